"""ultralytics: YOLO (and RT-DETR) from the model YAMLs the package bundles.

Ultralytics repos hold weights (`*.pt`), no config file; the architecture is the YAML a weight
file's name names (`face_yolov8n.pt` -> `yolov8n.yaml`). Offline, repos of the bundled catalog
map to their YAML through `model_configs/data/libraries/ultralytics.json`, each with a reason.
The shrink picks the YAML's smallest scale and caps its depth and width multiples and channel
cap (the YAML's own knobs), and the class count. The model is the task model ultralytics builds
from that dict (DetectionModel, SegmentationModel, PoseModel, OBBModel, ClassificationModel);
the loss is the model's own (`model.loss(batch, preds)` with the trainer's default
hyperparameters) on one box per image. Ultralytics is AGPL-3.0: an optional extra only.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from model_configs.adapters.base import Adapter, library_data, repo_name
from model_configs.spec import CatalogEntry, ResolvedConfig, TinySpec
from reports.errors import ConfigError, ShrinkError
from reports.schema import ConfigSource, SkipReason

BATCH = 2
SIDE = 64
CAPS = {"depth_multiple": 0.33, "width_multiple": 0.125, "max_channels": 128}
CLASSES = 4
TASK_CLASSES = {
    "detect": "DetectionModel",
    "segment": "SegmentationModel",
    "pose": "PoseModel",
    "obb": "OBBModel",
    "classify": "ClassificationModel",
}


def _quiet() -> None:
    os.environ.setdefault("YOLO_VERBOSE", "False")
    os.environ.setdefault("YOLO_OFFLINE", "True")


class UltralyticsAdapter(Adapter):
    library = "ultralytics"
    package = "ultralytics"
    extra = "ultralytics"
    config_files = ()  # weights only
    install_note = "ultralytics is AGPL-3.0, so it is an optional extra"

    def default_config(self, entry: CatalogEntry) -> ResolvedConfig:
        _quiet()
        table = library_data(self.library).get("repos", {})
        mapped = table.get(entry.model_id)
        yaml_name = mapped["yaml"] if mapped else _yaml_from_name(repo_name(entry.model_id))
        if yaml_name is None:
            raise ConfigError(
                "ultralytics repos hold weights only, and neither the repo name nor the "
                "adapter's table names a YOLO model YAML",
                reason=SkipReason.NO_CONFIG.value,
                model_id=entry.model_id,
            )
        resolved = _yaml_config(yaml_name, entry.model_id)
        why = mapped["reason"] if mapped else "named in the repo id"
        return ResolvedConfig(
            model_id=entry.model_id,
            library=self.library,
            config=resolved,
            source=ConfigSource.LIBRARY_DEFAULT.value,
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
        if "TorchVision" in layers:
            raise ShrinkError(
                "its TorchVision layer loads torchvision's pretrained weights when it is built "
                "(a download; no weights are ever loaded here)",
                model_id=resolved.model_id,
                stage="load",
            )
        if "A2C2f" in layers:  # YOLOv12's area attention needs channels in multiples of 32
            caps["width_multiple"] = 0.25
        for key, limit in caps.items():
            old = cfg.get(key, 1.0 if key != "max_channels" else 1024)
            new = min(old, limit)
            if new != old or key not in cfg:
                changes[key] = [cfg.get(key), new]
            cfg[key] = new
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
        model = cls(copy.deepcopy(spec.config), verbose=False)
        model.args = get_cfg(DEFAULT_CFG)  # the trainer's default loss weights
        if not hasattr(model, "nc") and "nc" in spec.config:
            model.nc = spec.config["nc"]  # as the trainer sets it (RT-DETR's loss reads it)
        return model.float().eval()

    def make_inputs(
        self, spec: TinySpec, model: Any, *, seed: int = 0, purpose: str = "train"
    ) -> dict[str, Any]:
        import torch

        gen = torch.Generator().manual_seed(seed)
        return {"x": torch.rand(BATCH, 3, SIDE, SIDE, generator=gen)}

    def compute_loss(self, spec: TinySpec, model: Any, outputs: Any, inputs: dict) -> Any:
        batch = _batch(spec, model, inputs["x"])
        preds = outputs[1] if isinstance(outputs, tuple) and len(outputs) == 2 else outputs
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
            yield ResolvedConfig(
                model_id=f"ultralytics/{path.stem}",
                library=self.library,
                config=_yaml_config(str(path), f"ultralytics/{path.stem}"),
                source=ConfigSource.LIBRARY_DEFAULT.value,
                detail=str(path.relative_to(root)),
            )


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
