"""Vision-language families L..Z: the default config shrinks, builds, takes real-shaped inputs
(every tower fed) and trains (see tests/family_support.py)."""

from __future__ import annotations

import inspect

import pytest

from tests.family_support import assert_trains, run_default

# One per cause; minicpmv4_7, molmo2, pix2struct, muse_spark, lxmert and visual_bert train in
# the layout tests below.
FAMILIES = [
    "modernvbert", "muse_glimmer_assistant", "neomme", "paddleocr_vl", "pp_formulanet",
    "qwen4_exp", "shieldgemma2", "t5gemma2", "unlimited_ocr", "video_llama_3", "videoprism",
    "vipllava", "xclip", "video_llama_3_vision",
]  # fmt: skip


@pytest.mark.parametrize("model_type", FAMILIES)
def test_family_trains(model_type: str) -> None:
    assert_trains(run_default(model_type))


def _count(ids, token_id: int) -> int:  # type: ignore[no-untyped-def]
    return int((ids == token_id).sum())


def test_minicpm_v_packs_images_and_counts_merged_tokens() -> None:
    """MiniCPM-V: all images packed in one NaViT row, the ViT merger runs inside the 2-layer
    tower (insert_layer_id=0), and each 8x8 patch grid becomes 2x2 placeholders (16x mode)."""
    run = run_default("minicpmv4_7")
    assert_trains(run)
    config, inputs = run.model.config, run.inputs
    assert inputs["pixel_values"].shape[0] == 1
    assert config.vision_config.insert_layer_id == 0
    grids = inputs["target_sizes"]
    merged = int((grids[:, 0] // 4 * (grids[:, 1] // 4)).sum())
    assert _count(inputs["input_ids"], config.image_token_id) == merged
    assert inputs["mm_token_type_ids"].sum() == merged
    assert run.model.model.vision_tower.vit_merger.linear_1.weight.grad is not None


def test_molmo2_pooled_tokens_match_image_grids() -> None:
    run = run_default("molmo2")
    assert_trains(run)
    config, inputs = run.model.config, run.inputs
    grids = inputs["image_grids"]
    tokens = int((grids[:, 0] * grids[:, 1] + grids[:, 2] * grids[:, 3]).sum())
    assert inputs["image_token_pooling"].shape[0] == tokens
    assert _count(inputs["input_ids"], config.image_patch_id) == tokens
    # each image's tokens pool that image's patches: counted from its first patch where the
    # model adds the offsets from image_num_crops (transformers >= 5.25), else from the batch's
    crops, per_image = inputs["pixel_values"].shape[1], inputs["pixel_values"].shape[1:3].numel()
    model_offsets = "image_num_crops" in inspect.signature(run.model.get_image_features).parameters
    sizes = (grids[:, 0] * grids[:, 1] + grids[:, 2] * grids[:, 3]).tolist()
    for image, rows in enumerate(inputs["image_token_pooling"].split(sizes)):
        first = 0 if model_offsets else image * per_image
        assert first <= int(rows.min()) and int(rows.max()) < first + per_image
    assert inputs["image_num_crops"].tolist() == [crops] * len(sizes)


def test_pix2struct_patches_carry_one_based_row_and_column() -> None:
    run = run_default("pix2struct")
    assert_trains(run)
    patches, mask = run.inputs["flattened_patches"], run.inputs["attention_mask"]
    width = run.model.config.vision_config.patch_embed_hidden_size
    assert patches.shape[-1] == width + 2
    real = patches[mask.bool()]
    assert real[:, :2].min() >= 1  # 0 is the padding row/column
    assert patches[~mask.bool()].abs().sum() == 0


def test_muse_spark_hears_one_token_per_audio_window() -> None:
    run = run_default("muse_spark")
    assert_trains(run)
    config, inputs = run.model.config, run.inputs
    per_token = config.audio_config.samples_per_token
    assert inputs["input_values"].shape[-1] % per_token == 0
    tokens = inputs["input_values"].numel() // per_token
    assert _count(inputs["input_ids"], config.audio_token_id) == tokens
    assert "pixel_values" in inputs


def test_region_feature_models_get_detector_features_and_boxes() -> None:
    lxmert = run_default("lxmert")
    assert_trains(lxmert)
    boxes = lxmert.inputs["visual_pos"]
    assert lxmert.inputs["visual_feats"].shape[-1] == lxmert.model.config.visual_feat_dim
    assert (boxes[..., 2:] >= boxes[..., :2]).all() and boxes.min() >= 0 and boxes.max() <= 1
    visual_bert = run_default("visual_bert")
    assert_trains(visual_bert)
    text = visual_bert.inputs["input_ids"].shape[1]
    regions = visual_bert.inputs["visual_embeds"].shape[1]
    assert visual_bert.inputs["labels"].shape[1] == text + regions
    assert (visual_bert.inputs["labels"][:, text:] == -100).all()
