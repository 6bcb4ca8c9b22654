"""The generic inputs, by signature: what a model is fed because of its main input name and the
parameters its forward takes, whatever its model type (see the package docstring).

Entries apply top to bottom, each to `ctx.inputs` as the entries above it left it: text first,
then images, audio and the other main inputs, then the inputs that go beside them (cross
attention, prompts holding image or audio tokens, the families' own extras), the decoder's side
last. Each entry's docstring names the families it was written for.
"""

from __future__ import annotations

import inspect
from typing import Any

from model_configs.libraries.transformers.build import (
    AUDIO_MARKERS,
    _audio_config,
    _audio_features,
    _audio_token_id,
    _count_feature_tokens,
    _feature_layout,
    _image_size,
    _image_token_id,
    _mel_bins,
    _num_channels,
    _pixel_inputs,
    _splice,
    _text_config,
    _token_ids,
    _vision_config,
    placeholder_run,
    splice_images,
)
from model_configs.libraries.transformers.inputs import InputContext, signature_inputs
from model_configs.tiny_inputs import BATCH

VOCAB_FALLBACK = 64
NOT_TEXT_MAIN_INPUTS = ("pixel_values", "input_features", "input_values")


def _ones(*shape: int) -> Any:
    import torch

    return torch.ones(*shape, dtype=torch.long)


def _add_text(ctx: InputContext) -> None:
    ctx.inputs["input_ids"] = _token_ids(ctx.gen, ctx.config, (BATCH, ctx.seq), ctx.avoid)
    if "attention_mask" in ctx.params:
        ctx.inputs["attention_mask"] = _ones(BATCH, ctx.seq)


# ---- the main input ------------------------------------------------------------------------


@signature_inputs(
    "input_ids",
    when=lambda ctx: (
        ctx.main == "input_ids"
        or ("input_ids" in ctx.params and ctx.main not in NOT_TEXT_MAIN_INPUTS)
    ),
)
def text(ctx: InputContext) -> None:
    """Token ids (kept away from special ids) and their mask, for a text model or a model that
    takes text beside a main input other than images or audio."""
    _add_text(ctx)


def _has_vision(config: Any) -> bool:
    return any(
        getattr(config, k, None) is not None
        for k in ("vision_config", "image_config", "image_size", "patch_size")
    )


@signature_inputs(
    "pixel_values",
    when=lambda ctx: (
        ctx.main == "pixel_values"
        or (
            "pixel_values" in ctx.params
            and _has_vision(ctx.config)
            and _image_token_id(ctx.config) is None
        )
    ),
)
def images(ctx: InputContext) -> None:
    """Images at the shrunk size in the layout the model takes, for vision models and dual
    encoders (CLIP); models whose prompt holds image tokens get theirs with the prompt below."""
    ctx.inputs.update(_pixel_inputs(ctx.config, ctx.params, ctx.gen, ctx.model))


@signature_inputs("input_features", when=lambda ctx: ctx.main == "input_features")
def audio_features(ctx: InputContext) -> None:
    """Spectrogram features of the length the audio encoder needs (Whisper, Speech2Text...)."""
    import torch

    config, inputs = ctx.config, ctx.inputs
    audio_config = _audio_config(config)
    inputs["input_features"] = _audio_features(ctx.gen, audio_config, ctx.rules)
    # Whisper-style encoders take fixed-length frames (nothing to mask); some of them add
    # attention_mask to the attention scores, where an integer 0/1 mask would be wrong.
    fixed = _feature_layout(audio_config, ctx.rules) == "mel_channels_first"
    if "attention_mask" in ctx.params and "input_ids" not in inputs and not fixed:
        frames_dim = -1 if inputs["input_features"].shape[1] == _mel_bins(audio_config) else 1
        frames = inputs["input_features"].shape[frames_dim]
        inputs["attention_mask"] = torch.ones(BATCH, frames, dtype=torch.long)


@signature_inputs(
    "input_values_mel",
    when=lambda ctx: ctx.main == "input_values" and ctx.rules.get("input_values") == "frames_mel",
)
def spectrogram_values(ctx: InputContext) -> None:
    """AST: `input_values` are mel frames (batch, frames, bins), not a waveform."""
    import torch

    frames = int(getattr(ctx.config, "max_length", 64))
    bins = int(getattr(ctx.config, "num_mel_bins", 128))
    ctx.inputs["input_values"] = torch.randn(BATCH, frames, bins, generator=ctx.gen)


