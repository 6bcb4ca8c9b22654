"""Input builders for models whose towers are timm models (they need the `timm` extra)."""

from __future__ import annotations

from typing import Any

from model_configs.libraries.transformers.build import splice_images
from model_configs.libraries.transformers.inputs import InputContext, family_inputs
from model_configs.tiny_inputs import BATCH

VIDEO_FRAMES = 2


def timm_image_size(config: Any) -> tuple[int, int]:
    """The input size of the timm model a `timm_wrapper` config names (its pretrained cfg)."""
    import timm.models

    cfg = timm.models.get_pretrained_cfg(str(getattr(config, "architecture", "")))
    size = getattr(cfg, "input_size", None) or (3, 224, 224)
    return int(size[1]), int(size[2])


def _video_clips(ctx: InputContext, video_config: Any) -> None:
    """Clips of VIDEO_FRAMES frames at the timm frame encoder's own size, all frames real."""
    import torch

    h, w = timm_image_size(video_config.vision_config)
    ctx.inputs["pixel_values_videos"] = torch.randn(BATCH, VIDEO_FRAMES, 3, h, w, generator=ctx.gen)
    if "padding_mask_videos" in ctx.params:
        ctx.inputs["padding_mask_videos"] = torch.ones(BATCH, VIDEO_FRAMES, dtype=torch.long)


@family_inputs("pe_video_encoder")
def pe_video_encoder(ctx: InputContext) -> None:
    """PE video encoder alone: each frame through the timm tower, then the temporal encoder."""
    _video_clips(ctx, ctx.config)


@family_inputs("pe_video")
def pe_video(ctx: InputContext) -> None:
    """PE-Video: text and clips, trained with its own video-text contrastive loss."""
    _video_clips(ctx, ctx.config.video_config)
    if ctx.purpose == "train":
        ctx.inputs["return_loss"] = True


def _waveforms(ctx: InputContext, audio_config: Any) -> None:
    """Mono waveforms as (batch, 1, samples) for the DAC front end, every sample real: two DAC
    hops long, since the padding mask is subsampled by the hop and must match the frames."""
    import torch

    samples = 2 * int(audio_config.dac_config.hop_length)
    ctx.inputs["input_values"] = torch.randn(BATCH, 1, samples, generator=ctx.gen)
    if "padding_mask" in ctx.params:
        ctx.inputs["padding_mask"] = torch.ones(BATCH, samples, dtype=torch.long)


@family_inputs("pe_audio_video_encoder")
def pe_audio_video_encoder(ctx: InputContext) -> None:
    """The joint encoder alone: audio and the clips it accompanies, fused frame by frame."""
    _waveforms(ctx, ctx.config.audio_config)
    _video_clips(ctx, ctx.config.video_config)


@family_inputs("pe_audio_video")
def pe_audio_video(ctx: InputContext) -> None:
    """PE-AV: text, audio and video together, with its own contrastive losses (all pairs)."""
    joint = ctx.config.audio_video_config
    _waveforms(ctx, joint.audio_config)
    _video_clips(ctx, joint.video_config)
    if ctx.purpose == "train":
        ctx.inputs["return_loss"] = True


@family_inputs("perception_lm", replace=True)
def perception_lm(ctx: InputContext) -> None:
    """PerceptionLM: one tile per image at the PE ViT's size, as many image tokens in the
    prompt as the (pooled) projector emits."""
    import torch

    vision = ctx.config.vision_config
    h, w = (vision.model_args or {}).get("img_size") or timm_image_size(vision)
    splice_images(ctx, {"pixel_values": torch.randn(BATCH, 1, 3, h, w, generator=ctx.gen)})


@family_inputs("fast_vlm", replace=True)
def fast_vlm(ctx: InputContext) -> None:
    """FastVLM: images at the size the hint gives (the FastViT grid), one token per cell."""
    import torch

    side = int(ctx.rules["image_size"])
    splice_images(ctx, {"pixel_values": torch.randn(BATCH, 3, side, side, generator=ctx.gen)})
