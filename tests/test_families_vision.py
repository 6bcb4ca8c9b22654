"""Detection, segmentation, OCR, depth, video and keypoint families: shrink the default config,
build, feed the inputs their users feed, train (rules and builders: the `images`, `video` and
`regions` layouts of model_configs/libraries/transformers/: data/families/ and inputs/)."""

from __future__ import annotations

import pytest

from tests.family_support import assert_trains, run_default

# lilt, tvp, sam2, uvdoc and prompt_depth_anything train in their own tests below.
REPRESENTATIVES = [
    "bros",  # layout: one box per token
    "d_fine",  # strict validator: head_dim * heads == d_model
    "lw_detr",  # default with no feature level; query groups
    "maskformer",  # GroupNorm(32) widths
    "hiera",  # mask-unit unrolling needs an image divisible by 8 tokens
    "sam_hq",  # HQ decoder fuses ViT features at the ViT width
    "seggpt",  # prompt image + prompt mask + input
    "pp_ocrv5_server_det",  # default config lacks the neck's block tables
    "pp_ocrv6_small_rec",  # text-line crops, LCNetV4 block table
    "pp_ocrv6_small_det",  # detection LCNetV4 (the default pairs the recognizer's) + neck widths
    "videomt",  # pixel_values_videos
]


@pytest.mark.parametrize("model_type", REPRESENTATIVES)
def test_family_trains(model_type: str) -> None:
    assert_trains(run_default(model_type))


def test_lilt_boxes_and_width() -> None:
    run = run_default("lilt")
    assert_trains(run)
    box = run.inputs["bbox"]
    assert box.shape == (*run.inputs["input_ids"].shape, 4)
    assert int(box.min()) >= 0 and int(box.max()) <= 1000
    assert bool((box[..., 0] <= box[..., 2]).all() and (box[..., 1] <= box[..., 3]).all())
    assert run.model.config.hidden_size % 6 == 0  # six layout features of hidden // 6 each


def test_tvp_feeds_one_clip_with_grounding_labels() -> None:
    run = run_default("tvp")
    assert_trains(run)
    config = run.model.config
    assert run.inputs["pixel_values"].shape == (
        1, config.num_frames, 3, config.max_img_size, config.max_img_size,
    )  # fmt: skip
    if "labels" in run.inputs:
        duration, start, end = run.inputs["labels"]
        assert bool((start <= end).all() and (end <= duration).all())


def test_sam2_image_matches_backbone_and_widths_agree() -> None:
    run = run_default("sam2")
    assert_trains(run)
    config = run.model.config
    side = config.vision_config.backbone_config.image_size
    assert list(run.inputs["pixel_values"].shape[-2:]) == list(side)
    assert config.vision_config.fpn_hidden_size == config.mask_decoder_config.hidden_size
    assert config.prompt_encoder_config.image_size == side[0]


def test_uvdoc_head_reads_every_bridge() -> None:
    import torch

    run = run_default("uvdoc")
    assert_trains(run)
    with torch.no_grad():
        maps = run.model.backbone(run.inputs["pixel_values"]).feature_maps
    assert len(maps) == len(run.model.config.backbone_config.stage_configs) == 6


def test_prompt_depth_reaches_every_fusion_layer() -> None:
    run = run_default("prompt_depth_anything")
    assert_trains(run)
    assert run.inputs["prompt_depth"].shape[1] == 1
    layers = run.model.neck.fusion_stage.layers
    assert all(layer.prompt_depth_layer.convolution1.weight.grad is not None for layer in layers)


def test_vjepa2_trains_encoder_and_predictor_on_jepa_masks() -> None:
    import torch

    run = run_default("vjepa2")
    assert_trains(run)
    assert run.spec.architecture == "VJEPA2Model"  # a bare config: the pre-training class
    (context,), (target,) = run.inputs["context_mask"], run.inputs["target_mask"]
    tokens = torch.cat([context, target], dim=1).sort(dim=1).values
    assert torch.equal(tokens, torch.arange(tokens.shape[1]).expand_as(tokens))  # a partition
    assert run.model.predictor.proj.weight.grad is not None


def test_depth_pro_smallest_scale_covers_a_tile() -> None:
    run = run_default("depth_pro")
    assert_trains(run)
    config = run.model.config
    side = run.inputs["pixel_values"].shape[-1]
    assert side * min(config.scaled_images_ratios) >= config.patch_size
    assert config.patch_size == config.patch_model_config.image_size
