"""Shrink a transformers config to a tiny model that runs the same code paths.

Generic rules walk the config and its sub-configs (`text_config`, `vision_config`, encoder /
decoder, ...) and shrink widths, heads, layers, experts, vocabularies, positions and images while
keeping every choice that decides which ops run (attention variant, GQA/MQA, layer kinds, RoPE
type, activations, norms, tied embeddings). The rules are a list, one small named rule each with
the keys it applies to and its reason (`shrink_rules.py`, read top to
bottom). Per-family rules live as data in `model_configs/libraries/transformers/data/families/*.json`,
each with a reason. The result is rebuilt through the config class so the library's own
validation runs.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from ground.errors import ConfigError, ShrinkError
from ground.schema import SkipReason
from model_configs.libraries.transformers.families import shrink_rules, timm_rules
from model_configs.libraries.transformers.shrink_rules import (  # noqa: E402  (the rules and their sizes)
    RULES,
    SKIP_SUBDICTS,
    VOCAB,
    Level,
    get_dotted,
    set_dotted,
)
from model_configs.spec import ResolvedConfig, TinySpec


def family_rules() -> dict[str, dict[str, Any]]:
    """The per-family shrink rules, keyed by model_type (data/families/)."""
    return shrink_rules()


def _timm_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("timm") is not None


def _replace_timm_backbones(d: dict[str, Any]) -> None:
    """Without timm, timm backbones become the data file's transformers ResNet stand-in."""
    if _timm_installed():
        return
    for key, sub in list(d.items()):
        if not isinstance(sub, dict) or key in SKIP_SUBDICTS:
            continue
        if sub.get("model_type") == "timm_backbone":
            stand_in = copy.deepcopy(timm_rules()["fallback_backbone"])  # the rules are cached
            stand_in.pop("_reason", None)
            outs = sub.get("out_indices") or [1, 2, 3, 4]
            stand_in["out_features"] = [f"stage{i}" for i in outs]
            d[key] = stand_in
            if "use_timm_backbone" in d:
                d["use_timm_backbone"] = False
        else:
            _replace_timm_backbones(sub)


class _Shrinker:
    """One shrink of one config tree: the rules of `shrink_rules.RULES`, top to bottom, on
    every level (sub-configs first). `widths` maps original widths to shrunk ones for the whole
    tree, so widths equal in the original (a projector's input and a tower's hidden size) stay
    equal."""

    def __init__(self) -> None:
        self.widths: dict[int, int] = {}

    def shrink_level(self, d: dict[str, Any], cls: Any, path: str) -> None:
        # Sub-configs first: their model_type decides their family rules.
        for key, sub in list(d.items()):
            if key in SKIP_SUBDICTS or not isinstance(sub, dict):
                continue
            sub_cls = _sub_config_class(cls, key, sub)
            if sub_cls is not None:
                self.shrink_level(sub, sub_cls, f"{path}{key}.")
        model_type = str(d.get("model_type") or getattr(cls, "model_type", "") or "")
        family = family_rules().get(model_type, {})
        level = Level(
            d=d,
            widths=self.widths,
            amap=dict(getattr(cls, "attribute_map", {}) or {}),
            keep=set(family.get("keep", [])),
            family=family,
            model_type=model_type,
        )
        for rule in RULES:
            rule.apply(level)


def _sub_config_class(cls: Any, key: str, sub: dict[str, Any]) -> Any:
    from transformers import CONFIG_MAPPING

    sub_configs = getattr(cls, "sub_configs", {}) or {}
    target = sub_configs.get(key)
    mt = sub.get("model_type")
    if target is not None and getattr(target, "__name__", "") != "AutoConfig":
        return target
    if mt and mt in CONFIG_MAPPING:
        return CONFIG_MAPPING[mt]
    if key.endswith("_config") or key in ("encoder", "decoder"):
        return type("_Plain", (), {"attribute_map": {}})
    return None


# ----------------------------------------------------------------------------------------------


