"""Input builders for images cut into patches by the processor: flattened patch rows or pixel
blocks with their grid (Qwen-VL style, Kimi, GLM-Image, Inkling 2, Gemma 4's positioned patches),
NaViT-packed rows (MiniCPM-V), crops with their pooling (Molmo2), Pix2Struct-style patches that
carry their row and column, and the vision towers built alone (see the package docstring)."""

from __future__ import annotations

from typing import Any

from model_configs.libraries.transformers.build import (
    _count_feature_tokens,
    _num_channels,
    _pixel_inputs,
    _splice,
    _token_ids,
    _vision_config,
    splice_images,
)
from model_configs.libraries.transformers.inputs import InputContext, family_inputs
from model_configs.libraries.transformers.inputs.prompt import (
    MARKERS,
    NO_MARKERS,
    plain_prompt,
    reserve_image_positions,
)
from model_configs.tiny_inputs import BATCH


@family_inputs("kimi_k25", replace=True)
def kimi_k25(ctx: InputContext) -> None:
    """Kimi-K2.5's MoonViT embeds patches with a Conv2d: one (3, patch, patch) crop per patch
    row beside `image_grid_thw`, not the flattened rows Qwen-VL takes."""
    ctx.inputs = plain_prompt(ctx)
    pixels = _pixel_inputs(ctx.config, ctx.params, ctx.gen, ctx.model)
    patch = int(getattr(ctx.config.vision_config, "patch_size", 14))
    rows = pixels["pixel_values"].shape[0]
    pixels["pixel_values"] = pixels["pixel_values"].view(rows, 3, patch, patch)
    splice_images(ctx, pixels, markers=NO_MARKERS)


def _gemma4_patches(ctx: InputContext, vision: Any, side: int) -> dict[str, Any]:
    """Gemma 4 vision input: `side` x `side` patches per image, flattened to 3*patch*patch
    values each, with their (x, y) positions (the image processor's `image_position_ids`)."""
    import torch

    patch = int(vision.patch_size)
    ys, xs = torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij")
    positions = torch.stack([xs.flatten(), ys.flatten()], dim=-1)
    return {
        "pixel_values": torch.rand(BATCH, side * side, 3 * patch * patch, generator=ctx.gen),
        "image_position_ids": positions.unsqueeze(0).repeat(BATCH, 1, 1),
    }


@family_inputs("diffusion_gemma", replace=True)
def diffusion_gemma(ctx: InputContext) -> None:
    """DiffusionGemma: a prompt with one image (boi, soft tokens, eoi) for the encoder, and a
    canvas of `canvas_length` tokens the diffusion decoder refines."""
    ctx.inputs = plain_prompt(ctx)
    vision = ctx.config.vision_config
    kernel = int(vision.pooling_kernel_size)
    pixels = _gemma4_patches(ctx, vision, side=2 * kernel)  # pools to a 2x2 soft-token grid
    config = ctx.config
    encoder = ctx.model.model.encoder  # the prompt encoder owns the vision tower
    markers = (("boi_token_id",), ("eoi_token_id",))
    splice_images(ctx, pixels, markers=markers, owner=encoder)
    canvas = int(config.canvas_length)
    ctx.inputs["decoder_input_ids"] = _token_ids(ctx.gen, config, (BATCH, canvas), ctx.avoid)


@family_inputs("fuyu", replace=True)
def fuyu(ctx: InputContext) -> None:
    """Fuyu has no vision tower: the processor cuts each image into patch_size x patch_size
    patches, flattened to (batch, patches, channels * patch * patch) rows that one linear layer
    embeds in place of the image tokens."""
    import torch

    config = ctx.config
    ctx.inputs = plain_prompt(ctx)
    patch, channels = int(config.patch_size), int(config.num_channels)
    side = int(config.image_size) // patch
    rows = torch.rand(BATCH, side * side, channels * patch * patch, generator=ctx.gen)
    splice_images(ctx, {"pixel_values": rows}, markers=NO_MARKERS)


