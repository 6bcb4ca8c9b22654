"""Per-family input builders: the input layouts a hint in `data/families/` cannot
express (bounding boxes beside tokens, patch grids for a vision tower built alone, video clips,
codebook layouts, time-series windows...).

The registry has two kinds of entries:

- **By signature** (`signature_inputs`): inputs a model gets because of what its forward takes
  (its main input name, a parameter such as `entity_ids` or `global_attention_mask`), whatever
  its model type. They make the generic inputs: every entry whose condition holds adds its
  inputs to `ctx.inputs`, in registration order (`generic.py`, the first group), each seeing
  what the earlier ones added.
- **By model type** (`family_inputs`): a builder registered for one or more model types. It
  receives the `InputContext` after the signature entries have filled `ctx.inputs` (or, with
  `replace=True`, before: they are skipped) and edits `ctx.inputs` in place.

Labels and `use_cache` are added afterwards by `make_inputs` unless a builder set them.

The builders live in one module per input layout, listed in `GROUPS` and imported on first
lookup (so they may use `model_configs.libraries.transformers.build` helpers): `text` (token
sequences beside a second stream or another model's states), `series` (time series,
trajectories, robot episodes), `audio` (waveforms, mel frames, codec codes), `images` (images at
a size, with point, box, mask or depth prompts), `video` (clips), `regions` (text beside boxes
or detector regions), `image_text` (whole images beside text, at the vision tower's size),
`patch_rows` (images cut into patch rows or blocks with their grid), `image_audio` (images and
audio in one prompt) and `timm_backed` (towers that are timm models: the `timm` extra). What
several layouts share to lay out a prompt is `prompt.py`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# One module per input layout (the first: the generic inputs, by signature). Each layout's hints
# and per-family shrink rules are the JSON file of the same name in `data/families/`.
GROUPS = (
    "generic",
    "text",
    "series",
    "audio",
    "images",
    "video",
    "regions",
    "image_text",
    "patch_rows",
    "image_audio",
    "timm_backed",
)


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
    main: str = "input_ids"  # the model's main input name
    companions: tuple[str, ...] = ()  # inputs named beside it (OneFormer's `task_inputs`)


@dataclass(frozen=True)
class FamilyInputs:
    fn: Callable[[InputContext], None]
    replace: bool
    module: str


@dataclass(frozen=True)
class SignatureInputs:
    name: str  # what it provides, for messages and tests
    when: Callable[[InputContext], bool]
    fn: Callable[[InputContext], None]
    module: str


_REGISTRY: dict[str, FamilyInputs] = {}
_BY_SIGNATURE: list[SignatureInputs] = []
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


def signature_inputs(
    name: str, *, when: Callable[[InputContext], bool]
) -> Callable[[Callable[[InputContext], None]], Callable[[InputContext], None]]:
    """Register `fn` as the generic inputs `name` of every model for which `when(ctx)` holds
    (applied in registration order; see the module docstring)."""

    def register(fn: Callable[[InputContext], None]) -> Callable[[InputContext], None]:
        if any(entry.name == name for entry in _BY_SIGNATURE):
            raise ValueError(f"two signature entries are named {name!r}")
        _BY_SIGNATURE.append(SignatureInputs(name, when, fn, fn.__module__))
        return fn

    return register


def _load() -> None:
    global _loaded
    if not _loaded:
        for group in GROUPS:
            importlib.import_module(f"{__name__}.{group}")
        _loaded = True


def lookup(model_type: str | None) -> FamilyInputs | None:
    """The builder registered for `model_type`, if any."""
    _load()
    return _REGISTRY.get(model_type or "")


def by_signature() -> list[SignatureInputs]:
    """The signature entries, in the order they apply."""
    _load()
    return list(_BY_SIGNATURE)


def registered() -> dict[str, FamilyInputs]:
    lookup(None)
    return dict(_REGISTRY)
