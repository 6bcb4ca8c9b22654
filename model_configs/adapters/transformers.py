"""transformers: configs by `model_type`, classes from the auto mappings, `save_pretrained`."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from model_configs.adapters.base import Adapter
from model_configs.config_files import from_file
from model_configs.spec import CatalogEntry, ResolvedConfig, TinySpec
from reports.errors import ConfigError
from reports.schema import ConfigSource, SkipReason


class TransformersAdapter(Adapter):
    library = "transformers"
    package = "transformers"

    def default_config(self, entry: CatalogEntry) -> ResolvedConfig:
        candidates = [c for c in (entry.model_type_hint or "").split("|") if c]
        if not candidates:
            raise ConfigError(
                "no config.json available and the catalog names no model_type",
                reason=SkipReason.NO_CONFIG.value,
                model_id=entry.model_id,
            )
        from transformers import CONFIG_MAPPING

        for model_type in candidates:
            if model_type in CONFIG_MAPPING:
                config = default_config_dict(model_type)
                if entry.architectures_hint:
                    config["architectures"] = list(entry.architectures_hint)
                return ResolvedConfig(
                    model_id=entry.model_id,
                    library=self.library,
                    config=config,
                    source=ConfigSource.TRANSFORMERS_DEFAULT.value,
                    detail=f"transformers defaults for model_type={model_type!r} (from the catalog)",
                )
        raise ConfigError(
            f"transformers does not know model_type {' or '.join(map(repr, candidates))}",
            reason=SkipReason.UNKNOWN_MODEL_TYPE.value,
            model_id=entry.model_id,
        )

    def from_files(self, model_id: str, folder: Path, source: str) -> ResolvedConfig | None:
        path = folder / "config.json"
        return from_file(model_id, self.library, path, source) if path.is_file() else None

    def shrink(
        self,
        resolved: ResolvedConfig,
        *,
        architecture_hint: str | None = None,
        pipeline_tag: str | None = None,
    ) -> TinySpec:
        from model_configs import quantization, quantized_build
        from model_configs.shrink.transformers import shrink_transformers

        quantization.refuse_unsupported(resolved)  # a method with no path here: a skip
        spec = shrink_transformers(
            resolved, architecture_hint=architecture_hint, pipeline_tag=pipeline_tag
        )
        return quantized_build.fit(spec)

    def build_model(self, spec: TinySpec) -> Any:
        from model_configs import quantized_build, transformers_models

        # quantized: built at full precision, quantized when saved (`save_and_load`)
        return transformers_models.build_model(quantized_build.plain(spec))

    def make_inputs(
        self, spec: TinySpec, model: Any, *, seed: int = 0, purpose: str = "train"
    ) -> dict[str, Any]:
        from model_configs import transformers_models

        return transformers_models.make_inputs(spec, model, seed=seed, purpose=purpose)

    def compute_loss(self, spec: TinySpec, model: Any, outputs: Any, inputs: dict) -> Any:
        from model_configs import transformers_models

        return transformers_models.compute_loss(spec, model, outputs, inputs)

    def save_and_load(self, spec: TinySpec, model: Any, folder: Path) -> Any:
        from model_configs import quantized_build

        if quantized_build.method_of_spec(spec) is not None:  # through transformers' quantizer
            return quantized_build.save_and_load(spec, model, folder)
        return save_pretrained_round_trip(model, folder)

    def to_dtype(self, spec: TinySpec, model: Any, dtype: Any) -> Any:
        from model_configs import quantized_build

        if quantized_build.method_of_spec(spec) is not None:  # float8 / packed storage kept
            return quantized_build.to_dtype(model, dtype)
        return model.to(dtype)

    def implementation_switches(self, spec: TinySpec) -> dict[str, str]:
        from model_configs import transformers_models

        return transformers_models.implementation_switches(spec)

    def set_implementation(self, model: Any, switch: str, value: str) -> None:
        from model_configs import transformers_models

        transformers_models.set_implementation(model, switch, value)

    def iter_architectures(self) -> Iterator[ResolvedConfig]:
        from model_configs import transformers_models

        return transformers_models.iter_default_configs()

    def known_failures(self) -> dict[str, dict[str, Any]]:
        from model_configs.family_rules import known_failures

        return known_failures()


def default_config_dict(model_type: str) -> dict[str, Any]:
    from transformers import AutoConfig

    return AutoConfig.for_model(model_type).to_dict()


def save_pretrained_round_trip(model: Any, folder: Path) -> Any:
    """The library's own save (safetensors) and load, as users do it."""
    with tempfile.TemporaryDirectory(prefix="hfsweep-save-", dir=folder) as tmp:
        model.save_pretrained(tmp)
        if not any(p.suffix == ".safetensors" for p in Path(tmp).rglob("*")):
            raise RuntimeError("save_pretrained wrote no safetensors file")
        return type(model).from_pretrained(tmp).eval()