def _inkling2_blocks(ctx: InputContext, vision: Any) -> dict[str, Any]:
    """Inkling 2 vision input: one (merge*patch)^2 pixel block per language-model image token,
    channels last, in [-1, 1]; `image_grid_thw` counts image tokens (2x2 per image here)."""
    import torch

    block = int(vision.patch_size) * int(vision.spatial_merge_size)
    side = 2
    shape = (BATCH * side * side, block, block, int(vision.num_channels))
    return {
        "pixel_values": torch.rand(*shape, generator=ctx.gen) * 2 - 1,
        "image_grid_thw": torch.tensor([[1, side, side]] * BATCH),
    }


@family_inputs("inkling2", "inkling2_loop", replace=True)
def inkling2(ctx: InputContext) -> None:
    """Inkling 2: a prompt with one image's blocks (see `_inkling2_blocks`)."""
    ctx.inputs = plain_prompt(ctx)
    splice_images(ctx, _inkling2_blocks(ctx, ctx.config.vision_config), markers=NO_MARKERS)


@family_inputs("kosmos-2.5", replace=True)
def kosmos2_5(ctx: InputContext) -> None:
    """Kosmos-2.5 reads Pix2Struct-style `flattened_patches`: each row is (row id, column
    id, patch pixels), ids from 1; latent_query_num positions after <s> take the resampled
    image features (image_embeds_position_mask)."""
    import torch

    config = ctx.config
    vision = config.vision_config
    ctx.inputs = plain_prompt(ctx)
    side = int(int(vision.max_num_patches) ** 0.5)
    rows, cols = torch.meshgrid(torch.arange(1, side + 1), torch.arange(1, side + 1), indexing="ij")
    ids_rc = torch.stack([rows.flatten(), cols.flatten()], dim=-1).float()
    pixels = torch.randn(BATCH, side * side, int(vision.patch_embed_hidden_size), generator=ctx.gen)
    patches = torch.cat([ids_rc.unsqueeze(0).repeat(BATCH, 1, 1), pixels], dim=-1)
    ctx.inputs["flattened_patches"] = patches
    reserve_image_positions(ctx, int(config.latent_query_num))


@family_inputs(
    "glm_image_vision", "cosmos3_edge_vision", "hy_v4_vl_vision", "kimi_k25_vision",
    "cohere_compass_vision", replace=True,
)  # fmt: skip
def grid_vision_towers_with_params(ctx: InputContext) -> None:
    """Qwen-VL-style vision towers built alone: flattened patch rows plus `grid_thw` (one
    image of 4x4 patches per sample), as their parent model hands them over. Kimi's MoonViT
    embeds (3, patch, patch) crops; Cohere Compass names the rows `hidden_states`."""
    pixels = _pixel_inputs(ctx.config, ctx.params | {"image_grid_thw"}, ctx.gen, ctx.model)
    rows = pixels["pixel_values"]
    if ctx.spec.model_type == "kimi_k25_vision":
        patch = int(ctx.config.patch_size)
        rows = rows.view(rows.shape[0], 3, patch, patch)
    main = "hidden_states" if "hidden_states" in ctx.params else "pixel_values"
    ctx.inputs = {main: rows, "grid_thw": pixels["image_grid_thw"]}


@family_inputs("gemma4_vision", replace=True)
def gemma4_vision(ctx: InputContext) -> None:
    """Gemma 4's vision tower built alone: patch rows with their (x, y) positions, a grid
    that pools (pooling_kernel_size^2 patches per soft token) to 2x2 soft tokens."""
    pixels = _gemma4_patches(ctx, ctx.config, side=2 * int(ctx.config.pooling_kernel_size))
    ctx.inputs = {
        "pixel_values": pixels["pixel_values"],
        "pixel_position_ids": pixels["image_position_ids"],
    }


@family_inputs("inkling2_vision", replace=True)
def inkling2_vision(ctx: InputContext) -> None:
    """Inkling 2's vision tower built alone: the pixel blocks and token grid of `inkling2`."""
    ctx.inputs = _inkling2_blocks(ctx, ctx.config)


