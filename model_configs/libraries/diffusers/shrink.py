"""Shrink a diffusers model config (or a pipeline's model_index.json) to a tiny, representative one.

A diffusers config is the model class's `__init__` kwargs plus `_class_name`. The shrink keeps
every key that decides which ops run (block types, in/out/latent channels, patch sizes, norm and
attention variants, added conditioning, RoPE layout) and shrinks only size keys: channel lists
keep their length and ratios, layer counts drop to one, heads to two, conditioning widths to 16.
Generic rules come first (`size_rules` in `data/class_rules.json`); per-class rules in
the same file override them, each with a reason. Consistency fixers then restore the constraints
the library checks: norm groups divide channels, RoPE axes sum to the head dim, layer-index
lists stay inside the shrunk layer count.

For a pipeline (`_class_name` ending in "Pipeline", components as `[library, class]` pairs) the
denoiser component (transformer, unet, prior, ...) is the model that runs; the other diffusers
components are listed in the spec's `changes`: `pipeline` is [pipeline class, component that
runs], `pipeline.components` is [all components, [the one that runs]].
"""

from __future__ import annotations

import ast
import copy
import functools
import json
import math
import operator
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ground.errors import ConfigError, ShrinkError
from ground.schema import ConfigSource, SkipReason
from model_configs.spec import ResolvedConfig, TinySpec

DATA_DIR = Path(__file__).resolve().parent / "data"
RULES_PATH = DATA_DIR / "class_rules.json"


@functools.cache
def load_rules() -> dict[str, Any]:
    """The generic size rules, the per-class rules and the pipeline component priorities."""
    with RULES_PATH.open() as f:
        return json.load(f)


def class_rule(class_name: str) -> dict[str, Any]:
    """Per-class rule entry (empty when the class has none: generic rules only)."""
    return dict(load_rules()["classes"].get(class_name, {}))


def model_class(class_name: str) -> Any:
    """The diffusers model class named `class_name`, or ConfigError(no_model_class)."""
    import diffusers
    from diffusers.models.modeling_utils import ModelMixin

    try:
        cls = getattr(diffusers, class_name, None)
        if cls is None:
            import diffusers.models

            cls = getattr(diffusers.models, class_name, None)
    except (ImportError, RuntimeError, AttributeError) as exc:
        raise ConfigError(
            f"diffusers cannot import {class_name}: {exc}",
            reason=SkipReason.NO_MODEL_CLASS.value,
        ) from exc
    if not (isinstance(cls, type) and issubclass(cls, ModelMixin)):
        raise ConfigError(
            f"diffusers {diffusers.__version__} has no model class {class_name!r}",
            reason=SkipReason.NO_MODEL_CLASS.value,
            hint="upgrade diffusers, or the repo needs remote code",
        )
    return cls


# ---------------------------------------------------------------------------------------------
# Pipelines


PIPELINE_LIBRARIES = ("diffusers", "transformers")


def is_pipeline_index(config: dict[str, Any]) -> bool:
    """A model_index.json: a *Pipeline class, or components given as [library, class]."""
    name = str(config.get("_class_name", ""))
    if name.endswith("Pipeline"):
        return True
    refs = [_component_ref(v) for k, v in config.items() if not k.startswith("_")]
    return any(ref and ref[0] in PIPELINE_LIBRARIES for ref in refs)


def _component_ref(value: Any) -> tuple[str, str] | None:
    if (
        isinstance(value, list | tuple)
        and len(value) == 2
        and all(isinstance(v, str | type(None)) for v in value)
        and value[0] is not None
        and value[1] is not None
    ):
        return str(value[0]), str(value[1])
    return None


def pipeline_denoiser(index: dict[str, Any]) -> tuple[str, str] | None:
    """(component name, class name) of the pipeline's denoiser, or None when it has none."""
    refs = {k: r for k, v in index.items() if not k.startswith("_") and (r := _component_ref(v))}
    diffusers_refs = {k: r for k, r in refs.items() if r[0] == "diffusers"}
    for key in load_rules()["denoiser_components"]:
        if key in diffusers_refs:
            return key, diffusers_refs[key][1]
    models = [
        (k, r[1])
        for k, r in sorted(diffusers_refs.items())
        if not r[1].endswith(("Scheduler", "Processor"))
    ]
    return models[0] if models else None


