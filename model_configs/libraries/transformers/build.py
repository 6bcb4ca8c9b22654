"""Build tiny transformers models from a TinySpec and feed them.

`make_inputs` dispatches on the model's `main_input_name` and `forward` signature: token ids kept
away from special ids, pixel values at the shrunk image size, audio features of the length the
model needs, image tokens whose count matches what the vision tower produces, both sides of an
encoder-decoder, and labels for training: the entries of the `family_inputs` registry keyed by
signature (`inputs/generic.py`). Per-family input hints are data
(`model_configs/libraries/transformers/data/families/`, the `inputs` tables); layouts a hint cannot
express are builders in `inputs/`, keyed by model type.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

from ground.errors import ShrinkError
from ground.schema import ConfigSource
from model_configs.libraries.transformers.classes import builds_as_is, part_config
from model_configs.libraries.transformers.families import input_rules
from model_configs.libraries.transformers.inputs import InputContext, by_signature
from model_configs.libraries.transformers.inputs import lookup as family_lookup
from model_configs.libraries.transformers.shrink import special_token_ids
from model_configs.spec import ResolvedConfig, TinySpec
from model_configs.tiny_inputs import BATCH, SEQ, routed_seq

# Inputs only a training step takes (targets and loss switches); generate gets none of them.
TRAINING_ONLY = (
    "labels", "labels_mask", "audio_labels", "return_loss", "future_values",
    "mlm_labels", "mim_labels", "itm_labels",
)  # fmt: skip
LABEL_TASKS = {
    "causal-lm", "masked-lm", "seq2seq-lm", "sequence-classification", "token-classification",
    "image-classification", "audio-classification", "speech-seq2seq", "ctc", "image-text-to-text",
    "multimodal-lm", "video-classification",
}  # fmt: skip


def build_model(spec: TinySpec) -> Any:
    """The tiny model: fp32 on the CPU, weights from seed 0, eval mode. Never remote code."""
    import torch
    import transformers
    from transformers import CONFIG_MAPPING

    config = CONFIG_MAPPING[str(spec.model_type)].from_dict(dict(spec.config))
    cls = getattr(transformers, spec.architecture, None)
    if cls is None:
        raise ShrinkError(f"transformers has no class {spec.architecture!r}", stage="load")
    if not isinstance(config, cls.config_class) and not builds_as_is(spec.architecture, config):
        # a part: the thinker, the text model
        config = part_config(config, cls.config_class) or config.get_text_config(decoder=True)
    torch.manual_seed(0)
    model = cls._from_config(config, dtype=torch.float32)
    return model.eval()


# transformers 5.24's documented switches of a model's own code (PreTrainedModel's
# `set_experts_implementation` / `set_attn_implementation`, the `experts_implementation` and
# `attn_implementation` kwargs of `from_pretrained` / `_from_config`), and the value each takes
# when none is asked for (`get_correct_experts_implementation`, `get_correct_attn_implementation`).
SWITCH_SETTERS = {
    "experts_implementation": "set_experts_implementation",
    "attn_implementation": "set_attn_implementation",
}


def implementation_switches(spec: TinySpec) -> dict[str, str]:
    """The switches the spec's class takes, with its default value: `experts_implementation`
    (`grouped_mm`) where its experts use `@use_experts_implementation`, `attn_implementation`
    (`sdpa`) where it supports SDPA through the attention interface."""
    import transformers

    cls = getattr(transformers, spec.architecture, None)
    out: dict[str, str] = {}
    if cls is None or not hasattr(cls, "_can_set_experts_implementation"):
        return out
    if cls._can_set_experts_implementation():
        out["experts_implementation"] = "grouped_mm"
    if getattr(cls, "_supports_sdpa", False) and cls._can_set_attn_implementation():
        out["attn_implementation"] = "sdpa"
    return out


def set_implementation(model: Any, switch: str, value: str) -> None:
    """`model.set_experts_implementation(value)` / `model.set_attn_implementation(value)`."""
    setter = SWITCH_SETTERS.get(switch)
    if setter is None:
        raise ValueError(
            f"unknown implementation switch {switch!r}; known: {', '.join(SWITCH_SETTERS)}"
        )
    getattr(model, setter)(value)


def _forward_params(model: Any) -> set[str]:
    return set(inspect.signature(model.forward).parameters)


def _token_ids(gen: Any, config: Any, shape: tuple[int, ...], avoid: set[int]) -> Any:
    import torch

    vocab = _vocab_size(config)
    allowed = torch.tensor([i for i in range(min(vocab, 4096)) if i not in avoid and i >= 3])
    if allowed.numel() == 0:
        allowed = torch.arange(vocab)
    idx = torch.randint(0, allowed.numel(), shape, generator=gen)
    return allowed[idx]


def _vocab_size(config: Any) -> int:
    for c in (config, _text_config(config)):
        v = getattr(c, "vocab_size", None)
        if isinstance(v, int) and v > 0:
            return v
    return 64


def _text_config(config: Any) -> Any:
    try:
        return config.get_text_config(decoder=True)
    except Exception:
        return config


def _vision_config(config: Any) -> Any:
    return getattr(config, "vision_config", None) or getattr(config, "image_config", None) or config


def _image_size(config: Any) -> tuple[int, int]:
    subs = (getattr(config, k, None) for k in ("encoder", "backbone_config"))
    for c in (_vision_config(config), *subs, config):
        size = getattr(c, "image_size", None) or getattr(c, "input_size", None)
        if isinstance(size, int):
            return size, size
        if isinstance(size, (list, tuple)) and len(size) == 2:
            return int(size[0]), int(size[1])
        if isinstance(size, dict):
            h = size.get("height") or size.get("shortest_edge")
            w = size.get("width") or size.get("shortest_edge")
            if h and w:
                return int(h), int(w)
    return 32, 32


def _num_channels(config: Any) -> int:
    for c in (_vision_config(config), getattr(config, "encoder", None), config):
        for k in ("num_channels", "in_channels", "in_chans"):
            v = getattr(c, k, None)
            if isinstance(v, int) and v > 0:
                return v
    return 3


def make_inputs(
    spec: TinySpec, model: Any, *, seed: int = 0, purpose: str = "train"
) -> dict[str, Any]:
    """CPU tensors for `model(**inputs)` (purpose="train") or `model.generate(**inputs)`.

    The generic layout comes from the model's main input and forward signature; a family's
    builder in `inputs/` then edits it (or replaces it)."""
    import torch

    rules = input_rules().get(spec.model_type or "", {})
    seq = int(rules.get("seq_len", SEQ))
    routed = experts_per_token(model.config)
    if routed and "seq_len" not in rules:  # a mixture of experts: rows routed as a real batch's
        seq = routed_seq(seq, routed)
    ctx = InputContext(
        spec=spec, model=model, config=model.config, params=_forward_params(model),
        gen=torch.Generator().manual_seed(seed), avoid=special_token_ids(spec.config),
        rules=rules, seq=seq, purpose=purpose,
    )  # fmt: skip
    builder = family_lookup(spec.model_type)
    if builder is None or not builder.replace:
        ctx.inputs = _generic_inputs(ctx)
    if builder is not None:
        builder.fn(ctx)
    return _finish(ctx)


def experts_per_token(config: Any) -> int | None:
    """How many experts a mixture of experts routes each token to (its text model's, for a
    composite config); None for a model with no routed experts."""
    from model_configs.libraries.transformers.shrink_rules import EXPERT_KEYS, TOPK_KEYS

    for c in (config, getattr(config, "text_config", None)):
        if c is None:
            continue
        experts = [getattr(c, k, None) for k in EXPERT_KEYS]
        count = next((e for e in experts if isinstance(e, int) and e > 1), None)
        if count is None:
            continue
        for key in TOPK_KEYS:
            k = getattr(c, key, None)
            if isinstance(k, int) and 1 <= k <= count:
                return k
    return None


def _generic_inputs(ctx: InputContext) -> dict[str, Any]:
    """Inputs read off the main input name and the forward signature: every entry of the
    `family_inputs` signature registry whose condition holds, in order."""
    main = getattr(ctx.model, "main_input_name", "input_ids")
    if isinstance(main, (list, tuple)):  # OneFormer: ["pixel_values", "task_inputs"]
        ctx.main, ctx.companions = main[0], tuple(main[1:])
    else:
        ctx.main, ctx.companions = main, ()
    ctx.inputs = {}
    for entry in by_signature():
        if entry.when(ctx):
            entry.fn(ctx)
    return ctx.inputs


def _finish(ctx: InputContext) -> dict[str, Any]:
    """Labels and use_cache for training; generation's start token for generate."""
    spec, config, params, inputs = ctx.spec, ctx.config, ctx.params, ctx.inputs
    model = ctx.model
    if ctx.purpose == "train":
        if "use_cache" in params:
            inputs.setdefault("use_cache", False)
        if spec.task in LABEL_TASKS and "labels" in params and "labels" not in inputs:
            labels = _labels(ctx.gen, spec, config, inputs)
            if labels is not None:
                inputs["labels"] = labels
    else:
        inputs.pop("decoder_input_ids", None)
        for key in TRAINING_ONLY:  # a family builder may have set them for its loss
            inputs.pop(key, None)
        generation = getattr(model, "generation_config", None)
        if (
            getattr(config, "is_encoder_decoder", False)
            and generation is not None
            and generation.decoder_start_token_id is None
            and generation.bos_token_id is None
        ):
            # Library default configs (T5's among them) leave this unset; published checkpoints
            # start decoding from the pad token, so generate does the same.
            pad = getattr(_text_config(config), "pad_token_id", None)
            inputs["decoder_start_token_id"] = pad if isinstance(pad, int) else 0
    return inputs


