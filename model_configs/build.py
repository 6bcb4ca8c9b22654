"""Build a tiny model from a TinySpec, feed it and train it, through the spec's library adapter.

Every adapter (`model_configs.libraries`, one package per Hub library) provides:

- `build_model(spec) -> torch.nn.Module`: fp32, on the CPU, weights from a fixed seed, eval mode.
- `make_inputs(spec, model, *, seed=0, purpose="train") -> dict[str, Any]`: CPU tensors for
  `model(**inputs)`; with purpose="train" they include labels where the model takes them; with
  purpose="generate" they are what `model.generate(**inputs)` takes.
- `compute_loss(spec, model, outputs, inputs) -> torch.Tensor`: a scalar loss whose gradient
  reaches the model's parameters (the model's own loss when it returns one).
- `save_and_load(spec, model, folder)`: the library's own save (safetensors) and load (for a
  quantized checkpoint: written in its method's format, loaded through the library's quantizer).
- `to_dtype(spec, model, dtype)`: the loaded model in the run's dtype.
- `iter_architectures() -> Iterator[ResolvedConfig]`: a default config for every architecture
  the library offers (used by the coverage benches and tests).

**The build budget** (`check_budget`): the tiny model is built first on PyTorch's `meta` device
(shapes only, no memory) and its parameters counted; above `BUILD_BUDGET` the build is refused
(`ParameterBudgetError`, the load stage's `fail`, naming the count) before a byte of weights is
allocated. A declared size the shrinker does not know to shrink (an unknown key, a sub-config it
does not walk) is caught here. Where a library cannot build on `meta`, the shrunk config's
integers are held to `MAX_DIMENSION` instead. What the build imports is imported before, on the
CPU (`Adapter.build_imports`): a module first imported inside the meta context would make its
import-time tensors there. (A config's shape is guarded before, in `model_configs.guards`.)
"""

from __future__ import annotations

import contextlib
import importlib
import re
from pathlib import Path
from typing import Any

from ground.errors import ShrinkError
from model_configs.libraries import get_adapter
from model_configs.pass_rule import MAX_PARAMS
from model_configs.spec import TinySpec

BUILD_BUDGET = 10 * MAX_PARAMS  # parameters: 10x the pass rule's "tiny" (200 MB in fp32)
MAX_DIMENSION = 1 << 20  # any integer above this in a shrunk config, when `meta` cannot tell
# Integers that are ids or counts of nothing allocated, never sizes.
_NOT_SIZES = ("_id", "_ids", "seed", "_token", "_epsilon", "_theta")


class ParameterBudgetError(ShrinkError):
    """The shrunk model would be too big to build: the shrinker missed a size."""


def build_model(spec: TinySpec) -> Any:
    """Build the tiny model (refused first, with no memory spent, over the build budget)."""
    check_budget(spec)
    return get_adapter(spec.library).build_model(spec)


def make_inputs(spec: TinySpec, model: Any, *, seed: int = 0, purpose: str = "train") -> dict:
    return get_adapter(spec.library).make_inputs(spec, model, seed=seed, purpose=purpose)


def compute_loss(spec: TinySpec, model: Any, outputs: Any, inputs: dict) -> Any:
    return get_adapter(spec.library).compute_loss(spec, model, outputs, inputs)


def save_and_load(spec: TinySpec, model: Any, folder: Path) -> Any:
    return get_adapter(spec.library).save_and_load(spec, model, folder)


def to_dtype(spec: TinySpec, model: Any, dtype: Any) -> Any:
    """The loaded model in the run's dtype, the library's way (a quantized checkpoint keeps
    its quantized storage)."""
    return get_adapter(spec.library).to_dtype(spec, model, dtype)


def implementation_switches(spec: TinySpec) -> dict[str, str]:
    """The switches of the model's own code it can run with (switch -> its default value)."""
    return get_adapter(spec.library).implementation_switches(spec)


def set_implementation(spec: TinySpec, model: Any, implementation: str) -> None:
    """Run the loaded model with `implementation` (`"switch=value"`), the library's way."""
    switch, _, value = implementation.partition("=")
    get_adapter(spec.library).set_implementation(model, switch, value)


def compiled_generate(
    spec: TinySpec, model: Any, *, backend: Any, dynamic: bool | None
) -> dict[str, Any]:
    """The `generate` arguments for a static KV cache and a compiled forward, the library's
    way (raises `NoCompiledGenerate` where it has none)."""
    return get_adapter(spec.library).compiled_generate(model, backend=backend, dynamic=dynamic)


def missing_package(exc: BaseException) -> str | None:
    """The optional package an ImportError says the model needs but this environment lacks
    (timm, natten, detectron2, torchaudio...), or None for any other error."""
    if not isinstance(exc, ImportError):
        return None
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        return exc.name.split(".")[0]
    found = re.search(r"requires the ([\w.-]+) library", str(exc))
    return found.group(1) if found else None


def build_on_meta(spec: TinySpec) -> Any:
    """The model of `spec` built on the `meta` device (shapes only, no memory) through its
    library's adapter; raises what the build raises."""
    import torch

    adapter = get_adapter(spec.library)
    import_for_build(spec)  # on the CPU, not inside the meta context (see Adapter.build_imports)
    with torch.device("meta"):
        return adapter.build_model(spec)


def import_for_build(spec: TinySpec) -> None:
    """Import what building `spec` imports (its library, `Adapter.build_imports`, and the
    class named as its architecture, which a lazy package imports on first use), no op run;
    what fails to import is left for the build itself to raise."""
    adapter = get_adapter(spec.library)
    for name in (adapter.package, *adapter.build_imports):
        if name:
            with contextlib.suppress(Exception):
                module = importlib.import_module(name)
                getattr(module, spec.architecture, None)


def count_on_meta(spec: TinySpec) -> int | None:
    """The tiny model's parameter count from a build on the `meta` device (no memory), or
    None when the library cannot build it there."""
    try:
        model = build_on_meta(spec)
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
