"""The `sizing` table's rows of one full-size config on a run's device (`ground.schema`'s
`SIZING_SCHEMA`): its facts, and the cores needed on each hardware type the device stands for
(`sizing.hardware`, `sizing.cores`); one row without hardware for a device with none, or a
sizing that failed."""

from __future__ import annotations

from typing import Any

from sizing import cores
from sizing.hardware import hardware_for
from sizing.measure import ModelSize


def sizing_rows(
    size: ModelSize,
    *,
    run_id: str,
    device: str,
    config_hash: str,
    config_source: str | None,
    context: int | None = None,
    batch: int | None = None,
) -> list[dict[str, Any]]:
    """The rows of `size` (a full-size config, `config_hash`) in run `run_id` on `device`,
    serving `context` tokens x `batch` sequences (default: the formula's)."""
    base: dict[str, Any] = {
        "run_id": run_id,
        "config_hash": config_hash,
        "config_source": config_source,
        "architecture": size.architecture,
        "status": size.status,
        "error_type": size.error_type,
        "error_message": size.error_message,
        "parameters": size.parameters,
        "buffers": size.buffers,
        **{f"bytes_{d}": size.bytes_at(d) for d in ("fp32", "bf16", "fp16", "fp8")},
        "kv_bytes_per_token": _kv_bytes(size.kv_elements_per_token),
        "kv_window_bytes_per_token": _kv_bytes(size.kv_window_elements_per_token),
        "sliding_window": size.sliding_window,
        "attention_heads": size.attention_heads,
        "kv_heads": size.kv_heads,
        "lora_parameters": size.lora_parameters,
        "sizing_s": size.sizing_s,
    }
    machines = hardware_for(device) if size.ok else []
    if not machines:
        return [base]
    rows = []
    for hw in machines:
        need = cores.cores_needed(
            size,
            hw,
            context=context or cores.SERVE_CONTEXT,
            batch=batch or cores.SERVE_BATCH,
        )
        rows.append(
            {
                **base,
                "hardware": hw.name,
                "primary_hardware": hw.primary,
                "core_memory_bytes": hw.core_memory_bytes,
                "cores_per_chip": hw.cores_per_chip,
                "cores_per_instance": hw.cores_per_instance,
                "serve_context": need.serve_context,
                "serve_batch": need.serve_batch,
                "serve_bytes": need.serve_bytes,
                "finetune_bytes": need.finetune_bytes,
                "lora_bytes": need.lora_bytes,
                "serve_cores": need.serve_cores,
                "finetune_cores": need.finetune_cores,
                "lora_cores": need.lora_cores,
                "note": need.note,
            }
        )
    return rows


def _kv_bytes(elements: int | None) -> int | None:
    return None if elements is None else elements * cores.KV_BYTES
