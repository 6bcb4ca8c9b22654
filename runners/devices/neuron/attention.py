"""Host kernels for TorchNeuron's fused attention op, `_scaled_dot_product_fused_attention_
overrideable` (and its backward): what the emulated device runs when SDPA takes that path.

PyTorch has no CPU kernel for the op (it exists for PrivateUse1 backends to implement). These
compute it in float32 (float16/bfloat16 inputs are widened and the results cast back), with a
log-sum-exp the backward uses, query heads that are a multiple of the key/value heads (grouped
attention), an additive or boolean bias, causal masking aligned top-left (as PyTorch's math
path), and dropout from a seed kept in the op's `philox_seed` output so the backward redraws
the same mask.
"""

from __future__ import annotations

import math
from typing import Any

import torch


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _expand_heads(t: torch.Tensor, heads: int) -> torch.Tensor:
    groups = heads // t.shape[1]
    return t if groups == 1 else t.repeat_interleave(groups, dim=1)


def _reduce_heads(grad: torch.Tensor, heads: int) -> torch.Tensor:
    b, h, s, e = grad.shape
    groups = h // heads
    return grad if groups == 1 else grad.view(b, heads, groups, s, e).sum(2)


def _scores(q, k, bias, is_causal, scale, dtype) -> torch.Tensor:
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale
    if is_causal:
        sq, sk = scores.shape[-2], scores.shape[-1]
        keep = torch.ones(sq, sk, dtype=torch.bool).tril()
        scores = scores.masked_fill(~keep, -math.inf)
    if bias is not None:
        if bias.dtype == torch.bool:
            scores = scores.masked_fill(~bias, -math.inf)
        else:
            scores = scores + bias.to(dtype)
    return scores


def _probabilities(scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    lse = torch.logsumexp(scores, dim=-1)
    probs = torch.exp(scores - lse.unsqueeze(-1))
    probs = torch.where(torch.isneginf(lse).unsqueeze(-1), torch.zeros_like(probs), probs)
    return probs, lse


def _like_layout(reference: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """`values` in a tensor laid out as the op's meta kernel allocates its output (AOT graphs
    rely on those strides): `empty_like(reference)` for its shape, else its stride order."""
    if values.shape == reference.shape:
        out = torch.empty_like(reference, dtype=values.dtype)
    else:
        strides = reference.stride()
        order = sorted(range(reference.dim()), key=lambda d: strides[d], reverse=True)
        new = [0] * len(order)
        step = 1
        for d in reversed(order):
            new[d] = step
            step *= values.shape[d]
        out = torch.empty_strided(values.shape, new, dtype=values.dtype)
    return out.copy_(values)


def _dropout_mask(shape: torch.Size, p: float, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=generator) >= p).to(torch.float32) / (1.0 - p)


def attention_forward(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_bias: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    return_debug_mask: bool = False,
    *,
    scale: float | None = None,
) -> tuple[Any, ...]:
    """The op's nine outputs, on the host."""
    dtype = _compute_dtype(query.dtype)
    heads = query.shape[1]
    q = query.to(dtype)
    k = _expand_heads(key.to(dtype), heads)
    v = _expand_heads(value.to(dtype), heads)
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    probs, lse = _probabilities(_scores(q, k, attn_bias, is_causal, scale, dtype))
    seed = int(torch.randint(0, 2**62, (1,)).item()) if dropout_p > 0 else 0
    if dropout_p > 0:
        probs = probs * _dropout_mask(probs.shape, dropout_p, seed)
    out = _like_layout(query, torch.matmul(probs, v).to(query.dtype))
    return (
        out,
        lse.to(torch.float32),
        None,
        None,
        query.shape[2],
        key.shape[2],
        torch.tensor(seed, dtype=torch.int64),
        torch.tensor(0, dtype=torch.int64),
        None,
    )


def attention_backward(
    grad_out: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_bias: torch.Tensor | None,
    grad_input_mask: list[bool],
    out: torch.Tensor,
    logsumexp: torch.Tensor,
    cum_seq_q: Any,
    cum_seq_k: Any,
    max_q: Any,
    max_k: Any,
    dropout_p: float,
    is_causal: bool,
    philox_seed: torch.Tensor,
    philox_offset: torch.Tensor,
    *,
    scale: float | None = None,
) -> tuple[torch.Tensor | None, ...]:
    """Gradients of query, key, value and the bias, from the forward's log-sum-exp."""
    dtype = _compute_dtype(query.dtype)
    heads, kv_heads = query.shape[1], key.shape[1]
    q = query.to(dtype)
    k = _expand_heads(key.to(dtype), heads)
    v = _expand_heads(value.to(dtype), heads)
    d_out = grad_out.to(dtype)
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    scores = _scores(q, k, attn_bias, is_causal, scale, dtype)
    lse = logsumexp.to(dtype).unsqueeze(-1)
    probs = torch.exp(scores - lse)
    probs = torch.where(torch.isneginf(lse), torch.zeros_like(probs), probs)
    dropped = probs
    d_probs = torch.matmul(d_out, v.transpose(-2, -1))
    if dropout_p > 0:
        mask = _dropout_mask(probs.shape, dropout_p, int(philox_seed.item()))
        dropped = probs * mask
        d_probs = d_probs * mask
    grad_v = torch.matmul(dropped.transpose(-2, -1), d_out)
    row = (d_probs * probs).sum(-1, keepdim=True)
    d_scores = probs * (d_probs - row)
    grad_q = torch.matmul(d_scores, k) * scale
    grad_k = torch.matmul(d_scores.transpose(-2, -1), q) * scale
    grad_bias = None
    if grad_input_mask[3] and attn_bias is not None and attn_bias.is_floating_point():
        grad_bias = d_scores.sum_to_size(attn_bias.shape).to(attn_bias.dtype)
    return (
        _like_layout(query, grad_q.to(query.dtype)) if grad_input_mask[0] else None,
        _like_layout(key, _reduce_heads(grad_k, kv_heads).to(key.dtype))
        if grad_input_mask[1]
        else None,
        _like_layout(value, _reduce_heads(grad_v, kv_heads).to(value.dtype))
        if grad_input_mask[2]
        else None,
        grad_bias,
    )
