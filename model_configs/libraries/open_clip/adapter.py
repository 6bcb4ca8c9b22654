"""open_clip: the bundled model configs of `open_clip_torch`, shrunk in both towers.

A repo's `open_clip_config.json` holds `model_cfg`; offline, the config is the bundled one whose
name the repo id contains (`laion/CLIP-ViT-B-32-laion2B-s34B-b79K` -> `ViT-B-32`). The model
class is chosen as `open_clip.create_model` chooses it (CLIP, CustomTextCLIP, CoCa). Both towers
shrink: the vision transformer / modified ResNet by its width, layers, head width and image
size, a timm trunk by the timm adapter's own shrink (the tiny trunk is what
`timm.create_model` returns while the tower is built), the text transformer by width, heads,
layers, context and vocabulary. Inputs are images and token ids; the loss is open_clip's own
contrastive loss (SigLIP's when the model has a logit bias, CoCa's with its caption loss).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from ground.errors import ConfigError, ShrinkError
from ground.schema import SkipReason
from model_configs.libraries.base import Adapter, no_config, read_json, repo_name
from model_configs.libraries.caps import cap_keys
from model_configs.spec import CatalogEntry, ResolvedConfig, TinySpec
from model_configs.tiny_inputs import BATCH, GRID

EMBED = 32
VISION_CAPS = {"width": 64, "head_width": 16, "layers": 2, "attn_pooler_queries": 8,
               "attn_pooler_heads": 2, "output_dim": EMBED}  # fmt: skip
TEXT_CAPS = {"width": 64, "heads": 4, "layers": 2, "context_length": 16, "vocab_size": 512,
             "mlp_ratio": 4}  # fmt: skip
MULTIMODAL_CAPS = {"heads": 4, "layers": 1, "context_length": 16, "vocab_size": 512,
                   "dim_head": 16, "n_queries": 8, "attn_pooler_heads": 2}  # fmt: skip
RESNET_WIDTH = 8  # ModifiedResNet's stem width (its top stage is 32x wider)


class OpenClipAdapter(Adapter):
    library = "open_clip"
    package = "open_clip"
    extra = "open_clip"
    config_files = ("open_clip_config.json",)
    hub_files = ("open_clip_config.json",)
    canonical_fields = {
        "model_name": "the name of the bundled config a repo was resolved from: the build never "
        "reads it (the class and both towers' settings say what runs)"
    }

    def default_config(self, entry: CatalogEntry) -> ResolvedConfig:
        import open_clip

        name = model_name_in(entry.model_id)
        if name is None:
            raise no_config(
                "no open_clip_config.json available offline, and the repo name contains no "
                f"open_clip {open_clip.__version__} model name",
                entry.model_id,
            )
        return self.library_default(
            entry.model_id,
            {"model_name": name, **copy.deepcopy(open_clip.get_model_config(name))},
            detail=f"open_clip {open_clip.__version__} bundled config {name!r} (named in the "
            "repo id)",
        )

    def from_files(self, model_id: str, folder: Path, source: str) -> ResolvedConfig | None:
        path = folder / "open_clip_config.json"
        if not path.is_file():
            return None
        data = read_json(path, model_id=model_id)
        model_cfg = data.get("model_cfg")
        if not isinstance(model_cfg, dict):
            raise ConfigError(
                f"{path}: no model_cfg object",
                reason=SkipReason.MALFORMED_CONFIG.value,
                model_id=model_id,
            )
        return ResolvedConfig(
            model_id=model_id, library=self.library, config=model_cfg, source=source,
            detail=str(path),
        )  # fmt: skip

    def shrink(
        self,
        resolved: ResolvedConfig,
        *,
        architecture_hint: str | None = None,
        pipeline_tag: str | None = None,
    ) -> TinySpec:
        cfg = copy.deepcopy(resolved.config)
        vision, text = cfg.get("vision_cfg"), cfg.get("text_cfg")
        if not isinstance(vision, dict) or not isinstance(text, dict):
            raise ConfigError(
                "open_clip config without vision_cfg and text_cfg",
                reason=SkipReason.MALFORMED_CONFIG.value,
                model_id=resolved.model_id,
            )
        if text.get("hf_model_name"):
            raise no_config(
                f"the text tower is the Hub model {text['hf_model_name']!r}, whose config "
                "open_clip reads from the Hub (AutoConfig.from_pretrained); not available offline",
                resolved.model_id,
            )
        changes: dict[str, list[Any]] = {}
        if isinstance(cfg.get("embed_dim"), int) and cfg["embed_dim"] > EMBED:
            changes["embed_dim"] = [cfg["embed_dim"], EMBED]
            cfg["embed_dim"] = EMBED
        cfg["vision_cfg"], vchanges = _shrink_vision(vision, resolved.model_id)
        width = cfg["vision_cfg"].pop("_trunk_features", None)
        if width is not None and vision.get("timm_proj") == "none":
            # no projection: the trunk's features are the embedding, so the text tower projects
            # to the tiny trunk's width
            changes["embed_dim"] = [resolved.config.get("embed_dim"), width]
            cfg["embed_dim"] = width
        cfg["text_cfg"], tchanges = cap_keys(text, TEXT_CAPS, prefix="text_cfg.")
        changes.update(vchanges)
        changes.update(tchanges)
        if isinstance(cfg.get("multimodal_cfg"), dict):
            cfg["multimodal_cfg"], mchanges = cap_keys(
                cfg["multimodal_cfg"], MULTIMODAL_CAPS, prefix="multimodal_cfg."
            )
            changes.update(mchanges)
            # CoCa: its decoder reads text tokens and image embeddings at one width, as wide as
            # the text tower, and the embedding is that wide too
            width = int(cfg["text_cfg"].get("width", 64))
            for where, key in ((cfg["multimodal_cfg"], "multimodal_cfg.width"), (cfg, "embed_dim")):
                name = key.rsplit(".", 1)[-1]
                if where.get(name) != width:
                    changes[key] = [where.get(name), width]
                    where[name] = width
            mm = cfg["multimodal_cfg"]
            head = width // int(mm.get("heads", 4))  # MultimodalCfg's default is 64 per head
            if mm.get("dim_head") != head:
                changes["multimodal_cfg.dim_head"] = [mm.get("dim_head"), head]
                mm["dim_head"] = head
        arch = _model_class_name(cfg)
        return TinySpec(
            library=self.library,
            model_type=str(cfg.get("model_name") or arch),
            architecture=arch,
            config=cfg,
            generative=False,
            task="zero-shot-image-classification",
            changes=changes,
        )

    def canonical(self, spec: TinySpec) -> TinySpec:
        if "model_name" not in spec.config:
            return spec
        config = {k: v for k, v in spec.config.items() if k != "model_name"}
        changes = {**spec.changes, "model_name": [spec.config["model_name"], None]}
        return replace(spec, config=config, changes=changes)

    def build_model(self, spec: TinySpec) -> Any:
        import open_clip
        import torch

        cfg = copy.deepcopy(spec.config)
        cfg.pop("model_name", None)
        cfg.pop("custom_text", None)
        cls = getattr(open_clip, spec.architecture)
        torch.manual_seed(0)
        import inspect

        if "output_dict" in inspect.signature(cls.__init__).parameters:
            cfg["output_dict"] = True  # CoCa returns its dict anyway
        with _tiny_timm_trunk(cfg["vision_cfg"]):
            model = cls(**cfg)
        decoder = getattr(model, "text_decoder", None)
        projection = getattr(decoder, "text_projection", None)
        if decoder is not None and projection is not None:
            # CoCa's MultimodalTransformer allocates text_projection with torch.empty and never
            # initialises it (its init_parameters is not called, and would fail: it reads a
            # `transformer` attribute the class lacks); loaded weights overwrite it. Seeded
            # here with the std that init_parameters names (width ** -0.5).
            torch.nn.init.normal_(projection, std=int(decoder.width) ** -0.5)
        return model.float().eval()

    def make_inputs(
        self, spec: TinySpec, model: Any, *, seed: int = 0, purpose: str = "train"
    ) -> dict[str, Any]:
        import torch

        gen = torch.Generator().manual_seed(seed)
        vision, text = spec.config["vision_cfg"], spec.config["text_cfg"]
        side = _side(vision)
        context = int(text.get("context_length", 16))
        vocab = int(text.get("vocab_size", 512))
        return {
            "image": torch.randn(BATCH, 3, side, side, generator=gen),
            "text": torch.randint(1, vocab, (BATCH, context), generator=gen),
        }

    def compute_loss(self, spec: TinySpec, model: Any, outputs: Any, inputs: dict) -> Any:
        from open_clip.loss import ClipLoss, CoCaLoss, SigLipLoss

        out = dict(outputs)
        if "logits" in out:  # CoCa: contrastive + captioning
            pad = int(spec.config.get("text_cfg", {}).get("pad_id", 0))
            loss = CoCaLoss(caption_loss_weight=1.0, clip_loss_weight=1.0, pad_id=pad)
            terms = loss(out["image_features"], out["text_features"], out["logits"],
                         out["labels"], out["logit_scale"])  # fmt: skip
            return sum(terms)
        if out.get("logit_bias") is not None:
            return SigLipLoss()(
                out["image_features"], out["text_features"], out["logit_scale"], out["logit_bias"]
            )
        return ClipLoss()(out["image_features"], out["text_features"], out["logit_scale"])

    def iter_architectures(self) -> Iterator[ResolvedConfig]:
        import open_clip

        for name in open_clip.list_models():
            yield self.library_default(
                f"open_clip/{name}",
                {"model_name": name, **copy.deepcopy(open_clip.get_model_config(name))},
            )


def model_name_in(model_id: str) -> str | None:
    """The longest bundled open_clip model name the repo name contains (case-insensitive)."""
    import open_clip

    name = repo_name(model_id).lower()
    for candidate in sorted(open_clip.list_models(), key=len, reverse=True):
        if candidate.lower() in name:
            return str(candidate)
    return None


def _model_class_name(cfg: dict[str, Any]) -> str:
    """As open_clip.create_model chooses: CoCa, CustomTextCLIP or CLIP."""
    custom = bool(cfg.get("custom_text")) or bool(cfg["text_cfg"].get("hf_model_name"))
    if "multimodal_cfg" in cfg:
        return "CoCa"
    return "CustomTextCLIP" if custom else "CLIP"


def _shrink_vision(vision: dict[str, Any], model_id: str) -> tuple[dict[str, Any], dict]:
    if vision.get("timm_model_name"):
        from model_configs.libraries.timm.adapter import _shrink as shrink_timm

        name = vision["timm_model_name"]
        try:
            trunk = shrink_timm(name, {}, 0, pipeline_tag=None)
        except ShrinkError as exc:
            exc.model_id = model_id
            raise
        from model_configs.libraries.timm.adapter import _build

        out = dict(vision)
        out["timm_tiny"] = trunk.config
        out["_trunk_features"] = int(_build(trunk.config)[0].num_features)
        changes = {f"vision_cfg.timm.{k}": v for k, v in trunk.changes.items()}
        side = int(trunk.config["image_side"])
        if out.get("image_size") != side:
            changes["vision_cfg.image_size"] = [out.get("image_size"), side]
            out["image_size"] = side
        return out, changes
    out, changes = cap_keys(vision, VISION_CAPS, prefix="vision_cfg.")
    if isinstance(out.get("layers"), list):  # ModifiedResNet: blocks per stage
        out["layers"] = [min(x, 1) for x in out["layers"]]
        changes["vision_cfg.layers"] = [vision["layers"], out["layers"]]
        # its stages are width x 1, 2, 4, 8 with 4x bottleneck expansion: the top is 32 x width
        out["width"] = min(int(vision.get("width", 64)), RESNET_WIDTH)
        changes["vision_cfg.width"] = [vision.get("width"), out["width"]]
        side = 64  # five stride-2 stages and an attention pool over a 2x2 map
    else:
        patch = int(out.get("patch_size", 16))
        side = patch * GRID
    if out.get("image_size") != side:
        changes["vision_cfg.image_size"] = [out.get("image_size"), side]
        out["image_size"] = side
    return out, changes


def _side(vision: dict[str, Any]) -> int:
    size = vision.get("image_size", 224)
    return int(size[0] if isinstance(size, (list, tuple)) else size)


@contextlib.contextmanager
def _tiny_timm_trunk(vision: dict[str, Any]) -> Iterator[None]:
    """While open_clip builds a timm tower, `timm.create_model` returns the shrunk trunk."""
    tiny = vision.pop("timm_tiny", None)
    if tiny is None:
        yield
        return
    import open_clip.timm_model as tm

    from model_configs.libraries.timm.adapter import _build

    real = tm.timm.create_model

    def create(name: str, *, num_classes: int | None = None, global_pool: Any = None,
               pretrained: bool = False, **_kwargs: Any) -> Any:  # fmt: skip
        model, _ = _build(tiny)
        if num_classes is not None or global_pool is not None:
            pool = global_pool if global_pool is not None else "avg"
            model.reset_classifier(num_classes or 0, global_pool=pool)
        return model

    tm.timm.create_model = create
    try:
        yield
    finally:
        tm.timm.create_model = real
