"""`hfsweep check`: run one model (a catalog / Hub id, or a local config) and print its stages,
a verdict line, the wall time and peak memory it took, and the next step where one exists.

Progress goes to stderr while it runs (stage by stage); the result to stdout. Exit 0 when every
stage that applies passed, 1 when a stage failed or the model was skipped, 2 for bad usage or
unreadable input, 3 when the device is not available here.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from ground import fmt, settings
from runners import stages as stage_registry
from sweep import verdict
from sweep.commands import options


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "model",
        metavar="MODEL_ID_OR_CONFIG_PATH",
        help="a Hub model id, or a config.json / model_index.json / model folder",
    )
    p.add_argument("--catalog", default="bundled", help="catalog to look the id up in")
    options.add_device_arguments(p)
    options.add_model_arguments(p)
    options.add_limit_arguments(p, timeout=600.0, per="model")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.add_argument("--architecture", help="transformers/diffusers class to build (optional)")
    p.add_argument(
        "--implementation",
        metavar="SWITCH=VALUE",
        help="run with a switch of the model's own code, e.g. experts_implementation=batched_mm "
        "or attn_implementation=eager (transformers' own), or of the hf_training stages' "
        "TrainingArguments, e.g. torch_compile_backend=aot_eager (no alternatives are tried then)",
    )
    options.add_sizing_arguments(p)


def _plan(args: argparse.Namespace, stages: list) -> Any:
    from ground.errors import ConfigError, UsageError
    from model_configs.catalog import load_catalog
    from model_configs.resolve import resolve_local
    from model_configs.spec import CatalogEntry
    from sweep.plan import plan_entry

    target = args.model
    path = Path(target).expanduser()
    looks_like_path = path.exists() or target.endswith(".json") or target.startswith((".", "/"))
    if looks_like_path:
        try:
            resolved = resolve_local(path)
        except ConfigError as exc:  # unreadable input: exit 2
            raise UsageError(exc.message, hint=exc.hint) from None
        entry = CatalogEntry(
            model_id=target,
            library=resolved.library,
            architectures_hint=tuple(resolved.config.get("architectures") or ()),
        )
        return plan_entry(_with_architecture(entry, args), stages, resolved=resolved)
    catalog = load_catalog(args.catalog)
    found = catalog.get(target)
    if found is not None:
        entry = found
    else:
        if settings.hub_offline():
            raise UsageError(
                f"unknown model id {target!r}: not in catalog {catalog.name}, and the Hub is "
                "offline (HF_HUB_OFFLINE=1)",
                hint="pass a local config.json, or unset HF_HUB_OFFLINE to look it up on the Hub",
            )
        entry = _entry_from_hub(target)
    return plan_entry(_with_architecture(entry, args), stages, config_dir=catalog.config_dir)


def _with_architecture(entry: Any, args: argparse.Namespace) -> Any:
    """`--architecture` overrides the class the catalog or config names."""
    if not args.architecture:
        return entry
    from dataclasses import replace

    return replace(entry, architectures_hint=(args.architecture,))


def _entry_from_hub(model_id: str) -> Any:
    from ground.errors import ConfigError, UsageError
    from model_configs.hub import HubClient
    from model_configs.spec import CatalogEntry

    try:
        info = HubClient().model_info(
            model_id, expand=["downloads", "pipeline_tag", "library_name", "tags", "config"]
        )
    except ConfigError as exc:  # gated repos still have public info; this is not found
        raise UsageError(f"unknown model id {model_id!r}: {exc.message}") from None
    tags = tuple(info.tags or ())
    cfg = info.config or {}
    return CatalogEntry(
        model_id=model_id,
        downloads=info.downloads,
        pipeline_tag=info.pipeline_tag,
        library=info.library_name,
        model_type_hint=cfg.get("model_type"),
        architectures_hint=tuple(cfg.get("architectures") or ()),
        custom_code="custom_code" in tags,
        tags=tags,
    )


def run(args: argparse.Namespace) -> int:
    from sweep.stage_progress import StageProgress

    with StageProgress() as progress:
        progress.phase("loading torch and the device")
        planned, device, per_dtype = _check(args, progress)
    if len(per_dtype) == 1:
        ((dtype, (rows, fallbacks, outcome)),) = per_dtype.items()
        ok = verdict.passed(rows)
        facts = _facts(args, rows, fallbacks, outcome, planned)
        if args.format == "json":
            print(
                _json(
                    {
                        "model_id": args.model,
                        "ok": ok,
                        **facts,
                        "stages": rows,
                        "fallbacks": fallbacks,
                        "config": _config(planned, device, dtype),
                        "full_size": _full_size(args, planned, device),
                    }
                )
            )
        else:
            _print_text(planned, rows, fallbacks, device)
            _print_full_size(args, planned, device)
            _print_facts(facts)
        return 0 if ok else 1
    # several dtypes: each one's stages and verdict, then what differs between them
    ok_at = {d: verdict.passed(rows) for d, (rows, _, _) in per_dtype.items()}
    if args.format == "json":
        by_dtype = {
            d: {
                "ok": ok_at[d],
                **_facts(args, rows, fallbacks, outcome, planned),
                "stages": rows,
                "fallbacks": fallbacks,
            }
            for d, (rows, fallbacks, outcome) in per_dtype.items()
        }
        first = next(iter(per_dtype))
        print(
            _json(
                {
                    "model_id": args.model,
                    "ok": all(ok_at.values()),
                    "dtypes": list(per_dtype),
                    "differences": _differences(per_dtype),
                    "by_dtype": by_dtype,
                    "config": _config(planned, device, first),
                    "full_size": _full_size(args, planned, device),
                }
            )
        )
    else:
        _print_full_size(args, planned, device)
        for dtype, (rows, fallbacks, outcome) in per_dtype.items():
            print()
            print(f"== at {dtype} ==")
            _print_text(planned, rows, fallbacks, device)
            _print_facts(_facts(args, rows, fallbacks, outcome, planned))
        print()
        print(f"dtypes:  {_differences(per_dtype)}")
    return 0 if all(ok_at.values()) else 1


def _full_size(args: argparse.Namespace, planned: Any, device: Any) -> list[dict]:
    """The model's sizing rows (docs/sizing.md) on the device's hardware types."""
    from sweep.rows import RunContext, sizing_rows

    return sizing_rows(
        RunContext.of("check", device, "bf16"),
        planned,
        context=args.serve_context,
        batch=args.serve_batch,
    )


def _print_full_size(args: argparse.Namespace, planned: Any, device: Any) -> None:
    from reports.coverage import DEFAULT_CONFIG_SOURCES
    from reports.render.sizing import full_size_lines

    default = planned.config_source in DEFAULT_CONFIG_SOURCES
    lines = full_size_lines(_full_size(args, planned, device), config_is_default=default)
    if lines:
        print()
        print("\n".join(lines))


def _json(doc: dict) -> str:
    return json.dumps(doc, default=str, indent=2)


def _config(planned: Any, device: Any, dtype: str) -> Any:
    from sweep.rows import RunContext, config_row

    return config_row(RunContext.of("check", device, dtype), planned)


def _differences(per_dtype: dict[str, tuple[list, list, Any]]) -> str:
    """One line: each dtype's verdict, and the first stage whose status differs with why."""
    statuses = {d: {r["stage"]: r for r in rows} for d, (rows, _, _) in per_dtype.items()}
    verdicts = ", ".join(
        f"{d} {'passes' if verdict.passed(rows) else 'fails'}"
        for d, (rows, _, _) in per_dtype.items()
    )
    stages = list(next(iter(statuses.values())))
    for stage in stages:
        at = {d: s.get(stage) for d, s in statuses.items()}
        if len({r["status"] if r else None for r in at.values()}) > 1:
            why = "; ".join(
                f"{d} {r['status'] if r else '-'}"
                + (f" ({_why(r)})" if r and r["status"] not in ("pass", "skip", "not_run") else "")
                for d, r in at.items()
            )
            return f"{verdicts}; they differ first at {stage}: {why}"
    ops = {d: sorted({f["op"] for f in fb}) for d, (_, fb, _) in per_dtype.items()}
    if len({tuple(v) for v in ops.values()}) > 1:
        fell = "; ".join(f"{d}: {', '.join(v) or 'none'}" for d, v in ops.items())
        return f"{verdicts}; the same stages, other CPU fallbacks ({fell})"
    return f"{verdicts}; the same result at every dtype"


