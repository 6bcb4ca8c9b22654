"""Coverage of the library adapters beyond transformers and diffusers: every architecture each
library offers, shrunk, built, saved and loaded the library's way, fed, trained once.

Per adapter it prints the architectures tried, built, passed (the pass rule of
`model_configs/pass_rule.py`: at most 5M parameters, a finite loss, at least 90% of trainable
parameters with a finite gradient), the median and maximum shrunk parameters (none may be
above the cap), the median seconds (shrink excluded: build + save/load + forward + backward),
and every failure with its reason from the adapter's known-failures table
(`model_configs/libraries/<package>/data/tables.json`), or UNEXPLAINED.

    .venv/bin/python bench/shrink_coverage_libraries.py [--library timm,open_clip,...]
        [--per-family N] [--workers 2] [--timeout 120] [--jsonl out.jsonl]

timm offers ~1,400 architectures in ~100 families (timm modules); `--per-family N` samples N
of each family, spread over its sorted names (default 3; 0 = all). Each architecture runs in a
forked child with a timeout, as in bench/shrink_coverage.py.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from shrink_coverage import run_jobs  # noqa: E402

LIBRARIES = ("timm", "open_clip", "chronos-forecasting", "sentence-transformers", "ultralytics",
             "pyannote-audio", "speechbrain", "diffusion-single-file")  # fmt: skip


def jobs_for(library: str, per_family: int) -> list[dict[str, Any]]:
    from model_configs.libraries import get_adapter

    adapter = get_adapter(library)
    resolved = list(adapter.iter_architectures())
    if library == "timm" and per_family:
        resolved = _sample_timm(resolved, per_family)
    jobs = []
    for r in resolved:
        key = str(r.config.get("architecture") or r.config.get("model_name")
                  or r.model_id.rsplit("/", 1)[-1])  # fmt: skip
        jobs.append({"key": key, "model_type": _family(library, key, r), "library": library,
                     "resolved": r.__dict__, "save_load": True})  # fmt: skip
    return jobs


def _family(library: str, key: str, resolved: Any) -> str:
    if library == "timm":
        from model_configs.libraries.timm.adapter import family

        return family(key)
    return str(resolved.model_type or key)


def _sample_timm(resolved: list[Any], per_family: int) -> list[Any]:
    from model_configs.libraries.timm.adapter import family

    groups: dict[str, list[Any]] = defaultdict(list)
    for r in resolved:
        groups[family(r.config["architecture"])].append(r)
    picked = []
    for _, members in sorted(groups.items()):
        members = sorted(members, key=lambda r: r.config["architecture"])
        n = len(members)
        idx = sorted({round(i * (n - 1) / max(1, per_family - 1)) for i in range(per_family)})
        picked += [members[i] for i in idx[:per_family]]
    return picked


def report(library: str, rows: list[dict[str, Any]], total_offered: int) -> int:
    """Print the adapter's figures; returns the number of unexplained failures."""
    from model_configs.libraries import get_adapter
    from model_configs.pass_rule import MAX_PARAMS

    known = get_adapter(library).known_failures()
    tried = len(rows)
    built = sum(1 for r in rows if r.get("built"))
    passed = [r for r in rows if r["stage"] == "pass"]
    params = [r["params"] for r in rows if "params" in r]
    secs = [r["seconds"] for r in rows if r.get("seconds") is not None]
    families = {r["model_type"] for r in rows}
    print(f"\n== {library}: {tried} architectures tried (of {total_offered} offered, "
          f"{len(families)} families)")  # fmt: skip
    print(f"   built {built}  passed {len(passed)} ({len(passed) / max(1, tried):.1%}; "
          "target 90%)")  # fmt: skip
    if params:
        print(f"   shrunk params: median {statistics.median(params):,.0f}  max {max(params):,}  "
              f"above {MAX_PARAMS / 1e6:.0f}M: {sum(p > MAX_PARAMS for p in params)}")  # fmt: skip
    if secs:
        print(f"   seconds (build+save/load+forward+backward): median "
              f"{statistics.median(secs):.3f}  max {max(secs):.3f}")  # fmt: skip
    unexplained = 0
    failures = [r for r in rows if r["stage"] != "pass"]
    if failures:
        print("   not passing:")
    for r in sorted(failures, key=lambda r: (r["model_type"], r["key"])):
        why = known.get(r["key"]) or known.get(r["model_type"])
        if why is None:
            unexplained += 1
        label = f"{why['kind']}: {why['reason']}" if why else "UNEXPLAINED"
        print(f"     {r['key']} [{r['model_type']}] {r['stage']}: {(r.get('error') or '')[:140]}")
        print(f"         why: {label}")
    stale = sorted(k for k in known if any(r["stage"] == "pass" and k == r["key"] for r in rows))
    if stale:
        print(f"   listed as known failures but passing now: {', '.join(stale)}")
    print(f"   failures without a reason in the known-failures table: {unexplained}")
    return unexplained


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", default=",".join(LIBRARIES))
    parser.add_argument("--per-family", type=int, default=3)
    parser.add_argument("--only", default="", help="comma-separated architecture names")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--jsonl", type=Path, default=None)
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import torch  # noqa: F401  (imported once, before forking)

    from model_configs.libraries import get_adapter
    from runners.run_model import quiet_libraries

    quiet_libraries()
    only = {k for k in args.only.split(",") if k}
    started = time.time()
    unexplained = 0
    for library in [x for x in args.library.split(",") if x]:
        adapter = get_adapter(library)
        missing = adapter.missing_packages()
        if missing:
            print(f"\n== {library}: skipped, {', '.join(missing)} not installed")
            continue
        t0 = time.time()
        offered = len(list(adapter.iter_architectures()))
        jobs = jobs_for(library, args.per_family)
        if only:
            jobs = [j for j in jobs if j["key"] in only]
        jsonl = args.jsonl.with_suffix(f".{library}.jsonl") if args.jsonl else None
        rows = run_jobs(jobs, workers=max(1, min(args.workers, 2)), timeout=args.timeout,
                        jsonl=jsonl, quiet=args.quiet)  # fmt: skip
        unexplained += report(library, rows, offered)
        print(f"   wall time: {time.time() - t0:.0f} s")
    print(f"\nwall time: {time.time() - started:.0f} s; unexplained failures: {unexplained}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
