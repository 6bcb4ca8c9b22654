"""Input builders for vision-language models (A..K) (see the package docstring)."""

from __future__ import annotations

from typing import Any

from model_configs.libraries.transformers.build import (
    _pixel_inputs,
    _splice,
    _token_ids,
    splice_images,
)
from model_configs.libraries.transformers.inputs import InputContext, family_inputs
from model_configs.tiny_inputs import BATCH


def _text(ctx: InputContext) -> dict[str, Any]:
    """A plain prompt of `ctx.seq` random tokens (special ids avoided), all attended."""
    import torch

    ids = _token_ids(ctx.gen, ctx.config, (BATCH, ctx.seq), ctx.avoid)
    out: dict[str, Any] = {"input_ids": ids}
    if "attention_mask" in ctx.params:
        out["attention_mask"] = torch.ones_like(ids)
    return out


# These builders splice image runs without the generic start / end markers unless they say so.
NO_MARKERS: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())


@family_inputs("kimi_k25", replace=True)
def kimi_k25(ctx: InputContext) -> None:
    """Kimi-K2.5's MoonViT embeds patches with a Conv2d: one (3, patch, patch) crop per patch
    row beside `image_grid_thw`, not the flattened rows Qwen-VL takes."""
    ctx.inputs = _text(ctx)
    pixels = _pixel_inputs(ctx.config, ctx.params, ctx.gen, ctx.model)
    patch = int(getattr(ctx.config.vision_config, "patch_size", 14))
    rows = pixels["pixel_values"].shape[0]
    pixels["pixel_values"] = pixels["pixel_values"].view(rows, 3, patch, patch)
    splice_images(ctx, pixels, markers=NO_MARKERS)


@family_inputs("deepseek_vl_hybrid", replace=True)
def deepseek_vl_hybrid(ctx: InputContext) -> None:
    """DeepSeek-VL hybrid: every image goes to the SigLIP tower at its size and, resized, to
    the SAM tower at the high-resolution size (`high_res_pixel_values`)."""
    import torch

    ctx.inputs = _text(ctx)
    pixels = _pixel_inputs(ctx.config, ctx.params, ctx.gen, ctx.model)
    high = ctx.config.high_res_vision_config
    side = int(high.image_size)
    channels = int(getattr(high, "num_channels", 3) or 3)
    pixels["high_res_pixel_values"] = torch.randn(BATCH, channels, side, side, generator=ctx.gen)
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
    ctx.inputs = _text(ctx)
    vision = ctx.config.vision_config
    kernel = int(vision.pooling_kernel_size)
    pixels = _gemma4_patches(ctx, vision, side=2 * kernel)  # pools to a 2x2 soft-token grid
    config = ctx.config
    encoder = ctx.model.model.encoder  # the prompt encoder owns the vision tower
    markers = (("boi_token_id",), ("eoi_token_id",))
    splice_images(ctx, pixels, markers=markers, owner=encoder)
    canvas = int(config.canvas_length)
    ctx.inputs["decoder_input_ids"] = _token_ids(ctx.gen, config, (BATCH, canvas), ctx.avoid)


