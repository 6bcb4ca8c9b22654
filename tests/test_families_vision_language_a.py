"""Vision-language families A..K: the default config shrinks, builds, takes real-shaped inputs
(every tower fed) and trains (see tests/family_support.py)."""

from __future__ import annotations

from functools import cache

import pytest

from model_configs.pass_rule import MIN_GRAD_SHARE
from tests.family_support import assert_trains, run_default

# One or two per cause fixed here; the rest of the group is measured by bench/shrink_coverage.py.
FAMILIES = [
    "align", "aria", "cohere_compass", "colmodernvbert", "colqwen2", "deepseek_ocr2",
    "deepseek_vl", "diffusion_gemma", "evolla", "florence2", "granite4_vision",
    "granite_docling", "idefics", "inkling_mm_model", "instructblipvideo", "kosmos-2",
    "kosmos-2.5",
]  # fmt: skip

_run = cache(run_default)  # the shape tests below reuse the trained runs


@pytest.mark.parametrize("model_type", FAMILIES)
def test_family_trains(model_type: str) -> None:
    assert_trains(_run(model_type))


def _image_tokens(run, config) -> int:  # type: ignore[no-untyped-def]
    return int((run.inputs["input_ids"] == config.image_token_id).sum())


def test_flattened_patch_rows_match_image_tokens() -> None:
    """Kimi-K2.5 (Conv2d patches) and Cosmos3-Edge (no temporal patch): one image token per
    merged 2x2 block of patch rows, and each row as wide as the patch embedding takes."""
    kimi = _run("kimi_k25")
    pixels = kimi.inputs["pixel_values"]
    patch = kimi.model.config.vision_config.patch_size
    assert tuple(pixels.shape[1:]) == (3, patch, patch)
    assert _image_tokens(kimi, kimi.model.config) == pixels.shape[0] // 4

    cosmos = _run("cosmos3_edge")
    rows = cosmos.inputs["pixel_values"]
    modules = dict(cosmos.model.named_modules())
    embed = next(m for n, m in modules.items() if n.endswith("visual.embeddings.patch_embedding"))
    assert rows.shape[-1] == embed.in_features  # no temporal_patch_size: one frame
    assert _image_tokens(cosmos, cosmos.model.config) == rows.shape[0] // 4


def test_fuyu_one_image_token_per_patch() -> None:
    run = _run("fuyu")
    assert _image_tokens(run, run.model.config) == run.inputs["pixel_values"].shape[:2].numel()


def test_text_only_default_gets_no_images() -> None:
    """Gemma 4's default config has no vision tower: no pixels, and the model still trains."""
    run = _run("gemma4")
    assert run.model.config.vision_config is None
    assert "pixel_values" not in run.inputs


def test_align_projection_matches_pooled_vision_width() -> None:
    """ALIGN compares the text projection with the EfficientNet's pooled last stage."""
    from transformers.models.align.modeling_align import round_filters

    config = _run("align").model.config
    vision = config.vision_config
    assert round_filters(vision, vision.out_channels[-1]) == config.projection_dim


def test_ernie_mrope_keeps_height_equal_width() -> None:
    section = _run("ernie4_5_vl_moe").spec.config["text_config"]["rope_parameters"]
    h, w, t = section["mrope_section"]
    assert h == w and h + w + t == 16 // 2


def test_granite4_vision_injects_each_group_at_its_own_layer() -> None:
    run = _run("granite4_vision")
    config = run.model.config
    targets = [llm for _, llm in config.deepstack_layer_map] + list(config.spatial_target_layers)
    assert len(set(targets)) == len(targets)
    assert max(targets) < config.text_config.num_hidden_layers


def test_chameleon_text_avoids_codebook_tokens() -> None:
    """Chameleon still fails the gradient share (its VQ tokenizer is argmax-quantised), but its
    prompt never holds the codebook tokens whose logits the model masks, so the loss is finite."""
    import torch

    run = _run("chameleon")
    codebook = torch.tensor(run.model.model.vocabulary_mapping.image_tokens)
    assert not torch.isin(run.inputs["input_ids"], codebook).any()
    assert torch.isfinite(run.loss)


def test_glm_image_source_tokens_match_grid() -> None:
    """GLM-Image: one source image per sample between <image_start> and <image_end>, one
    token per patch of its grid (merge 1), then the target's <image_start>; both grids listed."""
    run = _run("glm_image")
    config, ids = run.model.config, run.inputs["input_ids"]
    grids = run.inputs["image_grid_thw"].view(2, 2, 3)  # (batch, source + target, thw)
    assert run.inputs["images_per_sample"].tolist() == [2, 2]
    assert (ids[:, -1] == config.image_start_token_id).all()
    # Built as its checkpoints are (ForConditionalGeneration, LM loss): the tower is a tokenizer
    # behind an argmax, so it is a known failure, not a pass (see patch_rows.json).
    assert (
        run.spec.architecture == "GlmImageForConditionalGeneration"
        and run.grad_share < MIN_GRAD_SHARE
    )
    for row, grid in zip(ids, grids, strict=True):
        start = int((row == config.image_start_token_id).nonzero()[0])
        end = int((row == config.image_end_token_id).nonzero()[0])
        assert end - start - 1 == int(grid[0].prod())
