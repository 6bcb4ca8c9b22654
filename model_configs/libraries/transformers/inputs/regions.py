"""Input builders for text beside boxes: one layout box per token (BROS, LiLT, UDOP) and detector
region features with their boxes (VisualBERT, LXMERT) (see the package docstring)."""

from __future__ import annotations

from typing import Any

from model_configs.libraries.transformers.inputs import InputContext, family_inputs
from model_configs.tiny_inputs import BATCH


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


@family_inputs("udop")
def udop(ctx: InputContext) -> None:
    """UDOP reads OCR words with their normalised layout boxes beside the page image; the
    decoder learns the target text."""
    seq = ctx.inputs["input_ids"].shape[1]
    ctx.inputs["bbox"] = _region_boxes(ctx.gen, seq)
    ctx.inputs["labels"] = ctx.inputs["decoder_input_ids"].clone()


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
