"""transformers: configs by `model_type`, classes from the auto mappings, `save_pretrained`."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from ground.errors import ConfigError
from ground.schema import ConfigSource, SkipReason
from model_configs.config_files import from_file
from model_configs.libraries.base import (
    Adapter,
    AttentionLayout,
    LoraTargets,
    NoCompiledGenerate,
    save_pretrained_round_trip,
)
from model_configs.libraries.transformers.canonical import CANONICAL
from model_configs.spec import CatalogEntry, ResolvedConfig, TinySpec


class TransformersAdapter(Adapter):
    library = "transformers"
    package = "transformers"
    warm_in_parent = True
    canonical_fields = CANONICAL

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
        from model_configs import quantization
        from model_configs.libraries.transformers import quantized
        from model_configs.libraries.transformers.shrink import shrink_transformers

        quantization.refuse_unsupported(resolved)  # a method with no path here: a skip
        spec = shrink_transformers(
            resolved, architecture_hint=architecture_hint, pipeline_tag=pipeline_tag
        )
        return quantized.fit(spec)

    def canonical(self, spec: TinySpec) -> TinySpec:
        from model_configs.libraries.transformers.canonical import canonical

        return canonical(spec)

    def compiled_generate(
        self, model: Any, *, backend: Any, dynamic: bool | None
    ) -> dict[str, Any]:
        """transformers' own path: `cache_implementation="static"` and a `CompileConfig`, which
        `generate` applies to the forward (on every device, the CPU included), for a model whose
        class says it compiles in full with a static cache (`_can_compile_fullgraph`)."""
        from transformers import CompileConfig

        if not getattr(model, "_can_compile_fullgraph", False):
            raise NoCompiledGenerate(
                f"{type(model).__name__} does not support a static cache with a compiled "
                "forward (transformers' _can_compile_fullgraph is False)"
            )
        config = CompileConfig(backend=backend, dynamic=dynamic, fullgraph=False, mode="default")
        config._compile_all_devices = True  # type: ignore[assignment]  # the CPU included
        return {"cache_implementation": "static", "compile_config": config}

    def full_size_spec(self, resolved: ResolvedConfig, spec: TinySpec) -> TinySpec:
        """The spec's class (and, for a part such as a thinker or a text model, the part the
        build picks) from the resolved config.json the tiny config was shrunk from; sized
        unquantized (bytes are given per dtype)."""
        config = dict(resolved.config)
        config.pop("quantization_config", None)
        return replace(spec, config=config, changes={})

    def attention_layout(self, model: Any, *, kv_cache: bool) -> AttentionLayout:
        from model_configs.libraries.transformers import full_size

        return full_size.attention_layout(model, kv_cache=kv_cache)

    def lora_targets(self, model: Any) -> LoraTargets:
        from model_configs.libraries.transformers import full_size

        return full_size.lora_targets(model)

    def build_model(self, spec: TinySpec) -> Any:
        from model_configs.libraries.transformers import build, quantized

        # quantized: built at full precision, quantized when saved (`save_and_load`)
        return build.build_model(quantized.plain(spec))

    def make_inputs(
        self, spec: TinySpec, model: Any, *, seed: int = 0, purpose: str = "train"
    ) -> dict[str, Any]:
        from model_configs.libraries.transformers import build

        return build.make_inputs(spec, model, seed=seed, purpose=purpose)

    def compute_loss(self, spec: TinySpec, model: Any, outputs: Any, inputs: dict) -> Any:
        from model_configs.libraries.transformers import build

        return build.compute_loss(spec, model, outputs, inputs)

    def save_and_load(self, spec: TinySpec, model: Any, folder: Path) -> Any:
        from model_configs.libraries.transformers import quantized

        if quantized.method_of_spec(spec) is not None:  # through transformers' quantizer
            return quantized.save_and_load(spec, model, folder)
        return save_pretrained_round_trip(model, folder)

    def to_dtype(self, spec: TinySpec, model: Any, dtype: Any) -> Any:
        from model_configs.libraries.transformers import quantized

        if quantized.method_of_spec(spec) is not None:  # float8 / packed storage kept
            return quantized.to_dtype(model, dtype)
        return model.to(dtype)

    def tensor_parallel_plan(self, model: Any) -> dict[str, str] | None:
        """transformers' own plan: the model's `tp_plan` (its class's `_tp_plan` merged with the
        config's `base_model_tp_plan`, as `post_init` builds it)."""
        plan = dict(getattr(model, "tp_plan", None) or {})
        if not plan:
            plan = dict(getattr(model.config, "base_model_tp_plan", None) or {})
        return plan or None

    def save_for_tensor_parallel(self, spec: TinySpec, model: Any, folder: Path) -> None:
        model.save_pretrained(folder)

    def load_tensor_parallel(
        self, spec: TinySpec, model: Any, folder: Path, world_size: int
    ) -> Any:
        """`from_pretrained(..., distributed_config=DistributedConfig(tp_size=N))`, as
        transformers documents tensor parallelism: its plan applied over a mesh of the
        process group's ranks on the accelerator, each rank loading its own shards."""
        from transformers import DistributedConfig

        loaded = type(model).from_pretrained(
            folder, dtype=model.dtype, distributed_config=DistributedConfig(tp_size=world_size)
        )
        return loaded.eval()

    def implementation_switches(self, spec: TinySpec) -> dict[str, str]:
        from model_configs.libraries.transformers import build

        return build.implementation_switches(spec)

    def set_implementation(self, model: Any, switch: str, value: str) -> None:
        from model_configs.libraries.transformers import build

        build.set_implementation(model, switch, value)

    def iter_architectures(self) -> Iterator[ResolvedConfig]:
        from model_configs.libraries.transformers import build

        return build.iter_default_configs()

    def known_failures(self) -> dict[str, dict[str, Any]]:
        from model_configs.libraries.transformers.families import known_failures

        return known_failures()


def default_config_dict(model_type: str) -> dict[str, Any]:
    from transformers import AutoConfig

    return AutoConfig.for_model(model_type).to_dict()
