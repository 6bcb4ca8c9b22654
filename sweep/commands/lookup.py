"""`hfsweep lookup MODEL_ID`: the latest results for one model from the store.

The id as given, else the one stored id that differs only in case; else no results, with the
catalog's entry for it (its rank) and the exact `hfsweep run --models` command that adds its
rows to the store on the store's device (an id the catalog lacks gets no command: a check of it
would exit 2 offline), and the nearest ids of the store and the catalog ("did you mean").

Exit 0 when the model passed every stage (at every dtype of a run of several), 1 when it failed
or was skipped (at some dtype), 5 when the store has no results for it (not an error: the
answer says how to get them), 2 for bad usage (an empty id, a store that is not there or holds
no run)."""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any

from sweep.commands import options
from sweep.commands.options import add_store_argument, store_to_read

EXIT_NO_RESULTS = 5


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model_id", metavar="MODEL_ID", help="Hub model id, e.g. openai-community/gpt2")
    add_store_argument(p)
    p.add_argument("--run", help="run id (default: the newest run that has the model)")
    p.add_argument(
        "--dtype",
        help="one dtype of a run of several (default: every dtype of the run, side by side)",
    )
    p.add_argument("--format", default="text", choices=("text", "json"))
    p.add_argument(
        "--catalog",
        default="bundled",
        help="the catalog to suggest ids from and rank a model with no results (default bundled)",
    )


def run(args: argparse.Namespace) -> int:
    store_to_read(args.store)  # a file or a missing folder: one clear error
    from ground.errors import UsageError
    from reports.models import find_stored_model, model_detail, not_found_answer, reproduce_command
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
    found, check = find_stored_model(q, args.model_id, options.catalog_models(args.catalog))
    detail = model_detail(q, found.model_id, args.run, dtype) if found.model_id else None
    if detail is None:
        where = f"run {args.run}" if args.run else "any run"
        where += f" at dtype {dtype}" if dtype else ""
        answer = not_found_answer(found, check, f"{where} of {args.store}")
        if args.format == "json":
            sys.stdout.write(jsondoc.render(answer))
        else:
            lines = [answer["message"], answer["hint"]]
            if found.suggestions:
                lines.append(found.did_you_mean())
            sys.stdout.write("\n".join(lines) + "\n")
        return EXIT_NO_RESULTS
    if found.how == "case":
        detail = {**detail, "asked": args.model_id}
    if dtype is not None:  # that dtype alone, as a run of one
        detail = {
            **detail,
            "dtypes": [dtype],
            "by_dtype": {},
            "dtype_differences": None,
            "reproduce": reproduce_command(
                detail["model_id"],
                detail["device"],
                (q.run_info(detail["run_id"]) or {}).get("stages"),
                [dtype],
                world_size=(q.run_info(detail["run_id"]) or {}).get("world_size"),
            ),
        }
    if args.format == "json":
        sys.stdout.write(jsondoc.render(detail))
    else:
        sys.stdout.write(render_text(detail))
    summaries = [v["summary"] for v in detail["by_dtype"].values()] or [detail["summary"]]
    return 0 if all(s["outcome"] == "passed" for s in summaries) else 1


def render_text(d: dict[str, Any]) -> str:
    from ground import fmt
    from reports.render.stage_text import model_stage_lines

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
    if d.get("asked"):
        lines.append(
            f"note: no results for {d['asked']!r}; this is the stored id that differs in case"
        )
    if d["device_emulated"]:
        pairing = fmt.profile_pairing(d)
        lines.append(
            "note: an EMULATED device produced these results, not real hardware"
            + (f" ({pairing})" if pairing else "")
        )
    lines.append(
        f"rank {fmt.count(m['rank'])}, {fmt.downloads(m['downloads'])} downloads, "
        f"{m['library'] or '-'} / {m['pipeline_tag'] or '-'} / {m['model_type'] or '-'} / "
        f"{m['architecture'] or '-'}, config from {m['config_source'] or '-'}"
        + (" (a library's default, not the repo's own)" if d.get("config_is_default") else "")
    )
    if d.get("wall_s") is not None or d.get("stages_s") is not None:
        lines.append(
            f"time: {fmt.time_taken(d.get('stages_s'), d.get('wall_s'), d.get('ranks_s'))}"
            + (f", {d['measured_on']}" if d.get("measured_on") else "")
        )
    if d.get("peak_host_memory_bytes") is not None:
        lines.append(
            f"memory: peak host {fmt.byte_size(d.get('peak_host_memory_bytes'))} (the model's "
            "process)"
            + (
                f", peak device {fmt.byte_size(d['peak_device_memory_bytes'])}"
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
    clipped = False
    for dtype, v in per_dtype.items():
        lines.append("")
        if d.get("by_dtype"):
            lines.append(f"at {dtype}:")
        stage_lines, cut = model_stage_lines(v["stages"])
        lines += stage_lines
        if v["fallbacks"]:
            lines += ["", "CPU fallbacks:"]
            for f in v["fallbacks"]:
                lines.append(f"  {f['stage']:<18}{f['op']:<48}{f['count']:>8}  {f['source']}")
        clipped = clipped or cut
    if clipped:
        lines.append(
            "(… cut: every stored line of an error: "
            f"hfsweep lookup {shlex.quote(d['model_id'])} --format json)"
        )
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
                    lines.append(
                        f"  {key}: {fmt.short_value(change[0])} -> {fmt.short_value(change[1])}"
                    )
                else:
                    lines.append(f"  {key}: {fmt.short_value(change)}")
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
    lines.append("")
    for a in d.get("alternatives") or []:
        lines.append(f"tried: {a['described']} (run again in its own process)")
    step = d.get("next_step")
    if step:
        lines.append(f"next: {step['text']}")
        if step.get("command"):
            lines.append(f"      run: {step['command']}")
        if step.get("at_full_size"):
            lines.append(f"      at full size: {step['at_full_size']}")
    lines.append(f"reproduce: {d['reproduce']}")
    if d.get("hub_url"):
        lines.append(f"on the Hub: {d['hub_url']}")
    return "\n".join(lines) + "\n"