def select_model_config(
    resolved: ResolvedConfig,
) -> tuple[str, dict[str, Any], dict[str, list[Any]]]:
    """(class name, full-size config, notes) of the model to run from a config or pipeline."""
    config = resolved.config
    if isinstance(config, dict) and isinstance(config.get("_class_name"), list):
        raise ConfigError(  # ["module_in_the_repo", "Class"]: a custom pipeline
            f"the pipeline class {config['_class_name']!r} is code in the repo; "
            "trust_remote_code stays off",
            reason=SkipReason.REMOTE_CODE.value,
            model_id=resolved.model_id,
        )
    if not isinstance(config, dict) or not config.get("_class_name"):
        raise ConfigError(
            "diffusers config has no _class_name",
            reason=SkipReason.MALFORMED_CONFIG.value,
            model_id=resolved.model_id,
        )
    if not is_pipeline_index(config):
        return str(config["_class_name"]), dict(config), {}
    found = pipeline_denoiser(config)
    custom = sorted(
        k
        for k, v in config.items()
        if not k.startswith("_") and (ref := _component_ref(v)) and ref[0] not in PIPELINE_LIBRARIES
    )
    if found is None and custom:
        raise ConfigError(
            f"pipeline {config['_class_name']}: its model components ({', '.join(custom)}) are "
            "code in the repo; trust_remote_code stays off",
            reason=SkipReason.REMOTE_CODE.value,
            model_id=resolved.model_id,
        )
    if found is None:
        raise ConfigError(
            f"pipeline {config['_class_name']} has no diffusers model component",
            reason=SkipReason.NO_MODEL_CLASS.value,
            model_id=resolved.model_id,
        )
    component, class_name = found
    # [what the input was, what runs]: the pipeline -> its denoiser, all components -> the one
    notes: dict[str, list[Any]] = {
        "pipeline": [config["_class_name"], component],
        "pipeline.components": [
            sorted(k for k, v in config.items() if not k.startswith("_") and _component_ref(v)),
            [component],
        ],
    }
    sub = resolved.components.get(component)
    if sub:
        sub = dict(sub)
        sub.setdefault("_class_name", class_name)
        return class_name, sub, notes
    notes["pipeline.component_config"] = ["missing", "diffusers_default"]
    return class_name, default_config(class_name), notes


# ---------------------------------------------------------------------------------------------
# Default configs


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def default_config(class_name: str) -> dict[str, Any]:
    """`{"_class_name": name, **__init__ defaults}` for a diffusers model class."""
    import inspect

    cls = model_class(class_name)
    params = inspect.signature(cls.__init__).parameters
    config: dict[str, Any] = {"_class_name": class_name}
    for name, param in params.items():
        if name == "self" or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if param.default is not inspect.Parameter.empty:
            config[name] = _jsonable(param.default)
    return config


# ---------------------------------------------------------------------------------------------
# Expressions (used by rules and by input recipes): arithmetic over config values only.

_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Div: operator.truediv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_CMPS = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Is: operator.is_,
    ast.IsNot: operator.is_not,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}
_FUNCS: dict[str, Callable[..., Any]] = {
    "len": len,
    "min": min,
    "max": max,
    "sum": sum,
    "int": int,
    "prod": math.prod,
    "list": list,
    "range": lambda *a: list(range(*a)),
    "bool": bool,
    "first": lambda v: v[0] if isinstance(v, list | tuple) else v,
}


class _Missing(Exception):
    pass


def evaluate(expr: Any, names: dict[str, Any]) -> Any:
    """Evaluate a rule expression: numbers, config names, + - * // / % **, comparisons,
    `and`/`or`/`not`, `x if c else y`, subscripts and len/min/max/sum/int/prod/first/range/list. Non-strings
    pass through."""
    if not isinstance(expr, str):
        return expr
    return _eval(ast.parse(expr, mode="eval").body, names)