@signature_inputs(
    "input_values",
    when=lambda ctx: ctx.main == "input_values" and ctx.rules.get("input_values") != "frames_mel",
)
def waveform(ctx: InputContext) -> None:
    """A raw waveform (wav2vec 2.0, HuBERT...), with channels where the family's hints say."""
    import torch

    n = int(ctx.rules.get("samples", 6400))
    channels = int(ctx.rules.get("audio_channels", 0))
    shape = (BATCH, channels, n) if channels else (BATCH, n)
    ctx.inputs["input_values"] = torch.randn(*shape, generator=ctx.gen)


def _has_text(config: Any, model: Any) -> bool:
    return getattr(config, "text_config", None) is not None


@signature_inputs(
    "input_ids_beside",
    when=lambda ctx: (
        "input_ids" not in ctx.inputs
        and ctx.main != "input_ids"
        and "input_ids" in ctx.params
        and _has_text(ctx.config, ctx.model)
    ),
)
def text_beside(ctx: InputContext) -> None:
    """Text beside an image or audio main input, for models with a text tower (CLIP, CLAP)."""
    _add_text(ctx)


# ---- what goes beside it -------------------------------------------------------------------


def _has_cross_attention(model: Any) -> bool:
    """A decoder built alone whose layers cross-attend (BartForCausalLM, BertLMHeadModel...)."""
    return any(
        ("encoder_attn" in n or "crossattention" in n or "cross_attn" in n)
        for n, _ in model.named_parameters()
    )


@signature_inputs(
    "encoder_hidden_states",
    when=lambda ctx: (
        "encoder_hidden_states" in ctx.params
        and "input_ids" in ctx.inputs
        and _has_cross_attention(ctx.model)
    ),
)
def encoder_states(ctx: InputContext) -> None:
    """States for a decoder built alone to cross-attend to (BartForCausalLM, BertLMHeadModel)."""
    import torch

    width = int(getattr(_text_config(ctx.config), "hidden_size", 0) or 0)
    width = int(getattr(ctx.config, "cross_attention_hidden_size", None) or width)
    ctx.inputs["encoder_hidden_states"] = torch.randn(BATCH, 8, width, generator=ctx.gen)


