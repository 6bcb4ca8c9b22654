"""Build tiny diffusers models from a TinySpec, make their inputs, and compute a training loss.

Inputs come from each class's recipe in `data/class_rules.json` ("inputs"): a mapping
of forward kwarg -> tensor spec whose shapes are expressions over the model's config (so they
follow the shrunk sizes) and the batch size `B`. Tensor spec kinds:

- `randn` / `uniform` (`low`, `high`) / `randint` (`low`, `high`): a shape list;
- `zeros` / `ones` / `full` (`value`): a shape list, with an optional `dtype`;
- `grid_ids`: dims `[t, h, w, ...]` -> `(t*h*w*..., width)` position ids, one column per dim,
  zero columns first (Flux-style `img_ids`); `batch: true` adds the batch dim;
- `cache_object`: a fresh diffusers `...Cache` container (`args`) that the forward fills;
- `from_model`: the value of a helper method of the model the pipeline calls (`kwargs`);
- `rope`: a RoPE table the pipeline would compute (a whitelisted diffusers function, `args`);
- `arange`: a length (from `start`, default 0); `tensor`: a literal nested list;
- `value`: a plain (non-tensor) value (`tuples: true` turns its innermost lists into tuples,
  `int_keys: true` makes dict keys ints);
- `cat`: specs concatenated along `dim` (default 0); `stack`: specs stacked on a new dim 0;
- `dict` / `list`: nested specs (e.g. `added_cond_kwargs`); `first_of`: the first spec whose
  `when` holds.

Any spec may carry `when`, an expression: the input is omitted unless it holds. A class without
a recipe gets inputs guessed from its forward signature (`inputs_are_curated` says which).

Building follows the class rule too: `wrap` (a list-of-models wrapper built from tiny parts),
`host` (a part-only class, such as an adapter, built inside the model it runs in), and
`init_normal` (weights a class allocates with torch.empty). All-zero weight matrices (zero-init
output projections) get small seeded values so gradients reach the layers before them, as they
do in trained checkpoints.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

from ground.schema import ConfigSource
from model_configs.libraries.diffusers.shrink import (
    class_rule,
    default_config,
    evaluate,
    load_rules,
    model_class,
)
from model_configs.spec import ResolvedConfig, TinySpec
from model_configs.tiny_inputs import BATCH

_DTYPES = {"float": "float32", "long": "int64", "int": "int32", "bool": "bool"}

# Classes that wrap a list of other models (no config of their own to build from).
WRAPPER_ARGS = ("controlnets", "adapters")


def _quiet_diffusers() -> None:
    from diffusers.utils import logging as dlogging

    dlogging.set_verbosity_error()
    dlogging.disable_progress_bar()


def build_model(spec: TinySpec) -> Any:
    """The tiny model: fp32, CPU, weights from seed 0, eval mode."""
    import torch

    _quiet_diffusers()
    cls = model_class(spec.architecture)
    torch.manual_seed(0)
    wrap = class_rule(spec.architecture).get("wrap")
    if wrap:  # a list-of-models wrapper: build its parts, then the wrapper around them
        parts = []
        for index, part_config in enumerate(spec.config["parts"]):
            torch.manual_seed(index)
            parts.append(model_class(wrap["part"]).from_config(dict(part_config)))
        model = cls(parts)
    else:
        model = cls.from_config(dict(spec.config))
    host = class_rule(spec.architecture).get("host")
    if host:
        model = _build_host(host, model, spec)
    _init_unset_weights(model, class_rule(spec.architecture).get("init_normal", []))
    _randomize_zero_weights(model)
    return model.to(dtype=torch.float32).eval()


def _build_host(host: dict[str, Any], part: Any, spec: TinySpec) -> Any:
    """The model a part-only class runs inside (MotionAdapter -> UNetMotionModel, ...).

    `host` names the base class and its config (expressions over the part's config, so the
    two agree), the host class and its factory, which takes (base, part) positionally, or
    (part, base) with `part_first` (a ControlNet borrowing its transformer's embedders).
    """
    names = {**dict(part.config), "B": BATCH}
    base_config = {k: _plain(v, names) for k, v in host["base_config"].items()}
    base = model_class(host["base"]).from_config(base_config)
    factory = getattr(model_class(host["class"]), host["factory"])
    return factory(part, base) if host.get("part_first") else factory(base, part)


def _init_unset_weights(model: Any, suffixes: list[str]) -> None:
    """Seeded N(0, 0.02) for weights a class allocates with torch.empty and never initialises.

    Named per class in the rules (`init_normal`, parameter-name suffixes); any other parameter
    holding non-finite or huge values (uninitialised memory) gets the same treatment.
    """
    import torch

    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.numel() == 0 or param.is_meta:  # a meta build (sizing) has no values
                continue
            unset = any(name.endswith(suffix) for suffix in suffixes)
            if unset or not bool(torch.isfinite(param).all()) or bool(param.abs().max() > 1e4):
                noise = torch.randn(param.shape, generator=generator, dtype=torch.float32)
                param.copy_(noise.to(param.dtype) * 0.02)


def _randomize_zero_weights(model: Any) -> None:
    """Give all-zero weight matrices/kernels small random values (seeded).

    ControlNets, adaLN-zero DiTs and zero-conv adapters start with zero output projections, so
    at initialisation no gradient reaches the layers before them; trained checkpoints have no
    such zeros. Biases and norm scales are left as initialised.
    """
    import torch

    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():
            if param.is_meta:  # a meta build (sizing) has no values
                continue
            if param.ndim >= 2 and param.numel() > 1 and not bool(param.any()):
                noise = torch.randn(param.shape, generator=generator, dtype=torch.float32)
                param.copy_(noise.to(param.dtype) * 0.02)


def _names(spec: TinySpec, model: Any) -> dict[str, Any]:
    wrap = class_rule(spec.architecture).get("wrap")
    if wrap:  # a wrapper's inputs follow its parts' config
        return {**spec.config["parts"][0], "B": BATCH}
    config = dict(getattr(model, "config", {}) or {})
    config.update({k: v for k, v in spec.config.items() if k not in config})
    return {**config, "B": int(class_rule(spec.architecture).get("batch", BATCH))}


def inputs_are_curated(spec: TinySpec) -> bool:
    """True when the class has a written input recipe (not guessed from its signature)."""
    entry = class_rule(spec.architecture)
    if entry.get("host"):
        entry = class_rule(entry["host"]["class"])
    return "inputs" in entry


def make_inputs(
    spec: TinySpec, model: Any, *, seed: int = 0, purpose: str = "train"
) -> dict[str, Any]:
    """CPU inputs for `model(**inputs)` (the same for train and generate: nothing generates)."""
    import torch

    entry = class_rule(spec.architecture)
    if entry.get("host"):  # the part runs inside its host model: feed the host
        entry = class_rule(entry["host"]["class"])
    recipe = entry.get("inputs") or guess_recipe(spec, model)
    names = {**_names(spec, model), "_model": model}
    for key, expr in entry.get("vars", {}).items():
        names[key] = evaluate(expr, names)
    generator = torch.Generator().manual_seed(seed)
    out = _build_dict(recipe, names, generator)
    return out


def _build_dict(recipe: dict[str, Any], names: dict[str, Any], generator: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, spec in recipe.items():
        if isinstance(spec, dict) and "first_of" in spec:
            spec = next((s for s in spec["first_of"] if _holds(s, names)), None)
        if spec is None or not _holds(spec, names):
            continue
        out[key] = _build(spec, names, generator)
    return out


def _holds(spec: Any, names: dict[str, Any]) -> bool:
    return not (isinstance(spec, dict) and "when" in spec) or bool(evaluate(spec["when"], names))


def _shape(dims: Any, names: dict[str, Any]) -> list[int]:
    return [int(evaluate(d, names)) for d in dims]


def _build(spec: Any, names: dict[str, Any], generator: Any) -> Any:
    import torch

    if not isinstance(spec, dict):
        return spec
    if "first_of" in spec:
        chosen = next((s for s in spec["first_of"] if _holds(s, names)), None)
        return None if chosen is None else _build(chosen, names, generator)
    dtype_name = str(spec.get("dtype", "float"))
    dtype = getattr(torch, _DTYPES.get(dtype_name, dtype_name))
    if "dict" in spec:
        return _build_dict(spec["dict"], names, generator)
    if "list" in spec:
        return [_build(s, names, generator) for s in spec["list"]]
    if "cat" in spec:
        parts = [_build(s, names, generator) for s in spec["cat"]]
        return torch.cat(parts, dim=int(spec.get("dim", 0)))
    if "stack" in spec:
        return torch.stack([_build(s, names, generator) for s in spec["stack"]])
    if "value" in spec and "full" not in spec:
        value = _plain(spec["value"], names)
        if spec.get("int_keys") and isinstance(value, dict):  # JSON object keys are strings
            value = {int(k): v for k, v in value.items()}
        return _tuples(value) if spec.get("tuples") else value
    if "randn" in spec:
        return torch.randn(_shape(spec["randn"], names), generator=generator).to(dtype)
    if "uniform" in spec:
        low, high = evaluate(spec.get("low", 0), names), evaluate(spec.get("high", 1), names)
        tensor = torch.rand(_shape(spec["uniform"], names), generator=generator)
        return (low + (high - low) * tensor).to(dtype)
    if "randint" in spec:
        low, high = int(evaluate(spec.get("low", 0), names)), int(evaluate(spec["high"], names))
        shape = _shape(spec["randint"], names)
        ints = torch.randint(low, max(high, low + 1), shape, generator=generator)
        return ints.to(getattr(torch, _DTYPES.get(spec.get("dtype", "long"), "int64")))
    if "zeros" in spec:
        return torch.zeros(_shape(spec["zeros"], names), dtype=dtype)
    if "ones" in spec:
        return torch.ones(_shape(spec["ones"], names), dtype=dtype)
    if "full" in spec:
        value = evaluate(spec["value"], names)
        return torch.full(_shape(spec["full"], names), value, dtype=dtype)
    if "arange" in spec:
        start = int(evaluate(spec.get("start", 0), names))
        return torch.arange(start, start + int(evaluate(spec["arange"], names))).to(
            getattr(torch, _DTYPES.get(spec.get("dtype", "long"), "int64"))
        )
    if "rope" in spec:
        return _rope(spec, names)
    if "cache_object" in spec:  # a fresh cache container the forward fills (prefix KV caches)
        import importlib

        module_name, _, class_name = str(spec["cache_object"]).rpartition(".")
        if not module_name.startswith("diffusers.models.") or not class_name.endswith("Cache"):
            raise ValueError(f"not a diffusers model cache class: {spec['cache_object']}")
        cache_cls = getattr(importlib.import_module(module_name), class_name)
        return cache_cls(*(_plain(a, names) for a in spec.get("args", [])))
    if "from_model" in spec:  # an input the pipeline builds with a helper method of the model
        import inspect as _inspect

        method = getattr(names["_model"], spec["from_model"])
        kwargs = {k: _plain(v, names) for k, v in spec.get("kwargs", {}).items()}
        if "device" in _inspect.signature(method).parameters:
            kwargs.setdefault("device", torch.device("cpu"))
        return method(**kwargs)
    if "tensor" in spec:
        return torch.tensor(_plain(spec["tensor"], names), dtype=dtype)
    if "grid_ids" in spec:
        dims = _shape(spec["grid_ids"], names)
        width = int(spec.get("width", len(dims)))
        grid = torch.cartesian_prod(*(torch.arange(d) for d in dims)).reshape(-1, len(dims))
        ids = torch.zeros(grid.shape[0], width)
        ids[:, width - len(dims) :] = grid.to(ids.dtype)
        if spec.get("batch"):
            ids = ids.unsqueeze(0).expand(BATCH, -1, -1).contiguous()
        return ids.to(dtype if "dtype" in spec else torch.float32)
    raise ValueError(f"unknown input spec {spec}")


# RoPE tables some forwards take from their pipeline (computed there, passed in).
ROPE_FUNCTIONS = (
    "get_1d_rotary_pos_embed",
    "get_2d_rotary_pos_embed",
    "get_2d_rotary_pos_embed_lumina",
    "get_3d_rotary_pos_embed",
)


def _rope(spec: dict[str, Any], names: dict[str, Any]) -> Any:
    """A pipeline-computed RoPE table: `{"rope": <fn in ROPE_FUNCTIONS>, "args": [...]}`."""
    from diffusers.models import embeddings

    if spec["rope"] not in ROPE_FUNCTIONS:
        raise ValueError(f"rope function {spec['rope']!r} is not one of {ROPE_FUNCTIONS}")
    args = [_plain(a, names) for a in spec.get("args", [])]
    kwargs = {k: _plain(v, names) for k, v in spec.get("kwargs", {}).items()}
    return getattr(embeddings, spec["rope"])(*args, **kwargs)


def _tuples(value: Any) -> Any:
    """Innermost lists become tuples (JSON has no tuples; some forwards check for them)."""
    if isinstance(value, list):
        if all(not isinstance(v, list) for v in value):
            return tuple(value)
        return [_tuples(v) for v in value]
    return value


def _plain(value: Any, names: dict[str, Any]) -> Any:
    """A non-tensor value; strings starting with '=' are expressions."""
    if isinstance(value, str) and value.startswith("="):
        return evaluate(value[1:], names)
    if isinstance(value, list):
        return [_plain(v, names) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v, names) for k, v in value.items()}
    return value


def guess_recipe(spec: TinySpec, model: Any) -> dict[str, Any]:
    """Inputs guessed from the forward signature, for classes without a written recipe."""
    params = [
        p
        for name, p in inspect.signature(model.forward).parameters.items()
        if name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    config = dict(getattr(model, "config", {}) or {})
    channels = config.get("in_channels") or 4
    cond = next(
        (
            k
            for k in (
                "cross_attention_dim",
                "joint_attention_dim",
                "text_dim",
                "caption_channels",
                "text_embed_dim",
            )
            if isinstance(config.get(k), int)
        ),
        None,
    )
    recipe: dict[str, Any] = {}
    for p in params:
        if p.default is not inspect.Parameter.empty:
            if p.name in ("encoder_hidden_states", "timestep") and cond:
                pass
            else:
                continue
        if p.name in ("sample", "hidden_states", "x"):
            recipe[p.name] = {"randn": ["B", channels, 16, 16]}
        elif p.name in ("timestep", "timesteps", "t"):
            recipe[p.name] = {"randint": ["B"], "low": 1, "high": 1000}
        elif p.name == "encoder_hidden_states" and cond:
            recipe[p.name] = {"randn": ["B", 4, cond]}
        else:
            recipe[p.name] = {"randn": ["B", channels, 16, 16]}
    return recipe


def _tensors(value: Any) -> Iterator[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        if value.is_floating_point() and value.requires_grad:
            yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _tensors(v)
    elif hasattr(value, "to_tuple"):
        yield from _tensors(value.to_tuple())
    elif hasattr(value, "__dict__") and not isinstance(value, torch.nn.Module):
        yield from _tensors(vars(value))


def compute_loss(spec: TinySpec, model: Any, outputs: Any, inputs: dict[str, Any]) -> Any:
    """Sum over every differentiable output tensor of its MSE to a fixed random target."""
    import torch

    generator = torch.Generator().manual_seed(1234)
    total = None
    for tensor in _tensors(outputs):
        target = torch.randn(tensor.shape, generator=generator).to(
            device=tensor.device, dtype=tensor.dtype
        )
        term = torch.nn.functional.mse_loss(tensor, target)
        total = term if total is None else total + term
    if total is None:
        raise ValueError(f"{spec.architecture}: no differentiable output tensor")
    return total


# ---------------------------------------------------------------------------------------------
# Default configs


def _model_classes() -> Iterator[tuple[str, type, Any]]:
    """(name, class, its __init__ parameters) of every model class under diffusers.models."""
    import diffusers
    import diffusers.models as dm
    from diffusers.models.modeling_utils import ModelMixin

    for name in sorted(set(dir(diffusers)) | set(dir(dm))):
        try:
            obj = getattr(diffusers, name, None) or getattr(dm, name, None)
        except (ImportError, RuntimeError, AttributeError):
            continue
        if not (isinstance(obj, type) and issubclass(obj, ModelMixin) and obj is not ModelMixin):
            continue
        if obj.__module__.startswith("diffusers.models"):
            yield name, obj, inspect.signature(obj.__init__).parameters  # type: ignore[misc]


def model_class_names() -> list[str]:
    """Every diffusers model class under diffusers.models that builds from a config of its own."""
    from diffusers.configuration_utils import ConfigMixin

    _quiet_diffusers()
    return [
        name
        for name, cls, params in _model_classes()
        if issubclass(cls, ConfigMixin) and not any(arg in params for arg in WRAPPER_ARGS)
    ]


def wrapper_class_names() -> list[str]:
    """Model classes that only wrap a list of other models (MultiControlNetModel, ...)."""
    return [
        name for name, _, params in _model_classes() if any(arg in params for arg in WRAPPER_ARGS)
    ]


def iter_default_configs() -> Iterator[ResolvedConfig]:
    """One ResolvedConfig per diffusers model class, with the class's default config."""
    for name in model_class_names():
        yield ResolvedConfig(
            model_id=f"diffusers-default/{name}",
            library="diffusers",
            config=default_config(name),
            source=ConfigSource.DIFFUSERS_DEFAULT.value,
            detail=f"_class_name={name}",
        )


def iter_wrapper_configs() -> Iterator[ResolvedConfig]:
    """One ResolvedConfig per list-of-models wrapper (MultiControlNetModel, ...).

    They have no config of their own (most have no from_config); the shrinker builds each from
    tiny copies of its part class (`wrap` in the class rules).
    """
    for name in wrapper_class_names():
        yield ResolvedConfig(
            model_id=f"diffusers-default/{name}",
            library="diffusers",
            config={"_class_name": name},
            source=ConfigSource.DIFFUSERS_DEFAULT.value,
            detail=f"_class_name={name} (wraps a list of models)",
        )


def default_config_for_pipeline(pipeline_class_name: str) -> ResolvedConfig | None:
    """An offline config for a pipeline named in a repo's tags (`diffusers:<Pipeline>`).

    Uses the published denoiser config bundled in `data/configs/` when there is one,
    else the denoiser class's defaults; None for a pipeline this table does not know.
    """
    import json

    from model_configs.libraries.diffusers.shrink import DATA_DIR

    pipelines = load_rules().get("pipelines", {})
    entry = pipelines.get(pipeline_class_name)
    if entry is None:
        return None
    component, class_name = entry["component"], entry["class"]
    index = {"_class_name": pipeline_class_name, component: ["diffusers", class_name]}
    if entry.get("config_file"):
        path = DATA_DIR / "configs" / entry["config_file"]
        with path.open() as f:
            config = json.load(f)
        config.setdefault("_class_name", class_name)
        source_detail = f"bundled {entry['config_file']}"
    else:
        config = default_config(class_name)
        source_detail = f"{class_name} defaults"
    return ResolvedConfig(
        model_id=f"diffusers-default/{pipeline_class_name}",
        library="diffusers",
        config=index,
        source=ConfigSource.DIFFUSERS_DEFAULT.value,
        detail=f"pipeline {pipeline_class_name}: {component} from {source_detail}",
        components={component: config},
    )