def _check(
    args: argparse.Namespace, progress: Any
) -> tuple[Any, Any, dict[str, tuple[list, list, Any]]]:
    """Plan the model once, run it in its own process at each dtype `--dtype` names, with
    progress; per dtype its rows, fallbacks and outcome."""
    from dataclasses import replace

    from sweep.rows import RunContext, model_rows

    task = options.model_settings(args)
    dtypes = options.dtypes(args)
    stages = list(task.stages)
    device = task.device.build()  # unknown device: exit 2 before any work
    from runners.distributed import check_world_size

    check_world_size(task)  # more ranks than this machine holds: exit 2
    progress.phase(f"loading the model libraries, resolving and shrinking {args.model}")
    planned = _plan(args, stages)
    if task.implementation and planned.spec is not None:
        _known_switch(planned.spec, task.implementation, [s.value for s in stages])
    out: dict[str, tuple[list, list, Any]] = {}
    for dtype in dtypes:
        at = replace(task, dtype=dtype)
        outcome = planned.outcome
        if outcome is None:
            from runners.isolation import CHILD_MODULES, run_isolated
            from runners.stages import compiles
            from runners.warm import warm_parent

            compiling = compiles(stages)
            progress.phase("loading the compile stack" if compiling else "loading the stages")
            warm_parent(*CHILD_MODULES, compiles=compiling, device=args.device)
            names = [s.value for s in stages]
            label = f" at {dtype}" if len(dtypes) > 1 else ""
            progress.phase(f"setting up {args.device} and running {names[0]}{label}")

            def on_stage(result: Any, names: list[str] = names) -> None:
                at = names.index(result.stage) if result.stage in names else len(names)
                progress.stage_done(result, names[at + 1] if at + 1 < len(names) else None)
                if at + 1 >= len(names):
                    progress.phase("ending the model's process", announce=False)

            outcome = run_isolated(planned.spec, at, on_stage=on_stage)
            outcome.alternatives = _alternatives(planned.spec, at, outcome, progress)
        rows, fallbacks = model_rows(RunContext.of("check", device, dtype), planned, outcome)
        out[dtype] = (rows, fallbacks, outcome)
    return planned, device, out


