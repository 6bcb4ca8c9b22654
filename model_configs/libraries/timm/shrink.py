"""Shrink a timm architecture by its family's own constructor arguments.

Every timm architecture is an entrypoint (`resnet50`) that calls `build_model_with_cfg(cls,
variant, pretrained, **model_args)`. The shrinker asks the entrypoint for those arguments
(intercepting that one call: nothing is built, nothing downloaded), then shrinks them by name,
as the transformers shrinker shrinks config keys: stage depths to one block, widths divided by
one factor (so widths that were equal stay equal), heads that divide the new widths, window
and image sizes that still tile. Arguments the class takes with defaults (ResNet's `channels`)
are shrunk too. Config dataclasses (RegNetCfg, MaxxVitCfg, ByoModelCfg, ...) and
EfficientNet-style block lists are walked the same way. The model is then built by the real
`build_model_with_cfg` with the shrunk arguments.

The result is a plain description: the architecture name and the shrunk arguments as JSON; the
same timm version always shrinks the same way, so the build redoes the shrink and checks that
it matches the spec.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import sys
from pathlib import Path
from typing import Any, TypeGuard

RULES_FILE = Path(__file__).resolve().parent / "data" / "tables.json"

# Target sizes.
MAX_WIDTH = 64  # the widest stage after shrinking (before a block's own expansion)
WIDTH_STEP = 16
HEADS = 2
HEAD_DIM = 16
DEPTH = 2  # an int depth (a plain transformer's layer count)
WINDOW = 2
NUM_CLASSES = 10

# Argument names, by what they mean (as the transformers shrinker's key lists).
DEPTH_LIST_KEYS = {"layers", "depths", "depth", "block_repeats", "num_blocks", "stage_depths",
                   "d", "blocks_per_stage", "n_blocks", "repeats", "num_layers", "block_layers",
                   "stage_blocks"}  # fmt: skip
DEPTH_INT_KEYS = {"depth", "num_layers", "n_layers", "num_blocks", "layers", "d",
                  "depth_token_only", "num_decoder_layers"}  # fmt: skip
WIDTH_KEYS = {"embed_dim", "embed_dims", "dims", "dim", "widths", "width", "channels", "c",
              "hidden_dim", "hidden_dims", "num_features", "stem_width", "stem_chs", "stem_size",
              "out_chs", "head_hidden_size", "num_chs", "stage_channels", "inplanes", "init_chs",
              "num_init_features", "stem_out_chs", "embed_dim_per_stage", "w0", "mid_chs",
              "feat_dim", "out_channels", "in_chans_stage", "base_dim", "decoder_dim",
              "stem_dim", "num_channels", "hidden_size", "conv_dim", "head_dim_out",
              "hidden_channels", "stages_out_channels", "channels_per_stage", "base_width_chs",
              "head_chs", "output_channels", "block_chs", "chs"}  # fmt: skip
WIDTH_KEYS |= {"initial_chs", "final_chs", "stem_channels", "base_channels", "in_planes",
               "width_list", "inc_sec", "k_r", "growth_rates", "stage_conv_chs",
               "stage_out_chs", "in_chs", "inner_dim", "partial_dim"}  # fmt: skip

GROWTH_KEYS = {"growth_rate", "wa"}
# Multipliers some families build every width / depth from (RexNet, GhostNet, MobileNets).
WIDTH_MULT_KEYS = {"width_mult", "width_multiplier", "channel_multiplier", "multiplier",
                   "width_factor"}  # fmt: skip
DEPTH_MULT_KEYS = {"depth_mult", "depth_multiplier"}
WIDTH_MULT, DEPTH_MULT = 0.25, 0.5
FLOAT_WIDTH_MULT_KEYS = {"width"}  # GhostNet / RepGhostNet: `width=1.6` is a multiplier
WIDTH_KEYS |= {
    "head_widths"
}  # EfficientViT's classifier widths  # widths added per block (DenseNet, RegNet's slope)
HEAD_KEYS = {"num_heads", "heads", "n_heads", "num_attention_heads"}
DEPTH_LIST_KEYS |= {"depth_list", "k_sec", "num_blocks_list", "layer_per_block",
                    "block_per_stage", "serial_depths"}  # fmt: skip
DEPTH_INT_KEYS |= {"num_modules", "parallel_depth"}
HEAD_KEYS |= {"num_heads_outer", "num_heads_inner"}
HEAD_DIM_KEYS = {"head_dim", "dim_head", "key_dim", "attn_head_dim"}
WINDOW_KEYS = {"window_size", "partition_size", "local_window_size", "grid_size",
               "window_sizes"}  # fmt: skip
# Never sizes, whatever their names look like.
NOT_A_SIZE = {"in_chans", "num_classes", "img_size", "patch_size", "stride", "s", "kernel_size"}
# Arguments of build_model_with_cfg itself (not the model's).
BUILDER_ARGS = {"pretrained_cfg", "pretrained_cfg_overlay", "model_cfg", "feature_cfg",
                "pretrained_strict", "pretrained_filter_fn", "cache_dir", "kwargs_filter",
                "pretrained_model_args", "features_only"}  # fmt: skip


class _Captured(Exception):
    pass


@dataclasses.dataclass
class Captured:
    """What an entrypoint would build: the model class, and the arguments to shrink.

    Most families' entrypoints call a module-level creator (`_create_vision_transformer(variant,
    pretrained, **model_args)`, `_gen_efficientnet(variant, channel_multiplier, ...)`); its
    keyword arguments are the family's own constructor arguments, shrunk before the creator
    turns them into modules (ViTamin builds its conv stem from `embed_cfg` there). Families
    whose creator looks a config dataclass up by variant (RegNet, CSPNet, MaxViT) are captured
    one level down, at `build_model_with_cfg`, where that `model_cfg` is an argument.
    """

    cls: Any
    variant: str
    builder: dict[str, Any]  # build_model_with_cfg's own arguments (model_cfg, feature_cfg...)
    args: dict[str, Any]  # the arguments the shrinker shrinks
    creator: str | None = None  # the module-level creator called with `args`, if any
    creator_pos: tuple[Any, ...] = ()  # its positional arguments (variant, pretrained)
    passed: frozenset[str] = frozenset()  # what reaches the class: its defaults beyond these


def capture(name: str, **overrides: Any) -> Captured:
    """Run the entrypoint `name` up to the call that builds the model (nothing is built)."""
    from timm.models import _registry

    entry = _registry.model_entrypoint(name)
    module = sys.modules[entry.__module__]
    builder_call = _intercept(entry, module, ["build_model_with_cfg"], overrides)
    if builder_call is None:
        raise RuntimeError(f"timm entrypoint {name!r} did not call build_model_with_cfg")
    _, (cls, variant, _pretrained), kwargs = builder_call
    kwargs = dict(kwargs)
    builder = {k: kwargs.pop(k) for k in list(kwargs) if k in BUILDER_ARGS}
    if builder.get("model_cfg") is None:
        creators = sorted(
            n for n in vars(module)
            if n.startswith(("_create", "_gen_")) and callable(getattr(module, n))
        )  # fmt: skip
        creator_call = _intercept(entry, module, creators, overrides) if creators else None
        if creator_call is not None:
            fn_name, pos, ckwargs = creator_call
            try:  # positional arguments by name (`_gen_mobilenet_v3(variant, 1.0, ...)`)
                bound = inspect.signature(getattr(module, fn_name)).bind_partial(*pos, **ckwargs)
                named = dict(bound.arguments)
                extra = named.pop(
                    next(
                        (
                            n
                            for n, p in inspect.signature(
                                getattr(module, fn_name)
                            ).parameters.items()
                            if p.kind is p.VAR_KEYWORD
                        ),
                        "",
                    ),
                    {},
                )
                ckwargs, pos = {**named, **extra}, ()
            except TypeError:
                pass
            return Captured(cls=cls, variant=variant, builder=builder, args=dict(ckwargs),
                            creator=fn_name, creator_pos=tuple(pos),
                            passed=frozenset(kwargs))  # fmt: skip
    return Captured(
        cls=cls, variant=variant, builder=builder, args=kwargs, passed=frozenset(kwargs)
    )


def _intercept(
    entry: Any, module: Any, names: list[str], overrides: dict[str, Any]
) -> tuple[str, tuple, dict] | None:
    """The first call the entrypoint makes to one of `names` (module attributes)."""
    got: list[tuple[str, tuple, dict]] = []
    originals = {n: getattr(module, n) for n in names}

    def recorder(fn_name: str) -> Any:
        def fake(*args: Any, **kwargs: Any) -> Any:
            got.append((fn_name, args, kwargs))
            raise _Captured

        return fake

    for n in names:
        setattr(module, n, recorder(n))
    try:
        entry(pretrained=False, **overrides)
    except _Captured:
        pass
    finally:
        for n, fn in originals.items():
            setattr(module, n, fn)
    return got[0] if got else None


def class_defaults(cls: Any) -> dict[str, Any]:
    """The model class's own keyword defaults (ResNet's `channels`, ViT's `img_size`)."""
    try:
        target = cls.__init__ if isinstance(cls, type) else cls  # type: ignore[misc]
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return {}
    return {
        n: p.default
        for n, p in params.items()
        if p.default is not inspect.Parameter.empty and n not in ("self", "kwargs")
    }


def accepts(cls: Any, name: str) -> bool:
    """The class names this argument itself (not only through **kwargs)."""
    try:
        params = inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):
        return False
    return name in params


def unpassed_defaults(captured: Captured) -> dict[str, Any]:
    """Shrinkable defaults the entrypoint does not set itself: the creator's own (EfficientNetV2's
    `channel_multiplier=1.0`), else the class's (ResNet's `channels`)."""
    from_class = {
        k: v for k, v in shrinkable_defaults(captured.cls).items() if k not in captured.passed
    }
    if captured.creator is not None:
        from timm.models import _registry

        module = sys.modules[_registry.model_entrypoint(captured.variant.split(".")[0]).__module__]
        fn = getattr(module, captured.creator)
        own = {
            k: v for k, v in class_defaults(fn).items()
            if k in WIDTH_MULT_KEYS | DEPTH_MULT_KEYS and k not in captured.args
        }  # fmt: skip
        return {**from_class, **own}
    return from_class


def shrinkable_defaults(cls: Any) -> dict[str, Any]:
    """The class's keyword defaults that a rule shrinks (ResNet's `channels`, RexNet's
    `final_chs`): shrunk even when the entrypoint does not pass them."""
    keys = (DEPTH_LIST_KEYS | DEPTH_INT_KEYS | WIDTH_KEYS | GROWTH_KEYS | HEAD_KEYS
            | HEAD_DIM_KEYS | WINDOW_KEYS) - NOT_A_SIZE  # fmt: skip
    return {
        k: v
        for k, v in class_defaults(cls).items()
        if k in keys and (_is_int(v) or _int_seq(v)) and not isinstance(v, bool)
    }


# ----- the walk ---------------------------------------------------------------------------------


def _is_int(v: Any) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


GROUP_NORM_GROUPS = 32  # timm's GroupNorm default


def _group_norm(layer: Any) -> bool:
    """A norm layer argument naming GroupNorm ('groupnorm', 'gn', the class, a partial of it)."""
    if isinstance(layer, str):
        return layer.lower() in ("groupnorm", "gn", "groupnormact", "groupnorm1")
    target = getattr(layer, "func", layer)
    return "GroupNorm" in getattr(target, "__name__", "") and "1" not in target.__name__


def _whole_float(v: Any) -> bool:
    return isinstance(v, float) and v.is_integer()


def _chain_blocks(before: Any, after: Any) -> Any:
    """A block list whose dicts name `in_chs` and `out_chs` (Xception): the first block keeps
    its input width (a stem outside the list makes it), each next one takes the previous
    block's new output width."""
    if not all(isinstance(b, dict) and "in_chs" in b and "out_chs" in b for b in after):
        return after
    chained = [dict(b) for b in after]
    chained[0]["in_chs"] = before[0]["in_chs"]
    for prev, block in zip(chained, chained[1:], strict=False):
        out = prev["out_chs"]
        block["in_chs"] = out[-1] if isinstance(out, (list, tuple)) else out
    return type(after)(chained)


def _config_like(v: Any) -> bool:
    """A dataclass, a dict, or a sequence holding them (a block list)."""
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return True
    if isinstance(v, dict):
        return True
    return isinstance(v, (list, tuple)) and bool(v) and any(_config_like(x) for x in v)


def _int_seq(v: Any) -> TypeGuard[list[int] | tuple[int, ...]]:
    return isinstance(v, (list, tuple)) and bool(v) and all(_is_int(x) for x in v)


class Shrinker:
    """One shrink of one architecture's arguments. `factor` divides every width."""

    def __init__(self, factor: float, model_class: str = ""):
        self.factor = factor
        self.depth = DEPTH_FLOOR.get(model_class, 1)  # blocks kept per stage
        self.keep = KEEP_ARGS.get(model_class, set())
        self.step = WIDTH_STEP_BY_CLASS.get(model_class, WIDTH_STEP)
        self.model_class = model_class
        self.layouts = POSITIONAL_LAYOUTS.get(model_class, {})
        self.fixed = FIXED_ARGS.get(model_class, {})
        self.caps = NESTED_CAPS.get(model_class, {})

    def width(self, w: int) -> int:
        if w <= self.step:
            return w
        new = max(self.step, int(round(w / self.factor / self.step)) * self.step)
        return min(new, w)

    def value(self, key: str, v: Any, path: str) -> Any:
        """The shrunk value of argument `key` (recursing into dataclasses, dicts and lists)."""
        if key in NOT_A_SIZE or key in self.keep:
            return v
        if key in self.caps and _is_int(v):
            return min(v, self.caps[key])
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            return self.dataclass(v, path)
        if isinstance(v, dict):
            out = {
                k: self.positional(layout, x) if (layout := _layout(self.layouts, str(k)))
                else self.value(str(k), x, f"{path}.{k}")
                for k, x in v.items()
            }  # fmt: skip
            fit_heads(out)
            return out
        if key == "block_args" and isinstance(v, list):
            return self.block_args(v)
        if key == "arch_def" and isinstance(v, list) and all(isinstance(x, list) for x in v):
            return self.arch_def(v)
        if isinstance(v, (list, tuple)) and v and any(_config_like(x) for x in v):
            # blocks of dataclasses / dicts, possibly nested (ByobNet's interleaved blocks)
            blocks = type(v)(
                self.value(key, x, f"{path}[{i}]") if _config_like(x) else x
                for i, x in enumerate(v)
            )
            return _chain_blocks(v, blocks)
        if key == "model_cfg" and isinstance(v, list) and any(_is_int(x) for x in v):
            # VGG: a list of widths and "M" (max-pool) markers
            return [self.width(x) if _is_int(x) else x for x in v]
        if key in DEPTH_LIST_KEYS and _int_seq(v):
            return type(v)(min(x, self.depth) for x in v)
        if key in GROUP_COUNT_KEYS and _int_seq(v):
            return type(v)(min(x, 1) for x in v)
        if key in DEPTH_INT_KEYS and _is_int(v) and v > DEPTH:
            return DEPTH
        if key in WIDTH_KEYS and _is_int(v) and v > 0:
            return self.width(v)
        # before the whole-float rule: RepGhostNet's `width=2.0` is a multiplier, not 2 channels
        if key in FLOAT_WIDTH_MULT_KEYS and isinstance(v, float) and v > WIDTH_MULT:
            return WIDTH_MULT
        if key in WIDTH_KEYS and _whole_float(v) and v > 0:  # RepVGG's `c=64 * 2.0`
            return float(self.width(int(v)))
        if key in WIDTH_KEYS and _int_seq(v):
            return type(v)(self.width(x) for x in v)
        if key in GROWTH_KEYS and isinstance(v, (int, float)) and not isinstance(v, bool):
            return type(v)(max(4, round(v / self.factor))) if v > 4 else v
        if key in WIDTH_MULT_KEYS and isinstance(v, float) and v > WIDTH_MULT:
            return WIDTH_MULT
        if key in DEPTH_MULT_KEYS and isinstance(v, float) and v > DEPTH_MULT:
            return DEPTH_MULT
        if key in HEAD_DIM_KEYS and _is_int(v) and v > HEAD_DIM:
            return HEAD_DIM
        if key in ("group_size", "gs") and _is_int(v) and v > GROUP_SIZE:
            return GROUP_SIZE
        if key in WINDOW_KEYS and _is_int(v) and v > WINDOW:
            return WINDOW
        if key in WINDOW_KEYS and _int_seq(v):
            return type(v)(min(x, WINDOW) for x in v)
        return v

    def positional(self, layout: str, v: Any) -> Any:
        """A stage described by position (HGNet's `[in, mid, out, blocks, ...]`) or a list of
        such tuples (SelecSLS's blocks), shrunk by the roles its layout gives each position:
        `w` a width, `i` an input width (the first entry's is kept: a fixed stem makes it),
        `d` a block count, `l` layers inside a block, `_` as it is."""
        if isinstance(v, (list, tuple)) and v and all(isinstance(x, (list, tuple)) for x in v):
            return type(v)(self._entry(layout, x, first=i == 0) for i, x in enumerate(v))
        return self._entry(layout, v, first=False) if isinstance(v, (list, tuple)) else v

    def _entry(self, layout: str, entry: Any, *, first: bool) -> Any:
        out = list(entry)
        for i, role in enumerate(layout[: len(out)]):
            x = out[i]
            if not _is_int(x):
                continue
            if role == "w" or (role == "i" and not first):
                out[i] = self.width(x) if x > 0 else x
            elif role == "d":
                out[i] = min(x, self.depth)
            elif role == "l":
                out[i] = min(x, DEPTH)
        return type(entry)(out)

    def dataclass(self, obj: Any, path: str) -> Any:
        changes = {}
        keep = KEEP_FIELDS.get(type(obj).__name__, set())
        for f in dataclasses.fields(obj):
            if not f.init or f.name in keep:
                continue
            old = getattr(obj, f.name)
            new = self.value(f.name, old, f"{path}.{f.name}")
            if new is not old and new != old:
                changes[f.name] = new
        fields = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if f.init}
        fields.update(changes)
        fit_heads(fields)  # heads that divide the dataclass's own (shrunk) width
        hook = FAMILY_HOOKS.get(type(obj).__name__)
        if hook is not None:
            hook(self, fields)
        changes.update({k: v for k, v in fields.items() if v != getattr(obj, k)})
        return dataclasses.replace(obj, **changes) if changes else obj

    def block_args(self, stages: list[Any]) -> list[Any]:
        """EfficientNet / MobileNet stages: the first block of each stage, narrower."""
        out = []
        for stage in stages:
            blocks = list(stage)[:1] if isinstance(stage, (list, tuple)) else [stage]
            new_blocks = []
            for block in blocks:
                b = dict(block)
                for k in ("out_chs", "mid_chs", "exp_chs"):
                    if _is_int(b.get(k)):
                        b[k] = self.width(b[k])
                if _is_int(b.get("num_heads")) and b["num_heads"] > HEADS:
                    b["num_heads"] = HEADS
                if _is_int(b.get("key_dim")) and b["key_dim"] > HEAD_DIM:
                    b["key_dim"] = HEAD_DIM
                if _is_int(b.get("value_dim")) and b["value_dim"] > HEAD_DIM:
                    b["value_dim"] = HEAD_DIM
                new_blocks.append(b)
            out.append(new_blocks)
        return out

    def arch_def(self, stages: list[list[str]]) -> list[list[str]]:
        """EfficientNet-style block strings (`ir_r1_k5_s2_e6_c40_se0.25`, HardCoReNAS): the first
        block of each stage, its repeats at most the depth kept, its `c` channels narrower."""
        import re

        def block(text: str) -> str:
            text = re.sub(r"_c(\d+)", lambda m: f"_c{self.width(int(m.group(1)))}", text)
            return re.sub(r"_r(\d+)", lambda m: f"_r{min(int(m.group(1)), self.depth)}", text)

        return [[block(stage[0])] for stage in stages if stage]

    def args(self, args: dict[str, Any]) -> dict[str, Any]:
        if _group_norm(args.get("norm_layer")):
            # GroupNorm's 32 groups must divide every normalised width (ResNet-GN)
            self.step = max(self.step, GROUP_NORM_GROUPS)
        out = {k: self.value(k, v, k) for k, v in args.items()}
        out.update(self.fixed)
        hook = CLASS_HOOKS.get(self.model_class)
        if hook is not None:
            hook(out)
        if "num_heads" not in self.keep:
            fit_heads(out)
        fit_groups(out)
        return out


def fit_heads(args: dict[str, Any]) -> None:
    """Heads no more than HEADS, dividing the (per-stage) widths they split."""
    width = next(
        (args[k] for k in ("embed_dim", "embed_dims", "dims", "dim", "widths", "c") if k in args),
        None,
    )
    for key in HEAD_KEYS & set(args):
        heads = args[key]
        if _is_int(heads) and heads > 0:
            w = width[-1] if _int_seq(width) else width
            new = min(heads, HEADS)
            while _is_int(w) and new > 1 and w % new:
                new -= 1
            args[key] = new
        elif _int_seq(heads):
            ws = (
                list(width) if _int_seq(width) and len(width) == len(heads) else [None] * len(heads)
            )
            new_list = []
            for h, w in zip(heads, ws, strict=True):
                n = min(h, HEADS)
                while _is_int(w) and n > 1 and w % n:
                    n -= 1
                new_list.append(max(1, n))
            args[key] = type(heads)(new_list)


# Per-family exceptions, each with its reason: data (`shrink_rules` in
# model_configs/libraries/timm/data/tables.json), keyed by the model class or config dataclass.
_RULES: dict[str, Any] = json.loads(RULES_FILE.read_text(encoding="utf-8"))["shrink_rules"]


def _table(name: str, field: str) -> dict[str, Any]:
    """One table of the rules: class name -> the entry's `field` (its reason stays in the file)."""
    return {cls: entry[field] for cls, entry in _RULES[name].items() if not cls.startswith("_")}


DEPTH_FLOOR: dict[str, int] = _table("depth_floor", "blocks")  # blocks kept per stage
GROUP_COUNT_KEYS = {k for k in _RULES["group_count_keys"] if not k.startswith("_")}
KEEP_ARGS: dict[str, set[str]] = {k: set(v) for k, v in _table("keep_args", "args").items()}
WIDTH_STEP_BY_CLASS: dict[str, int] = _table("width_step", "step")
KEEP_FIELDS: dict[str, set[str]] = {k: set(v) for k, v in _table("keep_fields", "fields").items()}
# Stages described by position, keyed by the model class and the config key (fnmatch pattern);
# roles as in Shrinker.positional.
POSITIONAL_LAYOUTS: dict[str, dict[str, str]] = _table("positional_layouts", "layouts")
NESTED_CAPS: dict[str, dict[str, int]] = _table("nested_caps", "caps")
FIXED_ARGS: dict[str, dict[str, Any]] = _table("fixed_args", "args")


def _layout(layouts: dict[str, str], key: str) -> str | None:
    import fnmatch

    return next((lay for pat, lay in layouts.items() if fnmatch.fnmatchcase(key, pat)), None)


def _regnet(shrinker: Shrinker, fields: dict[str, Any]) -> None:
    """RegNet: widths w0 + wa * j quantised on powers of wm; scaling w0 and wa by exactly one
    factor keeps the four stages (w0 on RegNet's multiple of 8)."""
    w0, wa = fields.get("w0"), fields.get("wa")
    if _is_int(w0) and isinstance(wa, (int, float)) and shrinker.factor > 1:
        new_w0 = max(8, int(round(w0 / shrinker.factor / 8)) * 8)
        fields["w0"], fields["wa"] = new_w0, float(wa) * new_w0 / w0


def _byob(shrinker: Shrinker, fields: dict[str, Any]) -> None:
    """ByobNet's attention-pool heads (CLIP ResNets: `attn_abs`, `attn_rot`) split their
    embedding (head_hidden_size, else the last stage's width) into heads of 64 channels, a size
    the class fixes: the pool gets one head of 64 (the narrowed stage width is below it)."""
    hidden = fields.get("head_hidden_size")
    if str(fields.get("head_type", "")).startswith("attn"):
        fields["head_hidden_size"] = max(64, hidden // 64 * 64) if _is_int(hidden) else 64


def _split_attention(args: dict[str, Any]) -> None:
    """ResNeSt (a ResNet whose blocks take `radix`): split attention convolves
    `int(planes * base_width / 64) * cardinality` channels in cardinality x radix groups, so
    that width over the cardinality must be a multiple of the radix at every narrowed stage:
    base_width rises to the nearest value that makes it so."""
    radix = (args.get("block_args") or {}).get("radix", 1)
    planes, base = args.get("channels"), args.get("base_width")
    if not (_is_int(radix) and radix > 1 and _int_seq(planes) and _is_int(base)):
        return
    for candidate in range(base, base * 8):
        if all(int(p * candidate / 64) % radix == 0 for p in planes):
            args["base_width"] = candidate
            return


# The steps the rules' hooks name, after the generic walk of a class's arguments
# (`class_hooks`) or of a config dataclass (`dataclass_hooks`).
HOOKS: dict[str, Any] = {"split_attention": _split_attention, "regnet": _regnet, "byob": _byob}
CLASS_HOOKS: dict[str, Any] = {k: HOOKS[v] for k, v in _table("class_hooks", "hook").items()}
FAMILY_HOOKS: dict[str, Any] = {k: HOOKS[v] for k, v in _table("dataclass_hooks", "hook").items()}
GROUP_SIZE = 8  # channels per conv group (RegNet, NFNet, ByobNet gs): below the narrow widths


MAX_GROUPS = 4


def fit_groups(args: dict[str, Any]) -> None:
    """Conv groups (ResNeXt cardinality) small enough to divide the narrower channels. A grouped
    bottleneck whose width is `planes * base_width / 64 * cardinality` (ResNeXt, DLA-X, ResNeSt)
    keeps that width: base_width grows by the factor the groups shrank by, so each group is
    wider but the bottleneck keeps its share of the stage width (and a multiple of the groups)."""
    for key in ("cardinality", "groups", "num_groups"):
        v = args.get(key)
        if _is_int(v) and v > MAX_GROUPS:
            args[key] = MAX_GROUPS
            base = args.get("base_width")
            if key == "cardinality" and _is_int(base):
                args["base_width"] = base * v // MAX_GROUPS


def width_factor(args: dict[str, Any], model_class: str = "") -> float:
    """One factor for every width: the widest width found comes down to MAX_WIDTH."""
    widths: list[int] = []
    layouts = POSITIONAL_LAYOUTS.get(model_class, {})

    def walk(key: str, v: Any) -> None:
        layout = _layout(layouts, key)
        if layout and isinstance(v, (list, tuple)):
            entries = v if v and all(isinstance(x, (list, tuple)) for x in v) else [v]
            for entry in entries:
                widths.extend(x for x, r in zip(entry, layout, strict=False)
                              if r in "wi" and _is_int(x))  # fmt: skip
        elif dataclasses.is_dataclass(v) and not isinstance(v, type):
            for f in dataclasses.fields(v):
                walk(f.name, getattr(v, f.name))
        elif isinstance(v, dict):
            for k, x in v.items():
                walk(str(k), x)
        elif key == "block_args" and isinstance(v, list):
            for stage in v:
                for b in stage if isinstance(stage, (list, tuple)) else [stage]:
                    if isinstance(b, dict) and _is_int(b.get("out_chs")):
                        widths.append(b["out_chs"])
        elif isinstance(v, (list, tuple)) and v and any(_config_like(x) for x in v):
            for x in v:
                if _config_like(x):
                    walk(key, x)
        elif key == "model_cfg" and isinstance(v, list):
            widths.extend(x for x in v if _is_int(x))
        elif key == "arch_def" and isinstance(v, list):
            import re

            for stage in v:
                for text in stage if isinstance(stage, list) else []:
                    widths.extend(int(c) for c in re.findall(r"_c(\d+)", str(text)))
        elif key in WIDTH_KEYS and key not in ("num_features", "head_hidden_size"):
            if _is_int(v):
                widths.append(v)
            elif _whole_float(v):
                widths.append(int(v))
            elif _int_seq(v):
                widths.extend(v)

    for k, v in args.items():
        walk(k, v)
    top = max(widths) if widths else MAX_WIDTH
    return max(1.0, top / MAX_WIDTH)


def jsonable(v: Any) -> Any:
    """A JSON description of an argument value (classes and functions by name)."""
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return {
            "_dataclass": type(v).__name__,
            **{f.name: jsonable(getattr(v, f.name)) for f in dataclasses.fields(v)},
        }
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    name = getattr(v, "__qualname__", None) or getattr(getattr(v, "func", None), "__name__", None)
    return f"<{name or type(v).__name__}>"


def diff(before: Any, after: Any, prefix: str = "") -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    if isinstance(before, dict) and isinstance(after, dict):
        for k in sorted(set(before) | set(after)):
            out.update(diff(before.get(k), after.get(k), f"{prefix}{k}."))
        return out
    if before != after:
        out[prefix.rstrip(".")] = [before, after]
    return out
