"""diffusion-single-file: repackaged checkpoints mapped by name to a diffusers class.

These repos (mostly ComfyUI repackagings of Wan, FLUX, Qwen-Image, ...) hold weight files and
no diffusers config. A repo maps to a diffusers denoiser class by its name only where diffusers
itself loads that architecture's single files (`SINGLE_FILE_LOADABLE_CLASSES`), so the tiny
model is the architecture the file holds; the mapping table is
`data/tables.json` (a pattern, the class and the reason
each), and the rows carry `config_source=name_mapped`. Everything after resolving is the
diffusers adapter's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from ground.errors import ConfigError
from ground.schema import ConfigSource, SkipReason
from model_configs.libraries.base import Adapter, AttentionLayout, LoraTargets, library_tables
from model_configs.libraries.diffusers.adapter import DiffusersAdapter
from model_configs.libraries.diffusers.shrink import DATA_DIR
from model_configs.spec import CatalogEntry, ResolvedConfig, TinySpec

CONFIGS = DATA_DIR / "configs"  # the published denoiser configs diffusers bundles here


class SingleFileAdapter(Adapter):
    library = "diffusion-single-file"
    package = "diffusers"
    warm_in_parent = True
    config_files = ()  # weight files only

    def __init__(self) -> None:
        self._diffusers = DiffusersAdapter()

    def mapping_for(self, model_id: str) -> dict[str, Any] | None:
        name = model_id.lower()
        for m in library_tables(__file__)["mappings"]:
            if re.search(m["pattern"], name):
                return dict(m)
        return None

    def default_config(self, entry: CatalogEntry) -> ResolvedConfig:
        from diffusers.loaders.single_file_model import SINGLE_FILE_LOADABLE_CLASSES

        from model_configs.libraries.diffusers.shrink import default_config

        m = self.mapping_for(entry.model_id)
        if m is None:
            raise ConfigError(
                "a repackaged single-file checkpoint whose name maps to no diffusers class",
                reason=SkipReason.UNSUPPORTED_LIBRARY.value,
                model_id=entry.model_id,
            )
        if m["class"] not in SINGLE_FILE_LOADABLE_CLASSES:
            raise ConfigError(
                f"mapped by name to {m['class']}, but diffusers cannot load this architecture's "
                "single files, so the mapping would not be the file's model",
                reason=SkipReason.UNSUPPORTED_LIBRARY.value,
                model_id=entry.model_id,
            )
        if m.get("config"):
            config = json.loads((CONFIGS / m["config"]).read_text())
            what = f"bundled config {m['config']}"
        else:
            config = default_config(m["class"])
            what = f"{m['class']} defaults"
        return ResolvedConfig(
            model_id=entry.model_id,
            library=self.library,
            config=config,
            source=ConfigSource.NAME_MAPPED.value,
            detail=f"mapped by name to diffusers {m['class']} ({m['reason']}); {what}",
        )

    def shrink(
        self,
        resolved: ResolvedConfig,
        *,
        architecture_hint: str | None = None,
        pipeline_tag: str | None = None,
    ) -> TinySpec:
        spec = self._diffusers.shrink(replace(resolved, library="diffusers"))
        return replace(spec, library=self.library)

    def full_size_spec(self, resolved: ResolvedConfig, spec: TinySpec) -> TinySpec:
        """The diffusers class the name maps to, at the config `default_config` resolved."""
        return self._diffusers.full_size_spec(replace(resolved, library="diffusers"), spec)

    def attention_layout(self, model: Any, *, kv_cache: bool) -> AttentionLayout:
        return self._diffusers.attention_layout(model, kv_cache=kv_cache)

    def lora_targets(self, model: Any) -> LoraTargets:
        return self._diffusers.lora_targets(model)

    def build_model(self, spec: TinySpec) -> Any:
        return self._diffusers.build_model(spec)

    def make_inputs(
        self, spec: TinySpec, model: Any, *, seed: int = 0, purpose: str = "train"
    ) -> dict[str, Any]:
        return self._diffusers.make_inputs(spec, model, seed=seed, purpose=purpose)

    def compute_loss(self, spec: TinySpec, model: Any, outputs: Any, inputs: dict) -> Any:
        return self._diffusers.compute_loss(spec, model, outputs, inputs)

    def save_and_load(self, spec: TinySpec, model: Any, folder: Path) -> Any:
        return self._diffusers.save_and_load(spec, model, folder)

    def iter_architectures(self) -> Iterator[ResolvedConfig]:
        """One per mapping of the table (the classes single files are mapped to)."""
        for m in library_tables(__file__)["mappings"]:
            try:
                yield self.default_config(CatalogEntry(model_id=m["example"]))
            except ConfigError:  # diffusers cannot load this one's single files
                continue
