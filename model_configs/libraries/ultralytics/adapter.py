"""ultralytics: YOLO (and RT-DETR) from the model YAMLs the package bundles.

Ultralytics repos hold weights (`*.pt`), no config file; the architecture is the YAML a weight
file's name names (`face_yolov8n.pt` -> `yolov8n.yaml`). Offline, repos of the bundled catalog
map to their YAML through `data/tables.json`, each with a reason.
The shrink picks the YAML's smallest scale and caps its depth and width multiples and channel
cap (the YAML's own knobs), and the class count; channel counts a YAML writes that those knobs
do not reach (YOLOv9's hidden widths, the ResNet layers, RT-DETR's decoder) are scaled with
them (`_scale_written_channels`). The model is the task model ultralytics builds from that
dict (DetectionModel, SegmentationModel, PoseModel, OBBModel, ClassificationModel,
SemanticSegmentationModel, DepthModel, RTDETRDetectionModel, WorldModel, YOLOEModel); the loss
is the model's own (`model.loss(batch, preds)` with the trainer's default hyperparameters) on
one box per image (a class mask, a depth map for the dense tasks), on the eval-mode forward the
stages run. RT-DETR's loss takes its eval-mode outputs as they are (it reads the decoder's raw
outputs from them); only the denoising queries, which ultralytics adds in training mode alone,
are not exercised. YOLO-World and YOLOE take class text embeddings from a text encoder that
their trainers keep frozen and run apart; random embeddings of that width stand in for them.
Ultralytics is AGPL-3.0: an optional extra only.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ground.errors import ConfigError
from ground.schema import SkipReason
from model_configs.libraries.base import Adapter, library_tables, no_config, repo_name
from model_configs.spec import CatalogEntry, ResolvedConfig, TinySpec
from model_configs.tiny_inputs import BATCH

SIDE = 64
CAPS = {"depth_multiple": 0.33, "width_multiple": 0.125, "max_channels": 128}
CLASSES = 4
TASK_CLASSES = {
    "detect": "DetectionModel",
    "segment": "SegmentationModel",
    "pose": "PoseModel",
    "obb": "OBBModel",
    "classify": "ClassificationModel",
    "semantic": "SemanticSegmentationModel",
    "depth": "DepthModel",
}
# Open-vocabulary heads take their classes as text embeddings from a CLIP / MobileCLIP text
# encoder that ultralytics downloads and keeps frozen: its trainer computes them once and feeds
# them to the model (YOLO-World's `txt_feats`, YOLOE's `tpe`). The model trained is the same
# without the encoder, so the inputs carry random embeddings of the head's width in their place.
TEXT_PROMPT_INPUT = {"WorldModel": "txt_feats", "YOLOEModel": "tpe", "YOLOESegModel": "tpe"}
# RT-DETR's decoder by its own constructor arguments (RTDETRDecoder(nc, ch, hd, nq, ndp, nh, ndl,
# d_ffn)): hidden width, queries, sampling points, heads, layers, feed-forward width.
RTDETR_DECODER = {"hd": 32, "nq": 30, "ndp": 4, "nh": 2, "ndl": 2, "d_ffn": 64}
# Modules whose arguments after the output width are channel counts that parse_model passes as
# written (YOLOv9's RepNCSPELAN4 / ELAN1 hidden widths, SPPELAN's, CBLinear's output split):
# argument positions scaled as parse_model scales the output width.
ABSOLUTE_CHANNEL_ARGS = {"RepNCSPELAN4": (1, 2), "ELAN1": (1, 2), "SPPELAN": (1,),
                         "HGStem": (0, 1), "HGBlock": (0, 1)}  # fmt: skip


def _quiet() -> None:
    os.environ.setdefault("YOLO_VERBOSE", "False")
    os.environ.setdefault("YOLO_OFFLINE", "True")


class UltralyticsAdapter(Adapter):
    library = "ultralytics"
    package = "ultralytics"
    extra = "ultralytics"
    config_files = ()  # weights only
    install_note = "ultralytics is AGPL-3.0, so it is an optional extra"
    # its heads keep class-level tensors (`Detect.anchors`, `.strides`) that `.to()` moves
    build_imports = ("ultralytics.nn.tasks",)

    def default_config(self, entry: CatalogEntry) -> ResolvedConfig:
        _quiet()
        table = library_tables(__file__).get("repos", {})
        mapped = table.get(entry.model_id)
        yaml_name = mapped["yaml"] if mapped else _yaml_from_name(repo_name(entry.model_id))
        if yaml_name is None:
            raise no_config(
                "ultralytics repos hold weights only, and neither the repo name nor the "
                "adapter's table names a YOLO model YAML",
                entry.model_id,
            )
        resolved = _yaml_config(yaml_name, entry.model_id)
        why = mapped["reason"] if mapped else "named in the repo id"
        return self.library_default(
            entry.model_id,
            resolved,
            detail=f"ultralytics bundled {yaml_name} ({why})",
        )

    def shrink(
        self,
        resolved: ResolvedConfig,
        *,
        architecture_hint: str | None = None,
        pipeline_tag: str | None = None,
    ) -> TinySpec:
        _quiet()
        from ultralytics.nn.tasks import guess_model_task

        cfg = copy.deepcopy(resolved.config)
        changes: dict[str, list[Any]] = {}
        scales = cfg.pop("scales", None)
        if isinstance(scales, dict) and scales:
            scale = str(cfg.get("scale") or next(iter(scales)))
            depth, width, max_ch = scales.get(scale, next(iter(scales.values())))
            cfg.update(depth_multiple=depth, width_multiple=width, max_channels=max_ch)
            changes["scales"] = [sorted(scales), scale]
        caps = dict(CAPS)
        layers = [str(layer[2]) for layer in cfg.get("backbone", []) + cfg.get("head", [])]
        if "A2C2f" in layers:  # YOLOv12's area attention needs channels in multiples of 32
            caps["width_multiple"] = 0.25
        for key, limit in caps.items():
            old = cfg.get(key, 1.0 if key != "max_channels" else 1024)
            new = min(old, limit)
            if new != old or key not in cfg:
                changes[key] = [cfg.get(key), new]
            cfg[key] = new
        changes.update(_scale_written_channels(cfg))
        task = guess_model_task(cfg)
        if "nc" in cfg and isinstance(cfg["nc"], int) and cfg["nc"] > CLASSES:
            changes["nc"] = [cfg["nc"], CLASSES]
            cfg["nc"] = CLASSES
        arch = _model_class(cfg, task)
        return TinySpec(
            library=self.library,
            model_type=str(cfg.get("yaml_file") or arch),
            architecture=arch,
            config=cfg,
            generative=False,
            task=str(task),
            changes=changes,
        )

    def build_model(self, spec: TinySpec) -> Any:
        _quiet()
        import torch
        import ultralytics.nn.tasks as tasks
        from ultralytics.cfg import get_cfg
        from ultralytics.utils import DEFAULT_CFG

        cls = getattr(tasks, spec.architecture)
        torch.manual_seed(0)
        model = cls(copy.deepcopy(spec.config), nc=spec.config.get("nc"), verbose=False)
        model.args = get_cfg(DEFAULT_CFG)  # the trainer's default loss weights
        if not hasattr(model, "nc") and "nc" in spec.config:
            model.nc = spec.config["nc"]  # as the trainer sets it (RT-DETR's loss reads it)
        return model.float().eval()

    def make_inputs(
        self, spec: TinySpec, model: Any, *, seed: int = 0, purpose: str = "train"
    ) -> dict[str, Any]:
        import torch

        gen = torch.Generator().manual_seed(seed)
        inputs = {"x": torch.rand(BATCH, 3, SIDE, SIDE, generator=gen)}
        prompts = TEXT_PROMPT_INPUT.get(spec.architecture)
        if prompts is not None:  # the frozen text encoder's class embeddings, as the trainer feeds
            nc, embed = int(spec.config.get("nc") or CLASSES), _prompt_width(model)
            inputs[prompts] = torch.randn(BATCH, nc, embed, generator=gen)
        return inputs

    def compute_loss(self, spec: TinySpec, model: Any, outputs: Any, inputs: dict) -> Any:
        batch = _batch(spec, model, inputs["x"])
        preds = outputs
        if spec.architecture != "RTDETRDetectionModel" and isinstance(outputs, tuple):
            # (inference output, raw head output): the loss reads the raw one; RT-DETR's loss
            # takes the pair itself outside training (it reads the decoder's raw outputs)
            preds = outputs[1] if len(outputs) == 2 else outputs
        loss, _items = model.loss(batch, preds)
        return loss.sum()

    def save_and_load(self, spec: TinySpec, model: Any, folder: Path) -> Any:
        fresh = super().save_and_load(spec, model, folder)
        from ultralytics.cfg import get_cfg
        from ultralytics.utils import DEFAULT_CFG

        fresh.args = get_cfg(DEFAULT_CFG)
        if not hasattr(fresh, "nc") and "nc" in spec.config:
            fresh.nc = spec.config["nc"]
        return fresh

    def iter_architectures(self) -> Iterator[ResolvedConfig]:
        _quiet()
        import ultralytics

        root = Path(ultralytics.__file__).parent / "cfg" / "models"
        for path in sorted(root.rglob("*.yaml")):
            yield self.library_default(
                f"ultralytics/{path.stem}",
                _yaml_config(str(path), f"ultralytics/{path.stem}"),
                detail=str(path.relative_to(root)),
            )


def _scale_written_channels(cfg: dict[str, Any]) -> dict[str, list[Any]]:
    """Channel counts a YAML writes that parse_model does not scale, scaled as it scales the
    output widths (c * width_multiple on multiples of 8; its max_channels applies only through
    a `scales` table, which the shrink has resolved), so that the tiny
    model keeps the full one's proportions: YOLOv9's hidden widths and CBLinear splits, the
    ResNet classifiers' ResNetLayer widths (chained: each layer takes the previous one's
    output), RT-DETR's decoder (RTDETR_DECODER). A TorchVision layer is built without weights."""
    from ultralytics.utils.ops import make_divisible

    width, depth = float(cfg["width_multiple"]), float(cfg.get("depth_multiple", 1.0))

    def scaled(c: int) -> int:
        return int(make_divisible(c * width, 8))

    changes: dict[str, list[Any]] = {}
    prev_out: int | None = None
    for index, layer in enumerate(cfg.get("backbone", []) + cfg.get("head", [])):
        source, module, args = layer[0], str(layer[2]), list(layer[3])
        before = copy.deepcopy(args)
        if module in ABSOLUTE_CHANNEL_ARGS:
            for pos in ABSOLUTE_CHANNEL_ARGS[module]:
                if pos < len(args) and isinstance(args[pos], int):
                    args[pos] = scaled(args[pos])
        elif module == "CBLinear" and args and isinstance(args[0], list):
            args[0] = [scaled(c) for c in args[0]]
        elif module == "ResNetLayer" and len(args) >= 5:
            c1, c2, _stride, is_first, blocks = args[:5]
            args[1] = max(8, int(round(c2 * width / 8)) * 8)
            if not is_first:
                args[0] = prev_out if source == -1 and prev_out else max(8, round(c1 * width))
                args[4] = max(1, round(blocks * depth))
            prev_out = args[1] if is_first else args[1] * 4
        elif module == "RTDETRDecoder":
            nc = args[0] if args else "nc"
            args = [nc, *(RTDETR_DECODER[k] for k in ("hd", "nq", "ndp", "nh", "ndl", "d_ffn"))]
        elif module == "TorchVision" and len(args) >= 3:
            args[2] = None  # the architecture, never its pretrained weights
        if module != "ResNetLayer":
            prev_out = None
        if args != before:
            layer[3] = args
            changes[f"layers.{index}.{module}"] = [before, args]
    return changes


