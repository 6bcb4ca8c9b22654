"""Guards against hostile configs, in one place: what a config must be before a library sees
it, and what a tiny model may cost before it is built with real memory.

- **Shape** (`check_shape`): a config file of at most `MAX_FILE_BYTES`, at most `MAX_DEPTH`
  levels of nesting, `MAX_VALUES` values and `MAX_STRING` characters in a string. Deeper nesting overflows the libraries' recursive code;
  a config of millions of values is memory before it is a model. Beyond them: a
  `malformed_config` skip, checked without recursion before any library parses the config.
- **The build budget** (`check_budget`): the tiny model is built first on PyTorch's `meta`
  device (shapes only, no memory) and its parameters counted; above `BUILD_BUDGET` the build
  is refused (`ParameterBudgetError`, the load stage's `fail`, naming the count) before a byte
  of weights is allocated. A declared size the shrinker does not know to shrink (an unknown
  key, a sub-config it does not walk) is caught here. Where a library cannot build on `meta`,
  the shrunk config's integers are held to `MAX_DIMENSION` instead. What the build imports is
  imported before, on the CPU (`Adapter.build_imports`): a module first imported inside the
  meta context would make its import-time tensors there.
"""

from __future__ import annotations

import contextlib
import importlib
from typing import Any

from model_configs.pass_rule import MAX_PARAMS
from model_configs.spec import TinySpec
from reports.errors import ConfigError, ShrinkError
from reports.schema import SkipReason

MAX_FILE_BYTES = 16 << 20  # a config file (the largest on the Hub are a few hundred kB)
MAX_DEPTH = 64
MAX_VALUES = 200_000
MAX_STRING = 1 << 20
BUILD_BUDGET = 10 * MAX_PARAMS  # parameters: 10x the pass rule's "tiny" (200 MB in fp32)
MAX_DIMENSION = 1 << 20  # any integer above this in a shrunk config, when `meta` cannot tell
# Integers that are ids or counts of nothing allocated, never sizes.
_NOT_SIZES = ("_id", "_ids", "seed", "_token", "_epsilon", "_theta")


class ParameterBudgetError(ShrinkError):
    """The shrunk model would be too big to build: the shrinker missed a size."""


def check_shape(config: Any, *, model_id: str | None = None) -> None:
    """Raise a `malformed_config` ConfigError for a config beyond the shape limits."""
    stack: list[tuple[Any, int]] = [(config, 1)]
    values = 0
    while stack:
        value, depth = stack.pop()
        values += 1
        if values > MAX_VALUES:
            raise _malformed(f"the config has more than {MAX_VALUES:,} values", model_id)
        if isinstance(value, dict):
            if depth > MAX_DEPTH:
                raise _malformed(f"the config nests deeper than {MAX_DEPTH} levels", model_id)
            stack.extend((v, depth + 1) for v in value.values())
            stack.extend((k, depth + 1) for k in value)
        elif isinstance(value, list | tuple):
            if depth > MAX_DEPTH:
                raise _malformed(f"the config nests deeper than {MAX_DEPTH} levels", model_id)
            stack.extend((v, depth + 1) for v in value)
        elif isinstance(value, str) and len(value) > MAX_STRING:
            raise _malformed(f"a string of the config is longer than {MAX_STRING:,}", model_id)


def _malformed(message: str, model_id: str | None) -> ConfigError:
    return ConfigError(message, reason=SkipReason.MALFORMED_CONFIG.value, model_id=model_id)


def count_on_meta(spec: TinySpec) -> int | None:
    """The tiny model's parameter count from a build on the `meta` device (no memory), or
    None when the library cannot build it there."""
    import torch

    from model_configs.adapters import get_adapter

    adapter = get_adapter(spec.library)
    for name in (adapter.package, *adapter.build_imports):
        if name:  # on the CPU, not inside the meta context (see Adapter.build_imports)
            with contextlib.suppress(Exception):
                module = importlib.import_module(name)
                getattr(module, spec.architecture, None)  # a lazy package imports the class
    try:
        with torch.device("meta"):
            model = adapter.build_model(spec)
        return sum(p.numel() for p in model.parameters())
    except Exception:
        return None


def largest_dimension(config: Any) -> tuple[str, int] | None:
    """The largest integer of a config that may be a size (ids and seeds left out)."""
    best: tuple[str, int] | None = None
    stack: list[tuple[str, Any]] = [("", config)]
    while stack:
        key, value = stack.pop()
        if isinstance(value, bool):
            continue
        if isinstance(value, int):
            if not key.endswith(_NOT_SIZES) and (best is None or value > best[1]):
                best = (key, value)
        elif isinstance(value, dict):
            stack.extend((str(k), v) for k, v in value.items())
        elif isinstance(value, list | tuple):
            stack.extend((key, v) for v in value)
    return best


def check_budget(spec: TinySpec) -> int | None:
    """Refuse to build a tiny model over the build budget; returns the counted parameters."""
    count = count_on_meta(spec)
    if count is not None:
        if count > BUILD_BUDGET:
            raise ParameterBudgetError(
                f"the shrunk {spec.architecture} would have {count:,} parameters, over the "
                f"build budget of {BUILD_BUDGET:,}: a size the shrinker does not reduce",
            )
        return count
    largest = largest_dimension(spec.config)
    if largest is not None and largest[1] > MAX_DIMENSION:
        raise ParameterBudgetError(
            f"the shrunk {spec.architecture} keeps {largest[0]}={largest[1]:,}, over "
            f"{MAX_DIMENSION:,}: a size the shrinker does not reduce",
        )
    return None
