"""sentence-transformers: the whole module stack users run, not only the transformers backbone.

A repo's `modules.json` lists its modules (Transformer, Pooling, Dense, Normalize, ...), each
with its own config file. Offline, the stack is sentence-transformers' default for a bare
transformers checkpoint (Transformer, mean Pooling) plus Normalize, over transformers' default
config for the catalog's model type, and the row says so. The backbone shrinks through the
transformers adapter; Pooling follows the shrunk width, a Dense head keeps its activation and
shrinks its output. The model is a `SentenceTransformer` built from its modules: the backbone
folder (tiny config, seeded weights, a small word-level tokenizer made here) is loaded by the
library's own `Transformer` module. Module types outside a fixed list of the library's own
modules are refused (a repo can name its own code there). Saved and loaded with
`SentenceTransformer.save` and `SentenceTransformer(path)`.
"""

from __future__ import annotations

import copy
import json
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from ground.errors import ConfigError
from ground.schema import ConfigSource, SkipReason
from model_configs.config_files import read_json_file
from model_configs.libraries.base import Adapter, NotSizable, no_config, read_json
from model_configs.spec import CatalogEntry, ResolvedConfig, TinySpec

BATCH = 4  # two anchors, two positives: an in-batch contrastive loss
SEQ = 12  # tokens per text: below MAX_SEQ_LENGTH, the length the module truncates to
MAX_SEQ_LENGTH = 16
DENSE_OUT = 32
SCALE = 20.0  # MultipleNegativesRankingLoss's similarity scale
# The library's own modules this adapter builds (last part of the module type string).
MODULES = ("Transformer", "Pooling", "Dense", "Normalize", "LayerNorm", "Dropout",
           "WeightedLayerPooling")  # fmt: skip


