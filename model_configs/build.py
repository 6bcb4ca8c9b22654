"""Build a tiny model from a TinySpec and make inputs for it, dispatching on the library.

Each library module (`model_configs.transformers_models`, `model_configs.diffusers_models`)
provides the same four functions:

- `build_model(spec) -> torch.nn.Module`: fp32, on the CPU, weights from a fixed seed, eval mode.
- `make_inputs(spec, model, *, seed=0, purpose="train") -> dict[str, Any]`: CPU tensors for
  `model(**inputs)`; with purpose="train" they include labels where the model takes them; with
  purpose="generate" they are what `model.generate(**inputs)` takes.
- `compute_loss(spec, model, outputs, inputs) -> torch.Tensor`: a scalar loss whose gradient
  reaches the model's parameters (the model's own loss when it returns one).
- `iter_default_configs() -> Iterator[ResolvedConfig]`: the library's default config for every
  model type / model class it has (used by bench/shrink_coverage.py and tests).
"""

from __future__ import annotations

import importlib
import re
from types import ModuleType
from typing import Any

from model_configs.spec import TinySpec

LIBRARY_MODULES = {
    "transformers": "model_configs.transformers_models",
    "diffusers": "model_configs.diffusers_models",
}


def library_module(library: str) -> ModuleType:
    return importlib.import_module(LIBRARY_MODULES[library])


def build_model(spec: TinySpec) -> Any:
    return library_module(spec.library).build_model(spec)


def make_inputs(spec: TinySpec, model: Any, *, seed: int = 0, purpose: str = "train") -> dict:
    return library_module(spec.library).make_inputs(spec, model, seed=seed, purpose=purpose)


def compute_loss(spec: TinySpec, model: Any, outputs: Any, inputs: dict) -> Any:
    return library_module(spec.library).compute_loss(spec, model, outputs, inputs)


def missing_package(exc: BaseException) -> str | None:
    """The optional package an ImportError says the model needs but this environment lacks
    (timm, natten, detectron2, torchaudio...), or None for any other error."""
    if not isinstance(exc, ImportError):
        return None
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        return exc.name.split(".")[0]
    found = re.search(r"requires the ([\w.-]+) library", str(exc))
    return found.group(1) if found else None
