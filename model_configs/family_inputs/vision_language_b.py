"""Input builders for vision-language models (L..Z) (see the package docstring)."""

from __future__ import annotations

from typing import Any

from model_configs.family_inputs import InputContext, family_inputs
from model_configs.tiny_inputs import BATCH
from model_configs.transformers_models import (
    _count_feature_tokens,
    _image_size,
    _num_channels,
    _pixel_inputs,
    _splice,
    _token_ids,
    _vision_config,
    splice_images,
)

# Image markers as these families name them (image_start/end ids among them).
MARKERS = (
    ("vision_start_token_id", "boi_token_id", "image_start_token_id"),
    ("vision_end_token_id", "eoi_token_id", "image_end_token_id"),
)


def _splice_run(ctx: InputContext, token_id: int, count: int) -> None:
    """`count` placeholder tokens after the first token of every prompt (mask widened)."""
    import torch

    ids = _splice(ctx.inputs["input_ids"], [token_id] * count)
    ctx.inputs["input_ids"] = ids
    if "attention_mask" in ctx.inputs:
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
    _splice_run(ctx, int(ctx.config.video_token_id), total // BATCH)
    ctx.inputs.update(pixels)


def _region_boxes(gen: Any, regions: int) -> Any:
    """Normalised (x1, y1, x2, y2) boxes of `regions` detected objects per image."""
    import torch

    # (batch, regions, corner, xy) sorted over the corners: the top-left corner comes first
    corners = torch.rand(BATCH, regions, 2, 2, generator=gen).sort(dim=2).values
    return corners.reshape(BATCH, regions, 4)


@family_inputs("visual_bert")
def visual_bert(ctx: InputContext) -> None:
    """VisualBERT pre-training: detector region features beside the text, masked-LM labels over
    the text (regions are not predicted) and the sentence-image match label."""
    import torch

    regions = 8
    dim = int(ctx.config.visual_embedding_dim)
    ctx.inputs["visual_embeds"] = torch.randn(BATCH, regions, dim, generator=ctx.gen)
    ctx.inputs["visual_attention_mask"] = torch.ones(BATCH, regions, dtype=torch.long)
    ctx.inputs["visual_token_type_ids"] = torch.ones(BATCH, regions, dtype=torch.long)
    if "sentence_image_labels" in ctx.params:
        text = ctx.inputs["input_ids"]
        ignore = torch.full((BATCH, regions), -100, dtype=torch.long)
        ctx.inputs["labels"] = torch.cat([text.clone(), ignore], dim=1)
        ctx.inputs["sentence_image_labels"] = torch.randint(0, 2, (BATCH,), generator=ctx.gen)


@family_inputs("lxmert")
def lxmert(ctx: InputContext) -> None:
    """LXMERT reads Faster R-CNN region features and their boxes beside the question; the QA
    head trains on an answer label."""
    import torch

    regions = 8
    dim = int(ctx.config.visual_feat_dim)
    ctx.inputs["visual_feats"] = torch.randn(BATCH, regions, dim, generator=ctx.gen)
    ctx.inputs["visual_pos"] = _region_boxes(ctx.gen, regions)
    ctx.inputs["visual_attention_mask"] = torch.ones(BATCH, regions, dtype=torch.long)
    answers = int(getattr(ctx.config, "num_qa_labels", 0) or 0)
    if answers and "labels" in ctx.params:
        ctx.inputs["labels"] = torch.randint(0, answers, (BATCH,), generator=ctx.gen)


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


@family_inputs("udop")
def udop(ctx: InputContext) -> None:
    """UDOP reads OCR words with their normalised layout boxes beside the page image; the
    decoder learns the target text."""
    seq = ctx.inputs["input_ids"].shape[1]
    ctx.inputs["bbox"] = _region_boxes(ctx.gen, seq)
    ctx.inputs["labels"] = ctx.inputs["decoder_input_ids"].clone()


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


@family_inputs("muse_spark")
def muse_spark(ctx: InputContext) -> None:
    """Muse Spark also hears: raw mono waveforms padded to a multiple of the audio tower's
    samples_per_token (one token per window), one <audio> placeholder per token."""
    import torch

    config = ctx.config
    per_token = int(config.audio_config.samples_per_token)
    tokens = 4
    audio = {
        "input_values": torch.randn(BATCH, tokens * per_token, generator=ctx.gen),
        "input_values_mask": torch.ones(BATCH, tokens * per_token, dtype=torch.long),
    }
    total = _count_feature_tokens(ctx.model, config, audio, getter="get_audio_features")
    _splice_run(ctx, int(config.audio_token_id), total // BATCH)
    ctx.inputs.update({k: v for k, v in audio.items() if k in ctx.params})


@family_inputs("muse_glimmer_assistant", replace=True)
def muse_glimmer_assistant(ctx: InputContext) -> None:
    """The DFlash draft model denoises one block: noise_embeds are the target model's embeddings
    of the anchor token plus block_size - 1 mask tokens, and context_hidden_states the target's
    hidden states at target_layer_ids (concatenated) for the tokens accepted so far."""
    import torch

    config = ctx.config
    width = int(config.hidden_size)
    block = int(config.block_size)
    context = 8
    layers = len(config.target_layer_ids)
    ctx.inputs["noise_embeds"] = torch.randn(BATCH, block, width, generator=ctx.gen)
    ctx.inputs["context_hidden_states"] = torch.randn(
        BATCH, context, width * layers, generator=ctx.gen
    )
    # keys span the context and the block, so the mask does too (the docstring's layout)
    ctx.inputs["attention_mask"] = torch.ones(BATCH, context + block, dtype=torch.long)


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


@family_inputs("phi4_multimodal", replace=True)
def phi4_multimodal(ctx: InputContext) -> None:
    """Phi-4-multimodal's processor sends each image as a global crop plus its HD sub-crops
    (one here: the image is one crop wide) with patch masks, and a speech clip as 80-bin log-mel
    frames; the prompt holds one <image> token per merged feature (sub-crop rows with a newline
    column, a separator, the global rows) and one <audio> token per 8 mel frames."""
    import torch

    config = ctx.config
    vision, audio = config.vision_config, config.audio_config
    size = int(vision.crop_size)
    patches = size // int(vision.patch_size)
    side = (patches + 1) // 2  # 2x2 average pooling (padded when odd)
    crops = 2  # the global view and one sub-crop
    image_tokens = 2 * side * (side + 1) + 1
    frames, rate = 64, 8
    audio_tokens = -(-frames // rate)
    ctx.inputs["image_pixel_values"] = torch.randn(
        BATCH, crops, _num_channels(config), size, size, generator=ctx.gen
    )
    ctx.inputs["image_sizes"] = torch.tensor([[size, size]] * BATCH)
    ctx.inputs["image_attention_mask"] = torch.ones(BATCH, crops, patches, patches)
    ctx.inputs["audio_input_features"] = torch.randn(
        BATCH, frames, int(audio.input_size), generator=ctx.gen
    )
    ctx.inputs["audio_embed_sizes"] = torch.tensor([audio_tokens] * BATCH)
    ctx.inputs["audio_attention_mask"] = torch.ones(BATCH, frames, dtype=torch.bool)
    run = [int(vision.image_token_id)] * image_tokens + [int(audio.audio_token_id)] * audio_tokens
    ids = _splice(_token_ids(ctx.gen, config, (BATCH, ctx.seq), ctx.avoid), run)
    ctx.inputs["input_ids"] = ids
    ctx.inputs["attention_mask"] = torch.ones_like(ids)


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


@family_inputs("video_llama_3", replace=True)
def video_llama_3(ctx: InputContext) -> None:
    """VideoLLaMA 3 images: flattened patches with each image's (t, h, w) grid and its merge
    size (the image processor's is 1: every patch becomes a token)."""
    import torch

    pixels = _pixel_inputs(ctx.config, ctx.params, ctx.gen, ctx.model)
    pixels["image_merge_sizes"] = torch.ones(BATCH, dtype=torch.long)
    splice_images(ctx, pixels, markers=MARKERS)


@family_inputs("pp_formulanet")
def pp_formulanet(ctx: InputContext) -> None:
    """PP-FormulaNet reads only the formula image on the encoder side; the decoder learns the
    LaTeX tokens (labels aligned with the right-shifted decoder inputs)."""
    ctx.inputs.pop("input_ids", None)
    ctx.inputs.pop("attention_mask", None)
    ctx.inputs["labels"] = ctx.inputs["decoder_input_ids"].clone()


@family_inputs(
    "muse_glimmer_vision", "muse_spark_vision", "qwen4_exp_vision", "video_llama_3_vision",
    replace=True,
)  # fmt: skip
def grid_vision_tower(ctx: InputContext) -> None:
    """A Qwen-VL-style vision tower built alone: flattened patch rows plus each image's (t, h, w)
    grid under the tower's own argument names (and VideoLLaMA 3's per-image merge size)."""
    import torch

    pixels = _pixel_inputs(ctx.config, {"image_grid_thw"}, ctx.gen)
    main = "hidden_states" if "hidden_states" in ctx.params else "pixel_values"
    ctx.inputs[main] = pixels["pixel_values"]
    ctx.inputs["grid_thw"] = pixels["image_grid_thw"]
    if "merge_sizes" in ctx.params:
        ctx.inputs["merge_sizes"] = torch.ones(BATCH, dtype=torch.long)
