"""Input builders for detection, segmentation, OCR, depth, video and keypoint models (see the package docstring)."""

from __future__ import annotations

from typing import Any

from model_configs.libraries.transformers.inputs import InputContext, family_inputs
from model_configs.tiny_inputs import BATCH


def _boxes(gen: Any, n: int, scale: float) -> Any:
    """`n` word boxes per sample as (x0, y0, x1, y1) with x0 <= x1 and y0 <= y1, in [0, scale]."""
    import torch

    corners = torch.rand(BATCH, n, 2, 2, generator=gen) * scale
    low, high = corners.min(dim=2).values, corners.max(dim=2).values
    return torch.cat([low, high], dim=-1)


@family_inputs("bros")
def _bros(ctx: InputContext) -> None:
    """BROS reads one normalised box per token (0..1; the model scales it by bbox_scale)."""
    seq = ctx.inputs["input_ids"].shape[1]
    ctx.inputs["bbox"] = _boxes(ctx.gen, seq, 1.0)


@family_inputs("lilt")
def _lilt(ctx: InputContext) -> None:
    """LiLT's layout stream reads one integer box per token on the 0..1000 page grid."""
    seq = ctx.inputs["input_ids"].shape[1]
    ctx.inputs["bbox"] = _boxes(ctx.gen, seq, 1000.0).long()


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


@family_inputs("seggpt")
def _seggpt(ctx: InputContext) -> None:
    """SegGPT segments an input image in context: a prompt image, its mask (3-channel, as the
    image processor paints it) and the input, each half of the stacked image_size."""
    import torch

    from model_configs.libraries.transformers.build import _image_size, _num_channels

    h, w = _image_size(ctx.config)
    shape = (BATCH, _num_channels(ctx.config), h // 2, w)
    ctx.inputs["pixel_values"] = torch.randn(*shape, generator=ctx.gen)
    ctx.inputs["prompt_pixel_values"] = torch.randn(*shape, generator=ctx.gen)
    mask = (torch.rand(BATCH, 1, h // 2, w, generator=ctx.gen) > 0.5).float()
    ctx.inputs["prompt_masks"] = mask.expand(shape).clone()


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


@family_inputs("depth_pro")
def _depth_pro(ctx: InputContext) -> None:
    """DepthPro's smallest scale (min scaled_images_ratios) must still cover one patch_size
    tile: the image is patch_size / min(ratio) px (1536 = 384 / 0.25 upstream)."""
    import torch

    config = ctx.config
    side = int(round(config.patch_size / min(config.scaled_images_ratios)))
    ctx.inputs["pixel_values"] = torch.randn(BATCH, 3, side, side, generator=ctx.gen)


@family_inputs("prompt_depth_anything")
def _prompt_depth(ctx: InputContext) -> None:
    """Prompt Depth Anything refines a low-resolution metric depth prompt (an iPhone LiDAR map,
    (batch, 1, h, w) in metres, a quarter of the image side) that every fusion layer reads."""
    import torch

    h, w = ctx.inputs["pixel_values"].shape[-2:]
    depth = 0.5 + 4.5 * torch.rand(BATCH, 1, max(1, h // 4), max(1, w // 4), generator=ctx.gen)
    ctx.inputs["prompt_depth"] = depth


# Fully convolutional models whose config has no image size: the side that gives their deepest
# feature map a few pixels (their own sizes are far larger).
CONV_IMAGE_SIDE = {
    "uvdoc": 128,  # 16x downsampling: 8x8 maps for the dilated bridges (712 x 488 upstream)
    "pp_ocrv5_server_det": 64,  # a 4-level FPN down to 32x: a 2x2 top level (960 px upstream)
    "pp_ocrv6_medium_det": 64,
    "pp_ocrv6_small_det": 64,
}


@family_inputs(*CONV_IMAGE_SIDE)
def _conv_image(ctx: InputContext) -> None:
    """Images at the side CONV_IMAGE_SIDE names for this model type."""
    import torch

    from model_configs.libraries.transformers.build import _num_channels

    side = CONV_IMAGE_SIDE[str(ctx.spec.model_type)]
    shape = (BATCH, _num_channels(ctx.config), side, side)
    ctx.inputs["pixel_values"] = torch.randn(*shape, generator=ctx.gen)


@family_inputs("sam2", "sam3_tracker")
def _sam2_images(ctx: InputContext) -> None:
    """SAM 2-style trackers read the image at the Hiera backbone's image_size (nested two levels
    down, vision_config.backbone_config); one positive point prompt per image, in pixels."""
    import torch

    from model_configs.libraries.transformers.build import _num_channels

    vision = ctx.config.vision_config
    size = getattr(vision, "image_size", None) or vision.backbone_config.image_size
    h, w = (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))
    ctx.inputs["pixel_values"] = torch.randn(
        BATCH, _num_channels(ctx.config), h, w, generator=ctx.gen
    )
    ctx.inputs["input_points"] = torch.rand(BATCH, 1, 1, 2, generator=ctx.gen) * torch.tensor(
        [w, h]
    )
    ctx.inputs["input_labels"] = torch.ones(BATCH, 1, 1, dtype=torch.long)


@family_inputs("sam3", "sam3_lite_text")
def _sam3_prompts(ctx: InputContext) -> None:
    """SAM 3 segments what a text prompt names, refined by box exemplars: one positive box per
    image ((cx, cy, w, h) normalised to [0, 1]) that the geometry encoder pools from the image
    with torchvision's roi_align; without torchvision users prompt with text alone."""
    import importlib.util

    import torch

    if importlib.util.find_spec("torchvision") is None:
        return

    centre = 0.3 + 0.4 * torch.rand(BATCH, 1, 2, generator=ctx.gen)
    size = 0.1 + 0.3 * torch.rand(BATCH, 1, 2, generator=ctx.gen)
    ctx.inputs["input_boxes"] = torch.cat([centre, size], dim=-1)
    ctx.inputs["input_boxes_labels"] = torch.ones(BATCH, 1, dtype=torch.long)


@family_inputs("sam3_lite_text_text_model", replace=True)
def _text_prompt(ctx: InputContext) -> None:
    """A text tower built alone (its class inherits pixel_values as main input): the tokenized
    prompt it encodes."""
    import torch

    from model_configs.libraries.transformers.build import _token_ids

    ctx.inputs["input_ids"] = _token_ids(ctx.gen, ctx.config, (BATCH, ctx.seq), ctx.avoid)
    ctx.inputs["attention_mask"] = torch.ones(BATCH, ctx.seq, dtype=torch.long)


# Text-line recognizers read one line of text, which their processors resize to a fixed height
# (48 px upstream, 320 px wide); the backbone pools the height to 3 rows and a 3x2 average pool
# then to one. transformers' default PP-OCRv5 mobile config keeps the detector-style LCNetV3
# strides (2 on both axes in every stage, 32x in all), so its 3 rows need 96 px. 128 px wide
# keeps several time steps for the CTC head.
TEXT_LINE = {
    "pp_ocrv5_mobile_rec": (96, 128),
    "pp_ocrv5_server_rec": (48, 128),
    "pp_ocrv6_small_rec": (48, 128),
    "pp_ocrv6_tiny_rec": (48, 128),
}


@family_inputs(*TEXT_LINE)
def _text_line(ctx: InputContext) -> None:
    """One text-line crop per sample at TEXT_LINE's (height, width)."""
    import torch

    h, w = TEXT_LINE[str(ctx.spec.model_type)]
    ctx.inputs["pixel_values"] = torch.randn(BATCH, 3, h, w, generator=ctx.gen)