def _known_switch(spec: Any, implementation: str, stages: list[str]) -> None:
    """`--implementation SWITCH=VALUE` names a switch the model's class takes, or a
    TrainingArguments switch of an hf_training stage among `stages` (exit 2 else)."""
    from ground.errors import UsageError
    from model_configs import build
    from runners.switches import training_switch

    takes = build.implementation_switches(spec)
    switch = implementation.partition("=")[0]
    trainer = training_switch(implementation)
    if trainer is not None and not set(trainer.stages) & set(stages):
        raise UsageError(
            f"--implementation {implementation}: {switch} changes "
            f"{', '.join(trainer.stages)} only, which --stages does not ask for",
            hint=f"add it: --stages load,forward,backward,{trainer.stages[0]}",
        )
    if switch not in takes and trainer is None:
        raise UsageError(
            f"--implementation {implementation}: {spec.architecture} takes "
            + (", ".join(f"{k} (default {v})" for k, v in takes.items()) or "no such switch"),
            hint="experts_implementation: grouped_mm, batched_mm, eager; "
            "attn_implementation: sdpa, eager; torch_compile_backend (trainer_compiled): "
            "a torch.compile backend, e.g. eager",
        )


def _alternatives(spec: Any, settings: Any, outcome: Any, progress: Any) -> list:
    """The switches of the model's own code worth a run after its default failed, each run in
    its own process with progress (`runners.alternatives`)."""
    from runners.alternatives import try_alternatives
    from runners.isolation import run_isolated

    def run(spec: Any, at: Any) -> Any:
        label = at.implementation
        return run_isolated(
            spec, at, on_stage=lambda r: progress.stage_done(r, label=f"with {label}")
        )

    return try_alternatives(
        spec,
        settings,
        outcome,
        run=run,
        on_try=lambda i: progress.phase(f"running every stage again with {i}"),
    )