def _ensure_pad_token(d: dict[str, Any]) -> None:
    """Sequence-classification heads find the last token through pad_token_id; users of
    decoder-only checkpoints (GPT-2, Qwen2) set it to eos, as done here when it is missing."""
    text = d.get("text_config")
    target: dict[str, Any] = text if isinstance(text, dict) else d
    if target.get("pad_token_id") is None:
        eos = target.get("eos_token_id")
        eos = eos[0] if isinstance(eos, list) and eos else eos
        target["pad_token_id"] = eos if isinstance(eos, int) else 0


# Where the checkpoint was saved from (a Hub id, a training folder): it never changes which ops
# run, but fine-tunes of one base differ by it alone, which kept them out of one dedup group
# (measured on synthetic Hub configs: bench/synthetic_catalog.py).
PROVENANCE_KEYS = frozenset({"_name_or_path"})


def _without_provenance(d: Any) -> Any:
    """The tiny config without `PROVENANCE_KEYS`, at every level (labels kept as they are)."""
    if not isinstance(d, dict):
        return d
    return {
        k: v if k in ("id2label", "label2id") else _without_provenance(v)
        for k, v in d.items()
        if k not in PROVENANCE_KEYS
    }


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            if isinstance(v, dict) and k not in ("id2label", "label2id"):
                out.update(_flatten(v, f"{prefix}{k}."))
            else:
                out[f"{prefix}{k}"] = v
    return out


def _diff(before: dict[str, Any], after: dict[str, Any]) -> dict[str, list[Any]]:
    a, b = _flatten(_jsonable(before)), _flatten(_jsonable(after))
    skip = {"transformers_version", "_name_or_path", "architectures", "dtype", "torch_dtype"}
    changes: dict[str, list[Any]] = {}
    for k in sorted(set(a) | set(b)):
        if k.split(".")[-1] in skip:
            continue
        if a.get(k) != b.get(k):
            changes[k] = [_jsonable(a.get(k)), _jsonable(b.get(k))]
    return changes


def _jsonable(v: Any) -> Any:
    return json.loads(json.dumps(v, default=str))


def _fix_token_ids(root: dict[str, Any]) -> None:
    """Keep every special token id inside the shrunk vocabulary of its config (and distinct)."""
    mapping: dict[int, int] = {}

    def vocab_here(d: dict[str, Any], inherited: int | None) -> int | None:
        v = d.get("vocab_size")
        return v if isinstance(v, int) and v > 0 else inherited

    def fix(d: dict[str, Any], vocab: int | None, text_vocab: int | None) -> None:
        vocab = vocab_here(d, vocab)
        tc = d.get("text_config")
        if isinstance(tc, dict):
            text_vocab = vocab_here(tc, text_vocab)
        limit = text_vocab or vocab
        for k, v in list(d.items()):
            if isinstance(v, dict) and k not in SKIP_SUBDICTS:
                fix(v, vocab, text_vocab)
                continue
            if not _is_token_key(k) or limit is None:
                continue
            if isinstance(v, int) and not isinstance(v, bool):
                d[k] = _map_id(v, limit, mapping)
            elif isinstance(v, list) and all(isinstance(x, int) for x in v):
                d[k] = [_map_id(x, limit, mapping) for x in v]

    reserved = {i for i in special_token_ids(root) if 0 <= i < VOCAB}
    mapping.update({i: i for i in reserved})
    fix(root, None, None)


def _is_token_key(k: Any) -> bool:
    if not isinstance(k, str):
        return False
    return (
        k.endswith(("_token_id", "_token_ids", "_token_index", "_token_idx"))
        or k in ("suppress_tokens", "begin_suppress_tokens", "image_token", "decoder_start_token")
        or (k.endswith("_id") and k.startswith(("image_", "video_", "audio_", "boi_", "eoi_")))
    )


def _map_id(v: int, limit: int, mapping: dict[int, int]) -> int:
    if v in mapping and mapping[v] < limit:
        return mapping[v]
    if v < 0 or (v < limit and v not in mapping):
        return v
    used = set(mapping.values())
    new = limit - 1
    while new in used:
        new -= 1
    mapping[v] = new
    return new


