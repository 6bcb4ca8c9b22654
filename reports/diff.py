"""Run-over-run diff: which models changed outcome between two runs, and what else changed.

Categories (each model of either run lands in exactly one):
- `newly_failing`: passed in A, failed in B (and something changed: versions or its config);
- `newly_passing`: failed in A, passed in B (same condition);
- `flaky`: passed in one run and failed in the other while the software versions and the
  model's shrunk config are identical: nothing changed but the result did;
- `still_failing`, `still_passing`, `still_skipped`;
- `other_change`: any other change of outcome (e.g. skipped <-> attempted);
- `added` / `removed`: in only one of the runs.

Where either run swept several dtypes, a "model" above is a model at one dtype (`by_dtype`).
"""

from __future__ import annotations

from typing import Any

from ground import schema
from reports.coverage import device_label
from reports.query import OUTCOME_FAILED, OUTCOME_PASSED, OUTCOME_SKIPPED, StoreQuery

# What two runs are compared on: the versions (ground.schema), then the device's settings.
VERSION_FIELDS = (
    *schema.VERSION_FIELDS,
    "device",
    "device_emulated",
    "device_profile",
    "device_profile_hash",
    "dtype",
)
CATEGORIES = (
    "newly_failing",
    "newly_passing",
    "flaky",
    "still_failing",
    "still_passing",
    "still_skipped",
    "other_change",
    "added",
    "removed",
)


def version_changes(q: StoreQuery, run_a: str, run_b: str) -> list[dict[str, Any]]:
    a = q.run_info(run_a) or {}
    b = q.run_info(run_b) or {}
    return [
        {"field": f, "a": a.get(f), "b": b.get(f)} for f in VERSION_FIELDS if a.get(f) != b.get(f)
    ]


def resolve_known_run(q: StoreQuery, run_id: str) -> str:
    """`run_id` if the store has results for it or a row in its runs table, else StoreError."""
    if run_id in {r["run_id"] for r in q.runs()}:
        return run_id
    return q.resolve_run(run_id)  # raises, naming the runs it knows


def run_diff(q: StoreQuery, run_a: str, run_b: str, *, limit: int = 200) -> dict[str, Any]:
    """Counts, downloads and (up to `limit`, most downloaded first) models per category. A run
    in the runs table with no results yet (interrupted before its first part) has no models:
    everything of the other run is added or removed."""
    run_a, run_b = resolve_known_run(q, run_a), resolve_known_run(q, run_b)

    def build() -> dict[str, Any]:
        q.ensure_summaries([run_a, run_b])
        versions = version_changes(q, run_a, run_b)
        same_software = not versions
        # runs of one dtype each compare model by model (a dtype change is a setting that
        # changed); where either swept several, model and dtype by model and dtype
        by_dtype = len(q.run_dtypes(run_a)) > 1 or len(q.run_dtypes(run_b)) > 1
        join = "ON a.model_id = b.model_id" + (" AND a.dtype = b.dtype" if by_dtype else "")
        rows = q.fetch(
            f"""
            WITH a AS (SELECT * FROM model_runs WHERE run_id = $a),
                 b AS (SELECT * FROM model_runs WHERE run_id = $b)
            SELECT coalesce(b.model_id, a.model_id) AS model_id,
              coalesce(b.dtype, a.dtype) AS dtype,
              coalesce(b.downloads, a.downloads) AS downloads,
              a.outcome AS outcome_a, b.outcome AS outcome_b,
              a.failed_stage AS failed_stage_a, b.failed_stage AS failed_stage_b,
              a.failed_status AS failed_status_a, b.failed_status AS failed_status_b,
              a.error_signature AS signature_a, b.error_signature AS signature_b,
              a.failing_op AS failing_op_a, b.failing_op AS failing_op_b,
              a.error_type AS error_type_a, b.error_type AS error_type_b,
              a.error_message AS error_message_a, b.error_message AS error_message_b,
              a.shrunk_config_hash IS NOT DISTINCT FROM b.shrunk_config_hash AS same_config,
              CASE
                WHEN a.model_id IS NULL THEN 'added'
                WHEN b.model_id IS NULL THEN 'removed'
                WHEN a.outcome = '{OUTCOME_PASSED}' AND b.outcome = '{OUTCOME_FAILED}'
                  THEN CASE WHEN $same AND a.shrunk_config_hash IS NOT DISTINCT FROM
                    b.shrunk_config_hash THEN 'flaky' ELSE 'newly_failing' END
                WHEN a.outcome = '{OUTCOME_FAILED}' AND b.outcome = '{OUTCOME_PASSED}'
                  THEN CASE WHEN $same AND a.shrunk_config_hash IS NOT DISTINCT FROM
                    b.shrunk_config_hash THEN 'flaky' ELSE 'newly_passing' END
                WHEN a.outcome = '{OUTCOME_FAILED}' AND b.outcome = '{OUTCOME_FAILED}'
                  THEN 'still_failing'
                WHEN a.outcome = '{OUTCOME_PASSED}' AND b.outcome = '{OUTCOME_PASSED}'
                  THEN 'still_passing'
                WHEN a.outcome = '{OUTCOME_SKIPPED}' AND b.outcome = '{OUTCOME_SKIPPED}'
                  THEN 'still_skipped'
                WHEN a.outcome = b.outcome THEN 'still_' || a.outcome
                ELSE 'other_change'
              END AS category
            FROM a FULL OUTER JOIN b {join}
            """,
            {"a": run_a, "b": run_b, "same": same_software},
        )
        summary = {c: {"models": 0, "downloads": 0} for c in CATEGORIES}
        listed: dict[str, list[dict[str, Any]]] = {c: [] for c in CATEGORIES}
        rows.sort(key=lambda r: (-(r["downloads"] or 0), r["model_id"], r["dtype"] or ""))
        for r in rows:
            cat = r["category"]
            if cat not in summary:  # e.g. still_partial
                summary[cat] = {"models": 0, "downloads": 0}
                listed[cat] = []
            summary[cat]["models"] += 1
            summary[cat]["downloads"] += r["downloads"] or 0
            if len(listed[cat]) < limit and not cat.startswith("still_passing"):
                listed[cat].append(r)
        devices = {
            r["run_id"]: device_label(r["device"], r["emulated"])
            for r in q.fetch(
                "SELECT run_id, any_value(device) AS device, bool_or(device_emulated) AS emulated "
                "FROM model_runs WHERE run_id IN ($a, $b) GROUP BY run_id",
                {"a": run_a, "b": run_b},
            )
        }
        for run in (run_a, run_b):  # a run with no results: its device from the runs table
            info = q.run_info(run) or {}
            if run not in devices and info.get("device"):
                devices[run] = device_label(info["device"], info.get("device_emulated"))
        return {
            "run_a": run_a,
            "run_b": run_b,
            "device_a": devices.get(run_a),
            "device_b": devices.get(run_b),
            "by_dtype": by_dtype,
            "version_changes": versions,
            "summary": summary,
            "models": listed,
        }

    return q.memo("diff", run_b, build, run_a, q.fingerprint(run_a), limit)
