"""What running failing models again with the switches of their own code costs, and what it finds.

Runs `hfsweep run` (the real CLI, the bundled offline catalog) twice over the same models, once
with `--alternatives none` and once with `--alternatives auto` (the default), each into its own
run of one store, and prints:
- the wall time of each run and their ratio;
- per model: its default verdict (the same in both runs), the switches tried, which passed,
  and the seconds the alternatives' processes took against the default's own process;
- how many passing models were run again (0 by construction: the cost of a passing model is
  unchanged);
- the next step of each model, as `lookup` prints it.

    python bench/alternatives.py --top 30 --device neuron
    python bench/alternatives.py --models openai/gpt-oss-20b,Qwen/Qwen3-30B-A3B --device neuron
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def sweep(args: argparse.Namespace, store: Path, run_id: str, mode: str) -> float:
    """One `hfsweep run`; its wall time in seconds (exit 1, a model failed, is a result)."""
    what = ["--models", args.models] if args.models else ["--top", str(args.top)]
    command = [
        sys.executable, "-m", "sweep", "run", *what, "--device", args.device,
        "--store", str(store), "--run-id", run_id, "--alternatives", mode, "--no-report",
        *(["--local"] if args.local else []),
    ]  # fmt: skip
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(command)} failed ({proc.returncode}):\n{proc.stderr}")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--models", help="comma-separated catalog ids instead of --top")
    parser.add_argument("--device", default="neuron")
    parser.add_argument("--local", action="store_true", help="no Ray: one model at a time")
    parser.add_argument("--store", help="keep the store here (default: a temporary folder)")
    args = parser.parse_args()

    from reports.models import model_detail
    from reports.query import StoreQuery
    from reports.store import Store

    with tempfile.TemporaryDirectory(prefix="hfsweep-alternatives-") as tmp:
        store = Path(args.store or tmp) / "store"
        seconds = {mode: sweep(args, store, mode, mode) for mode in ("none", "auto")}
        print(
            f"wall time: --alternatives none {seconds['none']:.1f} s, auto {seconds['auto']:.1f} s"
        )
        print(f"ratio auto / none: {seconds['auto'] / seconds['none']:.2f}")
        s = Store(store)
        results = {mode: s.read("results", mode).to_pylist() for mode in ("none", "auto")}
        alternatives = s.read("alternatives", "auto").to_pylist()
        if s.read("alternatives", "none").num_rows:
            raise SystemExit("--alternatives none wrote alternatives rows")
        q = StoreQuery(str(store))
        verdicts = {}
        for mode, rows in results.items():
            by: dict[str, list[dict]] = {}
            for r in rows:
                by.setdefault(r["model_id"], []).append(r)
            verdicts[mode] = {
                m: "pass" if all(r["status"] in ("pass", "skip") for r in v) else "fail"
                for m, v in by.items()
            }
        same = verdicts["none"] == verdicts["auto"]
        print(f"default verdicts the same in both runs: {same}")
        tried_models = {r["model_id"] for r in alternatives if r["dedup_of"] is None}
        passing_tried = [m for m in tried_models if verdicts["auto"].get(m) == "pass"]
        print(
            f"models: {len(verdicts['auto'])}, failing: "
            f"{sum(v == 'fail' for v in verdicts['auto'].values())}, run again: "
            f"{len(tried_models)}, of them passing by default: {len(passing_tried)}"
        )
        extra = 0.0
        default_s = 0.0
        print()
        print(f"{'model':<44} {'default s':>9} {'alt s':>7}  switches tried (passed?)")
        for m in sorted(tried_models):
            own = [r for r in results["auto"] if r["model_id"] == m]
            wall = own[0]["wall_s"] or 0.0
            alts: dict[str, list[dict]] = {}
            for r in alternatives:
                if r["model_id"] == m:
                    alts.setdefault(r["implementation"], []).append(r)
            alt_s = sum(rows[0]["wall_s"] or 0.0 for rows in alts.values())
            extra += alt_s
            default_s += wall
            passed = ", ".join(
                f"{k} ({'yes' if all(r['status'] in ('pass', 'skip') for r in v) else 'no'})"
                for k, v in alts.items()
            )
            print(f"{m:<44} {wall:>9.1f} {alt_s:>7.1f}  {passed}")
        if tried_models:
            print(
                f"alternatives' processes: {extra:.1f} s against the same models' default "
                f"processes {default_s:.1f} s"
            )
        print()
        print("next steps (auto run):")
        for m in sorted(verdicts["auto"]):
            d = model_detail(q, m, "auto")
            if d and d["next_step"]["failure"] != "passes":
                print(f"  {m}: [{d['next_step']['failure']}] {d['next_step']['text']}")


if __name__ == "__main__":
    main()
