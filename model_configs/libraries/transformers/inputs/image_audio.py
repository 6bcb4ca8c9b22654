"""Input builders for prompts that carry images and audio together: pixel blocks and dMel frames
(Inkling), crops and log-mel frames (Phi-4-multimodal), patch rows and mel chunks (dots3 note),
waveform windows (Muse Spark) (see the package docstring)."""

from __future__ import annotations

from model_configs.libraries.transformers.build import (
    _count_feature_tokens,
    _num_channels,
    _pixel_inputs,
    _splice,
    _token_ids,
    splice_images,
)
from model_configs.libraries.transformers.inputs import InputContext, family_inputs
from model_configs.libraries.transformers.inputs.prompt import (
    plain_prompt,
    randn,
    splice_run,
)
from model_configs.tiny_inputs import BATCH


@family_inputs("inkling_mm_model", replace=True)
def inkling(ctx: InputContext) -> None:
    """Inkling (v1) sees and hears: each image token is one (temporal, patch, patch, channels)
    pixel block, and each audio token one frame of discretised dMel bins (`audio_input_ids`,
    values < mel_vocab_size); both runs follow their <bos> marker."""
    import torch

    config = ctx.config
    ctx.inputs = plain_prompt(ctx)
    vision, audio = config.vision_config, config.audio_config
    tokens = 4  # image tokens (pixel blocks) and audio frames per sample
    patch, frames_t = int(vision.patch_size), int(vision.temporal_patch_size)
    blocks = torch.rand(
        BATCH * tokens, frames_t, patch, patch, int(vision.num_channels), generator=ctx.gen
    )
    splice_images(ctx, {"pixel_values": blocks}, markers=(("image_bos_token_id",), ()))
    dmel = torch.randint(
        0, int(audio.mel_vocab_size), (BATCH, tokens, int(audio.n_mel_bins)), generator=ctx.gen
    )
    run = [config.audio_bos_token_id] + [config.audio_token_id] * tokens
    ids = _splice(ctx.inputs["input_ids"], run)
    ctx.inputs["input_ids"] = ids
    ctx.inputs["attention_mask"] = torch.ones_like(ids)
    ctx.inputs["audio_input_ids"] = dmel
    ctx.inputs["audio_input_ids_mask"] = torch.ones(BATCH, tokens, dtype=torch.long)


@family_inputs("muse_spark")
def muse_spark(ctx: InputContext) -> None:
    """Muse Spark also hears: raw mono waveforms padded to a multiple of the audio tower's
    samples_per_token (one token per window), one <audio> placeholder per token."""
    import torch

    config = ctx.config
    per_token = int(config.audio_config.samples_per_token)
    tokens = 4
    audio = {
        "input_values": torch.randn(BATCH, tokens * per_token, generator=ctx.gen),
        "input_values_mask": torch.ones(BATCH, tokens * per_token, dtype=torch.long),
    }
    total = _count_feature_tokens(ctx.model, config, audio, getter="get_audio_features")
    splice_run(ctx, int(config.audio_token_id), total // BATCH)
    ctx.inputs.update({k: v for k, v in audio.items() if k in ctx.params})


@family_inputs("phi4_multimodal", replace=True)
def phi4_multimodal(ctx: InputContext) -> None:
    """Phi-4-multimodal's processor sends each image as a global crop plus its HD sub-crops
    (one here: the image is one crop wide) with patch masks, and a speech clip as 80-bin log-mel
    frames; the prompt holds one <image> token per merged feature (sub-crop rows with a newline
    column, a separator, the global rows) and one <audio> token per 8 mel frames."""
    import torch

    config = ctx.config
    vision, audio = config.vision_config, config.audio_config
    size = int(vision.crop_size)
    patches = size // int(vision.patch_size)
    side = (patches + 1) // 2  # 2x2 average pooling (padded when odd)
    crops = 2  # the global view and one sub-crop
    image_tokens = 2 * side * (side + 1) + 1
    frames, rate = 64, 8
    audio_tokens = -(-frames // rate)
    ctx.inputs["image_pixel_values"] = torch.randn(
        BATCH, crops, _num_channels(config), size, size, generator=ctx.gen
    )
    ctx.inputs["image_sizes"] = torch.tensor([[size, size]] * BATCH)
    ctx.inputs["image_attention_mask"] = torch.ones(BATCH, crops, patches, patches)
    ctx.inputs["audio_input_features"] = torch.randn(
        BATCH, frames, int(audio.input_size), generator=ctx.gen
    )
    ctx.inputs["audio_embed_sizes"] = torch.tensor([audio_tokens] * BATCH)
    ctx.inputs["audio_attention_mask"] = torch.ones(BATCH, frames, dtype=torch.bool)
    run = [int(vision.image_token_id)] * image_tokens + [int(audio.audio_token_id)] * audio_tokens
    ids = _splice(_token_ids(ctx.gen, config, (BATCH, ctx.seq), ctx.avoid), run)
    ctx.inputs["input_ids"] = ids
    ctx.inputs["attention_mask"] = torch.ones_like(ids)


@family_inputs("dots3_note", replace=True)
def omni_prompt(ctx: InputContext) -> None:
    """dots3 note reads images (Qwen-VL style flattened patches plus their grid) and audio
    (log-mel chunks, 128 bins x frames, with each chunk's waveform length in samples: the conv
    stem masks frames past it and emits one token per samples_per_token). The prompt holds one
    image placeholder per merged patch and one audio placeholder per audio token."""
    import torch

    config, model = ctx.config, ctx.model
    audio_config = config.audio_config
    pixels = _pixel_inputs(config, ctx.params, ctx.gen, model)
    image_tokens = _count_feature_tokens(model, config, pixels) // BATCH
    frames = 64
    audio = {
        "input_features": randn(ctx, BATCH, int(audio_config.feature_size), frames),
        "chunk_sample_lengths": torch.full((BATCH,), frames * int(audio_config.hop_length)),
    }
    audio_tokens = _count_feature_tokens(model, config, audio, getter="get_audio_features") // BATCH
    text = _token_ids(ctx.gen, config, (BATCH, ctx.seq), ctx.avoid)
    ids = _splice(
        text,
        [int(config.image_token_id)] * image_tokens + [int(config.audio_token_id)] * audio_tokens,
    )
    ctx.inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), **pixels, **audio}
