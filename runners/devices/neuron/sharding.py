"""DTensor sharding strategies for the ops TorchNeuron adds them for, written for the emulator.

TorchNeuron registers strategies (torch_neuronx/distributed/tensor/register_sharding.py) for
the fused attention op its SDPA selection takes (`_scaled_dot_product_fused_attention_overrideable`
and its backward), which PyTorch has none for, and for `linear` and `linear_backward`, which
reach DTensor on TorchNeuron because it gives them kernels of their own. The same ops get
strategies here (`collectives.sharding_ops()` names them; a rule for an op not listed there is
an error), each a list of placements on one mesh dimension that PyTorch expands to the mesh:
- attention, forward: everything replicated; heads sharded (dim 1 of q, k, v, the output,
  the log-sum-exp and the bias); the batch sharded (dim 0). TorchNeuron also lists q, k and v
  sharded on the sequence dimension together; that one is left out here, since a query needs
  every key and value (context parallelism shards the queries only, and not under a causal
  mask), so picking it would compute another attention;
- attention, backward: replicated; heads; batch;
- linear: replicated; column-wise (weight dim 0, output last dim, bias dim 0); row-wise
  (input last dim, weight dim 1: the output is partial, the bias added once); batch;
- linear_backward: the same four, for the input, output and weight gradients.
On the emulated device `linear` decomposes before DTensor sees it (the emulator gives kernels
only to ops PyTorch does not decompose), so its two rules are registered but reached only where
`linear` itself reaches DTensor.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.tensor._op_schema import OpSchema, OpStrategy, RuntimeSchemaInfo
from torch.distributed.tensor._ops.utils import (
    expand_to_full_mesh_op_strategy,
    register_op_strategy,
)
from torch.distributed.tensor.placement_types import Partial, Placement, Replicate, Shard

from runners.devices.neuron import collectives

aten = torch.ops.aten
R = Replicate()
Placements = list[Placement | None]


def _roles(args: tuple, roles: dict[int, str]) -> list[str | None]:
    """The role of each DTensor argument (its index's role, or `other`), in order."""
    return [
        roles.get(i, "other") if isinstance(a, OpStrategy) else None for i, a in enumerate(args)
    ]


def _inputs(roles: list[str | None], by_role: dict[str, Placement]) -> Placements:
    return [by_role.get(role, R) for role in roles if role is not None]


def _ndim(arg: Any) -> int:
    return len(arg.shape) if isinstance(arg, OpStrategy) else 0


# ---- attention ------------------------------------------------------------------------------

_ATTENTION_OUTPUTS = 9  # output, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, seed, offset, mask


def _attention_outputs(shard: Placement, debug_mask: bool) -> Placements:
    return [shard, shard, None, None, None, None, R, R, shard if debug_mask else None]


def attention_strategy(op_schema: OpSchema) -> OpStrategy:
    mesh = op_schema.get_mesh_from_args()
    args = op_schema.args_schema
    debug_mask = bool(len(args) > 6 and args[6])
    roles = _roles(args, {0: "qkv", 1: "qkv", 2: "qkv", 3: "bias"})
    strategies = [
        _attention_outputs(R, debug_mask) + _inputs(roles, {}),
        _attention_outputs(Shard(1), debug_mask)
        + _inputs(roles, {"qkv": Shard(1), "bias": Shard(1)}),
        _attention_outputs(Shard(0), debug_mask)
        + _inputs(roles, {"qkv": Shard(0), "bias": Shard(0)}),
    ]
    return expand_to_full_mesh_op_strategy(
        mesh, op_schema, strategies, input_index=_ATTENTION_OUTPUTS
    )


def attention_backward_strategy(op_schema: OpSchema) -> OpStrategy:
    mesh = op_schema.get_mesh_from_args(validate=False)
    args = op_schema.args_schema
    # grad_out, query, key, value, attn_bias, grad_input_mask, out, logsumexp, cum_seq_q,
    # cum_seq_k, max_q, max_k, dropout_p, is_causal, philox_seed, philox_offset
    roles = _roles(
        args,
        {
            0: "qkv",
            1: "qkv",
            2: "qkv",
            3: "qkv",
            4: "bias",
            6: "qkv",
            7: "lse",
            14: "rng",
            15: "rng",
        },
    )
    has_bias = isinstance(args[4], OpStrategy)
    strategies = []
    for shard in (R, Shard(1), Shard(0)):
        outputs: Placements = [shard, shard, shard, shard if has_bias else None]
        strategies.append(
            outputs + _inputs(roles, {"qkv": shard, "bias": shard, "lse": shard, "rng": R})
        )
    return expand_to_full_mesh_op_strategy(mesh, op_schema, strategies, input_index=4)


# ---- linear ---------------------------------------------------------------------------------


def linear_strategy(op_schema: OpSchema) -> OpStrategy:
    mesh = op_schema.get_mesh_from_args(validate=False)
    args = op_schema.args_schema
    last = _ndim(args[0]) - 1
    has_bias = len(args) > 2 and isinstance(args[2], OpStrategy)

    def with_bias(placements: Placements, bias: Placement) -> Placements:
        return [*placements, bias] if has_bias else placements

    strategies: list[Placements] = [
        with_bias([R, R, R], R),
        with_bias([Shard(last), R, Shard(0)], Shard(0)),  # column-wise
        with_bias([Partial(), Shard(last), Shard(1)], Partial()),  # row-wise: bias added once
    ]
    if last >= 1:
        strategies.append(with_bias([Shard(0), Shard(0), R], R))  # batch
    return expand_to_full_mesh_op_strategy(mesh, op_schema, strategies, input_index=1)


def linear_backward_strategy(op_schema: OpSchema) -> OpStrategy:
    mesh = op_schema.get_mesh_from_args(validate=False)
    args = op_schema.args_schema  # input, grad_output, weight, output_mask
    last = _ndim(args[0]) - 1
    mask = [bool(m) for m in args[3]] if len(args) > 3 else [True, True, True]  # type: ignore[attr-defined]

    def outputs(grad_input: Placement, grad_weight: Placement, grad_bias: Placement) -> Placements:
        return [
            p if want else None
            for p, want in zip((grad_input, grad_weight, grad_bias), mask, strict=True)
        ]

    strategies: list[Placements] = [
        outputs(R, R, R) + [R, R, R],
        outputs(Partial(), Shard(0), Shard(0)) + [R, Shard(last), Shard(0)],  # column-wise
        outputs(Shard(last), Shard(1), R) + [Shard(last), R, Shard(1)],  # row-wise
    ]
    if last >= 1:
        strategies.append(outputs(Shard(0), Partial(), Partial()) + [Shard(0), Shard(0), R])
    return expand_to_full_mesh_op_strategy(mesh, op_schema, strategies, input_index=3)


RULES: dict[str, tuple[Any, Any, RuntimeSchemaInfo | None]] = {
    "aten::_scaled_dot_product_fused_attention_overrideable": (
        aten._scaled_dot_product_fused_attention_overrideable.default,
        attention_strategy,
        RuntimeSchemaInfo(4),
    ),
    "aten::_scaled_dot_product_fused_attention_overrideable_backward": (
        aten._scaled_dot_product_fused_attention_overrideable_backward.default,
        attention_backward_strategy,
        None,
    ),
    "aten::linear": (aten.linear.default, linear_strategy, None),
    "aten::linear_backward": (aten.linear_backward.default, linear_backward_strategy, None),
}
_REGISTERED: list[str] = []


def register_sharding_rules() -> None:
    """Register a strategy for every op TorchNeuron registers one for (once per process)."""
    if _REGISTERED:
        return
    for name in collectives.sharding_ops():
        if name not in RULES:
            raise RuntimeError(f"TorchNeuron registers a sharding rule for {name}; none here")
        op, strategy, schema_info = RULES[name]
        register_op_strategy(op, schema_info=schema_info)(strategy)
        _REGISTERED.append(name)


def registered() -> tuple[str, ...]:
    return tuple(_REGISTERED)