@signature_inputs(
    "audio_in_prompt",
    when=lambda ctx: (
        "input_ids" in ctx.inputs
        and _audio_token_id(ctx.config) is not None
        and "input_features" in ctx.params
        and bool(
            getattr(ctx.config, "audio_config", None) or getattr(ctx.config, "encoder_config", None)
        )
    ),
)
def audio_prompt(ctx: InputContext) -> None:
    """Audio features plus a prompt whose audio-token count matches the audio tower's output
    (Qwen2-Audio, audio language models)."""
    import torch

    model, config, params, inputs = ctx.model, ctx.config, ctx.params, ctx.inputs
    audio_config = _audio_config(config)
    layout = "mel_channels_first" if getattr(audio_config, "num_mel_bins", None) else "frames_last"
    feats = _audio_features(ctx.gen, audio_config, {"features": layout})
    frames = feats.shape[-1] if feats.shape[1] == _mel_bins(audio_config) else feats.shape[1]
    audio: dict[str, Any] = {"input_features": feats}
    getter = getattr(model, "get_audio_features", None)
    accepted = set(inspect.signature(getter).parameters) if getter else set()
    for k in ("input_features_mask", "feature_attention_mask", "audio_attention_mask"):
        if k in accepted or k in params:
            audio[k] = torch.ones(BATCH, frames, dtype=torch.long)
    if getter is None:  # no feature getter (Qwen2-Audio): the tower's own length arithmetic
        total = _audio_tower_tokens(model, frames)
    else:
        total = _count_feature_tokens(model, config, audio, getter="get_audio_features")
    audio_id = int(_audio_token_id(config) or 0)
    run = placeholder_run(config, audio_id, total // BATCH, AUDIO_MARKERS)
    ids = _splice(inputs["input_ids"], run)
    inputs["input_ids"] = ids
    if "attention_mask" in inputs:
        inputs["attention_mask"] = torch.ones_like(ids)
    inputs.update({k: v for k, v in audio.items() if k in params})


def _audio_tower_tokens(model: Any, frames: int) -> int:
    """Audio positions for BATCH clips of `frames` frames, from the audio tower's
    `_get_feat_extract_output_lengths` (its last value: the lengths after pooling)."""
    import torch

    from ground.errors import ShrinkError

    tower = getattr(model, "audio_tower", None) or getattr(
        getattr(model, "model", None), "audio_tower", None
    )
    lengths_fn = getattr(tower, "_get_feat_extract_output_lengths", None)
    if lengths_fn is None:
        raise ShrinkError(f"{type(model).__name__} takes audio but has no get_audio_features")
    lengths = lengths_fn(torch.full((BATCH,), frames, dtype=torch.long))
    lengths = lengths[-1] if isinstance(lengths, tuple) else lengths
    return int(lengths.sum())


@signature_inputs(
    "audio_beside_text",
    when=lambda ctx: (
        "input_features" in ctx.params
        and "input_features" not in ctx.inputs
        and getattr(ctx.config, "audio_config", None) is not None
        and _audio_token_id(ctx.config) is None
    ),
)
def audio_beside_text(ctx: InputContext) -> None:
    """Dual encoders (CLAP): audio features beside the text, no audio tokens in it."""
    ctx.inputs["input_features"] = _audio_features(ctx.gen, _audio_config(ctx.config), ctx.rules)


@signature_inputs(
    "input_points",
    when=lambda ctx: (
        "input_points" in ctx.params
        and "input_labels" in ctx.params
        and "pixel_values" in ctx.inputs
    ),
)
def point_prompts(ctx: InputContext) -> None:
    """SAM-style prompts: one point per image, inside it, labelled foreground."""
    import torch

    h, w = ctx.inputs["pixel_values"].shape[-2:]
    ctx.inputs["input_points"] = torch.rand(BATCH, 1, 1, 2, generator=ctx.gen) * torch.tensor(
        [w, h]
    )
    ctx.inputs["input_labels"] = torch.ones(BATCH, 1, 1, dtype=torch.long)


@signature_inputs(
    "mim_labels",
    when=lambda ctx: (
        "mim_labels" in ctx.params and "pixel_values" in ctx.inputs and "input_ids" in ctx.inputs
    ),
)
def flava_pretraining(ctx: InputContext) -> None:
    """FLAVA pre-training: masked text, masked image patches with codebook targets, and an
    image-text matching label, so every pre-training head and the multimodal encoder run."""
    import torch

    config, gen = ctx.config, ctx.gen
    image = getattr(config, "image_config", None) or _vision_config(config)
    side = int(getattr(image, "image_size", 32)) // int(getattr(image, "patch_size", 16))
    patches = side * side
    image_vocab = int(getattr(image, "vocab_size", 0) or 0) or 8  # the codebook's entries
    masked = torch.zeros(BATCH, patches, dtype=torch.bool)
    masked[:, : max(1, patches // 2)] = True
    ids = ctx.inputs["input_ids"]
    ctx.inputs.update(
        {
            "input_ids_masked": ids,
            "bool_masked_pos": masked,
            "mlm_labels": ids.clone(),
            "mim_labels": torch.randint(0, image_vocab, (BATCH, patches), generator=gen),
            "itm_labels": torch.ones(BATCH, dtype=torch.long),
        }
    )


@signature_inputs(
    "image_pairs",
    when=lambda ctx: (
        ctx.spec.task == "keypoint-matching"
        and ctx.inputs.get("pixel_values") is not None
        and ctx.inputs["pixel_values"].dim() == 4
    ),
)
def image_pairs(ctx: InputContext) -> None:
    """Keypoint matchers (SuperGlue, LightGlue) take image pairs: a second image per sample."""
    import torch

    pixels = ctx.inputs["pixel_values"]
    other = torch.randn(pixels.shape, generator=ctx.gen)
    ctx.inputs["pixel_values"] = torch.stack([pixels, other], dim=1)


@signature_inputs("task_inputs", when=lambda ctx: "task_inputs" in ctx.companions)
def task_prompt(ctx: InputContext) -> None:
    """OneFormer: the tokenized task prompt ("the task is ...") beside the image."""
    import torch

    config = ctx.config
    length = int(getattr(config, "task_seq_len", 0) or 0) or ctx.seq
    vocab = int(getattr(config, "text_encoder_vocab_size", 0) or 0) or VOCAB_FALLBACK
    ctx.inputs["task_inputs"] = torch.randint(0, vocab, (BATCH, length), generator=ctx.gen)


@signature_inputs(
    "entity_ids", when=lambda ctx: "entity_ids" in ctx.params and "input_ids" in ctx.inputs
)
def entities(ctx: InputContext) -> None:
    """LUKE: two entities (pair heads read both), each a two-token mention inside the text."""
    import torch

    n, mention = 2, 2
    vocab = int(getattr(ctx.config, "entity_vocab_size", 0) or 0) or 16
    positions = torch.arange(1, 1 + n * mention).view(1, n, mention).repeat(BATCH, 1, 1)
    out = {
        "entity_ids": torch.randint(1, max(2, vocab), (BATCH, n), generator=ctx.gen),
        "entity_attention_mask": torch.ones(BATCH, n, dtype=torch.long),
        "entity_position_ids": positions,
    }
    if "entity_start_positions" in ctx.params:  # span heads: where each mention starts and ends
        out["entity_start_positions"] = positions[:, :, 0]
        out["entity_end_positions"] = positions[:, :, -1]
    ctx.inputs.update(out)


@signature_inputs(
    "global_attention_mask",
    when=lambda ctx: "global_attention_mask" in ctx.params and "input_ids" in ctx.inputs,
)
def global_attention(ctx: InputContext) -> None:
    """Longformer / LED: the first token attends globally."""
    import torch

    mask = torch.zeros_like(ctx.inputs["input_ids"])
    mask[:, 0] = 1
    ctx.inputs["global_attention_mask"] = mask


@signature_inputs("qformer_input_ids", when=lambda ctx: "qformer_input_ids" in ctx.params)
def qformer_instruction(ctx: InputContext) -> None:
    """InstructBLIP: the instruction also goes to the Q-Former."""
    import torch

    qconfig = getattr(ctx.config, "qformer_config", ctx.config)
    ctx.inputs["qformer_input_ids"] = _token_ids(ctx.gen, qconfig, (BATCH, 8), ctx.avoid)
    ctx.inputs["qformer_attention_mask"] = torch.ones(BATCH, 8, dtype=torch.long)


def _tiled(ctx: InputContext) -> bool:
    return (
        "input_ids" in ctx.inputs
        and "aspect_ratio_ids" in ctx.params
        and "cross_attention_mask" in ctx.params
    )


@signature_inputs("aspect_ratio_ids", when=_tiled)
def tiled_images(ctx: InputContext) -> None:
    """Mllama: one image per sample cut into every tile the model allows, an <|image|> token
    after the first token, and text that cross-attends to all tiles."""
    import torch

    config, inputs, gen = ctx.config, ctx.inputs, ctx.gen
    vision = _vision_config(config)
    tiles = int(getattr(vision, "max_num_tiles", 1) or 1)
    ratios = list(getattr(vision, "supported_aspect_ratios", None) or [[1, 1]])
    ratio_id = next((i + 1 for i, (a, b) in enumerate(ratios) if a * b == tiles), 1)  # 0 = pad
    h, w = _image_size(config)
    ids = inputs["input_ids"]
    ids[:, 1] = int(_image_token_id(config) or 0)
    inputs["pixel_values"] = torch.randn(
        BATCH, 1, tiles, _num_channels(config), h, w, generator=gen
    )
    inputs["aspect_ratio_ids"] = torch.full((BATCH, 1), ratio_id, dtype=torch.long)
    inputs["aspect_ratio_mask"] = torch.ones(BATCH, 1, tiles, dtype=torch.long)
    mask = torch.ones(BATCH, ids.shape[1], 1, tiles, dtype=torch.long)
    mask[:, :1] = 0  # tokens before the image do not see it
    inputs["cross_attention_mask"] = mask


@signature_inputs(
    "image_tokens",
    when=lambda ctx: (
        not _tiled(ctx)
        and "input_ids" in ctx.inputs
        and _image_token_id(ctx.config) is not None
        and "pixel_values" in ctx.params
        and not (hasattr(ctx.config, "vision_config") and ctx.config.vision_config is None)
    ),
)
def image_prompt(ctx: InputContext) -> None:
    """Vision-language models whose prompt holds image tokens (LLaVA, Qwen-VL, InstructBLIP
    with its Q-Former inputs): images, and as many image tokens as the vision features fill. A
    vision tower the config may leave out (Gemma 4 text-only) gets images only when built."""
    qformer = {k: v for k, v in ctx.inputs.items() if k.startswith("qformer_")}
    pixels = _pixel_inputs(ctx.config, ctx.params, ctx.gen, ctx.model)
    splice_images(ctx, pixels, inputs=ctx.inputs, count_with=qformer)


@signature_inputs(
    "mask_time_indices",
    when=lambda ctx: (
        "mask_time_indices" in ctx.params
        and "sampled_negative_indices" in ctx.params
        and (
            "input_values" in ctx.inputs and hasattr(ctx.model, "_get_feat_extract_output_lengths")
        )
    ),
)
def contrastive_pretraining(ctx: InputContext) -> None:
    """wav2vec2-style pre-training: masked frames and contrastive negatives."""
    import torch

    model, config = ctx.model, ctx.config
    frames = int(model._get_feat_extract_output_lengths(ctx.inputs["input_values"].shape[-1]))
    mask = torch.zeros(BATCH, frames, dtype=torch.bool)
    mask[:, 1 : max(2, frames // 2)] = True
    negatives = int(getattr(config, "num_negatives", 4) or 4)
    t = torch.arange(frames).view(1, frames, 1)
    k = torch.arange(negatives).view(1, 1, negatives)
    b = torch.arange(BATCH).view(BATCH, 1, 1)
    ctx.inputs["mask_time_indices"] = mask
    ctx.inputs["sampled_negative_indices"] = b * frames + (t + 1 + k % max(1, frames - 1)) % frames


@signature_inputs("audio_mel", when=lambda ctx: ctx.main == "audio_mel")
def usm_audio(ctx: InputContext) -> None:
    """Gemma 3n / USM audio encoder: mel frames, True marks padding."""
    import torch

    bins = int(getattr(ctx.config, "input_feat_size", 0) or 0) or _mel_bins(ctx.config)
    frames = int(ctx.rules.get("frames", 64))
    ctx.inputs["audio_mel"] = torch.randn(BATCH, frames, bins, generator=ctx.gen)
    ctx.inputs["audio_mel_mask"] = torch.zeros(BATCH, frames, dtype=torch.bool)


@signature_inputs("past_values", when=lambda ctx: ctx.main == "past_values")
def time_series_window(ctx: InputContext) -> None:
    """PatchTST-style time series: (batch, context, channels)."""
    import torch

    length = int(getattr(ctx.config, "context_length", 32) or 32)
    channels = int(getattr(ctx.config, "num_input_channels", 1) or 1)
    ctx.inputs["past_values"] = torch.randn(BATCH, length, channels, generator=ctx.gen)


# ---- the decoder's side ----------------------------------------------------------------------


@signature_inputs(
    "decoder_input_ids",
    when=lambda ctx: (
        getattr(ctx.config, "is_encoder_decoder", False)
        and "decoder_input_ids" in ctx.params
        and ctx.spec.task != "sequence-classification"
    ),  # those shift input_ids themselves
)
def decoder_text(ctx: InputContext) -> None:
    """The decoder side of an encoder-decoder; MusicGen's decoder takes a row per codebook."""
    dec_seq = int(ctx.rules.get("decoder_seq_len", 8))
    codebooks = getattr(getattr(ctx.config, "decoder", None), "num_codebooks", None)
    rows = BATCH * codebooks if isinstance(codebooks, int) else BATCH  # MusicGen layout
    ctx.inputs["decoder_input_ids"] = _token_ids(ctx.gen, ctx.config, (rows, dec_seq), ctx.avoid)


def _eos(ctx: InputContext) -> Any:
    return getattr(_text_config(ctx.config), "eos_token_id", None)


@signature_inputs(
    "eos_last",
    when=lambda ctx: (
        ctx.spec.task == "sequence-classification"
        and isinstance(_eos(ctx), int)
        and "input_ids" in ctx.inputs
    ),
)
def eos_last(ctx: InputContext) -> None:
    """BART-style classification heads pool on the last <eos>: the text ends with one."""
    ctx.inputs["input_ids"][:, -1] = _eos(ctx)
