"""Shrink a real config to a tiny but representative one, per library.

`shrink(resolved)` returns a TinySpec. It raises ConfigError (with a SkipReason) when the config
cannot describe a buildable model (unknown model_type, no model class), and ShrinkError when the
shrinker cannot make a valid tiny config (a failure of the load stage, reported as such).
The same input always shrinks the same way.
"""

from __future__ import annotations

import importlib

from model_configs.spec import ResolvedConfig, TinySpec
from reports.errors import ConfigError
from reports.schema import SkipReason

# library -> "module:function" (lazy: importing this package does not import a model library)
SHRINKERS: dict[str, str] = {
    "transformers": "model_configs.shrink.transformers:shrink_transformers",
    "diffusers": "model_configs.shrink.diffusers:shrink_diffusers",
}


def shrink(
    resolved: ResolvedConfig,
    *,
    architecture_hint: str | None = None,
    pipeline_tag: str | None = None,
) -> TinySpec:
    target = SHRINKERS.get(resolved.library)
    if target is None:
        raise ConfigError(
            f"no shrinker for library {resolved.library!r}",
            reason=SkipReason.UNSUPPORTED_LIBRARY.value,
            model_id=resolved.model_id,
        )
    module_name, attr = target.split(":")
    fn = getattr(importlib.import_module(module_name), attr)
    return fn(resolved, architecture_hint=architecture_hint, pipeline_tag=pipeline_tag)