def _first_id(config: Any, names: tuple[str, ...]) -> int | None:
    """The first of `names` the config sets to an integer (a token id)."""
    for k in names:
        v = getattr(config, k, None)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return None


def _image_token_id(config: Any) -> int | None:
    return _first_id(config, ("image_token_id", "image_token_index"))


def _config_int(config: Any, *names: str, default: int) -> int:
    for c in (_vision_config(config), config):
        for k in names:
            v = getattr(c, k, None)
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                return v
    return default


def _required_args(fn: Any) -> set[str]:
    if fn is None:
        return set()
    sig = inspect.signature(fn).parameters
    return {k for k, p in sig.items() if p.default is p.empty and p.kind is not p.VAR_KEYWORD}


def _pixel_inputs(config: Any, params: set[str], gen: Any, model: Any = None) -> dict[str, Any]:
    """Images at the shrunk size, in the layout the model takes (one image per sample)."""
    import torch

    if "image_grid_thw" in params:  # Qwen-VL style: flattened patches plus the patch grid
        patch = _config_int(config, "patch_size", default=14)
        temporal = _config_int(
            config, "temporal_patch_size", "patch_temporal", default=1
        )  # none: one frame
        merge = _config_int(config, "spatial_merge_size", default=2)
        channels = _num_channels(config)
        side = merge * 2
        rows = BATCH * side * side
        return {
            "pixel_values": torch.randn(rows, channels * temporal * patch * patch, generator=gen),
            "image_grid_thw": torch.tensor([[1, side, side]] * BATCH),
        }
    h, w = _image_size(config)
    channels = _num_channels(config)
    frames = getattr(_vision_config(config), "num_frames", None) or getattr(
        config, "num_frames", None
    )
    if isinstance(frames, int) and frames > 0 and "image_grid_thw" not in params:  # video
        return {"pixel_values": torch.randn(BATCH, frames, channels, h, w, generator=gen)}
    if "pixel_attention_mask" in params and "spatial_shapes" not in params:  # Idefics2/3
        return {
            "pixel_values": torch.randn(BATCH, 1, channels, h, w, generator=gen),
            "pixel_attention_mask": torch.ones(BATCH, 1, h, w, dtype=torch.long),
        }
    pins = getattr(config, "image_grid_pinpoints", None)
    getter = getattr(model, "get_image_features", None) or getattr(
        getattr(model, "model", None), "get_image_features", None
    )
    sizes_needed = "image_sizes" in _required_args(getter)
    if pins and sizes_needed:  # LLaVA-NeXT any-resolution tiles
        from transformers.models.llava_next.modeling_llava_next import image_size_to_num_patches

        n = int(image_size_to_num_patches((h, w), pins, h))
        return {
            "pixel_values": torch.randn(BATCH, n, channels, h, w, generator=gen),
            "image_sizes": torch.tensor([[h, w]] * BATCH),
        }
    if sizes_needed:  # Pixtral-style: one image of its own size
        return {
            "pixel_values": torch.randn(BATCH, channels, h, w, generator=gen),
            "image_sizes": torch.tensor([[h, w]] * BATCH),
        }
    if "spatial_shapes" in params:  # NaFlex (SigLIP2): patch sequences plus their grid
        patch = _config_int(config, "patch_size", default=16)
        n = _config_int(config, "num_patches", default=16)
        side = int(n**0.5)
        return {
            "pixel_values": torch.randn(BATCH, n, channels * patch * patch, generator=gen),
            "pixel_attention_mask": torch.ones(BATCH, n, dtype=torch.long),
            "spatial_shapes": torch.tensor([[side, n // side]] * BATCH),
        }
    return {"pixel_values": torch.randn(BATCH, channels, h, w, generator=gen)}


def _count_feature_tokens(
    model: Any, config: Any, pixels: dict[str, Any], getter: str = "get_image_features"
) -> int:
    """How many text positions a tower's features fill, for all images (or clips) together."""
    import torch

    fn = getattr(model, getter, None) or getattr(getattr(model, "model", None), getter, None)
    if fn is None:
        raise ShrinkError(f"{type(model).__name__} takes this modality but has no {getter}")
    accepted = set(inspect.signature(fn).parameters)
    kwargs = {k: v for k, v in pixels.items() if k in accepted or "kwargs" in accepted}
    with torch.no_grad():
        out = fn(**kwargs)
    width = getattr(_text_config(config), "hidden_size", None)
    candidates = []
    if isinstance(out, (torch.Tensor, list, tuple)):
        candidates.append(out)
    else:
        for attr in ("pooler_output", "image_embeds", "last_hidden_state"):
            value = getattr(out, attr, None)
            if value is not None:
                candidates.append(value)
    for feats in candidates:
        tensors = [feats] if isinstance(feats, torch.Tensor) else list(feats)
        if all(isinstance(t, torch.Tensor) for t in tensors) and (
            width is None or all(t.shape[-1] == width for t in tensors)
        ):
            return sum(t.numel() // t.shape[-1] for t in tensors)
    raise ShrinkError("cannot tell how many image tokens the vision features fill")


def splice_images(
    ctx: InputContext,
    pixels: dict[str, Any],
    *,
    inputs: dict[str, Any] | None = None,
    markers: tuple[tuple[str, ...], tuple[str, ...]] | None = None,
    owner: Any = None,
    config: Any = None,
    count_with: dict[str, Any] | None = None,
) -> None:
    """Images plus a prompt whose image-token count matches the vision features: one run per
    sample, as many tokens as `owner`'s (default: the model's) `get_image_features` fills for
    `pixels` (plus `count_with`, inputs it needs that are not images), after the first token of
    the prompt in `inputs` (default `ctx.inputs`; fresh text when there is none), between the
    first start / end marker ids that `config` (default: the model's) names. The mask is widened,
    image positions are marked in the token-type inputs the model takes, `pixels` are added."""
    import torch

    inputs = ctx.inputs if inputs is None else inputs
    config = config or ctx.config
    total = _count_feature_tokens(owner or ctx.model, config, {**pixels, **(count_with or {})})
    image_id = int(_image_token_id(config) or 0)
    text = inputs.get("input_ids")
    if text is None:
        text = _token_ids(ctx.gen, ctx.config, (BATCH, ctx.seq), ctx.avoid)
    run = placeholder_run(config, image_id, total // BATCH, markers or IMAGE_MARKERS)
    ids = _splice(text, run)
    inputs["input_ids"] = ids
    if "attention_mask" in inputs or "attention_mask" in ctx.params:
        inputs["attention_mask"] = torch.ones_like(ids)
    is_image = torch.eq(ids, image_id).long()
    for k in ("mm_token_type_ids", "token_type_ids"):
        if k in ctx.params:
            inputs[k] = is_image
    inputs.update(pixels)


# Config keys naming the tokens that open and close a run of image / audio placeholders.
IMAGE_MARKERS = (
    ("vision_start_token_id", "boi_token_id", "boi_token_index"),
    ("vision_end_token_id", "eoi_token_id", "eoi_token_index"),
)
AUDIO_MARKERS = (
    ("audio_start_token_id", "audio_bos_token_id", "boa_token_id"),
    ("audio_end_token_id", "audio_eos_token_id", "eoa_token_id"),
)


def placeholder_run(
    config: Any, token_id: int, count: int, markers: tuple[tuple[str, ...], tuple[str, ...]]
) -> list[int]:
    """`count` placeholder tokens, between the first start and end marker ids the config names
    (none when it names none)."""
    start, end = ([i] if (i := _first_id(config, names)) is not None else [] for names in markers)
    return start + [token_id] * count + end


def _splice(text: Any, tokens: list[int]) -> Any:
    """Insert the same token run after the first token of every row."""
    import torch

    run = torch.tensor(tokens, dtype=torch.long)
    return torch.stack([torch.cat([row[:1], run, row[1:]]) for row in text])


def _audio_config(config: Any) -> Any:
    for k in ("audio_config", "encoder_config", "speech_config"):
        sub = getattr(config, k, None)
        if sub is not None and not isinstance(sub, dict):
            return sub
    return config


def _audio_token_id(config: Any) -> int | None:
    return _first_id(config, ("audio_token_id", "audio_token_index"))


def _mel_bins(config: Any) -> int:
    return int(
        getattr(config, "num_mel_bins", None) or getattr(config, "input_feat_per_channel", 80) or 80
    )


def _feature_layout(config: Any, rules: dict[str, Any]) -> str:
    """'mel_channels_first' for Whisper-style encoders (mel bins and fixed source positions)."""
    whisper_like = getattr(config, "num_mel_bins", None) and getattr(
        config, "max_source_positions", None
    )
    return str(rules.get("features", "mel_channels_first" if whisper_like else "frames_last"))


def _audio_features(gen: Any, config: Any, rules: dict[str, Any]) -> Any:
    import torch

    layout = _feature_layout(config, rules)
    bins = int(
        getattr(config, "num_mel_bins", None) or getattr(config, "input_feat_per_channel", 80) or 80
    )
    for k in ("feature_projection_input_dim", "feature_size", "input_dim"):
        v = getattr(config, k, None)
        if layout == "frames_last" and isinstance(v, int) and v > 0:
            bins = v
            break
    if layout == "channel_time_mel":  # CLAP's HTSAT: a one-channel spectrogram image
        frames = int(rules.get("frames", 64))
        return torch.randn(BATCH, 1, frames, bins, generator=gen)
    if layout == "mel_channels_first":
        frames = 2 * int(getattr(config, "max_source_positions", None) or 32)
        return torch.randn(BATCH, bins, frames, generator=gen)
    frames = int(rules.get("frames", 64))
    per_channel = getattr(config, "input_feat_per_channel", None)
    channels = int(getattr(config, "input_channels", 1) or 1) if per_channel == bins else 1
    return torch.randn(BATCH, frames, bins * channels, generator=gen)


def _labels(gen: Any, spec: TinySpec, config: Any, inputs: dict[str, Any]) -> Any:
    import torch

    task = spec.task
    num_labels = int(getattr(config, "num_labels", 2) or 2)
    if task in ("causal-lm", "masked-lm", "image-text-to-text", "multimodal-lm"):
        return inputs["input_ids"].clone() if "input_ids" in inputs else None
    if task in ("seq2seq-lm", "speech-seq2seq"):
        return inputs.get("decoder_input_ids", inputs.get("input_ids"))
    if task in ("sequence-classification", "image-classification", "audio-classification",
                "video-classification"):  # fmt: skip
        return torch.randint(0, num_labels, (BATCH,), generator=gen)
    if task == "token-classification" and "input_ids" in inputs:
        return torch.randint(0, num_labels, inputs["input_ids"].shape, generator=gen)
    if task == "ctc":
        vocab = _vocab_size(config)
        return torch.randint(1, max(2, vocab), (BATCH, 2), generator=gen)
    return None


def compute_loss(spec: TinySpec, model: Any, outputs: Any, inputs: dict[str, Any]) -> Any:
    """The model's own loss when it returns one, else a sum of means of its float outputs."""
    import torch

    loss = getattr(outputs, "loss", None)
    if loss is None and isinstance(outputs, dict):
        loss = outputs.get("loss")
    if isinstance(loss, torch.Tensor) and loss.numel() == 1 and loss.requires_grad:
        return loss.reshape(())
    total = None
    for t in _float_tensors(outputs):
        if not t.requires_grad:
            continue
        term = t.float().mean()
        if not torch.isfinite(term):
            continue
        total = term if total is None else total + term
    if total is None:
        raise ShrinkError("the model returned no float output that carries a gradient")
    return total


def _float_tensors(obj: Any) -> Iterator[Any]:
    import torch

    if isinstance(obj, torch.Tensor):
        if obj.is_floating_point() or obj.is_complex():
            yield obj.real if obj.is_complex() else obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _float_tensors(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _float_tensors(v)
    elif hasattr(obj, "to_tuple"):
        yield from _float_tensors(obj.to_tuple())


def iter_default_configs() -> Iterator[ResolvedConfig]:
    """transformers' default config for every model_type it knows."""
    from transformers import CONFIG_MAPPING

    for mt in sorted(CONFIG_MAPPING.keys()):
        try:
            config = CONFIG_MAPPING[mt]()
            data = config.to_dict()
        except Exception as exc:  # the default itself does not build: still yield a row
            data = {"model_type": mt, "_default_error": f"{type(exc).__name__}: {exc}"}
        yield ResolvedConfig(
            model_id=f"default/{mt}",
            library="transformers",
            config=data,
            source=ConfigSource.TRANSFORMERS_DEFAULT.value,
            detail=f"transformers default for model_type={mt}",
        )


def model_types_with_class() -> list[str]:
    """Model types that have a model class of their own in transformers' auto mappings."""
    from model_configs.libraries.transformers.classes import model_types_with_class as _types

    return _types()