@family_inputs("glm_image", replace=True)
def glm_image(ctx: InputContext) -> None:
    """GLM-Image edits images: each sample holds one source image (patch rows the vision
    encoder reads and the VQ-VAE turns into image tokens between <image_start> and
    <image_end>) and ends with the <image_start> of the target, whose grid comes last in
    `image_grid_thw` (`images_per_sample` counts both)."""
    import torch

    config = ctx.config
    ctx.inputs = plain_prompt(ctx)
    pixels = _pixel_inputs(config, ctx.params | {"image_grid_thw"}, ctx.gen, ctx.model)
    source = pixels["image_grid_thw"]
    splice_images(
        ctx,
        {"pixel_values": pixels["pixel_values"], "image_grid_thw": source},
        markers=(("image_start_token_id",), ("image_end_token_id",)),
    )
    ids = ctx.inputs["input_ids"]
    start = torch.full((BATCH, 1), int(config.image_start_token_id), dtype=ids.dtype)
    ctx.inputs["input_ids"] = torch.cat([ids, start], dim=1)
    ctx.inputs["attention_mask"] = torch.ones_like(ctx.inputs["input_ids"])
    grids = torch.stack([source, source], dim=1).reshape(-1, 3)  # source, then target
    ctx.inputs["image_grid_thw"] = grids
    ctx.inputs["images_per_sample"] = torch.full((BATCH,), 2, dtype=torch.long)


@family_inputs("pix2struct")
def pix2struct(ctx: InputContext) -> None:
    """Pix2Struct's processor cuts the image into variable-resolution patches: each row is
    (1-based row, 1-based column, flattened pixels), padding rows masked; the decoder
    learns the target text (labels, which the model shifts into decoder inputs)."""
    import torch

    vision = _vision_config(ctx.config)
    rows, cols = 3, 4
    width = int(vision.patch_embed_hidden_size)
    grid = torch.stack(
        torch.meshgrid(torch.arange(1, rows + 1), torch.arange(1, cols + 1), indexing="ij"), -1
    ).reshape(1, rows * cols, 2)
    pixels = torch.randn(BATCH, rows * cols, width, generator=ctx.gen)
    pad = 4  # the processor pads to max_patches with all-zero rows
    patches = torch.cat([grid.expand(BATCH, -1, -1).float(), pixels], dim=-1)
    patches = torch.cat([patches, torch.zeros(BATCH, pad, width + 2)], dim=1)
    mask = torch.cat([torch.ones(BATCH, rows * cols), torch.zeros(BATCH, pad)], dim=1)
    ctx.inputs["flattened_patches"] = patches
    ctx.inputs["attention_mask"] = mask
    ctx.inputs["labels"] = ctx.inputs["decoder_input_ids"].clone()


