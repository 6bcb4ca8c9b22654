"""Dump what the shrinkers and input builders produce, to prove a refactor changes none of it.

For every transformers model type (transformers' default config of each, offline), every
distinct (model type, architecture, task) of the bundled catalog's transformers entries, and
the timm architectures the benches and tests cover (`bench/shrink_coverage_libraries.py`'s
sample of N per family and `tests/test_adapters.py`'s; `--timm-per-family 0`: all), it records the shrunk config, architecture and task,
then builds the tiny model and records the inputs `make_inputs` builds for training and for
generate: each input's name, shape, dtype and a hash of its values (or the error raised).

    .venv/bin/python bench/shrink_inputs_identity.py dump OUT.jsonl [--workers 2]
        [--timm-per-family 3] [--only llama,bert] [--no-catalog] [--no-timm]
    .venv/bin/python bench/shrink_inputs_identity.py compare BEFORE.jsonl AFTER.jsonl

`compare` prints how many entries each side has, how many are identical (shrunk config and
inputs, values included), and each one that differs. Each entry runs in a forked child with a
timeout, as in bench/shrink_coverage.py.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from shrink_coverage import CATALOG, catalog_jobs, default_jobs, run_jobs  # noqa: E402
from shrink_coverage_libraries import _sample_timm  # noqa: E402


def describe(value: Any) -> Any:
    """A tensor as [shape, dtype, hash of its bytes]; anything else as its repr."""
    import torch

    if isinstance(value, torch.Tensor):
        data = value.detach().cpu().contiguous().reshape(-1)
        raw = data.view(torch.uint8).numpy().tobytes() if data.numel() else b""
        return [list(value.shape), str(value.dtype), hashlib.sha1(raw).hexdigest()[:16]]
    if isinstance(value, (list, tuple)):
        return [describe(v) for v in value]
    if isinstance(value, dict):
        return {str(k): describe(v) for k, v in value.items()}
    return repr(value)


def dump_one(job: dict[str, Any]) -> dict[str, Any]:
    """Shrink, build, make inputs for one job; a row of what came out (never raises)."""
    import torch

    torch.set_num_threads(1)
    from model_configs.build import build_model, make_inputs
    from model_configs.shrink import shrink
    from model_configs.spec import ResolvedConfig

    row: dict[str, Any] = {"key": job["key"], "model_type": job["model_type"], "stage": "shrink"}
    try:
        spec = shrink(
            ResolvedConfig(**job["resolved"]),
            architecture_hint=job.get("architecture_hint"),
            pipeline_tag=job.get("pipeline_tag"),
        )
        row["spec"] = {
            "architecture": spec.architecture,
            "task": spec.task,
            "model_type": spec.model_type,
            "config": json.loads(json.dumps(spec.config, sort_keys=True, default=str)),
        }
        row["stage"] = "build"
        model = build_model(spec)
        row["stage"] = "inputs"
        for purpose in ("train", "generate"):
            try:
                inputs = make_inputs(spec, model, purpose=purpose)
                row[f"inputs_{purpose}"] = {k: describe(v) for k, v in sorted(inputs.items())}
            except Exception as exc:
                row[f"inputs_{purpose}"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        row["stage"] = "done"
    except BaseException as exc:  # a model's failure is data here
        row["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        row["trace"] = traceback.format_exc(limit=-2)[-600:]
    return row


def timm_jobs(per_family: int) -> list[dict[str, Any]]:
    from model_configs.libraries import get_adapter

    resolved = list(get_adapter("timm").iter_architectures())
    if per_family:  # the benches' sample, and the architectures the tests name
        from tests.test_adapters import TIMM_SAMPLE

        named = {r.config["architecture"]: r for r in resolved}
        picked = _sample_timm(resolved, per_family)
        seen = {r.config["architecture"] for r in picked}
        resolved = picked + [named[a] for a in TIMM_SAMPLE if a in named and a not in seen]
    return [
        {"key": f"timm:{r.config['architecture']}", "model_type": "timm", "resolved": r.__dict__}
        for r in resolved
    ]


def dump(args: argparse.Namespace) -> int:
    only = set(args.only.split(",")) if args.only else None
    jobs = [{**j, "key": f"type:{j['key']}"} for j in default_jobs(only)]
    if args.catalog and CATALOG.is_file():
        jobs += [{**j, "key": f"catalog:{j['key']}"} for j in catalog_jobs(only)[0]]
    if args.timm:
        jobs += timm_jobs(args.timm_per_family)
    rows = run_jobs(
        jobs, workers=args.workers, timeout=args.timeout, jsonl=None, quiet=True, run=dump_one
    )
    with Path(args.out).open("w") as fh:
        for row in sorted(rows, key=lambda r: r["key"]):
            row.pop("trace", None)
            fh.write(json.dumps(row, sort_keys=True) + "\n")
    kinds = Counter(r["key"].split(":", 1)[0] for r in rows)
    print(f"{len(rows)} entries ({', '.join(f'{k} {n}' for k, n in sorted(kinds.items()))}); "
          f"{sum(r['stage'] == 'done' for r in rows)} shrunk, built and fed")  # fmt: skip
    return 0


def compare(args: argparse.Namespace) -> int:
    def load(path: str) -> dict[str, dict[str, Any]]:
        return {(r := json.loads(line))["key"]: r for line in Path(path).open()}

    before, after = load(args.before), load(args.after)
    keys = sorted(set(before) | set(after))
    differ = [k for k in keys if before.get(k) != after.get(k)]
    for kind in sorted({k.split(":", 1)[0] for k in keys}):
        mine = [k for k in keys if k.startswith(kind + ":")]
        fed = sum(1 for k in mine if (before.get(k) or {}).get("stage") == "done")
        shrunk = sum(1 for k in mine if "spec" in (before.get(k) or {}))
        same = sum(1 for k in mine if k not in differ)
        print(f"{kind}: {len(mine)} entries, {shrunk} shrunk, {fed} built and fed; "
              f"identical {same}, differ {len(mine) - same}")  # fmt: skip
    for k in differ:
        a, b = before.get(k) or {}, after.get(k) or {}
        fields = sorted(f for f in set(a) | set(b) if a.get(f) != b.get(f))
        print(f"  differs: {k} ({', '.join(fields)})")
    print(f"total: {len(keys)} entries, {len(keys) - len(differ)} identical, {len(differ)} differ")
    return 1 if differ else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("dump")
    d.add_argument("out")
    d.add_argument("--workers", type=int, default=2)
    d.add_argument("--timeout", type=float, default=180)
    d.add_argument("--only", default=None, help="transformers model types, comma-separated")
    d.add_argument("--timm-per-family", type=int, default=3)
    d.add_argument("--no-catalog", dest="catalog", action="store_false")
    d.add_argument("--no-timm", dest="timm", action="store_false")
    c = sub.add_parser("compare")
    c.add_argument("before")
    c.add_argument("after")
    args = parser.parse_args(argv)
    return dump(args) if args.command == "dump" else compare(args)


if __name__ == "__main__":
    sys.exit(main())