def special_token_ids(config: dict[str, Any]) -> set[int]:
    """Every token id a config names (random inputs avoid them)."""
    ids: set[int] = set()
    for k, v in _flatten(config).items():
        if not _is_token_key(k.split(".")[-1]):
            continue
        if isinstance(v, int) and not isinstance(v, bool):
            ids.add(v)
        elif isinstance(v, list):
            ids.update(x for x in v if isinstance(x, int))
    return ids


def _load_config(resolved: ResolvedConfig) -> Any:
    from transformers import CONFIG_MAPPING

    cfg = resolved.config
    if not isinstance(cfg, dict):
        raise ConfigError(
            f"the config is a JSON {type(cfg).__name__}, not an object",
            reason=SkipReason.MALFORMED_CONFIG.value,
            model_id=resolved.model_id,
        )
    if not isinstance(cfg.get("model_type"), str):
        keys = ", ".join(sorted(map(str, cfg))[:6]) + (", ..." if len(cfg) > 6 else "")
        what = "no model_type" if "model_type" not in cfg else "a model_type that is not a string"
        raise ConfigError(
            f"the config has {what} (its keys: {keys or 'none'}), and transformers needs one "
            "to know which architecture to build",
            reason=SkipReason.MALFORMED_CONFIG.value,
            model_id=resolved.model_id,
            hint='add the model_type of its architecture, e.g. "model_type": "llama", as '
            "config.json files written by save_pretrained have",
        )
    mt = cfg["model_type"]
    if mt not in CONFIG_MAPPING:
        raise ConfigError(
            f"transformers {_tf_version()} does not know model_type {mt!r}",
            reason=SkipReason.UNKNOWN_MODEL_TYPE.value,
            model_id=resolved.model_id,
            hint="upgrade transformers, or the repo needs remote code",
        )
    try:
        return CONFIG_MAPPING[mt].from_dict(copy.deepcopy(cfg))
    except Exception as exc:  # the library's validation of the original config
        raise ConfigError(
            f"transformers rejects the {mt} config: {type(exc).__name__}: {exc}",
            reason=SkipReason.MALFORMED_CONFIG.value,
            model_id=resolved.model_id,
        ) from exc


def _tf_version() -> str:
    import transformers

    return transformers.__version__


def shrink_transformers(
    resolved: ResolvedConfig,
    *,
    architecture_hint: str | None = None,
    pipeline_tag: str | None = None,
) -> TinySpec:
    """Shrink a transformers config and choose the class to build (see the module docstring)."""
    from model_configs.libraries.transformers.classes import choose_class

    config = _load_config(resolved)
    mt = config.model_type
    original = config.to_dict()
    default_class = family_rules().get(mt, {}).get("default_class")
    if default_class and not (architecture_hint or pipeline_tag or config.architectures):
        architecture_hint = str(default_class)  # a bare config: the class its users train
    arch, task, generative = choose_class(
        config, architecture_hint=architecture_hint, pipeline_tag=pipeline_tag,
        model_id=resolved.model_id,
    )  # fmt: skip
    if family_rules().get(mt, {}).get("generate") is False:
        generative = False  # e.g. a drafter that only runs inside its target's generate
    d = copy.deepcopy(original)
    try:
        _replace_timm_backbones(d)
        shrinker = _Shrinker()
        shrinker.shrink_level(d, type(config), "")
        _fix_token_ids(d)
        for dst, src in family_rules().get(mt, {}).get("link", {}).items():
            set_dotted(d, dst, copy.deepcopy(get_dotted(d, src)))
        if task == "sequence-classification":
            _ensure_pad_token(d)
        d["architectures"] = [arch]
        tiny = type(config).from_dict(d)
        final = tiny.to_dict()
    except ConfigError:
        raise
    except Exception as exc:
        raise ShrinkError(
            f"shrinking the {mt} config failed: {type(exc).__name__}: {exc}",
            model_id=resolved.model_id,
            stage="load",
            hint=f"add a shrink rule for {mt!r} to model_configs/libraries/transformers/data/families/",
        ) from exc
    final = _without_provenance(_jsonable(final))
    return TinySpec(
        library="transformers",
        model_type=mt,
        architecture=arch,
        config=final,
        generative=generative,
        task=task,
        changes=_diff(original, final),
    )
