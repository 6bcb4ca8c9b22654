"""timm: the architecture from the repo id (or its `config.json`), shrunk by its constructor.

A timm repo's `config.json` names the `architecture` (an entrypoint such as `resnet50`), its
`num_classes` and, for some, `model_args` passed to the entrypoint. Offline, the architecture
is the repo name up to its pretrained tag (`timm/resnet50.a1_in1k` -> `resnet50`), when timm
knows it. The shrink is `model_configs.libraries.timm.shrink`'s; the input size is the smallest of a few
candidates the tiny model accepts (checked at shrink time, on the CPU, a few milliseconds).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ground.errors import ConfigError, ShrinkError
from ground.schema import SkipReason
from model_configs.libraries.base import Adapter, no_config, repo_name
from model_configs.pass_rule import MAX_PARAMS
from model_configs.spec import CatalogEntry, ResolvedConfig, TinySpec
from model_configs.tiny_inputs import BATCH, GRID

IMAGE_SIDES = (64, 32, 96, 128, 160, 224)  # tried in order at shrink time
# Widths are divided further (x2, x4, x8) while the tiny model is above TARGET_PARAMS; when a
# narrower step does not build, the last one that built and stays under the pass rule's cap wins.
FACTOR_STEPS = (1, 2, 4, 8)
TARGET_PARAMS = 1_000_000


class TimmAdapter(Adapter):
    library = "timm"
    package = "timm"
    warm_in_parent = True
    extra = "timm"

    def default_config(self, entry: CatalogEntry) -> ResolvedConfig:
        import timm

        arch = repo_name(entry.model_id).split(".", 1)[0]
        if not timm.is_model(arch):
            raise no_config(
                f"no config.json available offline, and {arch!r} (from the repo name) is not "
                f"a timm {timm.__version__} architecture",
                entry.model_id,
            )
        return self.library_default(
            entry.model_id,
            {"architecture": arch},
            detail=f"timm {timm.__version__} defaults for architecture {arch!r} (from the repo id)",
        )

    def shrink(
        self,
        resolved: ResolvedConfig,
        *,
        architecture_hint: str | None = None,
        pipeline_tag: str | None = None,
    ) -> TinySpec:
        import timm

        cfg = resolved.config
        arch = cfg.get("architecture")
        if not isinstance(arch, str) or not arch:
            raise ConfigError(
                "timm config.json names no architecture",
                reason=SkipReason.MALFORMED_CONFIG.value,
                model_id=resolved.model_id,
            )
        if not timm.is_model(arch):
            raise ConfigError(
                f"timm {timm.__version__} has no architecture {arch!r}",
                reason=SkipReason.UNKNOWN_MODEL_TYPE.value,
                model_id=resolved.model_id,
                hint="upgrade timm",
            )
        model_args = dict(cfg.get("model_args") or {})
        num_classes = cfg.get("num_classes")
        try:
            return _shrink(arch, model_args, num_classes, pipeline_tag=pipeline_tag)
        except ShrinkError as exc:
            exc.model_id = resolved.model_id
            raise

    def build_model(self, spec: TinySpec) -> Any:
        model, _ = _build(spec.config)
        return model.eval()

    def make_inputs(
        self, spec: TinySpec, model: Any, *, seed: int = 0, purpose: str = "train"
    ) -> dict[str, Any]:
        import torch

        gen = torch.Generator().manual_seed(seed)
        side = int(spec.config["image_side"])
        chans = int(spec.config.get("in_chans", 3))
        return {"x": torch.randn(BATCH, chans, side, side, generator=gen)}

    def compute_loss(self, spec: TinySpec, model: Any, outputs: Any, inputs: dict) -> Any:
        return classification_loss(outputs, int(spec.config.get("num_classes") or 0))

    def iter_architectures(self) -> Iterator[ResolvedConfig]:
        import timm

        for name in timm.list_models():
            yield self.library_default(
                f"timm/{name}",
                {"architecture": name},
            )


def family(arch: str) -> str:
    """timm's module for an architecture (`resnet`, `vision_transformer`): its family."""
    from timm.models import _registry

    return str(_registry._model_to_module.get(arch, arch))


