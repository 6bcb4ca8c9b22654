"""`hfsweep diff RUN_A RUN_B`: what changed between two runs."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from sweep.commands.options import add_store_argument, store_to_read


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_a", metavar="RUN_A", help="the earlier run id")
    p.add_argument("run_b", metavar="RUN_B", help="the later run id")
    add_store_argument(p)
    p.add_argument("--format", default="text", choices=("text", "json"))
    p.add_argument("--limit", type=int, default=20, help="models listed per category (default 20)")


def run(args: argparse.Namespace) -> int:
    store_to_read(args.store)  # a file or a missing folder: one clear error
    from ground.errors import UsageError
    from reports.diff import run_diff
    from reports.query import StoreQuery
    from reports.render import jsondoc

    if args.limit < 0:
        raise UsageError(f"--limit must be 0 or more, not {args.limit}")
    q = StoreQuery(args.store)
    diff = run_diff(q, args.run_a, args.run_b, limit=args.limit)
    if args.format == "json":
        sys.stdout.write(jsondoc.render(diff))
    else:
        sys.stdout.write(render_text(diff))
    return 0


def render_text(diff: dict[str, Any]) -> str:
    from ground import fmt

    lines = [
        f"hfsweep diff: {diff['run_a']} ({diff['device_a'] or '-'}) -> {diff['run_b']} "
        f"({diff['device_b'] or '-'})",
        "",
    ]
    if diff["version_changes"]:
        lines.append("software / device changes:")
        lines += [f"  {c['field']}: {c['a']} -> {c['b']}" for c in diff["version_changes"]]
    else:
        lines.append("software / device: unchanged (status flips are counted as flaky)")
    lines += ["", f"{'category':<16}{'models':>10}{'downloads':>14}"]
    for cat, s in diff["summary"].items():
        lines.append(f"{cat:<16}{fmt.count(s['models']):>10}{fmt.downloads(s['downloads']):>14}")
    for cat, models in diff["models"].items():
        if not models or cat.startswith("still_passing") or cat == "still_skipped":
            continue
        lines += ["", f"{cat}:"]
        for m in models:
            side = "b" if m["outcome_b"] == "failed" else "a"
            where = m[f"failed_stage_{side}"] or ""
            what = m[f"failing_op_{side}"] or fmt.clip(
                ": ".join(
                    filter(
                        None, (m[f"error_type_{side}"], fmt.first_line(m[f"error_message_{side}"]))
                    )
                ),
                100,
            )
            lines.append(
                f"  {m['model_id']}  {m['outcome_a'] or '-'} -> {m['outcome_b'] or '-'}"
                f"  {fmt.downloads(m['downloads'])}  {where} {what}".rstrip()
            )
    return "\n".join(lines) + "\n"
