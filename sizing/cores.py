"""The cores a full-size model needs on one hardware type: the formula of docs/sizing.md.

`cores_needed` turns a model's size (`sizing.measure.ModelSize`) into the memory to serve it,
fine-tune it in full and train LoRA on it, and the smallest tensor-parallel degree that holds
each on a hardware type (`sizing.hardware.Hardware`), whose constants are the names below.
No torch here: the driver computes the rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sizing.hardware import Hardware

if TYPE_CHECKING:
    from sizing.measure import ModelSize

# The formula's constants (docs/sizing.md).
SERVE_CONTEXT = 4096  # tokens of context each served sequence holds in its KV cache
SERVE_BATCH = 1  # sequences served at once
SERVE_BYTES = 2  # bf16 weights and KV cache
KV_BYTES = 2  # bf16 KV cache
# Full fine-tune with AdamW in mixed precision (ZeRO's accounting, 16 bytes per parameter):
# bf16 weights (the SERVE_BYTES above), bf16 gradients, fp32 master weights, two fp32 moments.
GRADIENT_BYTES = 2
MASTER_BYTES = 4
MOMENT_BYTES = 4  # each of AdamW's exp_avg and exp_avg_sq
ADAM_MOMENTS = 2
# Activations of a training step, as a share of the bf16 weights: a stated stand-in (activation
# checkpointing at a short context), not a measurement.
ACTIVATION_HEADROOM = 0.2
# LoRA: the frozen base in bf16, the adapters trained as a full fine-tune is (16 bytes each).
TRAINED_BYTES = SERVE_BYTES + GRADIENT_BYTES + MASTER_BYTES + ADAM_MOMENTS * MOMENT_BYTES
# Share of each core's memory the runtime, compiled graphs and scratch buffers keep (the
# Neuron docs' "before runtime overhead"): a stated stand-in, not a measurement.
RUNTIME_RESERVE = 0.1


def usable_core_bytes(hw: Hardware) -> int:
    """What one core of `hw` holds for the model: its memory less `RUNTIME_RESERVE`."""
    return int(hw.core_memory_bytes * (1 - RUNTIME_RESERVE))


@dataclass(frozen=True)
class CoresNeeded:
    """Memory and the smallest tensor-parallel degree for serving, fine-tuning and LoRA on one
    hardware type (a degree None: no power of two up to the largest domain holds it)."""

    hardware: Hardware
    serve_context: int
    serve_batch: int
    serve_bytes: int
    finetune_bytes: int
    lora_bytes: int
    serve_cores: int | None
    finetune_cores: int | None
    lora_cores: int | None
    note: str | None = None


def kv_cache_bytes(size: ModelSize, context: int, batch: int) -> int:
    """The bf16 KV cache of `batch` sequences of `context` tokens (0: the model keeps none)."""
    full = size.kv_elements_per_token or 0
    windowed = size.kv_window_elements_per_token or 0
    window = min(context, size.sliding_window or context)
    return batch * KV_BYTES * (full * context + windowed * window)


def memory(size: ModelSize, context: int, batch: int) -> tuple[int, int, int]:
    """(serve, full fine-tune, LoRA) bytes of the whole model, before sharding."""
    weights = size.bytes_at("bf16") or 0
    params = size.parameters or 0
    headroom = int(ACTIVATION_HEADROOM * weights)
    optimizer_state = GRADIENT_BYTES + MASTER_BYTES + ADAM_MOMENTS * MOMENT_BYTES
    serve = weights + kv_cache_bytes(size, context, batch)
    finetune = weights + params * optimizer_state + headroom
    lora = weights + (size.lora_parameters or 0) * TRAINED_BYTES + headroom
    return serve, finetune, lora


def degrees(size: ModelSize, hw: Hardware) -> list[int]:
    """The tensor-parallel degrees allowed: powers of two up to the largest domain's cores,
    dividing the attention heads, and dividing the KV heads or a multiple of them (the KV
    heads are then replicated, `t / kv_heads` ranks holding each)."""
    out, t = [], 1
    while t <= hw.cores_per_domain:
        heads, kv = size.attention_heads, size.kv_heads
        if (not heads or heads % t == 0) and (not kv or kv % t == 0 or t % kv == 0):
            out.append(t)
        t *= 2
    return out


def _smallest(per_core: Any, allowed: list[int], limit: int) -> int | None:
    return next((t for t in allowed if per_core(t) <= limit), None)


def cores_needed(
    size: ModelSize, hw: Hardware, *, context: int = SERVE_CONTEXT, batch: int = SERVE_BATCH
) -> CoresNeeded:
    """The formula of docs/sizing.md for one model on one hardware type."""
    serve, finetune, lora = memory(size, context, batch)
    weights = size.bytes_at("bf16") or 0
    kv = serve - weights
    kv_heads = size.kv_heads

    def kv_share(t: int) -> float:  # what one rank holds of the KV cache
        return 1 / t if not kv_heads or kv_heads % t == 0 else 1 / kv_heads

    allowed = degrees(size, hw)
    limit = usable_core_bytes(hw)
    serve_cores = _smallest(lambda t: weights / t + kv * kv_share(t), allowed, limit)
    finetune_cores = _smallest(lambda t: finetune / t, allowed, limit)
    lora_cores = _smallest(lambda t: lora / t, allowed, limit)
    notes = []
    if kv_heads and allowed and allowed[-1] > kv_heads:
        notes.append(f"above {kv_heads} ranks each KV head is replicated")
    unfit = [w for w, c in (("serve", serve_cores), ("fine-tune", finetune_cores),
                             ("LoRA", lora_cores)) if c is None]  # fmt: skip
    if unfit:
        notes.append(
            f"{hw.name}, {' and '.join(unfit)}: no degree in {allowed or 'none'} (powers of two"
            f" up to {hw.cores_per_domain} cores"
            + (f" dividing {size.attention_heads} heads" if size.attention_heads else "")
            + ") holds it"
        )
    return CoresNeeded(
        hardware=hw,
        serve_context=context,
        serve_batch=batch,
        serve_bytes=serve,
        finetune_bytes=finetune,
        lora_bytes=lora,
        serve_cores=serve_cores,
        finetune_cores=finetune_cores,
        lora_cores=lora_cores,
        note="; ".join(notes) or None,
    )