def _facts(
    args: argparse.Namespace, rows: list, fallbacks: list, outcome: Any, planned: Any = None
) -> dict:
    """The verdict, the next step, the alternatives tried, and what the run took: the stages'
    seconds, the wall time and peak memory of the model's process and of this whole command
    (what `/usr/bin/time -v` sees)."""
    from ground.next_steps import Alternative

    spec = getattr(planned, "spec", None)
    tried = [
        Alternative(
            a.implementation,
            a.passed,
            *_first_failure_of(a.stages),
            fallback_ops=max((st.fallback_op_count for st in a.stages), default=0),
        )
        for a in outcome.alternatives
    ]
    step = verdict.next_step(
        rows,
        model=args.model,
        device=args.device,
        timeout_s=args.timeout,
        fallbacks=fallbacks,
        memory_limit_bytes=options.memory_limit(args),
        check=_check_command(args),
        config=spec.config if spec else None,
        changes=spec.changes if spec else None,
        alternatives=tried,
    )
    device_peaks = [r["peak_memory_bytes"] for r in rows if r.get("peak_memory_bytes") is not None]
    compile_s = next((r["duration_s"] for r in rows if r["stage"] == "compile"), None)
    ran = [r["duration_s"] for r in rows if r.get("duration_s") is not None]
    return {
        "verdict": verdict.verdict(rows, fallbacks),
        "error": (lambda f: verdict.error_line(f) if f else None)(verdict.first_failure(rows)),
        "next_step": step.to_dict(),
        "alternatives": [
            {
                "implementation": a.implementation,
                "passed": a.passed,
                "described": t.describe(),
                "wall_s": a.wall_s,
                "stages": [st.row() for st in a.stages],
            }
            for a, t in zip(outcome.alternatives, tried, strict=True)
        ],
        "stages_s": sum(ran) if ran else None,
        "ranks_s": fmt.ranks_seconds(
            rows, [s.value for s in stage_registry.section_stages("sharding")]
        ),
        "wall_s": outcome.timings.get("child_s"),
        "setup_s": outcome.timings.get("setup_s"),
        "compile_s": compile_s,
        "peak_host_memory_bytes": outcome.peak_host_memory_bytes,
        "peak_device_memory_bytes": max(device_peaks) if device_peaks else None,
        "command_wall_s": process_wall_s(),
        "command_peak_host_memory_bytes": process_tree_peak_rss(),
    }


def _first_failure_of(stages: list) -> tuple[str | None, str | None]:
    """(stage, op or error in a few words) of the first failing stage result, or Nones."""
    failed = verdict.first_failure([s.row() for s in stages])
    if failed is None:
        return None, None
    return failed["stage"], failed.get("failing_op") or verdict.error_line(failed, 60)


def _check_command(args: argparse.Namespace) -> str:
    """The command that reruns this check (its device, stages and dtypes)."""
    extra = []
    if args.stages:
        extra += ["--stages", args.stages]
    if args.dtype != "fp32":
        extra += ["--dtype", args.dtype]
    return verdict.check_command(args.model, args.device, *extra)


def _print_facts(f: dict) -> None:
    out = sys.stdout
    print(file=out)
    for a in f["alternatives"]:
        print(f"tried:   {a['described']} (run again in its own process)", file=out)
    print(f"verdict: {f['verdict']}", file=out)
    if f["error"]:
        print(f"error:   {f['error']}", file=out)
    if f["wall_s"] is not None:
        parts = [
            f"{label} {fmt.seconds(f[key])}"
            for key, label in (("setup_s", "device set-up"), ("compile_s", "compile stage"))
            if f[key] is not None
        ]
        line = fmt.time_taken(f["stages_s"], f["wall_s"], f.get("ranks_s"))
        if parts:
            line += f"; of it {', '.join(parts)}"
    else:
        line = "the model did not run"
    if f["command_wall_s"] is not None:
        line += f"; this command {fmt.seconds(f['command_wall_s'])} (imports and planning too)"
    print(f"time:    {line}", file=out)
    mem = []
    if f["peak_host_memory_bytes"] is not None:
        mem.append(f"peak host {fmt.byte_size(f['peak_host_memory_bytes'])} (the model's process)")
    if f["command_peak_host_memory_bytes"] is not None:
        mem.append(
            f"{fmt.byte_size(f['command_peak_host_memory_bytes'])} (this command's largest process)"
        )
    if f["peak_device_memory_bytes"] is not None:
        mem.append(f"peak device {fmt.byte_size(f['peak_device_memory_bytes'])}")
    if mem:
        print(f"memory:  {'; '.join(mem)}", file=out)
    step = f["next_step"]
    print(f"next:    {step['text']}", file=out)
    if step["command"]:
        print(f"         run: {step['command']}", file=out)
    if step["at_full_size"]:
        print(f"         at full size: {step['at_full_size']}", file=out)


