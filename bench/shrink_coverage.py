"""Shrink + build + forward + backward on the CPU for every transformers model type.

Each model runs in a forked child with a timeout (a model that hangs cannot stall the run). A
pass needs every tower fed (vision / audio / encoder-decoder inputs present) and at least 90% of
the trainable parameters reached by the gradient.

    .venv/bin/python bench/shrink_coverage.py [--only llama,bert] [--limit N] [--workers 2]
        [--timeout 60] [--catalog] [--jsonl out.jsonl]

`--catalog` runs the bundled Hub catalog's transformers entries (model_type_hint, architectures
hint and pipeline tag; no remote code) instead of the default config of each model type.
"""

from __future__ import annotations

import argparse
import csv
import json
import multiprocessing as mp
import os
import statistics
import sys
import time
import traceback
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# the bundled catalog (`model_configs.catalog`'s offline snapshot), read from this repository
CATALOG = ROOT / "model_configs" / "data" / "catalogs" / "hub-top1000-2026-02-09.csv"
TOWER_INPUTS = {
    "vision_config": ("pixel_values", "pixel_values_videos", "images", "image_embeds", "flattened_patches",
                      "image_pixel_values"),
    "audio_config": ("input_features", "input_values", "audio_values", "input_audio_embeds", "feature",
                     "audio_input_ids", "audio_input_features"),
    "encoder": ("input_ids", "pixel_values", "input_features", "input_values", "inputs_embeds"),
}  # fmt: skip


