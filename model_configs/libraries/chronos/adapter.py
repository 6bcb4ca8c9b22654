"""chronos-forecasting: Chronos (T5 over mean-scaled token bins), Chronos-Bolt and Chronos-2.

A Chronos repo's `config.json` is a T5 config (Chronos-2: chronos' own core config) with a
`chronos_config` and `chronos_pipeline_class`. Offline, the kind comes from the repo name and
the fields from the adapter's stand-ins (`data/tables.json`).
The models are those chronos builds: Chronos trains its inner `T5ForConditionalGeneration` on
token ids from its `MeanScaleUniformBins` tokenizer (and generates with it); Chronos-Bolt and
Chronos-2 are forecasters whose forward takes the series and its future target and returns the
quantile loss. Saved and loaded with `save_pretrained` / `from_pretrained`.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ground.errors import ConfigError
from ground.schema import SkipReason
from model_configs.libraries.base import (
    Adapter,
    library_tables,
    no_config,
    repo_name,
    save_pretrained_round_trip,
)
from model_configs.libraries.caps import cap_keys
from model_configs.spec import CatalogEntry, ResolvedConfig, TinySpec
from model_configs.tiny_inputs import BATCH

CONTEXT = 64  # series steps the tiny model sees
HORIZON = 8  # steps it forecasts
PATCH = 8  # Bolt / Chronos-2 input and output patches
TOKENS = 512  # Chronos token bins (the T5 vocabulary)
T5_CAPS = {"d_model": 64, "d_kv": 16, "d_ff": 128, "num_layers": 2, "num_decoder_layers": 2,
           "num_heads": 4, "relative_attention_num_buckets": 32,
           "relative_attention_max_distance": 128}  # fmt: skip
KINDS = {  # repo-name prefix -> pipeline class
    "chronos-t5": "ChronosPipeline",
    "chronos-bolt": "ChronosBoltPipeline",
    "chronos-2": "Chronos2Pipeline",
}


class ChronosAdapter(Adapter):
    library = "chronos-forecasting"
    package = "chronos"
    extra = "chronos"

    def claims_untagged(self, entry: CatalogEntry) -> bool:
        """autogluon/chronos-bolt-* carry no library tag: a Chronos name, T5, forecasting."""
        return _kind_from_name(entry.model_id) is not None and (
            entry.pipeline_tag == "time-series-forecasting" or "t5" in entry.tags
        )

    def default_config(self, entry: CatalogEntry) -> ResolvedConfig:
        kind = _kind_from_name(entry.model_id)
        if kind is None:
            raise no_config(
                "no config.json available offline, and the repo name names no Chronos kind "
                "(chronos-t5-*, chronos-bolt-*, chronos-2*)",
                entry.model_id,
            )
        stand_in = library_tables(__file__)["kinds"][kind]
        if stand_in["pipeline_class"] == "Chronos2Pipeline":
            from chronos.chronos2.config import Chronos2CoreConfig

            config = Chronos2CoreConfig().to_dict()
        else:
            from transformers import T5Config

            config = {**T5Config().to_dict(), **stand_in["t5"]}
            config["architectures"] = [
                "T5ForConditionalGeneration"
                if kind == "chronos-t5"
                else "ChronosBoltModelForForecasting"
            ]
        config["chronos_config"] = copy.deepcopy(stand_in["chronos_config"])
        config["chronos_pipeline_class"] = stand_in["pipeline_class"]
        return self.library_default(
            entry.model_id,
            config,
            detail=f"chronos {stand_in['pipeline_class']} stand-in (kind {kind!r} from the repo "
            "name; sizes from the library's config defaults)",
        )

    def shrink(
        self,
        resolved: ResolvedConfig,
        *,
        architecture_hint: str | None = None,
        pipeline_tag: str | None = None,
    ) -> TinySpec:
        cfg = resolved.config
        if not isinstance(cfg.get("chronos_config"), dict):
            raise ConfigError(
                "not a Chronos config (no chronos_config)",
                reason=SkipReason.MALFORMED_CONFIG.value,
                model_id=resolved.model_id,
            )
        pipeline = str(cfg.get("chronos_pipeline_class") or "ChronosPipeline")
        base = {k: v for k, v in cfg.items() if k not in ("chronos_config",)}
        tiny, changes = cap_keys(base, T5_CAPS)
        cc = dict(cfg["chronos_config"])
        if pipeline == "ChronosPipeline":
            arch = "T5ForConditionalGeneration"
            cc_caps = {"context_length": CONTEXT, "prediction_length": HORIZON,
                       "n_tokens": TOKENS, "num_samples": 2}  # fmt: skip
            tiny_cc, cc_changes = cap_keys(cc, cc_caps, prefix="chronos_config.")
            if tiny.get("vocab_size") != tiny_cc["n_tokens"]:
                changes["vocab_size"] = [tiny.get("vocab_size"), tiny_cc["n_tokens"]]
                tiny["vocab_size"] = tiny_cc["n_tokens"]
            task, generative = "time-series-forecasting (tokens)", True
        elif pipeline == "ChronosBoltPipeline":
            arch = "ChronosBoltModelForForecasting"
            cc_caps = {"context_length": CONTEXT, "prediction_length": HORIZON,
                       "input_patch_size": PATCH, "input_patch_stride": PATCH}  # fmt: skip
            tiny_cc, cc_changes = cap_keys(cc, cc_caps, prefix="chronos_config.")
            task, generative = "time-series-forecasting", False
        elif pipeline == "Chronos2Pipeline":
            arch = "Chronos2Model"
            cc_caps = {"context_length": CONTEXT, "input_patch_size": PATCH,
                       "input_patch_stride": PATCH, "output_patch_size": PATCH,
                       "max_output_patches": 2, "time_encoding_scale": CONTEXT}  # fmt: skip
            tiny_cc, cc_changes = cap_keys(cc, cc_caps, prefix="chronos_config.")
            task, generative = "time-series-forecasting", False
        else:
            raise ConfigError(
                f"chronos has no pipeline class {pipeline!r}",
                reason=SkipReason.NO_MODEL_CLASS.value,
                model_id=resolved.model_id,
            )
        tiny["chronos_config"] = tiny_cc
        tiny["architectures"] = [arch]
        return TinySpec(
            library=self.library,
            model_type=pipeline,
            architecture=arch,
            config=tiny,
            generative=generative,
            task=task,
            changes={**changes, **cc_changes},
        )

    def build_model(self, spec: TinySpec) -> Any:
        import torch

        config = dict(spec.config)
        torch.manual_seed(0)
        if spec.architecture == "Chronos2Model":
            from chronos.chronos2.config import Chronos2CoreConfig
            from chronos.chronos2.model import Chronos2Model

            return Chronos2Model(Chronos2CoreConfig(**config)).float().eval()
        from transformers import T5Config

        t5 = T5Config.from_dict(config)
        if spec.architecture == "ChronosBoltModelForForecasting":
            from chronos.chronos_bolt import ChronosBoltModelForForecasting

            return ChronosBoltModelForForecasting(t5).float().eval()
        from transformers import T5ForConditionalGeneration

        return T5ForConditionalGeneration(t5).float().eval()

    def make_inputs(
        self, spec: TinySpec, model: Any, *, seed: int = 0, purpose: str = "train"
    ) -> dict[str, Any]:
        import torch

        gen = torch.Generator().manual_seed(seed)
        cc = spec.config["chronos_config"]
        context_len = int(cc["context_length"])
        series = torch.randn(BATCH, context_len + HORIZON, generator=gen).cumsum(-1) + 10.0
        context = series[:, :context_len]
        if spec.architecture == "T5ForConditionalGeneration":
            from chronos import ChronosConfig

            tokenizer = ChronosConfig(**cc).create_tokenizer()
            input_ids, attention_mask, scale = tokenizer.context_input_transform(context)
            inputs: dict[str, Any] = {"input_ids": input_ids, "attention_mask": attention_mask}
            if purpose == "train":
                future = series[:, context_len : context_len + int(cc["prediction_length"])]
                labels, labels_mask = tokenizer.label_input_transform(future, scale)
                labels[labels_mask == 0] = -100
                inputs["labels"] = labels
            return inputs
        if spec.architecture == "ChronosBoltModelForForecasting":
            future = series[:, context_len : context_len + int(cc["prediction_length"])]
            return {"context": context, "target": future}
        horizon = int(cc["output_patch_size"])
        future = series[:, context_len : context_len + horizon]
        return {"context": context, "future_target": future, "num_output_patches": 1}

    def compute_loss(self, spec: TinySpec, model: Any, outputs: Any, inputs: dict) -> Any:
        loss = getattr(outputs, "loss", None)
        if loss is None:
            raise RuntimeError(f"{spec.architecture} returned no loss for a target")
        return loss

    def compiled_generate(
        self, model: Any, *, backend: Any, dynamic: bool | None
    ) -> dict[str, Any]:
        """Chronos generates with its inner T5, a transformers model: transformers' way."""
        from model_configs.libraries import get_adapter

        return get_adapter("transformers").compiled_generate(
            model, backend=backend, dynamic=dynamic
        )

    def save_and_load(self, spec: TinySpec, model: Any, folder: Path) -> Any:
        return save_pretrained_round_trip(model, folder)

    def iter_architectures(self) -> Iterator[ResolvedConfig]:
        for kind in KINDS:
            yield self.default_config(CatalogEntry(model_id=f"amazon/{kind}-default"))


def _kind_from_name(model_id: str) -> str | None:
    name = repo_name(model_id).lower()
    for prefix in sorted(KINDS, key=len, reverse=True):
        if name.startswith(prefix):
            return prefix
    return None
