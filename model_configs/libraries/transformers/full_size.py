"""What transformers and peft know of a full-size model, for sizing (docs/sizing.md): the
attention heads and the KV cache's layers from the decoder's config, and peft's default LoRA
targets for the model type."""

from __future__ import annotations

from typing import Any

from model_configs.libraries.base import AttentionLayout, KVCacheLayout, LoraTargets
from model_configs.libraries.base import config_int as _int


def attention_layout(model: Any, *, kv_cache: bool) -> AttentionLayout:
    """The heads of the decoder's config (a multimodal model's text config) and, with
    `kv_cache`, per attention layer `kv_heads x (key head dim + value head dim)` elements,
    layers with a sliding or chunked window apart, layers without attention (Mamba, linear
    attention) none."""
    text = _text_config(getattr(model, "config", None))
    heads = _int(text, "num_attention_heads")
    kv_heads = _int(text, "num_key_value_heads") or heads
    cache = _kv_cache(text, heads, kv_heads) if kv_cache and text is not None else None
    return AttentionLayout(heads=heads, kv_heads=kv_heads if heads else None, kv_cache=cache)


def lora_targets(model: Any) -> LoraTargets:
    """peft's default target modules for the model type (none named: every Linear layer, as
    peft's `all-linear` picks), never the output head."""
    targets: frozenset[str] | None = None
    try:
        from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING

        model_type = _model_type(getattr(model, "config", None))
        found = TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING.get(model_type or "")
        targets = frozenset(found) if found else None
    except ImportError:  # peft not installed: every Linear layer
        targets = None
    head = None
    get_output = getattr(model, "get_output_embeddings", None)
    if callable(get_output):
        try:
            head = get_output()
        except Exception:
            head = None
    return LoraTargets(modules=targets, excluded=(head,) if head is not None else ())


def _text_config(config: Any) -> Any:
    """The decoder's config of a (multimodal) config, or the config itself."""
    if config is None:
        return None
    get = getattr(config, "get_text_config", None)
    if callable(get):
        try:
            return get(decoder=True)
        except Exception:  # a config whose sub-configs do not say
            return config
    return config


def _kv_cache(text: Any, heads: int | None, kv_heads: int | None) -> KVCacheLayout | None:
    """The layers without a window, those with one, and the window, from the config's
    `layer_types` (or its `sliding_window` for every layer)."""
    layers = _int(text, "num_hidden_layers") or _int(text, "num_layers")
    if not layers or not heads or not kv_heads:
        return None  # no attention to cache (Mamba), or a config that does not say
    head_dim = _int(text, "head_dim") or (_int(text, "hidden_size") or 0) // heads
    nope, rope = _int(text, "qk_nope_head_dim"), _int(text, "qk_rope_head_dim")
    key_dim = _int(text, "qk_head_dim") or ((nope or 0) + (rope or 0)) or head_dim
    value_dim = _int(text, "v_head_dim") or head_dim
    window = _int(text, "sliding_window")
    chunk = _int(text, "attention_chunk_size")
    types = getattr(text, "layer_types", None)
    if isinstance(types, (list, tuple)) and types:
        kinds = [str(t) for t in types[:layers]]
        attention = [k for k in kinds if "attention" in k and "linear" not in k]
        windowed = [k for k in attention if k.startswith(("sliding", "chunked"))]
        if "chunked_attention" in windowed and chunk:
            window = chunk
        full = len(attention) - len(windowed)
        if windowed and not window:  # a window the config does not size: count it in full
            full, windowed = len(attention), []
        return KVCacheLayout(full, len(windowed), window if windowed else None, key_dim, value_dim)
    if window and getattr(text, "use_sliding_window", True) is not False:
        return KVCacheLayout(0, layers, window, key_dim, value_dim)
    return KVCacheLayout(layers, 0, None, key_dim, value_dim)


def _model_type(config: Any) -> str | None:
    value = getattr(config, "model_type", None)
    return value if isinstance(value, str) else None