def _classify(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = lines[0][:240] if lines else ""
    if isinstance(exc, ImportError) and not text:
        text = "a package this model needs is not installed"
    return f"{type(exc).__name__}: {text}"


def run_one(job: dict[str, Any]) -> dict[str, Any]:
    """Shrink, build, forward, backward one config; returns a result row (never raises)."""
    import torch

    torch.set_num_threads(1)
    from ground.errors import ConfigError
    from model_configs.build import build_model, compute_loss, make_inputs
    from model_configs.grad_coverage import grad_coverage, watch_grad_mode
    from model_configs.pass_rule import failure
    from model_configs.shrink import shrink
    from model_configs.spec import ResolvedConfig

    row: dict[str, Any] = {"key": job["key"], "model_type": job["model_type"], "stage": "shrink"}
    try:
        resolved = ResolvedConfig(**job["resolved"])
        spec = shrink(
            resolved, architecture_hint=job.get("architecture_hint"),
            pipeline_tag=job.get("pipeline_tag"),
        )  # fmt: skip
        row["architecture"] = spec.architecture
        row["task"] = spec.task
        t0 = time.perf_counter()
        row["stage"] = "build"
        model = build_model(spec)
        if job.get("save_load"):  # the library's own save and load, as the load stage does
            import tempfile

            from model_configs.build import save_and_load

            with tempfile.TemporaryDirectory(prefix="hfsweep-bench-") as tmp:
                model = save_and_load(spec, model, Path(tmp))
        row["built"] = True
        params = [p for p in model.parameters() if p.requires_grad]
        row["params"] = sum(p.numel() for p in params)
        row["stage"] = "inputs"
        inputs = make_inputs(spec, model, purpose="train")
        row["inputs"] = sorted(inputs)
        row["stage"] = "forward"
        model.train(False)
        with watch_grad_mode(model) as watch:
            outputs = model(**inputs)
        row["forward"] = True
        row["stage"] = "backward"
        loss = compute_loss(spec, model, outputs, inputs)
        loss.backward()
        row["seconds"] = time.perf_counter() - t0
        row["backward"] = True
        coverage = grad_coverage(model, watch)
        row["grad_share"] = coverage.share
        row["frozen_by_model"] = coverage.frozen_by_model
        row["stage"] = "check"
        missing = [
            key for key, names in TOWER_INPUTS.items()
            if spec.config.get(key) and not any(n in inputs for n in names)
        ]  # fmt: skip
        if missing:
            row["error"] = f"tower not fed: {', '.join(missing)}"
        elif (why := failure(params=row["params"], grad_share=row["grad_share"],
                             loss=float(loss.detach()))) is not None:  # fmt: skip
            row["error"] = why
        else:
            row["stage"] = "pass"
    except ConfigError as exc:
        row["stage"] = f"skip:{exc.reason}"
        row["error"] = _classify(exc)
    except BaseException as exc:  # a model's failure is data here
        from model_configs.build import missing_package

        if missing_package(exc) is not None:  # what the sweep records as a skip
            row["stage"] = "skip:missing_package"
        row["error"] = _classify(exc)
        row["trace"] = traceback.format_exc(limit=-3)[-1500:]
    return row


def _child(job: dict[str, Any], conn: Any, run: Any = None) -> None:
    try:
        conn.send((run or run_one)(job))
    finally:
        conn.close()


def run_jobs(jobs: list[dict[str, Any]], *, workers: int, timeout: float, jsonl: Path | None,
             quiet: bool, run: Any = None) -> list[dict[str, Any]]:  # fmt: skip
    """Each job in its own forked child, at most `workers` at a time (`run`: what a child does
    with its job, `run_one` by default)."""
    ctx = mp.get_context("fork")
    pending = list(jobs)
    running: list[tuple[Any, Any, dict[str, Any], float]] = []
    rows: list[dict[str, Any]] = []
    out = jsonl.open("w") if jsonl else None
    while pending or running:
        while pending and len(running) < workers:
            job = pending.pop(0)
            recv, send = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_child, args=(job, send, run), daemon=True)
            proc.start()
            send.close()
            running.append((proc, recv, job, time.monotonic()))
        time.sleep(0.02)
        for item in list(running):
            proc, recv, job, started = item
            row = None
            if recv.poll():
                try:
                    row = recv.recv()
                except EOFError:
                    row = {"key": job["key"], "model_type": job["model_type"], "stage": "crash",
                           "error": f"worker died (exit {proc.exitcode})"}  # fmt: skip
            elif not proc.is_alive():
                row = {"key": job["key"], "model_type": job["model_type"], "stage": "crash",
                       "error": f"worker died (exit {proc.exitcode})"}  # fmt: skip
            elif time.monotonic() - started > timeout:
                proc.kill()
                row = {"key": job["key"], "model_type": job["model_type"], "stage": "timeout",
                       "error": f"no result within {timeout:.0f} s"}  # fmt: skip
            if row is None:
                continue
            proc.join(1)
            recv.close()
            running.remove(item)
            rows.append(row)
            if out:
                out.write(json.dumps(row, default=str) + "\n")
                out.flush()
            if not quiet:
                mark = "ok " if row["stage"] == "pass" else "-- "
                print(f"{mark}{len(rows):4d}/{len(jobs)} {row['key']:<50} {row['stage']:<10} "
                      f"{row.get('error', '')[:120]}", file=sys.stderr, flush=True)  # fmt: skip
    if out:
        out.close()
    return rows


def default_jobs(only: set[str] | None) -> list[dict[str, Any]]:
    from model_configs.libraries.transformers.build import iter_default_configs

    jobs = []
    for resolved in iter_default_configs():
        mt = resolved.model_id.removeprefix("default/")
        if only and mt not in only:
            continue
        jobs.append({"key": mt, "model_type": mt, "resolved": resolved.__dict__})
    return jobs