def classification_loss(outputs: Any, num_classes: int) -> Any:
    """Cross-entropy on fixed labels for logits; mean square of the features otherwise."""
    import torch
    import torch.nn.functional as F

    outs = list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]
    loss = None
    for out in outs:  # distilled / auxiliary heads each get the same loss
        if isinstance(out, dict):
            out = next((v for v in out.values() if isinstance(v, torch.Tensor)), None)
        if not isinstance(out, torch.Tensor) or not out.is_floating_point():
            continue
        if num_classes > 0 and out.ndim == 2 and out.shape[-1] == num_classes:
            target = torch.arange(out.shape[0], device=out.device) % num_classes
            term = F.cross_entropy(out.float(), target)
        else:
            term = out.float().pow(2).mean()
        loss = term if loss is None else loss + term
    if loss is None:
        raise TypeError(f"the model returned no float tensor ({type(outputs).__name__})")
    return loss


def _shrink(
    arch: str, model_args: dict[str, Any], num_classes: Any, *, pipeline_tag: str | None
) -> TinySpec:
    from model_configs.libraries.timm import shrink as tshrink

    try:
        captured = tshrink.capture(arch, **model_args)
    except Exception as exc:
        raise ShrinkError(
            f"timm entrypoint {arch!r} failed: {type(exc).__name__}: {exc}", stage="load"
        ) from exc
    pretrained = captured.builder.get("pretrained_cfg") or {}
    if not isinstance(pretrained, dict):  # a PretrainedCfg dataclass
        pretrained = pretrained.to_dict() if hasattr(pretrained, "to_dict") else {}
    classes = num_classes if isinstance(num_classes, int) else pretrained.get("num_classes")
    classes = 1000 if classes is None else int(classes)
    tiny_classes = min(classes, tshrink.NUM_CLASSES) if classes > 0 else 0
    patch = _patch_size(captured)
    errors: list[str] = []
    fallback: dict[str, Any] | None = None  # a working tiny model above TARGET_PARAMS
    for step in FACTOR_STEPS:
        found = _first_working(arch, model_args, tiny_classes, step, captured, patch, errors)
        if found is None:
            continue
        config, params = found
        if params <= TARGET_PARAMS:
            return _spec(arch, captured, config, classes, tiny_classes, pretrained)
        errors.append(f"{params / 1e6:.1f}M parameters at width step {step}")
        if params <= MAX_PARAMS:
            fallback = config  # narrower steps may not build; this one passes the cap
    if fallback is not None:
        return _spec(arch, captured, fallback, classes, tiny_classes, pretrained)
    raise ShrinkError(
        f"no tiny {arch} builds and runs: {'; '.join(errors[:4])}",
        stage="load",
        hint="add a rule to model_configs/libraries/timm/shrink.py or a known failure to "
        "model_configs/libraries/timm/data/tables.json",
    )


def _first_working(
    arch: str,
    model_args: dict[str, Any],
    tiny_classes: int,
    step: int,
    captured: Any,
    patch: int | None,
    errors: list[str],
) -> tuple[dict[str, Any], int] | None:
    """The first image side at this width step whose tiny model builds and runs forward."""
    for side, with_img in _sides(captured, patch):
        config: dict[str, Any] = {
            "architecture": arch,
            "model_args": model_args,
            "num_classes": tiny_classes,
            "width_factor_step": step,
            "image_side": side,
            "set_img_size": with_img,
        }
        try:
            model, args_json = _build(config)
            params = sum(p.numel() for p in model.parameters())
            if params > MAX_PARAMS:
                return config, params  # too big at any side: the caller narrows the width
            _probe(model, side, 3)
        except Exception as exc:  # this size does not fit the model: try the next
            why = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
            if not any(why in e for e in errors):
                errors.append(f"{side}px: {why}")
            continue
        config["args"] = args_json
        return config, params
    return None


