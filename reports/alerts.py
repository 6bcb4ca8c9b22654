"""What a nightly run alerts on: a model that passed the night before and fails tonight.

The previous night is found in the runs table: the newest earlier run of the same nightly series
(`runs.nightly`) that finished (or ended `incomplete`: every model it has rows for is whole). A
run that was interrupted is no baseline: its missing models would look like changes.

Rules, applied to the diff of the previous night against tonight (`reports.diff.run_diff`):
- **regression** (alerts): the model passed every applicable stage last night and fails one
  tonight (`fail`, `fail_accuracy`, `crash` or `oom`), whatever else changed;
- **flake** (no alert): it failed last night and passes tonight, or it passed last night and
  tonight's failure is a `timeout` (a slow or starved worker, not the model);
- everything else (still failing, newly skipped, added, removed) is in the diff and never alerts.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ground.schema import Status
from reports.query import OUTCOME_FAILED, OUTCOME_PASSED

BASELINE_STATUSES = ("finished", "incomplete")


def previous_night(runs: Iterable[dict[str, Any]], series: str, run_id: str) -> str | None:
    """The run id of the newest run of `series` started before `run_id` that can be compared
    with (`BASELINE_STATUSES`); None on the series' first night. `runs`: the store's runs."""
    rows = list(runs)
    tonight = next((r for r in rows if r["run_id"] == run_id), None)
    started = tonight.get("started_at") if tonight else None
    earlier = [
        r
        for r in rows
        if r["run_id"] != run_id
        and r.get("nightly") == series
        and r.get("status") in BASELINE_STATUSES
        and (started is None or (r.get("started_at") or started) < started)
    ]
    if not earlier:
        return None
    return str(max(earlier, key=lambda r: (r.get("started_at"), r["run_id"]))["run_id"])


def changed_models(diff: dict[str, Any]) -> Iterable[dict[str, Any]]:
    for models in diff["models"].values():
        yield from models


def regressions(diff: dict[str, Any]) -> list[dict[str, Any]]:
    """Models that passed in run A and fail in run B on anything but a timeout."""
    return [
        m
        for m in changed_models(diff)
        if m["outcome_a"] == OUTCOME_PASSED
        and m["outcome_b"] == OUTCOME_FAILED
        and m.get("failed_status_b") != Status.TIMEOUT.value
    ]


def flakes(diff: dict[str, Any]) -> list[dict[str, Any]]:
    """Changes that do not alert: failed in A and passes in B, or passed in A and timed out
    in B."""
    return [
        m
        for m in changed_models(diff)
        if (m["outcome_a"] == OUTCOME_FAILED and m["outcome_b"] == OUTCOME_PASSED)
        or (
            m["outcome_a"] == OUTCOME_PASSED
            and m["outcome_b"] == OUTCOME_FAILED
            and m.get("failed_status_b") == Status.TIMEOUT.value
        )
    ]


def describe(model: dict[str, Any]) -> str:
    """`org/name: passed -> fail at forward (aten::foo)`: one line for an alert."""
    status = model.get("failed_status_b") or model["outcome_b"]
    where = f" at {model['failed_stage_b']}" if model.get("failed_stage_b") else ""
    what = model.get("failing_op_b") or model.get("error_type_b") or ""
    return f"{model['model_id']}: {model['outcome_a']} -> {status}{where}" + (
        f" ({what})" if what else ""
    )