def catalog_jobs(only: set[str] | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One job per distinct (model type, architecture hint, pipeline tag) among the catalog's
    transformers entries without remote code; the entries themselves for the tally."""
    from transformers import CONFIG_MAPPING

    from ground.schema import ConfigSource
    from model_configs.spec import ResolvedConfig

    entries = []
    with CATALOG.open() as fh:
        for rec in csv.DictReader(fh):
            if rec["library_name"] not in ("transformers", "sentence-transformers"):
                continue
            if rec["custom_code"] == "True":
                continue
            types = [t for t in (rec["model_type_hint"] or "").split("|") if t]
            known = [t for t in types if t in CONFIG_MAPPING]
            if not types:
                continue
            if not known:  # not a transformers model type: outside this target
                continue
            mt = known[0]
            if only and mt not in only:
                continue
            arch = (rec["architectures_hint"] or "").split("|")[0] or None
            key = f"{mt}|{arch or ''}|{rec['pipeline_tag'] or ''}"
            entries.append({"model_id": rec["model_id"], "key": key, "model_type": mt})
    jobs: dict[str, dict[str, Any]] = {}
    for e in entries:
        if e["key"] in jobs:
            continue
        mt, arch, tag = e["key"].split("|")
        try:
            config = CONFIG_MAPPING[mt]().to_dict() if mt in CONFIG_MAPPING else {"model_type": mt}
        except Exception as exc:
            config = {"model_type": mt, "_default_error": str(exc)}
        resolved = ResolvedConfig(model_id=e["model_id"], library="transformers", config=config,
                                  source=ConfigSource.TRANSFORMERS_DEFAULT.value)  # fmt: skip
        jobs[e["key"]] = {"key": e["key"], "model_type": mt, "resolved": resolved.__dict__,
                          "architecture_hint": arch or None, "pipeline_tag": tag or None}  # fmt: skip
    return list(jobs.values()), entries


def _parents() -> dict[str, set[str]]:
    """sub-component model type -> the model types whose default config nests it."""
    from model_configs.libraries.transformers.build import iter_default_configs

    parents: dict[str, set[str]] = defaultdict(set)

    def walk(d: Any, root: str) -> None:
        if isinstance(d, dict):
            mt = d.get("model_type")
            if isinstance(mt, str) and mt != root:
                parents[mt].add(root)
            for v in d.values():
                walk(v, root)

    for resolved in iter_default_configs():
        walk(resolved.config, resolved.model_id.removeprefix("default/"))
    return parents


def report(rows: list[dict[str, Any]], *, catalog_entries: list[dict[str, Any]] | None) -> None:
    from model_configs.libraries.transformers.build import model_types_with_class
    from model_configs.pass_rule import grad_failure, size_failure

    n = len(rows)
    built = sum(1 for r in rows if "params" in r)
    fwd = sum(1 for r in rows if r.get("forward"))
    bwd = sum(1 for r in rows if r.get("backward"))
    passed = {r["key"] for r in rows if r["stage"] == "pass"}
    print(f"\nconfigs: {n}  built: {built}  forward: {fwd}  backward: {bwd}  pass: {len(passed)}"
          f"  ({len(passed) / max(1, n):.1%})")  # fmt: skip
    params = [r["params"] for r in rows if r.get("backward")]
    grads = [r["grad_share"] for r in rows if r.get("backward")]
    secs = [r["seconds"] for r in rows if r.get("backward")]
    if params:
        print(f"params (backward ok): median {statistics.median(params):,.0f}  max "
              f"{max(params):,}  over the cap: {sum(size_failure(p) is not None for p in params)}")  # fmt: skip
        print(f"grad share: mean {statistics.mean(grads):.1%}  median "
              f"{statistics.median(grads):.1%}  below the rule: "
              f"{sum(grad_failure(g) is not None for g in grads)}")  # fmt: skip
        print(f"build+forward+backward seconds: median {statistics.median(secs):.3f}  "
              f"p90 {sorted(secs)[int(0.9 * (len(secs) - 1))]:.3f}  max {max(secs):.3f}")  # fmt: skip
    if catalog_entries is None:
        with_class = set(model_types_with_class())
        parents = _parents()
        by_type = {r["model_type"]: r for r in rows}
        considered = [t for t in with_class if t in by_type]

        def covered(t: str) -> bool:
            return by_type[t]["stage"] == "pass" or any(
                by_type.get(p, {}).get("stage") == "pass" for p in parents.get(t, ())
            )

        ok = [t for t in considered if covered(t)]
        print(f"TARGET types with their own class: {len(ok)}/{len(considered)} covered "
              f"({len(ok) / max(1, len(considered)):.1%}; target 90%)")  # fmt: skip
        lacking = [t for t in considered if by_type[t]["stage"] == "skip:missing_package"
                   and not covered(t)]  # fmt: skip
        print(f"  of the {len(considered) - len(ok)} not covered, {len(lacking)} need a package "
              f"that is not installed ({', '.join(sorted(lacking))})")  # fmt: skip
        _explain(sorted(t for t in considered if not covered(t)), by_type)
    else:
        by_key = {r["key"]: r for r in rows}
        ok_entries = [e for e in catalog_entries if by_key.get(e["key"], {}).get("stage") == "pass"]
        print(f"TARGET catalog entries: {len(ok_entries)}/{len(catalog_entries)} pass "
              f"({len(ok_entries) / max(1, len(catalog_entries)):.1%}; target 98%)")  # fmt: skip
        for e in catalog_entries:
            r = by_key.get(e["key"], {})
            if r.get("stage") != "pass":
                print(f"  catalog miss: {e['model_id']} [{e['key']}] {r.get('stage')}: "
                      f"{r.get('error', '')[:150]}")  # fmt: skip
    groups: dict[str, list[str]] = defaultdict(list)
    for r in rows:
        if r["stage"] != "pass":
            groups[f"{r['stage']}: {(r.get('error') or '')[:110]}"].append(r["key"])
    print("\nfailures by stage and reason:")
    stages = Counter(r["stage"] for r in rows if r["stage"] != "pass")
    for stage, count in stages.most_common():
        print(f"  {stage:<28} {count}")
    for reason, keys in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        print(f"  [{len(keys)}] {reason}\n      {', '.join(sorted(keys)[:12])}")


def _explain(uncovered: list[str], by_type: dict[str, dict[str, Any]]) -> None:
    """Each type not covered with the reason its family file gives (`known_failures`)."""
    from model_configs.libraries.transformers.families import known_failures

    known = known_failures()
    kinds: dict[str, list[str]] = defaultdict(list)
    for t in uncovered:
        kinds[known.get(t, {}).get("kind", "UNEXPLAINED")].append(t)
    print("\ntypes not covered, by kind of cause (known_failures in the family files):")
    for kind, types in sorted(kinds.items()):
        print(f"  {kind}: {len(types)}")
        for t in types:
            why = known.get(t, {}).get("reason") or (by_type[t].get("error") or "")[:150]
            print(f"    {t}: {why}")
    stale = sorted(
        t for t, k in known.items()
        if by_type.get(t, {}).get("stage") == "pass" and k.get("kind") != "dependency"
    )  # fmt: skip
    if stale:
        print(f"  listed as known failures but passing now: {', '.join(stale)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated model types")
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=90.0, help="seconds per model")
    parser.add_argument("--catalog", action="store_true")
    parser.add_argument("--jsonl", type=Path, default=None, help="write one row per model here")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import torch  # noqa: F401  (imported once, before forking)
    import transformers  # noqa: F401

    only = {t for t in args.only.split(",") if t} or None
    entries = None
    if args.catalog:
        jobs, entries = catalog_jobs(only)
    else:
        jobs = default_jobs(only)
    if args.limit:
        jobs = jobs[: args.limit]
        if entries is not None:
            keys = {j["key"] for j in jobs}
            entries = [e for e in entries if e["key"] in keys]
    started = time.time()
    rows = run_jobs(jobs, workers=max(1, min(args.workers, 2)), timeout=args.timeout,
                    jsonl=args.jsonl, quiet=args.quiet)  # fmt: skip
    report(rows, catalog_entries=entries)
    print(f"\nwall time: {time.time() - started:.0f} s for {len(rows)} configs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