def _spec(
    arch: str,
    captured: Any,
    config: dict[str, Any],
    classes: int,
    tiny_classes: int,
    pretrained: dict[str, Any],
) -> TinySpec:
    from model_configs.libraries.timm import shrink as tshrink

    before = tshrink.jsonable(
        {**_defaults_for_diff(captured), **captured.args,
         "model_cfg": captured.builder.get("model_cfg")}
    )  # fmt: skip
    changes = tshrink.diff(before, {**before, **config["args"]})
    changes["num_classes"] = [classes, tiny_classes]
    in_size = pretrained.get("input_size")
    if in_size:
        changes["input_size"] = [list(in_size), [3, config["image_side"], config["image_side"]]]
    return TinySpec(
        library="timm",
        model_type=family(arch),
        architecture=arch,
        config=config,
        generative=False,
        task="image-classification" if tiny_classes else "image-feature-extraction",
        changes=changes,
    )


def _defaults_for_diff(captured: Any) -> dict[str, Any]:
    from model_configs.libraries.timm import shrink as tshrink

    return tshrink.unpassed_defaults(captured)


def _patch_size(captured: Any) -> int | None:
    p = captured.args.get("patch_size")
    if p is None:
        p = captured.args.get("patch_size", None) or _default(captured, "patch_size")
    if isinstance(p, (list, tuple)) and p:
        p = p[0]
    return int(p) if isinstance(p, int) and not isinstance(p, bool) else None


def _default(captured: Any, name: str) -> Any:
    from model_configs.libraries.timm import shrink as tshrink

    return tshrink.class_defaults(captured.cls).get(name)


def _sides(captured: Any, patch: int | None) -> list[tuple[int, bool]]:
    """Image sides to try, and whether the class is told the size (`img_size`)."""
    from model_configs.libraries.timm import shrink as tshrink

    takes_img = tshrink.accepts(captured.cls, "img_size")
    sides = list(IMAGE_SIDES)
    if patch and patch > 1:
        sides = [patch * GRID, patch * 2 * GRID, *sides]
    seen: list[tuple[int, bool]] = []
    for s in sides:
        for flag in (True, False) if takes_img else (False,):
            if (s, flag) not in seen:
                seen.append((s, flag))
    return seen


def _build(config: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """Build the tiny model a spec describes; returns it and its shrunk arguments as JSON."""
    import torch
    from timm.models._builder import build_model_with_cfg

    from model_configs.libraries.timm import shrink as tshrink

    arch = config["architecture"]
    captured = tshrink.capture(arch, **dict(config.get("model_args") or {}))
    args = {**tshrink.unpassed_defaults(captured), **captured.args}
    builder = dict(captured.builder)
    builder.pop("features_only", None)
    if builder.get("model_cfg") is not None:  # a config dataclass: shrunk with the arguments
        args["model_cfg"] = builder.pop("model_cfg")
    factor = tshrink.width_factor(args, captured.cls.__name__)
    factor *= float(config.get("width_factor_step", 1))
    shrunk = tshrink.Shrinker(factor, captured.cls.__name__).args(args)
    if "model_cfg" in shrunk:
        builder["model_cfg"] = shrunk.pop("model_cfg")
    if config.get("set_img_size"):
        shrunk["img_size"] = int(config["image_side"])
    if tshrink.accepts(captured.cls, "num_classes"):
        shrunk["num_classes"] = int(config.get("num_classes") or 0)
    args_json = tshrink.jsonable({**shrunk, "model_cfg": builder.get("model_cfg")})
    expected = config.get("args")
    if expected is not None and expected != args_json:
        raise ShrinkError(
            f"timm builds {arch} differently from when it was shrunk (another timm version?)",
            stage="load",
        )
    torch.manual_seed(0)
    if captured.creator is not None:
        import sys

        module = sys.modules[_entry_module(arch)]
        creator = getattr(module, captured.creator)
        pos = list(captured.creator_pos)
        if len(pos) >= 2 and isinstance(pos[1], bool):
            pos[1] = False  # (variant, pretrained): never pretrained
        if "pretrained" in shrunk:
            shrunk["pretrained"] = False
        model = creator(*pos, **shrunk)
    else:
        model = build_model_with_cfg(captured.cls, captured.variant, False, **builder, **shrunk)
    return model.float().eval(), args_json


def _entry_module(arch: str) -> str:
    from timm.models import _registry

    return str(_registry.model_entrypoint(arch).__module__)


def _probe(model: Any, side: int, chans: int) -> None:
    """One forward at this size (shrink time): raises when the tiny model does not take it."""
    import torch

    with torch.no_grad():
        model(torch.zeros(BATCH, chans, side, side))