def _prompt_width(model: Any) -> int:
    """The text-embedding width an open-vocabulary model takes: YOLOE's head `embed`, else
    the width of YOLO-World's own placeholder embeddings."""
    embed = getattr(model.model[-1], "embed", None)
    return int(embed) if isinstance(embed, int) else int(model.txt_feats.shape[-1])


def _yaml_from_name(name: str) -> str | None:
    import re

    found = re.search(r"(yolo(?:v\d+|\d+)[nsmlx]?(?:-(?:seg|pose|obb|cls|world|worldv2))?)",
                      name.lower())  # fmt: skip
    return f"{found.group(1)}.yaml" if found else None


def _yaml_config(name: str, model_id: str) -> dict[str, Any]:
    from ultralytics.nn.tasks import yaml_model_load

    try:
        cfg = yaml_model_load(name)
    except (FileNotFoundError, OSError) as exc:
        raise ConfigError(
            f"ultralytics bundles no model YAML {name!r}",
            reason=SkipReason.UNKNOWN_MODEL_TYPE.value,
            model_id=model_id,
        ) from exc
    return _plain(cfg)


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _model_class(cfg: dict[str, Any], task: str) -> str:
    head = str(cfg.get("head", [[None, None, ""]])[-1][2]) if cfg.get("head") else ""
    if "RTDETR" in head:
        return "RTDETRDetectionModel"
    if "World" in head:
        return "WorldModel"
    if "YOLOE" in head:
        return "YOLOESegModel" if "Seg" in head else "YOLOEModel"
    return TASK_CLASSES.get(task, "DetectionModel")


