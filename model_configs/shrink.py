"""Shrink a real config to a tiny but representative one, through the config's library adapter.

`shrink(resolved)` returns a TinySpec. It raises ConfigError (with a SkipReason) when the config
cannot describe a buildable model (unknown model_type, no model class, a missing package), and
ShrinkError when the shrinker cannot make a valid tiny config (a failure of the load stage,
reported as such). The same input always shrinks the same way. The spec is in its canonical
form (`Adapter.canonical`): the fields that change no op (label names, the stored dtype, the
values of special token ids...) set to one value, so that its hash, the task key, merges the
models that run the same ops.
"""

from __future__ import annotations

from ground.errors import ConfigError, UnknownNameError
from ground.schema import SkipReason
from model_configs.spec import ResolvedConfig, TinySpec


def shrink(
    resolved: ResolvedConfig,
    *,
    architecture_hint: str | None = None,
    pipeline_tag: str | None = None,
) -> TinySpec:
    from model_configs.libraries import get_adapter

    try:
        adapter = get_adapter(resolved.library)
    except UnknownNameError as exc:
        raise ConfigError(
            f"no shrinker for library {resolved.library!r}",
            reason=SkipReason.UNSUPPORTED_LIBRARY.value,
            model_id=resolved.model_id,
        ) from exc
    adapter.require_package(resolved.model_id)
    spec = adapter.shrink(resolved, architecture_hint=architecture_hint, pipeline_tag=pipeline_tag)
    return adapter.canonical(spec)