@family_inputs("minicpm_ocr", "minicpmv4_6", "minicpmv4_7", replace=True)
def minicpm_v(ctx: InputContext) -> None:
    """MiniCPM-V packs every image's patches NaViT-style into one row (1, channels, patch,
    patches * patch) with each image's patch grid in target_sizes; a prompt carries
    <image> + one placeholder per merged feature + </image> (16x mode: 4x4 patches per token).
    MiniCPM-V 4.7 also marks the image tokens in mm_token_type_ids for its canvas M-RoPE."""
    import torch

    config = ctx.config
    vision = _vision_config(config)
    patch = int(vision.patch_size)
    side = 8  # an 8x8 patch grid per image: divisible by the 2x2 window and the 2x2 merger
    channels = _num_channels(config)
    pixel_values = torch.randn(1, channels, patch, BATCH * side * side * patch, generator=ctx.gen)
    target_sizes = torch.tensor([[side, side]] * BATCH)
    pixels = {"pixel_values": pixel_values, "target_sizes": target_sizes}
    total = _count_feature_tokens(ctx.model, config, pixels)
    markers = {
        getattr(config, k, None)
        for k in ("slice_start_id", "slice_end_id", "newline_id", "image_start_id", "image_end_id")
    }
    avoid = ctx.avoid | {m for m in markers if isinstance(m, int)}
    ctx.inputs["input_ids"] = _token_ids(ctx.gen, config, (BATCH, ctx.seq), avoid)
    image_id = int(config.image_token_id)
    ctx.inputs["input_ids"] = _splice(
        ctx.inputs["input_ids"],
        [int(config.image_start_id)] + [image_id] * (total // BATCH) + [int(config.image_end_id)],
    )
    ids = ctx.inputs["input_ids"]
    ctx.inputs["attention_mask"] = torch.ones_like(ids)
    if "mm_token_type_ids" in ctx.params:
        ctx.inputs["mm_token_type_ids"] = torch.eq(ids, image_id).long()
    ctx.inputs.update(pixels)


@family_inputs("minicpm_ocr_vision", "minicpmv4_7_vision", replace=True)
def minicpm_v_vision(ctx: InputContext) -> None:
    """The MiniCPM-V vision tower alone: NaViT-packed patches of two images plus their grids."""
    import torch

    patch = int(ctx.config.patch_size)
    side = 8
    ctx.inputs["pixel_values"] = torch.randn(
        1, _num_channels(ctx.config), patch, BATCH * side * side * patch, generator=ctx.gen
    )
    ctx.inputs["target_sizes"] = torch.tensor([[side, side]] * BATCH)


@family_inputs("molmo2", replace=True)
def molmo2(ctx: InputContext) -> None:
    """Molmo2's processor cuts each image into a low-res crop and a high-res crop of
    flattened patches; image_token_pooling lists, per output token, the patches (2x2 here)
    the adapter pools, image_grids gives each image's (low h, low w, high h, high w) token grid,
    and the prompt wraps each crop's patch tokens in its start/end markers. Up to transformers
    5.24 the processor offsets each image's pooling indices by the patches of the images before
    it; from 5.25 the model does, from image_num_crops (its get_image_features takes it), and
    the indices of each image count from 0."""
    import inspect

    import torch

    config = ctx.config
    vision = _vision_config(config)
    patch = int(vision.patch_size)
    side = int(vision.image_size[0]) // patch  # patches per crop side
    crops, pool = 2, 2
    per_crop = side * side
    grid = side // pool  # tokens per crop side
    width = patch * patch * _num_channels(config)
    ctx.inputs["pixel_values"] = torch.randn(BATCH, crops, per_crop, width, generator=ctx.gen)
    features = getattr(ctx.model, "get_image_features", None)
    model_offsets = (
        features is not None and "image_num_crops" in inspect.signature(features).parameters
    )
    pooling = []
    for crop in range(BATCH * crops):
        first = (crop % crops if model_offsets else crop) * per_crop
        for r in range(grid):
            for c in range(grid):
                pooling.append(
                    [
                        first + (r * pool + i) * side + c * pool + j
                        for i in range(pool)
                        for j in range(pool)
                    ]
                )
    ctx.inputs["image_token_pooling"] = torch.tensor(pooling)
    ctx.inputs["image_grids"] = torch.tensor([[grid, grid, grid, grid]] * BATCH)
    if "image_num_crops" in ctx.params:  # what the processor gives beside them
        ctx.inputs["image_num_crops"] = torch.tensor([crops] * BATCH)
    patch_id = int(config.image_patch_id)
    run = [int(config.low_res_image_start_token_id)] + [patch_id] * grid * grid
    run += [int(config.image_end_token_id), int(config.image_start_token_id)]
    run += [patch_id] * grid * grid + [int(config.image_end_token_id)]
    ids = _splice(_token_ids(ctx.gen, config, (BATCH, ctx.seq), ctx.avoid), run)
    ctx.inputs["input_ids"] = ids
    ctx.inputs["attention_mask"] = torch.ones_like(ids)
    ctx.inputs["mm_token_type_ids"] = torch.eq(ids, patch_id).long()


@family_inputs("neomme", replace=True)
def neomme(ctx: InputContext) -> None:
    """NeoMME's processor flattens each image into patches (num_patches, 3 * patch_size**2) and
    puts one image placeholder per patch in the text."""
    import torch

    config = ctx.config
    per_sample = 4
    ids = _token_ids(ctx.gen, config, (BATCH, ctx.seq), ctx.avoid)
    ids = _splice(ids, [int(config.image_token_id)] * per_sample)
    ctx.inputs["input_ids"] = ids
    ctx.inputs["attention_mask"] = torch.ones_like(ids)
    width = int(config.patch_dim)
    ctx.inputs["pixel_values"] = torch.randn(BATCH * per_sample, width, generator=ctx.gen)


@family_inputs("nemotron_h_omni", replace=True)
def nemotron_h_omni(ctx: InputContext) -> None:
    """Nemotron-H Omni's processor flattens each image into patches (total_patches,
    channels * patch**2) with each image's patch grid in image_grid_hw; the projector
    pixel-shuffles 2x2 patches into one <image> token."""
    import torch

    config = ctx.config
    vision = _vision_config(config)
    patch = int(vision.patch_size)
    side = 4  # a 4x4 patch grid per image: 2x2 image tokens after the pixel shuffle
    width = _num_channels(config) * patch * patch
    pixels = {
        "pixel_values": torch.randn(BATCH * side * side, width, generator=ctx.gen),
        "image_grid_hw": torch.tensor([[side, side]] * BATCH),
    }
    total = _count_feature_tokens(ctx.model, config, pixels)
    ids = _token_ids(ctx.gen, config, (BATCH, ctx.seq), ctx.avoid)
    ctx.inputs["input_ids"] = _splice(ids, [int(config.image_token_id)] * (total // BATCH))
    ctx.inputs["attention_mask"] = torch.ones_like(ctx.inputs["input_ids"])
    ctx.inputs.update(pixels)


@family_inputs("paddleocr_vl", replace=True)
def paddleocr_vl(ctx: InputContext) -> None:
    """PaddleOCR-VL's processor keeps each patch as a (channels, patch, patch) square: pixel
    values (patches, channels, patch, patch) plus each image's (t, h, w) grid."""
    import torch

    vision = _vision_config(ctx.config)
    patch = int(vision.patch_size)
    side = 2 * int(vision.spatial_merge_size)
    channels = _num_channels(ctx.config)
    pixels = {
        "pixel_values": torch.randn(BATCH * side * side, channels, patch, patch, generator=ctx.gen),
        "image_grid_thw": torch.tensor([[1, side, side]] * BATCH),
    }
    splice_images(ctx, pixels, markers=MARKERS)


@family_inputs("video_llama_3", replace=True)
def video_llama_3(ctx: InputContext) -> None:
    """VideoLLaMA 3 images: flattened patches with each image's (t, h, w) grid and its merge
    size (the image processor's is 1: every patch becomes a token)."""
    import torch

    pixels = _pixel_inputs(ctx.config, ctx.params, ctx.gen, ctx.model)
    pixels["image_merge_sizes"] = torch.ones(BATCH, dtype=torch.long)
    splice_images(ctx, pixels, markers=MARKERS)


@family_inputs(
    "muse_glimmer_vision", "muse_spark_vision", "qwen4_exp_vision", "video_llama_3_vision",
    replace=True,
)  # fmt: skip
def grid_vision_towers_alone(ctx: InputContext) -> None:
    """A Qwen-VL-style vision tower built alone: flattened patch rows plus each image's (t, h, w)
    grid under the tower's own argument names (and VideoLLaMA 3's per-image merge size)."""
    import torch

    pixels = _pixel_inputs(ctx.config, {"image_grid_thw"}, ctx.gen)
    main = "hidden_states" if "hidden_states" in ctx.params else "pixel_values"
    ctx.inputs[main] = pixels["pixel_values"]
    ctx.inputs["grid_thw"] = pixels["image_grid_thw"]
    if "merge_sizes" in ctx.params:
        ctx.inputs["merge_sizes"] = torch.ones(BATCH, dtype=torch.long)
