"""`hfsweep lookup MODEL_ID`: the latest results for one model from the store.

Exit 0 when the model passed every stage (at every dtype of a run of several), 1 when it failed
or was skipped (at some dtype), 2 when the store has no results for it."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from sweep.commands.options import add_store_argument, store_to_read


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model_id", metavar="MODEL_ID", help="Hub model id, e.g. openai-community/gpt2")
    add_store_argument(p)
    p.add_argument("--run", help="run id (default: the newest run that has the model)")
    p.add_argument(
        "--dtype",
        help="one dtype of a run of several (default: every dtype of the run, side by side)",
    )
    p.add_argument("--format", default="text", choices=("text", "json"))


def run(args: argparse.Namespace) -> int:
    store_to_read(args.store)  # a file or a missing folder: one clear error
    from reports.errors import UsageError
    from reports.models import model_detail, reproduce_command
    from reports.query import StoreQuery
    from reports.render import jsondoc

    if not args.model_id.strip():
        raise UsageError("MODEL_ID is empty")
    q = StoreQuery(args.store)
    if not q.run_ids():
        raise UsageError(
            f"the store {args.store!r} has no results yet",
            hint="run `hfsweep run` first, or pass --store DIR",
        )
    dtype = getattr(args, "dtype", None)
    detail = model_detail(q, args.model_id, args.run, dtype)
    if detail is None:
        where = f"run {args.run}" if args.run else "any run"
        at = f" at dtype {dtype}" if dtype else ""
        raise UsageError(
            f"no results for model {args.model_id!r}{at} in {where} of {args.store!r}",
            model_id=args.model_id,
            hint=f"run it with: hfsweep check {args.model_id} --device DEVICE",
        )
    if dtype is not None:  # that dtype alone, as a run of one
        detail = {
            **detail,
            "dtypes": [dtype],
            "by_dtype": {},
            "dtype_differences": None,
            "reproduce": reproduce_command(
                args.model_id,
                detail["device"],
                (q.run_info(detail["run_id"]) or {}).get("stages"),
                [dtype],
            ),
        }
    if args.format == "json":
        sys.stdout.write(jsondoc.render(detail))
    else:
        sys.stdout.write(render_text(detail))
    summaries = [v["summary"] for v in detail["by_dtype"].values()] or [detail["summary"]]
    return 0 if all(s["outcome"] == "passed" for s in summaries) else 1


def render_text(d: dict[str, Any]) -> str:
    from reports.render import fmt

    s, m = d["summary"], d["model"]
    outcomes = [
        (f"{dtype} " if d.get("by_dtype") else "")
        + v["outcome"]
        + (f" ({v['skip_reason']})" if v.get("skip_reason") else "")
        for dtype, v in (
            {k: x["summary"] for k, x in d["by_dtype"].items()} if d.get("by_dtype") else {"": s}
        ).items()
    ]
    lines = [
        f"{d['model_id']}: {', '.join(outcomes)} on {d['device_label']}, run {d['run_id']}",
    ]
    if d["device_emulated"]:
        lines.append("note: an EMULATED device produced these results, not real hardware")
    lines.append(
        f"rank {fmt.count(m['rank'])}, {fmt.downloads(m['downloads'])} downloads, "
        f"{m['library'] or '-'} / {m['pipeline_tag'] or '-'} / {m['model_type'] or '-'} / "
        f"{m['architecture'] or '-'}, config from {m['config_source'] or '-'}"
        + (" (a library's default, not the repo's own)" if d.get("config_is_default") else "")
    )
    if d.get("wall_s") is not None or d.get("peak_host_memory_bytes") is not None:
        lines.append(
            f"wall time {fmt.seconds(d.get('wall_s'))} (set-up and compile included), peak host "
            f"memory {fmt.byte_size(d.get('peak_host_memory_bytes'))}"
            + (
                f", peak device memory {fmt.byte_size(d['peak_device_memory_bytes'])}"
                if d.get("peak_device_memory_bytes") is not None
                else ""
            )
        )
    if m.get("quantization"):
        lines.append(f"quantization: {m['quantization']} (the method this checkpoint needs)")
    per_dtype = d.get("by_dtype") or {d.get("dtype"): d}
    if d.get("by_dtype"):
        diff = d.get("dtype_differences")
        lines.append(
            f"dtypes {', '.join(per_dtype)}: "
            + (f"they differ: {diff['cause'] or diff['kind']}" if diff else "the same result")
        )
    for dtype, v in per_dtype.items():
        lines.append("")
        if d.get("by_dtype"):
            lines.append(f"at {dtype}:")
        lines += _stage_lines(v["stages"], v["fallbacks"])
    if d.get("full_size"):
        from reports.render.sizing import full_size_lines

        default = bool(d.get("config_is_default"))
        lines += ["", *full_size_lines(d["full_size"], config_is_default=default)]
    if d["shrink_changes"]:
        base = "the library's default config" if d.get("config_is_default") else "the original"
        lines += ["", f"shrunk from {base}:"]
        changes = d["shrink_changes"]
        if isinstance(changes, dict):
            for key, change in changes.items():
                if isinstance(change, list) and len(change) == 2:
                    lines.append(f"  {key}: {change[0]} -> {change[1]}")
                else:
                    lines.append(f"  {key}: {fmt.text(change)}")
    versions = ", ".join(f"{k.removesuffix('_version')} {v}" for k, v in d["versions"].items() if v)
    if versions:
        lines += ["", f"versions: {versions}"]
    # a dtype per history line where some run of it swept several
    several = len({h["run_id"] for h in d["history"]}) < len(d["history"])
    if len(d["history"]) > 1:
        lines += [
            "",
            "history (newest first): "
            + ", ".join(
                f"{h['run_id']} " + (f"{h['dtype']} " if several else "") + h["outcome"]
                for h in d["history"][:10]
            ),
        ]
    lines += ["", f"reproduce: {d['reproduce']}"]
    if d.get("hub_url"):
        lines.append(f"on the Hub: {d['hub_url']}")
    return "\n".join(lines) + "\n"


def _stage_lines(stages: list[dict[str, Any]], fallbacks: list[dict[str, Any]]) -> list[str]:
    from reports.render import fmt

    lines = [f"{'stage':<18}{'status':<15}{'seconds':>9}{'fallback ops':>14}  detail"]
    for r in stages:
        detail = r["reason"] or (f"op {r['failing_op']}" if r["failing_op"] else "")
        secs = "-" if r["duration_s"] is None else f"{r['duration_s']:.2f}"
        lines.append(
            f"{r['stage']:<18}{r['status']:<15}{secs:>9}{fmt.count(r['fallback_op_count']):>14}"
            f"  {detail}".rstrip()
        )
        if r.get("shape_detail"):
            lines.append(f"{'':<10}{r['shape_detail']}")
        if r["error_message"]:
            kind = f"{r['error_type']}: " if r["error_type"] else ""
            lines.append(f"{'':<10}{fmt.clip(kind + fmt.first_line(r['error_message']), 200)}")
    if fallbacks:
        lines += ["", "CPU fallbacks:"]
        for f in fallbacks:
            lines.append(f"  {f['stage']:<18}{f['op']:<48}{f['count']:>8}  {f['source']}")
    return lines
