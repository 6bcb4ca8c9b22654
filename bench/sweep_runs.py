"""What the stage benches share (bench/training_stages.py, bench/distributed_stages.py): a
sweep that resumes by run id, each (model, stage)'s last attempt, and the figures' formats."""

from __future__ import annotations

import time
from typing import Any


def pct(part: float | None, whole: float | None) -> str:
    return "-" if not whole or part is None else f"{100.0 * part / whole:.1f}%"


def dl(n: float | None) -> str:
    return "-" if n is None else f"{n / 1e6:.1f}M"


def resumable_sweep(
    *, store: str, run_id: str, top: int, num_cpus: int | None, task: Any
) -> tuple[str, float]:
    """Run the top `top` models with `task` (ModelSettings) as `run_id`, resuming it; a run
    already finished is not run again (0 s)."""
    from reports.store import Store
    from sweep.driver import run_sweep
    from sweep.settings import JobSettings, ModelRun

    run = Store(store).run(run_id)
    if run is not None and run.get("status") == "finished":
        return run_id, 0.0
    start = time.perf_counter()
    job = JobSettings(store=store, run_id=run_id, num_cpus=num_cpus, progress=False)
    run_sweep(ModelRun(job=job, task=task, top=top))
    return run_id, time.perf_counter() - start


def last_attempts(store: Any, run_id: str) -> dict[str, dict[str, dict[str, Any]]]:
    """model -> stage -> the row of its last attempt."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for r in store.read("results", run_id).to_pylist():
        current = out.setdefault(r["model_id"], {}).get(r["stage"])
        if current is None or (r["attempt"] or 0) >= (current["attempt"] or 0):
            out[r["model_id"]][r["stage"]] = r
    return out
