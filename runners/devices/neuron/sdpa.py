"""SDPA on the device: TorchNeuron's selection rule (csrc/aten/SdpBackendSelection.cpp).

The fused `_scaled_dot_product_fused_attention_overrideable` op (computed on the host by
`attention.py`) where the rule picks it, else PyTorch's math decomposition.
"""

from __future__ import annotations

import math

import torch

from runners.devices.neuron import rules
from runners.devices.neuron.state import STATE


def scaled_dot_product_attention(
    query,
    key,
    value,
    attn_mask=None,
    dropout_p=0.0,
    is_causal=False,
    *,
    scale=None,
    enable_gqa=False,
):
    """`aten::scaled_dot_product_attention` on the device: the fused `overrideable` op when
    TorchNeuron's selection rule picks it (q on the device, q/k/v 4-D) and the profile has it,
    else PyTorch's math decomposition. Registered for the backend and its autograd key, like
    the composite it replaces: the ops it calls record their own gradients."""
    device = STATE.device
    fused = (
        device is not None
        and device.op_profile.declares(rules.SDPA_OVERRIDEABLE)
        and rules.sdpa_uses_overrideable(query, key, value)
    )
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        bias = torch.zeros_like(attn_mask, dtype=query.dtype)
        attn_mask = bias.masked_fill_(attn_mask.logical_not(), -math.inf)
    if fused:
        out = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(
            query, key, value, attn_mask, dropout_p, is_causal, False, scale=scale
        )
        return out[0]
    return torch.ops.aten._scaled_dot_product_attention_math(
        query,
        key,
        value,
        attn_mask,
        dropout_p,
        is_causal,
        None,
        scale=scale,
        enable_gqa=enable_gqa,
    )[0]
