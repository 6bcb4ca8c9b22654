"""diffusers: a model class's config, or a pipeline's denoiser; `save_pretrained`."""

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
    NotSizable,
    config_int,
    save_pretrained_round_trip,
)
from model_configs.spec import CatalogEntry, ResolvedConfig, TinySpec


class DiffusersAdapter(Adapter):
    library = "diffusers"
    package = "diffusers"
    warm_in_parent = True
    config_files = ("model_index.json", "config.json")
    hub_files = ("model_index.json", "config.json", "*/config.json", "*/scheduler_config.json")

    def default_config(self, entry: CatalogEntry) -> ResolvedConfig:
        from model_configs.libraries.diffusers.build import default_config_for_pipeline

        pipelines = [t.split(":", 1)[1] for t in entry.tags if t.startswith("diffusers:")]
        for pipeline in pipelines:
            resolved = default_config_for_pipeline(pipeline)
            if resolved is not None:
                return ResolvedConfig(
                    model_id=entry.model_id,
                    library=self.library,
                    config=resolved.config,
                    source=ConfigSource.DIFFUSERS_DEFAULT.value,
                    detail=f"known component configs of {pipeline} (from the repo's tags)",
                    components=resolved.components,
                )
        raise ConfigError(
            "no model_index.json / config.json available offline, and no known pipeline in its "
            "tags",
            reason=SkipReason.NO_CONFIG.value,
            model_id=entry.model_id,
        )

    def from_files(self, model_id: str, folder: Path, source: str) -> ResolvedConfig | None:
        for name in self.config_files:
            if (folder / name).is_file():
                return from_file(model_id, self.library, folder / name, source)
        return None

    def shrink(
        self,
        resolved: ResolvedConfig,
        *,
        architecture_hint: str | None = None,
        pipeline_tag: str | None = None,
    ) -> TinySpec:
        from model_configs.libraries.diffusers.shrink import shrink_diffusers

        return shrink_diffusers(
            resolved, architecture_hint=architecture_hint, pipeline_tag=pipeline_tag
        )

    def full_size_spec(self, resolved: ResolvedConfig, spec: TinySpec) -> TinySpec:
        """The component the tiny spec runs (a pipeline's denoiser), from its config over the
        class defaults, as the shrinker starts from."""
        from model_configs.libraries.diffusers.shrink import default_config, select_model_config

        class_name, config, _ = select_model_config(resolved)
        if class_name != spec.architecture:
            raise NotSizable(f"the tiny spec builds {spec.architecture}, the config {class_name}")
        return replace(spec, config={**default_config(class_name), **config}, changes={})

    def attention_layout(self, model: Any, *, kv_cache: bool) -> AttentionLayout:
        """The heads the component's config names where it is one number (a denoiser's
        transformer); no KV cache (a diffusers model generates no tokens)."""
        config = getattr(model, "config", None)
        heads = config_int(config, "num_attention_heads")
        kv_heads = config_int(config, "num_key_value_heads") or heads
        return AttentionLayout(heads=heads, kv_heads=kv_heads if heads else None)

    def build_model(self, spec: TinySpec) -> Any:
        from model_configs.libraries.diffusers import build

        return build.build_model(spec)

    def make_inputs(
        self, spec: TinySpec, model: Any, *, seed: int = 0, purpose: str = "train"
    ) -> dict[str, Any]:
        from model_configs.libraries.diffusers import build

        return build.make_inputs(spec, model, seed=seed, purpose=purpose)

    def compute_loss(self, spec: TinySpec, model: Any, outputs: Any, inputs: dict) -> Any:
        from model_configs.libraries.diffusers import build

        return build.compute_loss(spec, model, outputs, inputs)

    def save_and_load(self, spec: TinySpec, model: Any, folder: Path) -> Any:
        return save_pretrained_round_trip(model, folder)

    def iter_architectures(self) -> Iterator[ResolvedConfig]:
        from model_configs.libraries.diffusers import build

        return build.iter_default_configs()

    def known_failures(self) -> dict[str, dict[str, Any]]:
        from model_configs.libraries.diffusers.shrink import load_rules

        table = load_rules().get("known_failures", {})
        return {k: v for k, v in table.items() if not k.startswith("_")}
