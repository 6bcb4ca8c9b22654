"""Input builders for clips, (batch, frames, channels, height, width): video encoders and their
pre-training masks (V-JEPA 2), clips beside text (Video-LLaVA, InstructBLIP-Video, TVP),
video-text contrastive models (VideoPrism, X-CLIP) (see the package docstring)."""

from __future__ import annotations

from typing import Any

from model_configs.libraries.transformers.build import (
    _count_feature_tokens,
    _image_size,
    _num_channels,
    _splice,
    _token_ids,
    _vision_config,
)
from model_configs.libraries.transformers.inputs import InputContext, family_inputs
from model_configs.libraries.transformers.inputs.prompt import (
    plain_prompt,
    splice_run,
)
from model_configs.tiny_inputs import BATCH


@family_inputs("instructblipvideo", replace=True)
def instructblipvideo(ctx: InputContext) -> None:
    """InstructBLIP-Video: a clip of frames (batch, frames, channels, size, size); the
    Q-Former reads the instruction too, and each frame fills num_query_tokens video tokens."""
    import torch

    config = ctx.config
    ctx.inputs = plain_prompt(ctx)
    qformer = config.qformer_config
    ctx.inputs["qformer_input_ids"] = _token_ids(ctx.gen, qformer, (BATCH, 8), ctx.avoid)
    ctx.inputs["qformer_attention_mask"] = torch.ones(BATCH, 8, dtype=torch.long)
    vision = config.vision_config
    side, frames = int(vision.image_size), 4  # the processor samples 4 frames per clip
    ctx.inputs["pixel_values"] = torch.randn(BATCH, frames, 3, side, side, generator=ctx.gen)
    run = [int(config.video_token_id)] * (int(config.num_query_tokens) * frames)
    ids = _splice(ctx.inputs["input_ids"], run)
    ctx.inputs["input_ids"] = ids
    ctx.inputs["attention_mask"] = torch.ones_like(ids)


@family_inputs("video_llava")
def video_llava(ctx: InputContext) -> None:
    """Video-LLaVA's users send a clip beside the image: frames through the video tower, one
    <video> token per frame patch (CLS included, as the model keeps it)."""
    import torch

    h, w = _image_size(ctx.config)
    frames = 2
    clip = torch.randn(BATCH, frames, _num_channels(ctx.config), h, w, generator=ctx.gen)
    pixels: dict[str, Any] = {"pixel_values_videos": clip}
    total = _count_feature_tokens(ctx.model, ctx.config, pixels, getter="get_video_features")
    splice_run(ctx, int(ctx.config.video_token_id), total // BATCH)
    ctx.inputs.update(pixels)


@family_inputs("videoprism", "videoprism_vision_model")
def videoprism(ctx: InputContext) -> None:
    """VideoPrism takes clips as pixel_values_videos (batch, frames, channels, h, w) at the
    configured frame count; the CLIP model trains on its video-text contrastive loss."""
    import torch

    vision = _vision_config(ctx.config)
    frames = int(vision.num_frames)
    h, w = _image_size(ctx.config)
    clip = torch.randn(BATCH, frames, _num_channels(ctx.config), h, w, generator=ctx.gen)
    ctx.inputs.pop("pixel_values", None)
    ctx.inputs["pixel_values_videos"] = clip
    if "return_loss" in ctx.params:
        ctx.inputs["return_loss"] = True


@family_inputs("xclip")
def xclip(ctx: InputContext) -> None:
    """X-CLIP trains on its video-text contrastive loss (clips come from the generic layout:
    (batch, frames, channels, h, w))."""
    if "return_loss" in ctx.params:
        ctx.inputs["return_loss"] = True


@family_inputs("vjepa2", "videomt")
def _video_clip(ctx: InputContext) -> None:
    """Video models whose forward takes the clip as `pixel_values_videos` (batch, frames, C, H, W)."""
    import torch

    from model_configs.libraries.transformers.build import _image_size, _num_channels

    config = ctx.config
    frames = int(getattr(config, "frames_per_clip", 0) or getattr(config, "num_frames", 0) or 4)
    h, w = _image_size(config)
    crop = getattr(config, "crop_size", None)
    if isinstance(crop, int):
        h = w = crop
    pixels = ctx.inputs.pop("pixel_values", None)
    shape = (BATCH, frames, _num_channels(config), h, w)
    if pixels is None or pixels.dim() != 5:
        pixels = torch.randn(*shape, generator=ctx.gen)
    ctx.inputs["pixel_values_videos"] = pixels
    if "context_mask" in ctx.params and "target_mask" in ctx.params:
        ctx.inputs.update(_jepa_masks(ctx, frames, h, w))


def _jepa_masks(ctx: InputContext, frames: int, h: int, w: int) -> dict[str, Any]:
    """V-JEPA pre-training: the predictor sees the context tubelets and predicts the features of
    a masked block; here a random quarter-size spatial block through the whole clip is the
    target and the rest the context (token indices, one list entry per mask)."""
    import torch

    config = ctx.config
    patch, tubelet = int(config.patch_size), int(config.tubelet_size)
    t, gh, gw = max(1, frames // tubelet), h // patch, w // patch
    bh, bw = max(1, gh // 2), max(1, gw // 2)
    grid = torch.arange(t * gh * gw).view(t, gh, gw)
    context, target = [], []
    for _ in range(BATCH):
        top = int(torch.randint(0, gh - bh + 1, (1,), generator=ctx.gen))
        left = int(torch.randint(0, gw - bw + 1, (1,), generator=ctx.gen))
        inside = torch.zeros(t, gh, gw, dtype=torch.bool)
        inside[:, top : top + bh, left : left + bw] = True
        target.append(grid[inside])
        context.append(grid[~inside])
    return {"context_mask": [torch.stack(context)], "target_mask": [torch.stack(target)]}


@family_inputs("tvp", replace=True)
def _tvp(ctx: InputContext) -> None:
    """TVP grounds a text query in a clip: frames at max_img_size, plus (duration, start, end)
    labels in seconds for its IoU / distance / duration losses, as its training script passes.
    One clip per batch: the 2D position embedding views its (width, hidden) table as
    (batch, 1, width, hidden) (modeling_tvp.add_2d_positional_embeddings), which upstream only
    holds for batch 1, the size its docs and tests use."""
    import torch

    from model_configs.libraries.transformers.build import _token_ids

    config = ctx.config
    size = int(config.max_img_size)
    ctx.inputs["input_ids"] = _token_ids(ctx.gen, config, (1, ctx.seq), ctx.avoid)
    ctx.inputs["attention_mask"] = torch.ones(1, ctx.seq, dtype=torch.long)
    shape = (1, int(config.num_frames), 3, size, size)
    ctx.inputs["pixel_values"] = torch.randn(*shape, generator=ctx.gen)
    if ctx.purpose == "train" and "labels" in ctx.params:
        duration = 10.0 + 20.0 * torch.rand(1, generator=ctx.gen)
        edges = torch.rand(1, 2, generator=ctx.gen).sort(dim=1).values * duration[:, None]
        ctx.inputs["labels"] = (duration, edges[:, 0], edges[:, 1])
