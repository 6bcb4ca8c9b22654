"""Build a tiny model from a TinySpec, feed it and train it, through the spec's library adapter.

Every adapter (`model_configs.adapters`, one per Hub library) provides:

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
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from model_configs import guards
from model_configs.adapters import get_adapter
from model_configs.spec import TinySpec


def build_model(spec: TinySpec) -> Any:
    """Build the tiny model (refused first, with no memory spent, over the build budget)."""
    guards.check_budget(spec)
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


def missing_package(exc: BaseException) -> str | None:
    """The optional package an ImportError says the model needs but this environment lacks
    (timm, natten, detectron2, torchaudio...), or None for any other error."""
    if not isinstance(exc, ImportError):
        return None
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        return exc.name.split(".")[0]
    found = re.search(r"requires the ([\w.-]+) library", str(exc))
    return found.group(1) if found else None