@family_inputs("colpali", "colqwen2", "colmodernvbert")
def late_interaction_retrievers(ctx: InputContext) -> None:
    """ColPali-style retrievers embed document pages: each sample is a page image (its image
    tokens, as many as the wrapped VLM's vision features fill) plus the prompt text. The
    image token and the pixel layout belong to the wrapped VLM (`vlm_config`)."""
    import inspect

    vlm, vlm_config = ctx.model.vlm, ctx.config.vlm_config
    params = set(inspect.signature(vlm.forward).parameters)
    pixels = _pixel_inputs(vlm_config, params, ctx.gen, vlm)
    pixels = {k: v for k, v in pixels.items() if k in params}
    splice_images(ctx, pixels, markers=NO_MARKERS, owner=vlm, config=vlm_config)
    grid = ctx.inputs.get("image_grid_thw")
    if grid is not None:  # ColQwen2's processor pads each page's patch rows into one row per page
        rows = ctx.inputs["pixel_values"]
        ctx.inputs["pixel_values"] = rows.view(BATCH, rows.shape[0] // BATCH, rows.shape[-1])


@family_inputs("evolla")
def evolla(ctx: InputContext) -> None:
    """Evolla answers questions about a protein: beside the text it takes the SaProt tokens of
    the protein (amino acid + Foldseek structure letters), framed by <cls> ... <eos>."""
    import torch

    protein = ctx.config.protein_encoder_config
    length = 16
    first = (
        int(getattr(protein, "mask_token_id", 4) or 4) + 1
    )  # past <cls> <pad> <eos> <unk> <mask>
    body = torch.randint(first, int(protein.vocab_size), (BATCH, length - 2), generator=ctx.gen)
    cls = torch.zeros(BATCH, 1, dtype=torch.long)
    eos = torch.full((BATCH, 1), 2, dtype=torch.long)
    ctx.inputs["protein_input_ids"] = torch.cat([cls, body, eos], dim=1)
    ctx.inputs["protein_attention_mask"] = torch.ones(BATCH, length, dtype=torch.long)


@family_inputs("florence2")
def florence2(ctx: InputContext) -> None:
    """Florence-2 is an encoder-decoder: the image and the task prompt go to the encoder, and
    the target text is the labels (the model shifts them into decoder inputs itself)."""
    if ctx.purpose == "train" and "decoder_input_ids" in ctx.inputs:
        ctx.inputs["labels"] = ctx.inputs.pop("decoder_input_ids")


@family_inputs("fuyu", replace=True)
def fuyu(ctx: InputContext) -> None:
    """Fuyu has no vision tower: the processor cuts each image into patch_size x patch_size
    patches, flattened to (batch, patches, channels * patch * patch) rows that one linear layer
    embeds in place of the image tokens."""
    import torch

    config = ctx.config
    ctx.inputs = _text(ctx)
    patch, channels = int(config.patch_size), int(config.num_channels)
    side = int(config.image_size) // patch
    rows = torch.rand(BATCH, side * side, channels * patch * patch, generator=ctx.gen)
    splice_images(ctx, {"pixel_values": rows}, markers=NO_MARKERS)


@family_inputs("granite4_vision", replace=True)
def granite4_vision(ctx: InputContext) -> None:
    """Granite 4 Vision injects projected vision features at several decoder layers
    (deepstack): the prompt holds one image token per packed feature row, read off the
    first injected group (every group packs the same grid)."""
    import torch

    config = ctx.config
    ctx.inputs = _text(ctx)
    pixels = _pixel_inputs(config, ctx.params, ctx.gen, ctx.model)
    with torch.no_grad():
        out = ctx.model.get_image_features(
            **pixels, vision_feature_select_strategy=config.vision_feature_select_strategy
        )
    per_image = [int(t.shape[0]) for t in out.deepstack_features[0][1]]
    image_id = int(config.image_token_id)
    ids = _splice(ctx.inputs["input_ids"], [image_id] * per_image[0])
    ctx.inputs["input_ids"] = ids
    ctx.inputs["attention_mask"] = torch.ones_like(ids)
    ctx.inputs.update(pixels)


@family_inputs("granite_docling", replace=True)
def granite_docling(ctx: InputContext) -> None:
    """Granite-Docling takes pages as tiles, (batch, tiles, channels, size, size), with a
    per-tile mask of the real tiles (not Idefics3's per-pixel mask); one tile per sample."""
    import torch

    ctx.inputs = _text(ctx)
    vision = ctx.config.vision_config
    side, channels = int(vision.image_size), int(getattr(vision, "num_channels", 3) or 3)
    pixels = {
        "pixel_values": torch.randn(BATCH, 1, channels, side, side, generator=ctx.gen),
        "pixel_attention_mask": torch.ones(BATCH, 1, dtype=torch.bool),
    }
    splice_images(ctx, pixels, markers=NO_MARKERS)


@family_inputs("idefics")
def idefics(ctx: InputContext) -> None:
    """IDEFICS (v1) cross-attends to images: pixels as (batch, images, channels, size, size)
    and an image_attention_mask (batch, text, images) saying which text tokens see which
    image; one image per sample, seen by every token after the first."""
    import torch

    vision = ctx.config.vision_config
    side = int(vision.image_size)
    channels = int(getattr(vision, "num_channels", 3) or 3)
    ctx.inputs["pixel_values"] = torch.randn(BATCH, 1, channels, side, side, generator=ctx.gen)
    mask = torch.ones(BATCH, ctx.inputs["input_ids"].shape[1], 1, dtype=torch.long)
    mask[:, :1] = 0
    ctx.inputs["image_attention_mask"] = mask


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
    ctx.inputs = _text(ctx)
    splice_images(ctx, _inkling2_blocks(ctx, ctx.config.vision_config), markers=NO_MARKERS)


@family_inputs("inkling_mm_model", replace=True)
def inkling(ctx: InputContext) -> None:
    """Inkling (v1) sees and hears: each image token is one (temporal, patch, patch, channels)
    pixel block, and each audio token one frame of discretised dMel bins (`audio_input_ids`,
    values < mel_vocab_size); both runs follow their <bos> marker."""
    import torch

    config = ctx.config
    ctx.inputs = _text(ctx)
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


@family_inputs("instructblipvideo", replace=True)
def instructblipvideo(ctx: InputContext) -> None:
    """InstructBLIP-Video: a clip of frames (batch, frames, channels, size, size); the
    Q-Former reads the instruction too, and each frame fills num_query_tokens video tokens."""
    import torch

    config = ctx.config
    ctx.inputs = _text(ctx)
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


def _reserve_image_positions(ctx: InputContext, n: int) -> None:
    """Kosmos-2 layout: `n` positions after <s> that the resampled image features overwrite,
    marked in `image_embeds_position_mask`."""
    import torch

    ids = ctx.inputs["input_ids"]
    placeholder = torch.zeros(BATCH, n, dtype=torch.long)  # overwritten by the image features
    ids = torch.cat([ids[:, :1], placeholder, ids[:, 1:]], dim=1)
    mask = torch.zeros_like(ids)
    mask[:, 1 : 1 + n] = 1
    ctx.inputs["input_ids"] = ids
    ctx.inputs["attention_mask"] = torch.ones_like(ids)
    ctx.inputs["image_embeds_position_mask"] = mask


@family_inputs("kosmos-2", replace=True)
def kosmos2(ctx: InputContext) -> None:
    """Kosmos-2: the processor reserves latent_query_num positions after <s> for the
    resampled image features and marks them in image_embeds_position_mask."""
    import torch

    config = ctx.config
    ctx.inputs = _text(ctx)
    vision = config.vision_config
    side = int(vision.image_size)
    ctx.inputs["pixel_values"] = torch.randn(BATCH, 3, side, side, generator=ctx.gen)
    _reserve_image_positions(ctx, int(config.latent_query_num))


@family_inputs("kosmos-2.5", replace=True)
def kosmos2_5(ctx: InputContext) -> None:
    """Kosmos-2.5 reads Pix2Struct-style `flattened_patches`: each row is (row id, column
    id, patch pixels), ids from 1; latent_query_num positions after <s> take the resampled
    image features (image_embeds_position_mask)."""
    import torch

    config = ctx.config
    vision = config.vision_config
    ctx.inputs = _text(ctx)
    side = int(int(vision.max_num_patches) ** 0.5)
    rows, cols = torch.meshgrid(torch.arange(1, side + 1), torch.arange(1, side + 1), indexing="ij")
    ids_rc = torch.stack([rows.flatten(), cols.flatten()], dim=-1).float()
    pixels = torch.randn(BATCH, side * side, int(vision.patch_embed_hidden_size), generator=ctx.gen)
    patches = torch.cat([ids_rc.unsqueeze(0).repeat(BATCH, 1, 1), pixels], dim=-1)
    ctx.inputs["flattened_patches"] = patches
    _reserve_image_positions(ctx, int(config.latent_query_num))


@family_inputs("chameleon")
def chameleon(ctx: InputContext) -> None:
    """Chameleon masks the logits of its image-codebook tokens (text never predicts them), so
    the random prompt text must not contain them: they are redrawn from the text vocabulary."""
    import torch

    codebook = set(ctx.model.model.vocabulary_mapping.image_tokens)
    ids = ctx.inputs["input_ids"]
    redraw = _token_ids(ctx.gen, ctx.config, tuple(ids.shape), ctx.avoid | codebook)
    in_codebook = torch.isin(ids, torch.tensor(sorted(codebook), dtype=ids.dtype))
    ctx.inputs["input_ids"] = torch.where(in_codebook, redraw, ids)


@family_inputs(
    "glm_image_vision", "cosmos3_edge_vision", "hy_v4_vl_vision", "kimi_k25_vision",
    "cohere_compass_vision", replace=True,
)  # fmt: skip
def grid_vision_towers(ctx: InputContext) -> None:
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
    ctx.inputs = _text(ctx)
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
