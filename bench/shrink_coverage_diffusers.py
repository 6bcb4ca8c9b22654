"""Shrink + build + forward + backward every diffusers model class on the CPU, and print coverage.

For each model class under `diffusers.models` (its default config, as `iter_default_configs`
gives it): shrink, count parameters on the meta device (a shrunk model above 5M parameters is
a failure and is not built), build, make inputs, run forward, compute the loss, run backward.
A class passes when all of that ran, at least 90% of its trainable parameters received a non-zero
gradient, and its inputs come from a written recipe (not guessed from the signature). The
list-of-models wrappers (MultiControlNetModel, ...) have no config of their own (most have no
from_config); they are built from two tiny parts and reported on a line of their own.

Usage: .venv/bin/python bench/shrink_coverage_diffusers.py [--only NAME ...] [--json PATH]
       [--verbose] [--threads N]. Single-threaded by default: tiny models gain nothing from
       threads, and on a busy machine OpenMP waits cost ~0.1 s per conv3d backward.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import time
import traceback
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from model_configs.pass_rule import MAX_PARAMS, MIN_GRAD_SHARE  # noqa: E402  (defined once)

TIMEOUT_S = 60


class _Timeout(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _Timeout(f"over {TIMEOUT_S}s")


def run_class(resolved: Any) -> dict[str, Any]:
    """One row: how far the class got, and why it stopped."""
    import torch

    from model_configs.libraries.diffusers import build as dm
    from model_configs.libraries.diffusers.shrink import model_class
    from model_configs.shrink import shrink

    name = resolved.config["_class_name"]
    row: dict[str, Any] = {"class": name, "stage": "shrink", "built": False, "forward": False}
    row.update(backward=False, passed=False, params=None, grad_share=None, seconds=None)
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(TIMEOUT_S)
    try:
        spec = shrink(resolved)
        row["curated_inputs"] = dm.inputs_are_curated(spec)
        row["stage"] = "size"
        try:
            with torch.device("meta"):
                meta = model_class(name).from_config(dict(spec.config))
            row["params"] = sum(p.numel() for p in meta.parameters())
            del meta
        except (RuntimeError, NotImplementedError, AttributeError, TypeError):
            row["params"] = None  # weight_norm cannot init on meta; wrappers have no from_config
        if row["params"] is not None and row["params"] > MAX_PARAMS:
            raise ValueError(f"shrunk model has {row['params'] / 1e6:.1f}M parameters")
        start = time.perf_counter()
        row["stage"] = "build"
        model = dm.build_model(spec)
        row["built"] = True
        row["params"] = sum(p.numel() for p in model.parameters())
        if row["params"] > MAX_PARAMS:
            raise ValueError(f"shrunk model has {row['params'] / 1e6:.1f}M parameters")
        row["stage"] = "inputs"
        inputs = dm.make_inputs(spec, model)
        row["stage"] = "forward"
        model.train()
        outputs = model(**inputs)
        row["forward"] = True
        row["stage"] = "backward"
        loss = dm.compute_loss(spec, model, outputs, inputs)
        loss.backward()
        row["seconds"] = time.perf_counter() - start
        row["backward"] = True
        trainable = [p for p in model.parameters() if p.requires_grad]
        total = sum(p.numel() for p in trainable)
        reached = sum(
            p.numel() for p in trainable if p.grad is not None and bool(p.grad.abs().sum() > 0)
        )
        row["grad_share"] = reached / total if total else 0.0
        row["stage"] = "grad"
        if not torch.isfinite(loss):
            raise ValueError("loss is not finite")
        if row["grad_share"] < MIN_GRAD_SHARE:
            missing = sorted(
                {
                    ".".join(n.split(".")[:2])
                    for n, p in model.named_parameters()
                    if p.requires_grad and (p.grad is None or not bool(p.grad.abs().sum() > 0))
                }
            )
            raise ValueError(
                f"only {row['grad_share']:.0%} of params got a gradient (none: {missing[:4]})"
            )
        row["stage"] = "inputs"
        if not row["curated_inputs"]:
            raise ValueError("inputs guessed from the forward signature (no recipe)")
        row["stage"] = "done"
        row["passed"] = True
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a row
        if isinstance(exc, KeyboardInterrupt):
            raise
        row["error_type"] = type(exc).__name__
        row["error"] = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
        row["reason"] = getattr(exc, "fields", {}).get("reason")
        row["where"] = traceback.extract_tb(exc.__traceback__)[-1].name if exc.__traceback__ else ""
    finally:
        signal.alarm(0)
    return row


def _known_failures() -> dict[str, dict[str, str]]:
    """Classes known not to pass, with reason and kind (model_configs/data/...rules.json)."""
    path = ROOT / "model_configs" / "libraries" / "diffusers" / "data" / "class_rules.json"
    table = json.loads(path.read_text()).get("known_failures", {})
    return {k: v for k, v in table.items() if not k.startswith("_")}


def summarize(rows: list[dict[str, Any]], wrappers: list[str]) -> str:
    n = len(rows)
    lines = []

    def pct(k: int) -> str:
        return f"{k:4d} / {n} ({k / n:.1%})" if n else "0"

    built = sum(r["built"] for r in rows)
    fwd = sum(r["forward"] for r in rows)
    bwd = sum(r["backward"] for r in rows)
    passed = sum(r["passed"] for r in rows)
    lines.append(
        f"diffusers model classes: {n} (plus {len(wrappers)} list-of-models wrappers, "
        "counted separately at the end)"
    )
    lines.append(f"  built                      {pct(built)}")
    lines.append(f"  ran forward                {pct(fwd)}")
    lines.append(f"  ran backward               {pct(bwd)}")
    lines.append(f"  PASS (>=90% grads, recipe) {pct(passed)}")
    shares = [r["grad_share"] for r in rows if r["grad_share"] is not None]
    if shares:
        lines.append(
            f"  share of trainable params with a gradient (backward ran): "
            f"mean {statistics.mean(shares):.1%}, min {min(shares):.1%}"
        )
    params = [r["params"] for r in rows if r["params"] is not None and r["built"]]
    if params:
        lines.append(
            f"  params of built models: median {statistics.median(params):,.0f}, "
            f"max {max(params):,.0f} ({sum(p > MAX_PARAMS for p in params)} above 5M)"
        )
    secs = [r["seconds"] for r in rows if r["seconds"] is not None]
    if secs:
        lines.append(
            f"  build+forward+backward seconds: median {statistics.median(secs):.3f}, "
            f"max {max(secs):.2f}"
        )
    known = _known_failures()
    groups: dict[str, list[str]] = defaultdict(list)
    for r in rows:
        if not r["passed"]:
            groups[f"{r['stage']}: {r.get('reason') or r.get('error_type')}"].append(r["class"])
    if groups:
        lines.append("  not passing, by stage and reason:")
        for key, names in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            lines.append(f"    {len(names):3d}  {key}")
            for nm in sorted(names):
                err = next(r.get("error", "") for r in rows if r["class"] == nm)
                lines.append(f"           {nm}: {err}")
                why = known.get(nm)
                lines.append(f"             why ({why['kind']}): {why['reason']}" if why else
                             "             why: UNEXPLAINED (add it to known_failures)")  # fmt: skip
        unexplained = sum(1 for r in rows if not r["passed"] and r["class"] not in known)
        lines.append(f"  failures without a reason in known_failures: {unexplained}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None, help="class names to run")
    parser.add_argument("--json", type=Path, default=None, help="write the rows as JSON here")
    parser.add_argument("--verbose", action="store_true", help="one line per class as it runs")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    from model_configs.libraries.diffusers import build as dm

    def run_all(configs: Any) -> list[dict[str, Any]]:
        out = []
        for resolved in configs:
            name = resolved.config["_class_name"]
            if args.only and name not in args.only:
                continue
            row = run_class(resolved)
            out.append(row)
            if args.verbose:
                status = "PASS" if row["passed"] else f"{row['stage']}: {row.get('error', '')}"
                secs = f"{row['seconds']:.2f}s" if row["seconds"] is not None else "-"
                print(f"{name:45s} {row['params'] or 0:>10,} {secs:>7s} {status}", flush=True)
        return out

    rows = run_all(dm.iter_default_configs())
    wrapper_rows = run_all(dm.iter_wrapper_configs())
    print(summarize(rows, [r["class"] for r in wrapper_rows]))
    if wrapper_rows:
        passed = [r["class"] for r in wrapper_rows if r["passed"]]
        failed = [f"{r['class']} ({r.get('error', '')})" for r in wrapper_rows if not r["passed"]]
        print(
            f"  list-of-models wrappers, built from two tiny parts: {len(passed)} / "
            f"{len(wrapper_rows)} pass" + (f"; failing: {', '.join(failed)}" if failed else "")
        )
    rows = rows + wrapper_rows
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