def _batch(spec: TinySpec, model: Any, img: Any) -> dict[str, Any]:
    """One box per image, in the layout the task's loss reads (normalised xywh)."""
    import torch

    n = img.shape[0]
    nc = int(spec.config.get("nc") or CLASSES)  # YOLOv8-pose has one class (person)
    batch: dict[str, Any] = {
        "img": img,
        "batch_idx": torch.arange(n, dtype=torch.float32),
        "cls": (torch.arange(n, dtype=torch.float32) % nc).view(-1, 1),
        "bboxes": torch.tensor([[0.5, 0.5, 0.4, 0.4]] * n),
    }
    if spec.task == "classify":
        return {"img": img, "cls": torch.arange(n) % nc}
    if spec.task == "semantic":  # a class id per pixel: a square of class 1 on background 0
        mask = torch.zeros(n, SIDE, SIDE, dtype=torch.int64)
        mask[:, 16:48, 16:48] = 1
        return {"img": img, "semantic_mask": mask}
    if spec.task == "depth":  # metres, a plane sloping away from the camera
        ramp = torch.linspace(1.0, 10.0, SIDE).view(1, SIDE, 1).expand(n, SIDE, SIDE)
        return {"img": img, "depth": ramp.contiguous()}
    if spec.task == "obb":
        batch["bboxes"] = torch.tensor([[0.5, 0.5, 0.4, 0.3, 0.2]] * n)
    if spec.task == "segment":
        masks = torch.zeros(n, SIDE // 4, SIDE // 4)
        masks[:, 4:12, 4:12] = 1.0  # instance 1 of each image (overlapping-mask layout)
        batch["masks"] = masks
    if spec.task == "pose":
        kpt = list(spec.config.get("kpt_shape") or [17, 3])
        points = torch.full((n, kpt[0], kpt[1]), 0.5)
        if kpt[1] == 3:
            points[..., 2] = 2.0  # visible
        batch["keypoints"] = points
    return batch