def _eval(node: ast.AST, names: dict[str, Any]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in names:
            return names[node.id]
        if node.id in ("None", "True", "False"):
            return {"None": None, "True": True, "False": False}[node.id]
        raise _Missing(node.id)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        return _BINOPS[type(node.op)](_eval(node.left, names), _eval(node.right, names))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval(node.operand, names)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return not _eval(node.operand, names)
    if isinstance(node, ast.BoolOp):  # Python semantics: the deciding operand, short-circuit
        value = None
        for operand in node.values:
            value = _eval(operand, names)
            if bool(value) != isinstance(node.op, ast.And):
                return value
        return value
    if isinstance(node, ast.Compare):
        left = _eval(node.left, names)
        for op, comp in zip(node.ops, node.comparators, strict=True):
            right = _eval(comp, names)
            if not _CMPS[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):
        return _eval(node.body if _eval(node.test, names) else node.orelse, names)
    if isinstance(node, ast.Subscript):
        return _eval(node.value, names)[_eval(node.slice, names)]
    if isinstance(node, ast.List | ast.Tuple):
        return [_eval(e, names) for e in node.elts]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS:
        return _FUNCS[node.func.id](*(_eval(a, names) for a in node.args))
    raise ValueError(f"unsupported expression: {ast.dump(node)}")


# ---------------------------------------------------------------------------------------------
# Size rules


def _cap(value: Any, limit: int) -> Any:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return min(value, limit) if value > 0 else value
    if isinstance(value, list):
        return [_cap(v, limit) for v in value]
    return value


def _channels(value: Any, base: int, cap: int) -> Any:
    """Channel list: keep its length and its ratios to the first entry, on a multiple of base."""
    if isinstance(value, int) and not isinstance(value, bool):
        return min(value, base)
    if not isinstance(value, list) or not value or not all(isinstance(v, int) for v in value):
        return value
    first = max(value[0], 1)
    return [min(v, min(cap, base * max(1, round(v / first)))) if v > 0 else v for v in value]


def _rescale_axes(axes: list[int], total: int) -> list[int]:
    """Even entries >= 2 with the same proportions as `axes`, summing to `total` (even)."""
    orig = sum(axes)
    out = [max(2, 2 * round(a * total / orig / 2)) for a in axes]
    i = 0
    while sum(out) != total:
        j = (len(out) - 1 - i) % len(out)
        step = 2 if sum(out) < total else -2
        if out[j] + step >= 2:
            out[j] += step
        i += 1
        if i > 64 * len(out):
            raise ShrinkError(f"cannot split {total} into {len(axes)} even RoPE axes")
    return out


def apply_rule(rule: dict[str, Any], value: Any, names: dict[str, Any]) -> Any:
    if "set" in rule:
        return copy.deepcopy(rule["set"])
    if "expr" in rule:
        return evaluate(rule["expr"], names)
    if "cap" in rule:
        return _cap(value, int(rule["cap"]))
    if "channels" in rule:
        return _channels(value, int(rule["channels"]), int(rule.get("max", 64)))
    if "rope_factors" in rule:  # longrope factor lists resampled to rotary_dim / 2 entries
        length = int(evaluate(rule["rope_factors"], names))
        if value is None:
            return {"long_factor": [1.0] * length, "short_factor": [1.0] * length}
        if not isinstance(value, dict):
            return value
        out = dict(value)
        for key in ("long_factor", "short_factor"):
            factors = value.get(key)
            if isinstance(factors, list) and factors:
                out[key] = [factors[i * len(factors) // length] for i in range(length)]
        return out
    if "scale_first" in rule:  # list scaled so its first entry becomes the base (ratios kept)
        if not isinstance(value, list) or not value or not value[0]:
            return value
        base = int(rule["scale_first"])
        return [max(1, v * base // value[0]) for v in value]
    if "axes_sum" in rule:
        if not isinstance(value, list) or not value:
            return value
        return _rescale_axes([int(v) for v in value], int(evaluate(rule["axes_sum"], names)))
    if "kv_heads" in rule:  # keep MHA (kv == heads), MQA (kv == 1) and GQA (1 < kv < heads)
        heads_key = str(rule["kv_heads"])
        orig_heads, heads = names["orig"].get(heads_key), names.get(heads_key)
        if (
            not isinstance(value, int)
            or not isinstance(orig_heads, int)
            or not isinstance(heads, int)
        ):
            return value
        if value >= orig_heads:
            return heads
        return 1 if value == 1 else max(1, heads // 2)
    if "keep_indices_below" in rule:
        if not isinstance(value, list):
            return value
        limit = int(evaluate(rule["keep_indices_below"], names))
        kept = [i for i in value if isinstance(i, int) and i < limit]
        return kept or ([0] if value else [])
    raise ShrinkError(f"unknown size rule {rule}")


def _when(rule: dict[str, Any], names: dict[str, Any]) -> bool:
    if "when" not in rule:
        return True
    try:
        return bool(evaluate(rule["when"], names))
    except _Missing:
        return False


def _largest_divisor(groups: int, channels: list[int], cap: int) -> int:
    for g in range(min(groups, cap), 0, -1):
        if all(c % g == 0 for c in channels):
            return g
    return 1


def _fix_groups(config: dict[str, Any], fixer: dict[str, Any]) -> None:
    """Make every group-norm group count divide every channel count it normalises."""
    channels: list[int] = []
    for key in fixer["channel_keys"]:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            channels.append(value)
        elif isinstance(value, list):
            channels.extend(v for v in value if isinstance(v, int) and v > 0)
    if not channels:
        return
    for key in fixer["group_keys"]:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            config[key] = _largest_divisor(value, channels, int(fixer.get("cap", 4)))


def shrink_config(
    config: dict[str, Any], class_name: str
) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """The shrunk config and {key: [original, shrunk]} for every key it changed."""
    rules = load_rules()
    entry = class_rule(class_name)
    original = {k: v for k, v in config.items() if not k.startswith("_")}
    for key, value in entry.get("fill", {}).items():  # required kwargs the config may lack
        original.setdefault(key, copy.deepcopy(value))
    new = copy.deepcopy(original)
    kind = entry.get("kind") or ("unet" if "down_block_types" in new else "transformer")
    steps: list[tuple[str, dict[str, Any]]] = []
    generic = rules["size_rules"]
    for key, rule in {**generic.get("all", {}), **generic.get(kind, {})}.items():
        if key not in entry.get("rules", {}):
            steps.append((key, rule))
    steps.extend(entry.get("rules", {}).items())
    for key, rule in steps:
        names = {**new, "orig": original}
        if key not in new or not _when(rule, names):
            continue
        if new[key] is None and "set" not in rule and "expr" not in rule:
            continue
        try:
            new[key] = apply_rule(rule, new[key], names)
        except _Missing as exc:
            raise ShrinkError(f"{class_name}: rule for {key} needs missing key {exc}") from exc
        except (TypeError, ValueError, ZeroDivisionError, IndexError, KeyError) as exc:
            raise ShrinkError(f"{class_name}: rule for {key} failed: {exc}") from exc
    for key, value in entry.get("set", {}).items():
        new[key] = copy.deepcopy(value)
    if not entry.get("skip_group_fix"):
        _fix_groups(new, {**rules["group_fix"], **entry.get("group_fix", {})})
    after = {**rules["size_rules"].get("after", {}), **entry.get("after", {})}
    for key, rule in after.items():
        names = {**new, "orig": original}
        if key in new and _when(rule, names):
            try:
                new[key] = apply_rule(rule, new[key], names)
            except (
                _Missing,
                TypeError,
                ValueError,
                ZeroDivisionError,
                IndexError,
                KeyError,
            ) as exc:
                raise ShrinkError(f"{class_name}: rule for {key} failed: {exc}") from exc
    changes = {
        key: [original.get(key), new.get(key)]
        for key in sorted(set(original) | set(new))
        if original.get(key) != new.get(key)
    }
    return {"_class_name": class_name, **new}, changes


# ---------------------------------------------------------------------------------------------


def shrink_diffusers(
    resolved: ResolvedConfig,
    *,
    architecture_hint: str | None = None,
    pipeline_tag: str | None = None,
) -> TinySpec:
    """Tiny spec for a diffusers model config or for a pipeline's denoiser."""
    class_name, config, notes = select_model_config(resolved)
    model_class(class_name)
    entry = class_rule(class_name)
    if entry.get("unsupported"):
        raise ConfigError(
            f"{class_name}: {entry['unsupported']}",
            reason=SkipReason.NO_MODEL_CLASS.value,
            model_id=resolved.model_id,
        )
    # Keys a config.json omits take the class defaults when diffusers loads it; shrink those too.
    config = {**default_config(class_name), **config}
    try:
        if entry.get("wrap"):
            shrunk, changes = _shrink_wrapper(config, class_name, entry["wrap"])
        else:
            shrunk, changes = shrink_config(config, class_name)
    except ShrinkError as exc:
        exc.model_id = exc.model_id or resolved.model_id
        raise
    return TinySpec(
        library="diffusers",
        model_type=class_name,
        architecture=class_name,
        config=shrunk,
        generative=False,
        task=entry.get("task") or _task(class_name),
        changes={**notes, **changes},
        # a pipeline whose component config was missing built it from class defaults: say so
        config_source=ConfigSource.DIFFUSERS_DEFAULT.value
        if "pipeline.component_config" in notes
        else None,
    )


def _shrink_wrapper(
    config: dict[str, Any], class_name: str, wrap: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """A class that wraps a list of models (MultiControlNetModel, ...): shrink its part.

    The part's config comes from `config["parts"][0]` when given, else the part class's defaults;
    the tiny wrapper holds `count` copies of the shrunk part config under "parts".
    """
    part = str(wrap["part"])
    given = config.get("parts")
    part_config = dict(given[0]) if isinstance(given, list) and given else default_config(part)
    part_config = {**default_config(part), **part_config}
    shrunk_part, part_changes = shrink_config(part_config, part)
    count = int(wrap.get("count", 2))
    changes = {f"parts.{key}": value for key, value in part_changes.items()}
    changes["parts"] = [len(given) if isinstance(given, list) else None, count]
    return {"_class_name": class_name, "parts": [shrunk_part] * count}, changes


def _task(class_name: str) -> str:
    for suffix, task in load_rules()["task_by_name"]:
        if suffix in class_name:
            return str(task)
    return "model"
