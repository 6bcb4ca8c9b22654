"""The "At full size" block: a model's sizing rows (the sizing table's, one per hardware type)
as text lines, for `hfsweep check` and `hfsweep lookup`."""

from __future__ import annotations

from typing import Any

from ground import fmt
from ground.schema import SizingStatus
from ground.sizing_columns import NO_OWN_CONFIG_TEXT


def cores_cell(row: dict[str, Any] | None, what: str) -> str:
    """The cores `what` (serve, finetune, lora) needs, in words (`fmt.cores`)."""
    if not row or row.get("hardware") is None:
        return "-"
    return fmt.cores(row.get(f"{what}_cores"), row["cores_per_chip"], row["cores_per_instance"])


def full_size_lines(rows: list[dict[str, Any]], *, config_is_default: bool = False) -> list[str]:
    """The block's lines (none: the model was not sized)."""
    if not rows:
        return []
    first = rows[0]
    if first["status"] != SizingStatus.OK.value:
        why = first.get("error_message") or ""
        kind = f"{first['error_type']}: " if first.get("error_type") else ""
        return [f"at full size: not sized ({first['status']}): {fmt.clip(kind + why, 300)}"]
    head = (
        [
            f"at full size: {NO_OWN_CONFIG_TEXT}; what the architecture's default config "
            f"({first.get('config_source') or 'a library default'}) would need, not this model:",
            f"  default: {fmt.count(first['parameters'])} parameters "
            f"({fmt.params(first['parameters'])}; {first['architecture']})",
        ]
        if config_is_default
        else [
            f"at full size: {fmt.count(first['parameters'])} parameters "
            f"({fmt.params(first['parameters'])}; {first['architecture']}, from the model's own "
            "config)"
        ]
    )
    lines = [
        *head,
        f"  weights:  {fmt.byte_size(first['bytes_fp32'])} fp32, "
        f"{fmt.byte_size(first['bytes_bf16'])} bf16/fp16, {fmt.byte_size(first['bytes_fp8'])} fp8",
    ]
    kv, windowed = first.get("kv_bytes_per_token"), first.get("kv_window_bytes_per_token")
    if kv or windowed:
        window = (
            f" + {fmt.byte_size(windowed)} in layers with a {fmt.count(first['sliding_window'])}"
            "-token window"
            if windowed
            else ""
        )
        lines.append(f"  KV cache: {fmt.byte_size(kv or 0)} per token at bf16{window}")
    sized = [r for r in rows if r.get("hardware")]
    if not sized:
        return lines
    r = sized[0]
    lines.append(
        f"  memory:   serve {fmt.byte_size(r['serve_bytes'])} (bf16, context "
        f"{fmt.count(r['serve_context'])}, batch {r['serve_batch']}); full fine-tune "
        f"{fmt.byte_size(r['finetune_bytes'])} (AdamW, mixed precision); LoRA "
        f"{fmt.byte_size(r['lora_bytes'])} ({fmt.count(r['lora_parameters'])} adapter parameters)"
    )
    lines.append(
        f"  {'hardware':<12}{'per core':>10}{'cores/chip':>11} {'serve':<16}{'fine-tune':<22}"
        f"{'LoRA':<16}one instance"
    )
    for r in sized:
        per_instance = r.get("cores_per_instance") or 0
        largest = max((r[f"{w}_cores"] or 10**9) for w in ("serve", "finetune", "lora"))
        fits = (
            "all three"
            if largest <= per_instance
            else "serving"
            if (r["serve_cores"] or 10**9) <= per_instance
            else "none"
        )
        lines.append(
            f"  {r['hardware']:<12}{fmt.byte_size(r['core_memory_bytes']):>10}"
            f"{r['cores_per_chip']:>11} {cores_cell(r, 'serve'):<16}"
            f"{cores_cell(r, 'finetune'):<22}{cores_cell(r, 'lora'):<16}"
            f"{fits} ({per_instance} cores)"
        )
    # a row's note joins its notes with "; ": each said once, however many rows share it
    notes = dict.fromkeys(n for r in sized for n in (r.get("note") or "").split("; ") if n)
    for note in notes:
        lines.append(f"  note: {note}")
    lines.append("  (cores: the smallest tensor-parallel degree that fits; docs/sizing.md)")
    return lines
