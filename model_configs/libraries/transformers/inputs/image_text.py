"""Input builders for whole images beside text, at the vision tower's own size: images as runs of
placeholder tokens (two towers, tiles, pages, deepstack layers), positions reserved for
resampled features (Kosmos-2), cross-attention masks (IDEFICS), image encoders with a text
decoder's target (Florence-2, PP-FormulaNet, T5Gemma 2) (see the package docstring)."""

from __future__ import annotations

from model_configs.libraries.transformers.build import (
    _count_feature_tokens,
    _pixel_inputs,
    _splice,
    _token_ids,
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


@family_inputs("deepseek_vl_hybrid", replace=True)
def deepseek_vl_hybrid(ctx: InputContext) -> None:
    """DeepSeek-VL hybrid: every image goes to the SigLIP tower at its size and, resized, to
    the SAM tower at the high-resolution size (`high_res_pixel_values`)."""
    import torch

    ctx.inputs = plain_prompt(ctx)
    pixels = _pixel_inputs(ctx.config, ctx.params, ctx.gen, ctx.model)
    high = ctx.config.high_res_vision_config
    side = int(high.image_size)
    channels = int(getattr(high, "num_channels", 3) or 3)
    pixels["high_res_pixel_values"] = torch.randn(BATCH, channels, side, side, generator=ctx.gen)
    splice_images(ctx, pixels, markers=NO_MARKERS)


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


@family_inputs("florence2")
def florence2(ctx: InputContext) -> None:
    """Florence-2 is an encoder-decoder: the image and the task prompt go to the encoder, and
    the target text is the labels (the model shifts them into decoder inputs itself)."""
    if ctx.purpose == "train" and "decoder_input_ids" in ctx.inputs:
        ctx.inputs["labels"] = ctx.inputs.pop("decoder_input_ids")


@family_inputs("granite4_vision", replace=True)
def granite4_vision(ctx: InputContext) -> None:
    """Granite 4 Vision injects projected vision features at several decoder layers
    (deepstack): the prompt holds one image token per packed feature row, read off the
    first injected group (every group packs the same grid)."""
    import torch

    config = ctx.config
    ctx.inputs = plain_prompt(ctx)
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

    ctx.inputs = plain_prompt(ctx)
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


@family_inputs("kosmos-2", replace=True)
def kosmos2(ctx: InputContext) -> None:
    """Kosmos-2: the processor reserves latent_query_num positions after <s> for the
    resampled image features and marks them in image_embeds_position_mask."""
    import torch

    config = ctx.config
    ctx.inputs = plain_prompt(ctx)
    vision = config.vision_config
    side = int(vision.image_size)
    ctx.inputs["pixel_values"] = torch.randn(BATCH, 3, side, side, generator=ctx.gen)
    reserve_image_positions(ctx, int(config.latent_query_num))


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


@family_inputs("shieldgemma2")
def shieldgemma2(ctx: InputContext) -> None:
    """ShieldGemma 2 scores an image against a policy prompt and returns the yes/no logits of
    the last position, with no loss; its `labels` argument is the underlying LM's per-token
    labels (which it computes and drops), so a class label would be wrong and none is given."""
    ctx.inputs["labels"] = None


@family_inputs("t5gemma2", replace=True)
def t5gemma2(ctx: InputContext) -> None:
    """T5Gemma 2: the encoder reads the prompt with its image (Gemma 3 layout: <boi>, one image
    token per pooled feature, <eoi>, images at the encoder's vision size); the decoder learns
    the target text (labels, shifted into decoder inputs by the model)."""
    import torch

    config = ctx.config
    encoder = config.encoder
    vision = encoder.vision_config
    size = int(vision.image_size)
    pixels = {
        "pixel_values": torch.randn(BATCH, int(vision.num_channels), size, size, generator=ctx.gen)
    }
    total = _count_feature_tokens(ctx.model, encoder, pixels)
    run = [int(encoder.boi_token_index)] + [int(encoder.image_token_index)] * (total // BATCH)
    ids = _splice(
        _token_ids(ctx.gen, config, (BATCH, ctx.seq), ctx.avoid),
        run + [int(encoder.eoi_token_index)],
    )
    ctx.inputs["input_ids"] = ids
    ctx.inputs["attention_mask"] = torch.ones_like(ids)
    ctx.inputs.update(pixels)
    dec_seq = int(ctx.rules.get("decoder_seq_len", 8))
    ctx.inputs["labels"] = _token_ids(ctx.gen, config.decoder, (BATCH, dec_seq), ctx.avoid)


@family_inputs("unlimited_ocr", replace=True)
def unlimited_ocr(ctx: InputContext) -> None:
    """Unlimited-OCR (DeepSeek-OCR layout): the global view enters the SAM encoder at its own
    image size (its features become the CLIP encoder's patches); the prompt holds one image
    token per projected feature, row newlines and the view separator included."""
    import torch

    sam = ctx.config.vision_config.sam_config
    size = int(sam.image_size)
    pixels = {
        "pixel_values": torch.randn(BATCH, int(sam.num_channels), size, size, generator=ctx.gen)
    }
    splice_images(ctx, pixels, markers=MARKERS)


@family_inputs("pp_formulanet")
def pp_formulanet(ctx: InputContext) -> None:
    """PP-FormulaNet reads only the formula image on the encoder side; the decoder learns the
    LaTeX tokens (labels aligned with the right-shifted decoder inputs)."""
    ctx.inputs.pop("input_ids", None)
    ctx.inputs.pop("attention_mask", None)
    ctx.inputs["labels"] = ctx.inputs["decoder_input_ids"].clone()
