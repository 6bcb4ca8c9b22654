"""The full-size spec of a planned model: the class its tiny spec builds, with the model's own
(unshrunk) config, for `model_configs.sizing` to build on the meta device through the library's
adapter (`Adapter.build_model`).

One builder per library that can be sized, keyed by the spec's library (the Hub's
`library_name`, as the adapters are). A library with no entry is not sized (its sizing row says
`unsupported`: timm, open_clip, Chronos, pyannote, SpeechBrain and YOLO, whose adapters shrink
inside their build or build from other files). What each builder rests on:
- transformers: the resolved config.json is what the tiny config was shrunk from; the spec's
  class (and, for a part such as a thinker or a text model, the part the adapter picks) is
  built from it;
- sentence-transformers: its backbone, a transformers model, at full size (the Pooling, Dense
  and Normalize modules after it are not counted: a few hundred thousand parameters at most);
- diffusers (and repackaged single files, which map by name to a diffusers class): the component
  the tiny spec runs (the denoiser of a pipeline), from its config over the class defaults, as
  the shrinker starts from.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from model_configs.spec import ResolvedConfig, TinySpec


class NotSizable(Exception):
    """No full-size builder for this library or this kind of spec."""


def _transformers(resolved: ResolvedConfig, spec: TinySpec) -> TinySpec:
    config = dict(resolved.config)
    config.pop("quantization_config", None)  # sized unquantized: bytes are given per dtype
    return replace(spec, config=config, changes={})


def _sentence_transformers(resolved: ResolvedConfig, spec: TinySpec) -> TinySpec:
    backbone = resolved.config.get("backbone")
    if not isinstance(backbone, dict) or not isinstance(spec.config.get("backbone"), dict):
        raise NotSizable("a sentence-transformers model without a transformers backbone")
    tiny_backbone = TinySpec.from_dict(spec.config["backbone"])
    full = ResolvedConfig(resolved.model_id, "transformers", backbone, resolved.source)
    return _transformers(full, tiny_backbone)


def _diffusers(resolved: ResolvedConfig, spec: TinySpec) -> TinySpec:
    from model_configs.shrink.diffusers import default_config, select_model_config

    class_name, config, _ = select_model_config(resolved)
    if class_name != spec.architecture:
        raise NotSizable(f"the tiny spec builds {spec.architecture}, the config {class_name}")
    return replace(spec, config={**default_config(class_name), **config}, changes={})


FULL_SIZE: dict[str, Callable[[ResolvedConfig, TinySpec], TinySpec]] = {
    "transformers": _transformers,
    "sentence-transformers": _sentence_transformers,
    "diffusers": _diffusers,
    "diffusion-single-file": _diffusers,  # mapped by name to a diffusers class's config
}


def full_size_spec(resolved: ResolvedConfig, spec: TinySpec) -> TinySpec:
    """The spec of `spec`'s model at full size (raises NotSizable where no builder says)."""
    builder = FULL_SIZE.get(spec.library)
    if builder is None:
        raise NotSizable(f"no full-size builder for {spec.library} models")
    return builder(resolved, spec)


def sizing_inputs(resolved: ResolvedConfig, spec: TinySpec) -> dict[str, Any]:
    """What a sizing depends on besides the code: the library, the class and the full config."""
    return {"library": spec.library, "architecture": spec.architecture, "config": resolved.hash}
