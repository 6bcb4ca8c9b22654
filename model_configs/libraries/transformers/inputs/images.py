"""Input builders for images at a size the model needs, with the prompts its users give:
in-context segmentation (SegGPT), depth prompts, point and box prompts (SAM 2 / SAM 3), fully
convolutional models and text-line crops at a working side (see the package docstring)."""

from __future__ import annotations

from model_configs.libraries.transformers.build import (
    _image_size,
    _num_channels,
)
from model_configs.libraries.transformers.inputs import InputContext, family_inputs
from model_configs.tiny_inputs import BATCH


@family_inputs("seggpt")
def _seggpt(ctx: InputContext) -> None:
    """SegGPT segments an input image in context: a prompt image, its mask (3-channel, as the
    image processor paints it) and the input, each half of the stacked image_size."""
    import torch

    h, w = _image_size(ctx.config)
    shape = (BATCH, _num_channels(ctx.config), h // 2, w)
    ctx.inputs["pixel_values"] = torch.randn(*shape, generator=ctx.gen)
    ctx.inputs["prompt_pixel_values"] = torch.randn(*shape, generator=ctx.gen)
    mask = (torch.rand(BATCH, 1, h // 2, w, generator=ctx.gen) > 0.5).float()
    ctx.inputs["prompt_masks"] = mask.expand(shape).clone()


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

    side = CONV_IMAGE_SIDE[str(ctx.spec.model_type)]
    shape = (BATCH, _num_channels(ctx.config), side, side)
    ctx.inputs["pixel_values"] = torch.randn(*shape, generator=ctx.gen)


@family_inputs("sam2", "sam3_tracker")
def _sam2_images(ctx: InputContext) -> None:
    """SAM 2-style trackers read the image at the Hiera backbone's image_size (nested two levels
    down, vision_config.backbone_config); one positive point prompt per image, in pixels."""
    import torch

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