class SentenceTransformersAdapter(Adapter):
    library = "sentence-transformers"
    package = "sentence_transformers"
    build_imports = ("transformers.modeling_utils",)  # its backbone's class is transformers'
    warm_in_parent = True
    extra = "sentence-transformers"
    config_files = ("modules.json",)
    canonical_fields = {
        "backbone": "the transformers backbone's own canonical fields (its adapter's "
        "`canonical_fields`)"
    }
    hub_files = ("modules.json", "config.json", "sentence_bert_config.json", "*/config.json",
                 "*/sentence_bert_config.json")  # fmt: skip

    def default_config(self, entry: CatalogEntry) -> ResolvedConfig:
        from model_configs.libraries import get_adapter

        backbone = get_adapter("transformers").default_config(entry)
        stack = [
            {"type": "Transformer", "path": "", "config": {"max_seq_length": 512}},
            {"type": "Pooling", "path": "1_Pooling", "config": {"pooling_mode": "mean"}},
            {"type": "Normalize", "path": "2_Normalize", "config": {}},
        ]
        return ResolvedConfig(
            model_id=entry.model_id,
            library=self.library,
            config={"modules": stack, "backbone": backbone.config},
            source=ConfigSource.TRANSFORMERS_DEFAULT.value,
            detail=f"sentence-transformers' default stack (Transformer, mean Pooling, Normalize) "
            f"over {backbone.detail}",
        )

    def from_files(self, model_id: str, folder: Path, source: str) -> ResolvedConfig | None:
        path = folder / "modules.json"
        if not path.is_file():
            return None
        modules = read_json_file(path, model_id=model_id)
        if not isinstance(modules, list):
            raise ConfigError(
                f"{path}: expected a list of modules",
                reason=SkipReason.MALFORMED_CONFIG.value,
                model_id=model_id,
            )
        stack = []
        backbone: dict[str, Any] | None = None
        for m in modules:
            kind = str(m.get("type", "")).rsplit(".", 1)[-1]
            sub = folder / str(m.get("path") or "")
            cfg: dict[str, Any] = {}
            if kind == "Transformer":  # its own settings, and the backbone's config.json
                if (sub / "sentence_bert_config.json").is_file():
                    cfg = read_json(sub / "sentence_bert_config.json", model_id=model_id)
                if (sub / "config.json").is_file():
                    backbone = read_json(sub / "config.json", model_id=model_id)
            elif (sub / "config.json").is_file():
                cfg = read_json(sub / "config.json", model_id=model_id)
            stack.append({"type": kind, "path": str(m.get("path") or ""), "config": cfg})
        if backbone is None:
            raise no_config(
                "modules.json names no Transformer module with a config.json",
                model_id,
            )
        return ResolvedConfig(
            model_id=model_id,
            library=self.library,
            config={"modules": stack, "backbone": backbone},
            source=source,
            detail=str(path),
        )

    def shrink(
        self,
        resolved: ResolvedConfig,
        *,
        architecture_hint: str | None = None,
        pipeline_tag: str | None = None,
    ) -> TinySpec:
        from model_configs.libraries import get_adapter

        modules = resolved.config.get("modules")
        backbone = resolved.config.get("backbone")
        if not isinstance(modules, list) or not isinstance(backbone, dict):
            raise ConfigError(
                "sentence-transformers config without modules and a backbone",
                reason=SkipReason.MALFORMED_CONFIG.value,
                model_id=resolved.model_id,
            )
        unknown = [m["type"] for m in modules if m.get("type") not in MODULES]
        if unknown:
            raise ConfigError(
                f"module type {unknown[0]!r} is not one of sentence-transformers' own modules "
                f"this tool builds ({', '.join(MODULES)})",
                reason=SkipReason.NO_MODEL_CLASS.value,
                model_id=resolved.model_id,
            )
        tf = get_adapter("transformers")
        tiny_backbone = tf.shrink(
            ResolvedConfig(
                model_id=resolved.model_id,
                library="transformers",
                config=backbone,
                source=resolved.source,
            ),
            pipeline_tag="feature-extraction",
        )
        width = _hidden_size(tiny_backbone.config)
        changes = {f"backbone.{k}": v for k, v in tiny_backbone.changes.items()}
        tiny_modules = []
        dim = width
        for i, m in enumerate(modules):
            cfg = copy.deepcopy(m.get("config") or {})
            kind = m["type"]
            if kind == "Transformer":
                old = cfg.get("max_seq_length")
                if not isinstance(old, int) or old > MAX_SEQ_LENGTH:
                    cfg["max_seq_length"] = MAX_SEQ_LENGTH
                    changes[f"modules.{i}.max_seq_length"] = [old, MAX_SEQ_LENGTH]
            elif kind == "Pooling":
                keys = [k for k in ("word_embedding_dimension", "embedding_dimension") if k in cfg]
                for key in keys or ["embedding_dimension"]:
                    changes[f"modules.{i}.{key}"] = [cfg.get(key), width]
                    cfg[key] = width
                dim = width * max(1, len(_pooling_modes(cfg)))
            elif kind == "Dense":
                out = int(cfg.get("out_features", DENSE_OUT))
                new_out = min(out, DENSE_OUT)
                changes[f"modules.{i}.in_features"] = [cfg.get("in_features"), dim]
                changes[f"modules.{i}.out_features"] = [out, new_out]
                cfg["in_features"], cfg["out_features"] = dim, new_out
                dim = new_out
            elif kind in ("LayerNorm",):
                cfg["dimension"] = dim
            elif kind == "WeightedLayerPooling":
                layers = int(tiny_backbone.config.get("num_hidden_layers", 2))
                cfg.update(word_embedding_dimension=width, num_hidden_layers=layers,
                           layer_start=min(int(cfg.get("layer_start", 1)), layers))  # fmt: skip
            tiny_modules.append({"type": kind, "path": m.get("path", ""), "config": cfg})
        return TinySpec(
            library=self.library,
            model_type=tiny_backbone.model_type,
            architecture="SentenceTransformer",
            config={"modules": tiny_modules, "backbone": _backbone_entry(tiny_backbone)},
            generative=False,
            task="sentence-similarity",
            changes=changes,
        )

    def canonical(self, spec: TinySpec) -> TinySpec:
        """The backbone in transformers' canonical form (`canonical_fields`); the stack's own
        settings all change what runs (widths, pooling modes, activations)."""
        from model_configs.libraries import get_adapter

        backbone = get_adapter("transformers").canonical(
            TinySpec.from_dict(spec.config["backbone"])
        )
        entry = _backbone_entry(backbone)
        if entry == spec.config["backbone"]:
            return spec
        changes = {k: v for k, v in spec.changes.items() if not k.startswith("backbone.")}
        changes.update({f"backbone.{k}": v for k, v in backbone.changes.items()})
        return replace(spec, config={**spec.config, "backbone": entry}, changes=changes)

    def full_size_spec(self, resolved: ResolvedConfig, spec: TinySpec) -> TinySpec:
        """The backbone, a transformers model, at full size (the Pooling, Dense and Normalize
        modules after it are not counted: a few hundred thousand parameters at most)."""
        from model_configs.libraries import get_adapter

        backbone = resolved.config.get("backbone")
        if not isinstance(backbone, dict) or not isinstance(spec.config.get("backbone"), dict):
            raise NotSizable("a sentence-transformers model without a transformers backbone")
        full = ResolvedConfig(resolved.model_id, "transformers", backbone, resolved.source)
        return get_adapter("transformers").full_size_spec(
            full, TinySpec.from_dict(spec.config["backbone"])
        )

    def build_model(self, spec: TinySpec) -> Any:
        import torch
        from sentence_transformers import SentenceTransformer

        from model_configs.libraries import get_adapter

        backbone = TinySpec.from_dict(spec.config["backbone"])
        torch.manual_seed(0)
        hf_model = get_adapter("transformers").build_model(backbone)
        with tempfile.TemporaryDirectory(prefix="hfsweep-st-") as tmp:
            folder = Path(tmp) / "backbone"
            hf_model.save_pretrained(folder)
            _tiny_tokenizer(backbone.config).save_pretrained(folder)
            modules = [_module(m, folder) for m in spec.config["modules"]]
            model = SentenceTransformer(modules=modules, device="cpu")
        return model.float().eval()

    def make_inputs(
        self, spec: TinySpec, model: Any, *, seed: int = 0, purpose: str = "train"
    ) -> dict[str, Any]:
        import torch

        from model_configs.libraries.transformers.shrink import special_token_ids

        backbone = spec.config["backbone"]["config"]
        vocab = int(backbone.get("vocab_size") or 64)
        avoid = special_token_ids(backbone)
        gen = torch.Generator().manual_seed(seed)
        ids = torch.randint(0, vocab, (BATCH, SEQ), generator=gen)
        for bad in avoid:  # keep random tokens off special ids
            ids[ids == bad] = (bad + 1) % vocab if (bad + 1) % vocab not in avoid else 0
        features: dict[str, Any] = {
            "input_ids": ids,
            "attention_mask": torch.ones(BATCH, SEQ, dtype=torch.long),
        }
        if int(backbone.get("type_vocab_size") or 0) > 0:
            features["token_type_ids"] = torch.zeros(BATCH, SEQ, dtype=torch.long)
        return {"input": features}

    def compute_loss(self, spec: TinySpec, model: Any, outputs: Any, inputs: dict) -> Any:
        """MultipleNegativesRankingLoss: anchors (first half) against positives (second)."""
        import torch
        import torch.nn.functional as F

        emb = outputs["sentence_embedding"].float()
        half = emb.shape[0] // 2
        anchors, positives = F.normalize(emb[:half], dim=-1), F.normalize(emb[half:], dim=-1)
        scores = anchors @ positives.T * SCALE
        return F.cross_entropy(scores, torch.arange(half, device=scores.device))

    def save_and_load(self, spec: TinySpec, model: Any, folder: Path) -> Any:
        from sentence_transformers import SentenceTransformer

        with tempfile.TemporaryDirectory(prefix="hfsweep-st-save-", dir=folder) as tmp:
            model.save(tmp, safe_serialization=True)
            if not any(p.suffix == ".safetensors" for p in Path(tmp).rglob("*")):
                raise RuntimeError("SentenceTransformer.save wrote no safetensors file")
            loaded = SentenceTransformer(tmp, device="cpu", local_files_only=True)
        return loaded.float().eval()

    def iter_architectures(self) -> Iterator[ResolvedConfig]:
        """The stacks on the backbones the bundled catalog's sentence-transformers repos use."""
        from model_configs.catalog import load_catalog

        seen: set[str] = set()
        for entry in load_catalog("bundled").entries:
            mt = (entry.model_type_hint or "").split("|")[0]
            if entry.library != self.library or not mt or mt in seen or entry.custom_code:
                continue
            seen.add(mt)
            try:
                yield self.default_config(entry)
            except ConfigError:
                continue


