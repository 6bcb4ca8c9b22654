"""`hfsweep check`: run one model (a catalog / Hub id, or a local config) and print its stages.

Exit 0 when every stage that applies passed, 1 when a stage failed or the model was skipped,
2 for bad usage or unreadable input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from reports import settings
from sweep.commands.run import COMPILE_MODE_HELP, COMPILE_MODES, PROFILE_HELP, device_options


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "model",
        metavar="MODEL_ID_OR_CONFIG_PATH",
        help="a Hub model id, or a config.json / model_index.json / model folder",
    )
    p.add_argument("--device", default="cpu", help="cpu, cuda, mps, neuron (default cpu)")
    p.add_argument("--profile", help=PROFILE_HELP)
    p.add_argument("--strict", action="store_true", help="a CPU fallback is an error")
    p.add_argument("--compile-mode", choices=COMPILE_MODES, help=COMPILE_MODE_HELP)
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"])
    p.add_argument(
        "--compile-backend",
        help="torch.compile backend (default: the device's: inductor on cpu/cuda, neuron on neuron)",
    )
    p.add_argument("--stages", help="comma-separated stages (default: all)")
    p.add_argument("--catalog", default="bundled", help="catalog to look the id up in")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds (default 600)")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.add_argument("--architecture", help="transformers/diffusers class to build (optional)")


def _plan(args: argparse.Namespace, stages: list) -> Any:
    from model_configs.catalog import load_catalog
    from model_configs.resolve import resolve_local
    from model_configs.spec import CatalogEntry
    from reports.errors import ConfigError, UsageError
    from sweep.plan import plan_entry

    target = args.model
    path = Path(target).expanduser()
    looks_like_path = path.exists() or target.endswith(".json") or target.startswith((".", "/"))
    if looks_like_path:
        try:
            resolved = resolve_local(path)
        except ConfigError as exc:  # unreadable input: exit 2
            raise UsageError(exc.message, model_id=target) from None
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
    from model_configs.hub import HubClient
    from model_configs.spec import CatalogEntry
    from reports.errors import ConfigError, UsageError

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
    from runners.devices import get_device
    from sweep.driver import stage_list
    from sweep.rows import RunContext, config_row, model_rows

    stages = stage_list(args.stages)
    options = device_options(args)
    device = get_device(args.device, **options)  # unknown device: exit 2 before any work
    planned = _plan(args, stages)
    outcome = planned.outcome
    if outcome is None:
        from runners.isolation import run_isolated

        outcome = run_isolated(
            planned.spec,
            device=args.device,
            device_options=options,
            dtype=args.dtype,
            stages=stages,
            timeout_s=args.timeout,
            compile_backend=args.compile_backend,
        )
    profile, profile_hash = device.profile_info()
    ctx = RunContext(
        run_id="check",
        device=device.name,
        device_emulated=device.emulated,
        device_profile=profile,
        device_profile_hash=profile_hash,
        dtype=args.dtype,
    )
    rows, fallbacks = model_rows(ctx, planned, outcome)
    ok = all(
        r["status"] == "pass" or (r["status"] == "skip" and r["reason"] == "not_applicable")
        for r in rows
    )
    if args.format == "json":
        print(
            json.dumps(
                {
                    "model_id": args.model,
                    "ok": ok,
                    "stages": rows,
                    "fallbacks": fallbacks,
                    "config": config_row(ctx, planned),
                },
                default=str,
                indent=2,
            )
        )
    else:
        _print_text(planned, rows, fallbacks, device)
    return 0 if ok else 1


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
            f"tiny:    {spec.architecture} ({spec.library}), {params}, "
            f"config {spec.hash}, {len(spec.changes)} fields shrunk",
            file=out,
        )
    if first.get("quantization"):
        print(f"quant:   {first['quantization']} (the method this checkpoint needs)", file=out)
    label = f"{device.name}" + (
        " (EMULATED"
        + (f", profile {first['device_profile']}" if first["device_profile"] else "")
        + ")"
        if device.emulated
        else ""
    )
    print(f"device:  {label}, dtype {first['dtype']}", file=out)
    print(file=out)
    print(f"{'stage':<10} {'status':<14} {'seconds':>8} {'fallback ops':>13}  detail", file=out)
    for r in rows:
        secs = f"{r['duration_s']:.2f}" if r["duration_s"] is not None else "-"
        detail = r["reason"] or ""
        if r["error_message"] and r["status"] not in ("pass",):
            detail = (detail + ": " if detail else "") + r["error_message"].splitlines()[0][:160]
        if r["failing_op"]:
            detail += f" [op {r['failing_op']}]"
        if r.get("compile_evidence"):  # what the compiler's verdicts rest on
            detail += f" [evidence {r['compile_evidence']}]"
        if r.get("unverified_ops"):
            detail += f" unverified (no evidence either way): {', '.join(r['unverified_ops'][:4])}"
        print(
            f"{r['stage']:<10} {r['status']:<14} {secs:>8} {r['fallback_op_count'] or 0:>13}  "
            f"{detail}",
            file=out,
        )
    if fallbacks:
        print(file=out)
        print("CPU fallbacks (op, calls, stage):", file=out)
        for fb in sorted(fallbacks, key=lambda f: (-f["count"], f["op"]))[:30]:
            print(f"  {fb['op']:<50} {fb['count']:>6}  {fb['stage']} ({fb['source']})", file=out)
