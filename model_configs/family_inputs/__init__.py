"""Per-family input builders: the input layouts a hint in `data/transformers_families/` cannot
express (bounding boxes beside tokens, patch grids for a vision tower built alone, video clips,
codebook layouts, time-series windows...).

A builder is a function registered for one or more model types. It receives an `InputContext`
after the generic `make_inputs` has filled `ctx.inputs` (or, with `replace=True`, before: the
generic inputs are skipped) and edits `ctx.inputs` in place. Labels and `use_cache` are added
afterwards by `make_inputs` unless the builder set them. Group modules are listed in `GROUPS`
and imported on first lookup, so they may use `model_configs.transformers_models` helpers.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

GROUPS = ("vision_language_a", "vision_language_b", "audio", "vision", "text", "timm_backed")


@dataclass
class InputContext:
    """What a builder may read, and the inputs it edits."""

    spec: Any  # TinySpec
    model: Any
    config: Any  # the built model's config
    params: set[str]  # the names model.forward takes
    gen: Any  # torch.Generator: draw every random tensor from it
    avoid: set[int]  # special token ids to keep out of random text
    rules: dict[str, Any]  # this model_type's input hints
    seq: int
    purpose: str  # "train" or "generate"
    inputs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class FamilyInputs:
    fn: Callable[[InputContext], None]
    replace: bool
    module: str


_REGISTRY: dict[str, FamilyInputs] = {}
_loaded = False


def family_inputs(
    *model_types: str, replace: bool = False
) -> Callable[[Callable[[InputContext], None]], Callable[[InputContext], None]]:
    """Register `fn` as the input builder of `model_types` (one builder per model type)."""

    def register(fn: Callable[[InputContext], None]) -> Callable[[InputContext], None]:
        for mt in model_types:
            if mt in _REGISTRY:
                raise ValueError(
                    f"{mt!r} has two input builders: {_REGISTRY[mt].module} and {fn.__module__}"
                )
            _REGISTRY[mt] = FamilyInputs(fn, replace, fn.__module__)
        return fn

    return register


def lookup(model_type: str | None) -> FamilyInputs | None:
    """The builder registered for `model_type`, if any."""
    global _loaded
    if not _loaded:
        for group in GROUPS:
            importlib.import_module(f"{__name__}.{group}")
        _loaded = True
    return _REGISTRY.get(model_type or "")


def registered() -> dict[str, FamilyInputs]:
    lookup(None)
    return dict(_REGISTRY)