def _backbone_entry(backbone: TinySpec) -> dict[str, Any]:
    """The backbone as the stack's config holds it: what builds it, not what the shrink changed
    (`changes` holds full-size values: two backbones that shrink to one tiny model would
    otherwise hash apart; the stack's own `changes` keep them, prefixed `backbone.`)."""
    return {**backbone.to_dict(), "changes": {}}


def _hidden_size(config: dict[str, Any]) -> int:
    for key in ("hidden_size", "d_model", "dim", "n_embd", "embed_dim"):
        if isinstance(config.get(key), int):
            return int(config[key])
    text = config.get("text_config")
    if isinstance(text, dict):
        return _hidden_size(text)
    raise ConfigError("the backbone config names no hidden size", reason="malformed_config")


def _pooling_modes(cfg: dict[str, Any]) -> list[str]:
    mode = cfg.get("pooling_mode")
    if isinstance(mode, str):
        return [mode]
    if isinstance(mode, list):
        return [str(m) for m in mode]
    legacy = [k for k, v in cfg.items() if k.startswith("pooling_mode_") and v is True]
    return legacy or ["mean"]


def _module(m: dict[str, Any], backbone_dir: Path) -> Any:
    """One module of the stack, built by the library's own class from its (shrunk) config."""
    import sentence_transformers.base.modules as base_modules
    import sentence_transformers.sentence_transformer.modules as st_modules
    import torch

    kind, cfg = m["type"], dict(m["config"])
    if kind == "Transformer":
        from sentence_transformers.base.modules import Transformer

        return Transformer(str(backbone_dir), max_seq_length=int(cfg["max_seq_length"]))
    if kind == "Pooling":
        with tempfile.TemporaryDirectory(prefix="hfsweep-pool-") as tmp:
            (Path(tmp) / "config.json").write_text(json.dumps(cfg))
            return st_modules.Pooling.load(tmp)
    if kind == "Dense":
        act = str(cfg.get("activation_function") or "torch.nn.modules.activation.Tanh")
        activation = (
            getattr(torch.nn, act.rsplit(".", 1)[-1], None) if act.startswith("torch.") else None
        )
        if not (isinstance(activation, type) and issubclass(activation, torch.nn.Module)):
            raise ConfigError(
                f"Dense activation {act!r} is not a torch.nn module", reason="malformed_config"
            )
        return base_modules.Dense(
            in_features=int(cfg["in_features"]),
            out_features=int(cfg["out_features"]),
            bias=bool(cfg.get("bias", True)),
            activation_function=activation(),
        )
    if kind == "Normalize":
        return base_modules.Normalize()
    if kind == "LayerNorm":
        return st_modules.LayerNorm(int(cfg["dimension"]))
    if kind == "Dropout":
        return st_modules.Dropout(float(cfg.get("dropout", 0.2)))
    if kind == "WeightedLayerPooling":
        return st_modules.WeightedLayerPooling(
            int(cfg["word_embedding_dimension"]),
            num_hidden_layers=int(cfg["num_hidden_layers"]),
            layer_start=int(cfg["layer_start"]),
        )
    raise ConfigError(f"module type {kind!r} is not built here", reason="no_model_class")


def _tiny_tokenizer(config: dict[str, Any]) -> Any:
    """A word-level tokenizer over the tiny vocabulary, made here (no tokenizer is downloaded):
    the Transformer module needs one to load; inputs are token ids made by the adapter."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    size = max(8, min(int(config.get("vocab_size") or 64), 512))
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = {tok: i for i, tok in enumerate(specials)}
    vocab.update({f"w{i}": i for i in range(len(specials), size)})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
        sep_token="[SEP]", mask_token="[MASK]",
    )  # fmt: skip
