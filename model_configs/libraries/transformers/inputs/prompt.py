"""Pieces the layout modules share to lay out a prompt: plain text, the image markers some
families name, a run of placeholder tokens, positions reserved for resampled image features."""

from __future__ import annotations

from typing import Any

from model_configs.libraries.transformers.build import (
    _splice,
    _token_ids,
)
from model_configs.libraries.transformers.inputs import InputContext
from model_configs.tiny_inputs import BATCH


def plain_prompt(ctx: InputContext) -> dict[str, Any]:
    """A plain prompt of `ctx.seq` random tokens (special ids avoided), all attended."""
    import torch

    ids = _token_ids(ctx.gen, ctx.config, (BATCH, ctx.seq), ctx.avoid)
    out: dict[str, Any] = {"input_ids": ids}
    if "attention_mask" in ctx.params:
        out["attention_mask"] = torch.ones_like(ids)
    return out


# These builders splice image runs without the generic start / end markers unless they say so.
NO_MARKERS: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())


def reserve_image_positions(ctx: InputContext, n: int) -> None:
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


# Image markers as these families name them (image_start/end ids among them).
MARKERS = (
    ("vision_start_token_id", "boi_token_id", "image_start_token_id"),
    ("vision_end_token_id", "eoi_token_id", "image_end_token_id"),
)


def splice_run(ctx: InputContext, token_id: int, count: int) -> None:
    """`count` placeholder tokens after the first token of every prompt (mask widened)."""
    import torch

    ids = _splice(ctx.inputs["input_ids"], [token_id] * count)
    ctx.inputs["input_ids"] = ids
    if "attention_mask" in ctx.inputs:
        ctx.inputs["attention_mask"] = torch.ones_like(ids)


def randn(ctx: InputContext, *shape: int) -> Any:
    import torch

    return torch.randn(*shape, generator=ctx.gen)
