"""The op sweep as titled tables (for the text, markdown and html reports and the dashboard)."""

from __future__ import annotations

from typing import Any

from ground import fmt
from reports.render import tables
from reports.render.tables import Section, text_sections, wrap

PYTORCH_REASON_LABELS = {
    "dtype_not_supported": "the OpInfo does not support the dtype on CPU",
    "no_autograd": "backward: no gradient for the dtype / sample",
    "pytorch_declared": "PyTorch skips comparing it with the CPU",
    "reference_failed": "the sample raised on the CPU too",
}
DEVICE_REASON_LABELS = {
    "device_unsupported_feature": "a dtype the device declares unsupported",
    "device_declared": "on the device's own skip list",
}


def emulated_notice(d: dict[str, Any]) -> str | None:
    return tables.emulated_notice(d, "op-sweep results")


def denominators_section(d: dict[str, Any]) -> Section:
    """Total results, skipped by PyTorch's applicability, skipped by the device (for ops with no
    native lowering), passed, failed, wrong: per dtype, then all together."""
    dtypes = d["dtypes"]
    cols = [d["by_dtype"].get(dt, {}) for dt in dtypes] + [d["total"]]
    rows: list[list[str]] = []
    indent: list[int] = []

    def add(level: int, label: str, key: str | None = None, values: list[Any] | None = None):
        vals = values if values is not None else [c.get(key or "", 0) for c in cols]
        rows.append([label, *(fmt.count(v or 0) for v in vals)])
        indent.append(level)

    add(0, "total results", "total")
    add(1, "skipped by PyTorch's applicability", "skipped_pytorch")
    reasons = {r["reason"]: r for r in d["skip_reasons"]}
    for reason, label in PYTORCH_REASON_LABELS.items():
        if reason in reasons:
            r = reasons[reason]
            add(2, label, values=[*(r["by_dtype"].get(dt, 0) for dt in dtypes), r["total"]])
    add(1, "skipped by the device", "skipped_device")
    add(2, "of which for ops with no native lowering", "skipped_device_no_lowering")
    for reason, label in DEVICE_REASON_LABELS.items():
        if reason in reasons:
            r = reasons[reason]
            add(2, label, values=[*(r["by_dtype"].get(dt, 0) for dt in dtypes), r["total"]])
    add(1, "run on the device", "run_on_device")
    add(2, "passed", "passed")
    add(3, "natively (no CPU fallback)", "passed_native")
    add(3, "with CPU fallback", "passed_fallback")
    add(2, "failed", "failed")
    add(3, "error", "failed_error")
    add(3, "timeout", "failed_timeout")
    add(3, "crash", "failed_crash")
    add(3, "out of memory", "failed_oom")
    add(2, "wrong results", "wrong")
    add(2, "backward not run (forward did not finish)", "not_run")
    per = d.get("seconds_per_sample")
    notes = [
        "A result is one OpInfo x dtype x sample x phase (forward, backward); a phase that does "
        "not apply to a whole OpInfo x dtype (a dtype it lacks, no autograd) is one result.",
        f"{fmt.count(d['total'].get('opinfos'))} OpInfos; {fmt.count(d['aten_ops'])} ATen ops "
        f"dispatched, {fmt.count(d['aten_ops_all_native'])} of them correct and native in every "
        "sample."
        + (f" {per * 1000:.1f} ms of device + CPU time per sample result." if per else ""),
    ]
    return Section(
        "op_denominators",
        f"Op sweep: denominators (run {d['run_id']}, {d['device_label']})",
        ["", *dtypes, "all"],
        rows,
        notes,
        indent,
    )


def _rate(o: dict[str, Any] | None) -> str:
    if not o:
        return "-"
    return fmt.pct(o.get("pass_rate"))


def problem_ops_section(data: dict[str, Any]) -> Section:
    rows = [
        [
            o["op"],
            o["verdict"].replace("_", " "),
            fmt.text(o["dtypes"]),
            fmt.count(o["samples"]),
            fmt.count(o["passed"]),
            fmt.count(o["failed"]),
            fmt.count(o["wrong"]),
            fmt.count(o["fallback"]),
            _rate(o),
            fmt.text(o["opinfos"][:3]),
        ]
        for o in data["problem_ops"]
    ]
    return Section(
        "op_problems",
        "Op sweep: ATen ops that fail or give wrong results on the device",
        [
            "op",
            "verdict",
            "dtypes",
            "samples",
            "passed",
            "failed",
            "wrong",
            "fell back",
            "pass rate",
            "OpInfos",
        ],
        rows,
        [
            f"{fmt.count(data['problem_ops_total'])} ops in all. 'pass rate' = passed / (passed + "
            "wrong + failed at this op), over the samples (and phases) that dispatched it."
        ],
    )


def joined_section(data: dict[str, Any]) -> Section | None:
    j = data.get("joined")
    if not j:
        return None
    # a model run of several dtypes is joined dtype by dtype: a dtype column, a note each
    joins = data.get("joined_by_dtype") or {None: j}
    several = len(joins) > 1
    rows = [
        [
            i["op"],
            *([dtype] if several else []),
            fmt.count(i["models"]),
            fmt.downloads(i["downloads"]),
            fmt.pct(i.get("downloads_share")),
            fmt.count(i["op_sweep"]["samples"]),
            _rate(i["op_sweep"]),
            fmt.count(i["op_sweep"]["fallback"]),
        ]
        for dtype, joined in joins.items()
        for i in joined["correct_not_native"]
    ]
    notes = []
    for dtype, joined in joins.items():
        c = joined["by_verdict"]
        notes.append(
            (f"{dtype}: " if several else "")
            + f"Of the {fmt.count(joined['named_ops'])} ATen ops the model sweep's fallbacks name "
            f"(run {joined['model_run_id']}), the op sweep (run {joined['op_run_id']}) finds "
            f"{fmt.count(c['correct_not_native'])} correct but not native (listed: the cheapest "
            f"lowering wins), {fmt.count(c['native'])} correct and native, "
            f"{fmt.count(c['fails'])} failing, {fmt.count(c['wrong'])} wrong, "
            f"{fmt.count(c['skipped'])} skipped, and {fmt.count(c['not_swept'])} are not "
            "dispatched by any OpInfo sample" + (f" of {dtype}." if several else ".")
        )
    return Section(
        "op_cheapest",
        "Op sweep x model sweep: fallbacks the op sweep finds correct but not native",
        [
            "op",
            *(["dtype"] if several else []),
            "models",
            "downloads",
            "% dl",
            "samples",
            "pass rate",
            "fell back",
        ],
        rows,
        notes,
    )


def op_sweep_sections(data: dict[str, Any] | None) -> list[Section]:
    if not data:
        return []
    out = [denominators_section(data["denominators"]), problem_ops_section(data)]
    joined = joined_section(data)
    if joined is not None:
        out.append(joined)
    return out


def render_op_text(data: dict[str, Any] | None) -> str:
    """The op sweep alone, as text (what `hfsweep ops` prints at the end)."""
    if not data:
        return "no op-sweep run in this store\n"
    d = data["denominators"]
    lines = wrap(
        f"hfsweep op sweep: run {d['run_id']} ({d['run'].get('status', 'unknown')}), device "
        f"{d['device_label']}, dtypes {', '.join(d['dtypes']) or '-'}"
    )
    notice = emulated_notice(d)
    if notice:
        lines += wrap(notice)
    lines += text_sections(op_sweep_sections(data))
    return "\n".join(lines) + "\n"