def process_wall_s() -> float | None:
    """Seconds since this process started (Linux: from /proc; None elsewhere)."""
    try:
        with open("/proc/self/stat", encoding="ascii") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime", encoding="ascii") as fh:
            uptime = float(fh.read().split()[0])
        return max(0.0, uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def process_tree_peak_rss() -> int | None:
    """The peak resident memory of this process or of a child it waited for, whichever is
    larger (what `/usr/bin/time -v` reports as the maximum resident set size)."""
    try:
        import resource
    except ImportError:  # pragma: no cover (not on Windows)
        return None
    unit = 1 if sys.platform == "darwin" else 1024
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return int(max(own, children)) * unit


def _print_text(planned: Any, rows: list[dict], fallbacks: list[dict], device: Any) -> None:
    out = sys.stdout
    entry, resolved, spec = planned.entry, planned.resolved, planned.spec  # check keeps resolved
    first = rows[0]
    print(f"model:   {entry.model_id}", file=out)
    if entry.downloads is not None:
        print(f"         rank {entry.rank}, {entry.downloads:,} downloads (30 days)", file=out)
    if resolved is not None:
        hub = entry.library or "(no library tag)"
        print(f"library: {hub}, built by the {resolved.library} adapter", file=out)
        print(f"config:  {first['config_source']} ({resolved.detail})", file=out)
    if spec is not None:
        params = f"{first['param_count']:,} params" if first["param_count"] else "params n/a"
        print(
            f"tiny:    {spec.architecture} ({spec.library}), {params}, config {spec.hash}", file=out
        )
        for line in shrunk_lines(spec.changes):
            print(f"         {line}", file=out)
    if first.get("quantization"):
        print(f"quant:   {first['quantization']} (the method this checkpoint needs)", file=out)
    label = f"{device.name}" + (
        " (EMULATED"
        + (f", profile {first['device_profile']}" if first["device_profile"] else "")
        + (f"; {fmt.profile_pairing(first)}" if fmt.profile_pairing(first) else "")
        + ")"
        if device.emulated
        else ""
    )
    print(f"device:  {label}, dtype {first['dtype']}", file=out)
    print(file=out)
    from reports.render.stage_text import model_stage_lines

    lines, clipped = model_stage_lines(rows)
    for line in lines:
        print(line, file=out)
    if clipped:
        print(
            "(… cut: the error's whole first line is below, every line in --format json)", file=out
        )
    if fallbacks:
        print(file=out)
        print("CPU fallbacks (op, calls, stage):", file=out)
        for fb in sorted(fallbacks, key=lambda f: (-f["count"], f["op"]))[:30]:
            print(f"  {fb['op']:<50} {fb['count']:>6}  {fb['stage']} ({fb['source']})", file=out)


def shrunk_lines(changes: dict[str, Any], limit: int = 8) -> list[str]:
    """What the shrink changed, a field a line (`num_hidden_layers: 24 -> 2`), the first
    `limit` of them and how many more; a long list as its length and first items."""
    if not changes:
        return ["shrunk: nothing (the config is tiny already)"]
    items = list(changes.items())
    lines = [f"shrunk {len(items)} field{'s' if len(items) != 1 else ''}:"]
    for key, change in items[:limit]:
        if isinstance(change, list) and len(change) == 2:
            text = f"{fmt.short_value(change[0])} -> {fmt.short_value(change[1])}"
        else:
            text = fmt.short_value(change)
        lines.append(f"  {key}: {text}")
    if len(items) > limit:
        lines.append(f"  and {len(items) - limit} more (every one: --format json, `config`)")
    return lines


def _why(row: dict) -> str:
    """A failed stage in a few words: the op it names, else its error's first line."""
    return f"op {row['failing_op']}" if row.get("failing_op") else verdict.error_line(row, 120)
