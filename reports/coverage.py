"""Coverage of one run: denominators, the stage funnel, breakdowns, the headline, and coverage
over runs. Every figure is given as a model count and as downloads, out of a stated base.

The base of every share is the run's models (every model with rows in the run, skipped ones
included), so the denominator never shrinks silently; `denominators` says how that base relates
to the catalog and to what the run was asked for.
"""

from __future__ import annotations

import re
from typing import Any

from ground import fmt
from ground.schema import FAILED_STATUSES, SkipReason
from ground.sizing_columns import DEFAULT_CONFIG_SOURCES
from reports.query import (
    IN_DTYPE,
    OUTCOME_FAILED,
    OUTCOME_PARTIAL,
    OUTCOME_PASSED,
    OUTCOME_SKIPPED,
    STAGES,
    Scan,
    StoreQuery,
)
from runners import stages as stage_registry

BREAKDOWN_KEYS = ("library", "pipeline_tag", "model_type", "architecture")
_NA = SkipReason.NOT_APPLICABLE.value
HEADLINE_TASK = "text-generation"
HEADLINE_TOP = 100


# Per-group model counts by outcome, and the passed / entirely-on-device models and downloads.
_OUTCOME_COUNTS = f"""
  count(*) FILTER (WHERE outcome = '{OUTCOME_SKIPPED}') AS skipped,
  count(*) FILTER (WHERE outcome = '{OUTCOME_FAILED}') AS failed,
  count(*) FILTER (WHERE outcome = '{OUTCOME_PARTIAL}') AS partial,
  count(*) FILTER (WHERE outcome = '{OUTCOME_PASSED}') AS passed,
  coalesce(sum(downloads) FILTER (WHERE outcome = '{OUTCOME_PASSED}'), 0) AS passed_downloads,
  count(*) FILTER (WHERE outcome = '{OUTCOME_PASSED}' AND fallback_ops = 0
    AND fallback_calls = 0) AS on_device,
  coalesce(sum(downloads) FILTER (WHERE outcome = '{OUTCOME_PASSED}'
    AND fallback_ops = 0 AND fallback_calls = 0), 0) AS on_device_downloads"""


def share(part: float | int | None, whole: float | int | None) -> float | None:
    """part / whole, or None when the whole is 0 / unknown."""
    if not whole or part is None:
        return None
    return float(part) / float(whole)


def _totals(q: StoreQuery, run_id: str, dtype: str | None) -> dict[str, Any]:
    q.ensure_summaries([run_id])
    rows = q.fetch(
        f"""
        SELECT count(*) AS models, coalesce(sum(downloads), 0) AS downloads,
          count(*) FILTER (WHERE outcome = '{OUTCOME_SKIPPED}') AS skipped,
          coalesce(sum(downloads) FILTER (WHERE outcome = '{OUTCOME_SKIPPED}'), 0)
            AS skipped_downloads,
          count(*) FILTER (WHERE outcome = '{OUTCOME_FAILED}') AS failed,
          coalesce(sum(downloads) FILTER (WHERE outcome = '{OUTCOME_FAILED}'), 0)
            AS failed_downloads,
          count(*) FILTER (WHERE outcome = '{OUTCOME_PARTIAL}') AS partial,
          coalesce(sum(downloads) FILTER (WHERE outcome = '{OUTCOME_PARTIAL}'), 0)
            AS partial_downloads,
          count(*) FILTER (WHERE outcome = '{OUTCOME_PASSED}') AS passed,
          coalesce(sum(downloads) FILTER (WHERE outcome = '{OUTCOME_PASSED}'), 0)
            AS passed_downloads,
          count(*) FILTER (WHERE outcome = '{OUTCOME_PASSED}' AND fallback_ops = 0
            AND fallback_calls = 0) AS on_device,
          coalesce(sum(downloads) FILTER (WHERE outcome = '{OUTCOME_PASSED}'
            AND fallback_ops = 0 AND fallback_calls = 0), 0) AS on_device_downloads,
          bool_or(device_emulated) AS device_emulated,
          any_value(device) AS device,
          any_value(dtype) AS dtype
        FROM model_runs WHERE run_id = $run AND {IN_DTYPE}
        """,
        {"run": run_id, "dtype": dtype},
    )
    return rows[0]


def device_label(device: str | None, emulated: bool | None) -> str:
    """`neuron (emulated)` for emulated devices: emulated results never pass for real ones."""
    name = device or "unknown device"
    return f"{name} (emulated)" if emulated else name


def _by_skip_reason(
    q: StoreQuery, run_id: str, outcome: str, dtype: str | None
) -> list[dict[str, Any]]:
    """Models of one outcome in a run, grouped by skip reason, with their downloads."""
    return q.fetch(
        f"""
        SELECT coalesce(skip_reason, 'unknown') AS reason, count(*) AS models,
          coalesce(sum(downloads), 0) AS downloads
        FROM model_runs WHERE run_id = $run AND {IN_DTYPE} AND outcome = $outcome
        GROUP BY ALL ORDER BY models DESC, reason
        """,
        {"run": run_id, "dtype": dtype, "outcome": outcome},
    )


def denominators(q: StoreQuery, run_id: str, dtype: str | None = None) -> dict[str, Any]:
    """What was counted, out of what: catalog, requested, in the store, skipped by reason,
    failed by stage and status, passed with and without CPU fallback; counts and downloads.
    `dtype`: the models' rows at that dtype (None: every row of the run, its one dtype)."""

    def build() -> dict[str, Any]:
        t = _totals(q, run_id, dtype)
        run = q.run_info(run_id) or {}
        skipped = _by_skip_reason(q, run_id, OUTCOME_SKIPPED, dtype)
        failed = q.fetch(
            f"""
            SELECT failed_stage AS stage, failed_status AS status, count(*) AS models,
              coalesce(sum(downloads), 0) AS downloads
            FROM model_runs WHERE run_id = $run AND {IN_DTYPE} AND outcome = '{OUTCOME_FAILED}'
            GROUP BY failed_stage, failed_status
            ORDER BY list_position({list(STAGES)}, failed_stage), models DESC, failed_status
            """,
            {"run": run_id, "dtype": dtype},
        )
        partial = _by_skip_reason(q, run_id, OUTCOME_PARTIAL, dtype)
        sources = q.fetch(
            f"""
            SELECT coalesce(config_source, 'none') AS source, count(*) AS models,
              coalesce(sum(downloads), 0) AS downloads
            FROM model_runs WHERE run_id = $run AND {IN_DTYPE} AND outcome <> '{OUTCOME_SKIPPED}'
            GROUP BY ALL ORDER BY models DESC, source
            """,
            {"run": run_id, "dtype": dtype},
        )
        for r in sources:
            r["default"] = r["source"] in DEFAULT_CONFIG_SOURCES
        from_default = [r for r in sources if r["default"]]
        reused = q.fetch(
            f"""
            SELECT reused_from AS run_id, count(*) AS models,
              coalesce(sum(downloads), 0) AS downloads
            FROM model_runs WHERE run_id = $run AND {IN_DTYPE} AND reused_from IS NOT NULL
            GROUP BY reused_from ORDER BY models DESC, reused_from
            """,
            {"run": run_id, "dtype": dtype},
        )
        requested = run.get("models_requested")
        emulated = bool(t["device_emulated"]) or bool(run.get("device_emulated"))
        device = t["device"] or run.get("device")
        return {
            "run_id": run_id,
            "run_status": run.get("status", "unknown"),
            "device": device,
            "device_emulated": emulated,
            "device_label": device_label(device, emulated),
            "device_profile_torch": run.get("device_profile_torch"),
            "device_torch": run.get("device_torch"),
            "dtype": dtype or t["dtype"] or run.get("dtype"),
            "catalog": run.get("catalog"),
            "catalog_size": run.get("catalog_size"),
            "catalog_date": catalog_date(run.get("catalog"), run.get("started_at")),
            "models_requested": requested,
            "models": t["models"],
            "downloads": t["downloads"],
            "not_yet_in_store": (requested - t["models"]) if requested is not None else None,
            "swept": t["models"] - t["skipped"],
            "swept_downloads": t["downloads"] - t["skipped_downloads"],
            "skipped": t["skipped"],
            "skipped_downloads": t["skipped_downloads"],
            "skipped_by_reason": skipped,
            "failed": t["failed"],
            "failed_downloads": t["failed_downloads"],
            "failed_by_stage": failed,
            "partial": t["partial"],
            "partial_downloads": t["partial_downloads"],
            "partial_by_reason": partial,
            "passed": t["passed"],
            "passed_downloads": t["passed_downloads"],
            "passed_on_device": t["on_device"],
            "passed_on_device_downloads": t["on_device_downloads"],
            "passed_with_fallback": t["passed"] - t["on_device"],
            "passed_with_fallback_downloads": t["passed_downloads"] - t["on_device_downloads"],
            "swept_by_config_source": sources,
            "built_from_default": sum(r["models"] for r in from_default),
            "built_from_default_downloads": sum(r["downloads"] for r in from_default),
            "quantized": quantized_checkpoints(q, run_id, dtype),
            # swept models whose rows were copied from an earlier run (`--reuse`), per run
            "reused": sum(r["models"] for r in reused),
            "reused_downloads": sum(r["downloads"] for r in reused),
            "reused_by_run": reused,
        }

    return q.memo("denominators", run_id, build, dtype)


def quantized_checkpoints(q: StoreQuery, run_id: str, dtype: str | None = None) -> dict[str, Any]:
    """Quantized checkpoints as their own denominator: per method (the rows' `quantization`),
    models and downloads run and skipped, and how far the run ones got (stages passed)."""
    q.ensure_summaries([run_id])
    stage_counts = ",\n".join(
        f"count(*) FILTER (WHERE s_{stage} = 'pass') AS \"{stage}\"" for stage in STAGES
    )
    rows = q.fetch(
        f"""
        SELECT quantization AS method, count(*) AS models, coalesce(sum(downloads), 0) AS downloads,
          count(*) FILTER (WHERE outcome <> '{OUTCOME_SKIPPED}') AS run,
          coalesce(sum(downloads) FILTER (WHERE outcome <> '{OUTCOME_SKIPPED}'), 0) AS run_downloads,
          count(*) FILTER (WHERE outcome = '{OUTCOME_SKIPPED}') AS skipped,
          coalesce(sum(downloads) FILTER (WHERE outcome = '{OUTCOME_SKIPPED}'), 0)
            AS skipped_downloads,
          count(*) FILTER (WHERE outcome = '{OUTCOME_PASSED}') AS passed,
          coalesce(sum(downloads) FILTER (WHERE outcome = '{OUTCOME_PASSED}'), 0)
            AS passed_downloads,
          list_sort(list(DISTINCT skip_reason) FILTER (WHERE outcome = '{OUTCOME_SKIPPED}'))
            AS skip_reasons,
          {stage_counts}
        FROM model_runs WHERE run_id = $run AND {IN_DTYPE} AND quantization IS NOT NULL
        GROUP BY quantization ORDER BY models DESC, method
        """,
        {"run": run_id, "dtype": dtype},
    )
    for r in rows:
        r["stages_passed"] = {stage: r.pop(stage) for stage in STAGES}
        r["skip_reasons"] = [x for x in (r["skip_reasons"] or []) if x]
    total = {k: sum(r[k] for r in rows) for k in (
        "models", "downloads", "run", "run_downloads", "skipped", "skipped_downloads",
        "passed", "passed_downloads",
    )}  # fmt: skip
    return {**total, "by_method": rows}


def run_stages(q: StoreQuery, run_id: str) -> list[str]:
    """The stages a run reports, in order: those it asked for (its run row; the default ones
    for a run without one) and any other it has rows for."""

    def build() -> list[str]:
        q.ensure_summaries([run_id])
        counts = q.fetch(
            "SELECT "
            + ", ".join(f'count(s_{stage}) AS "{stage}"' for stage in STAGES)
            + " FROM model_runs WHERE run_id = $run",
            {"run": run_id},
        )[0]
        asked = (q.run_info(run_id) or {}).get("stages")
        wanted = (
            set(asked.split(",")) if asked else {s.value for s in stage_registry.default_stages()}
        )
        return [s for s in STAGES if s in wanted or counts[s]]

    return q.memo("run_stages", run_id, build)


def stage_counts(
    q: StoreQuery, run_id: str, stages: tuple[str, ...] | list[str], dtype: str | None = None
) -> dict[str, Any]:
    """Per stage of `stages`, the run's models (and downloads) by that stage's status, in one
    query: the base of every stage group's section (the funnel, fine-tuning, sharding, the
    Hugging Face training stack). `models` / `downloads`: the run's (at `dtype`).

    Each stage's counts: `rows` (models with a row for it), `applies` (not a `not_applicable`
    skip), `attempted` (passed or failed), `passed`, `no_fallback` (passed with no op falling
    back to the CPU in it), `failed`, `not_run`, and `skipped`: the stage skipped for a model
    the run swept (not applicable, or the device's reason). A model the run skipped whole is
    counted once, in `denominators`' skipped, not again under each of its stages. The model
    counts come with their downloads (`<count>_downloads`)."""

    def build() -> dict[str, Any]:
        q.ensure_summaries([run_id])
        failed = f"s_{{s}} IN ({_in(FAILED_STATUSES)})"
        conditions = {
            "rows": "s_{s} IS NOT NULL",
            "applies": "NOT n_{s}",
            "attempted": f"s_{{s}} = 'pass' OR {failed}",
            "passed": "s_{s} = 'pass'",
            "no_fallback": "s_{s} = 'pass' AND coalesce(f_{s}, 0) = 0",
            "failed": failed,
            "not_run": "s_{s} = 'not_run'",
            "skipped": f"s_{{s}} = 'skip' AND outcome <> '{OUTCOME_SKIPPED}'",
        }
        columns = [
            f'count(*) FILTER (WHERE {where.format(s=s)}) AS "{s}.{name}", '
            f"coalesce(sum(downloads) FILTER (WHERE {where.format(s=s)}), 0) "
            f'AS "{s}.{name}_downloads"'
            for s in stages
            for name, where in conditions.items()
        ]
        row = q.fetch(
            "SELECT count(*) AS models, coalesce(sum(downloads), 0) AS downloads"
            + "".join(f", {c}" for c in columns)
            + f" FROM model_runs WHERE run_id = $run AND {IN_DTYPE}",
            {"run": run_id, "dtype": dtype},
        )[0]
        return {
            "models": row["models"],
            "downloads": row["downloads"],
            "stages": {
                s: {
                    key: row[f"{s}.{key}"]
                    for name in conditions
                    for key in (name, f"{name}_downloads")
                }
                for s in stages
            },
        }

    return q.memo("stage_counts", run_id, build, tuple(stages), dtype)


def stage_line(
    stage: str, counts: dict[str, Any], models: int, downloads: int, **more: Any
) -> dict[str, Any]:
    """One stage's line of a section: its `stage_counts`, with the passed and no-fallback
    shares of `models` / `downloads` (the section's base), then `more`."""
    return {
        **more,
        "stage": stage,
        **counts,
        "passed_share": share(counts["passed"], models),
        "passed_downloads_share": share(counts["passed_downloads"], downloads),
        "no_fallback_share": share(counts["no_fallback"], models),
        "no_fallback_downloads_share": share(counts["no_fallback_downloads"], downloads),
    }


def stage_group(
    q: StoreQuery,
    run_id: str,
    stages: tuple[str, ...],
    labels: dict[str, str],
    dtype: str | None = None,
) -> dict[str, Any]:
    """A stage group's section head: whether the run asked for any of its `stages` (`ran`),
    the run's models and downloads (every share's base), and a `stage_line` per stage, with
    its label."""
    counts = stage_counts(q, run_id, stages, dtype)
    models, downloads = counts["models"], counts["downloads"]
    lines = [
        stage_line(s, c, models, downloads, label=labels[s]) for s, c in counts["stages"].items()
    ]
    return {
        "ran": any(line["rows"] for line in lines),
        "models": models,
        "downloads": downloads,
        "stages": lines,
    }


def funnel(q: StoreQuery, run_id: str, dtype: str | None = None) -> list[dict[str, Any]]:
    """One line per stage of the run (models that passed it; and of those, with no CPU fallback
    in it), then "every stage" and "every stage, no CPU fallback". Shares are of the run's
    models (`dtype`: of that dtype's rows of a run of several)."""

    def build() -> list[dict[str, Any]]:
        stages = run_stages(q, run_id)
        counts = stage_counts(q, run_id, stages, dtype)["stages"]
        d = denominators(q, run_id, dtype)
        models, downloads = d["models"], d["downloads"]
        # a stage's shares are of the models it applies to (generate: not the encoders)
        lines = [
            stage_line(stage, c, c["applies"], c["applies_downloads"], line=stage)
            for stage, c in counts.items()
        ]
        for line, count, dl in (
            ("every stage", d["passed"], d["passed_downloads"]),
            (
                "every stage, no CPU fallback",
                d["passed_on_device"],
                d["passed_on_device_downloads"],
            ),
        ):
            lines.append(
                {
                    "line": line,
                    "stage": None,
                    "applies": models,
                    "applies_downloads": downloads,
                    "attempted": d["swept"],
                    "passed": count,
                    "passed_downloads": dl,
                    "passed_share": share(count, models),
                    "passed_downloads_share": share(dl, downloads),
                }
            )
        return lines

    return q.memo("funnel", run_id, build, dtype)


def band(q: StoreQuery, run_id: str, dtype: str | None = None) -> dict[str, Any]:
    """Compile, and every stage, as a band: what passes with evidence for every compiler verdict
    ("lowers with evidence") and what passes at most ("unless the unverified ops fail": some
    graph op had no evidence either way, `compile_evidence = none`). Counts and downloads, of
    the run's models; `recorded` is false where no row carries compiler evidence (a device
    whose compiler reports none, or a store written before it was recorded): then the band
    is no band."""

    def build() -> dict[str, Any]:
        q.ensure_summaries([run_id])
        row = q.fetch(
            f"""
            SELECT
              count(*) FILTER (WHERE s_compile = 'pass') AS compile_at_most,
              coalesce(sum(downloads) FILTER (WHERE s_compile = 'pass'), 0)
                AS compile_at_most_downloads,
              count(*) FILTER (WHERE s_compile = 'pass' AND NOT unverified) AS compile_with_evidence,
              coalesce(sum(downloads) FILTER (WHERE s_compile = 'pass' AND NOT unverified), 0)
                AS compile_with_evidence_downloads,
              count(*) FILTER (WHERE outcome = '{OUTCOME_PASSED}') AS every_at_most,
              coalesce(sum(downloads) FILTER (WHERE outcome = '{OUTCOME_PASSED}'), 0)
                AS every_at_most_downloads,
              count(*) FILTER (WHERE outcome = '{OUTCOME_PASSED}' AND NOT unverified)
                AS every_with_evidence,
              coalesce(sum(downloads) FILTER (WHERE outcome = '{OUTCOME_PASSED}'
                AND NOT unverified), 0) AS every_with_evidence_downloads,
              count(*) FILTER (WHERE unverified) AS unverified_models,
              coalesce(sum(downloads) FILTER (WHERE unverified), 0) AS unverified_downloads,
              coalesce(bool_or(evidence_recorded), false) AS recorded
            FROM model_runs WHERE run_id = $run AND {IN_DTYPE}
            """,
            {"run": run_id, "dtype": dtype},
        )[0]
        d = denominators(q, run_id, dtype)
        lines = []
        for key, label in (("compile", "compile"), ("every", "every stage")):
            low, high = row[f"{key}_with_evidence"], row[f"{key}_at_most"]
            low_dl, high_dl = row[f"{key}_with_evidence_downloads"], row[f"{key}_at_most_downloads"]
            lines.append(
                {
                    "line": label,
                    "with_evidence": low,
                    "with_evidence_downloads": low_dl,
                    "with_evidence_share": share(low, d["models"]),
                    "with_evidence_downloads_share": share(low_dl, d["downloads"]),
                    "at_most": high,
                    "at_most_downloads": high_dl,
                    "at_most_share": share(high, d["models"]),
                    "at_most_downloads_share": share(high_dl, d["downloads"]),
                }
            )
        return {
            "recorded": bool(row["recorded"]),
            "lines": lines,
            "unverified_models": row["unverified_models"],
            "unverified_downloads": row["unverified_downloads"],
        }

    return q.memo("band", run_id, build, dtype)


def breakdown(
    q: StoreQuery, run_id: str, by: str, *, limit: int = 50, dtype: str | None = None
) -> list[dict[str, Any]]:
    """Outcomes per library / pipeline tag / model type / architecture, largest by downloads."""
    if by not in BREAKDOWN_KEYS:
        raise ValueError(f"unknown breakdown {by!r}; use one of {', '.join(BREAKDOWN_KEYS)}")

    def build() -> list[dict[str, Any]]:
        q.ensure_summaries([run_id])
        rows = q.fetch(
            f"""
            SELECT coalesce({by}, '(none)') AS key, count(*) AS models,
              coalesce(sum(downloads), 0) AS downloads,
              {_OUTCOME_COUNTS}
            FROM model_runs WHERE run_id = $run AND {IN_DTYPE}
            GROUP BY ALL ORDER BY downloads DESC, key LIMIT $limit
            """,
            {"run": run_id, "dtype": dtype, "limit": limit},
        )
        for r in rows:
            r["passed_share"] = share(r["passed"], r["models"])
            r["passed_downloads_share"] = share(r["passed_downloads"], r["downloads"])
            r["on_device_downloads_share"] = share(r["on_device_downloads"], r["downloads"])
        return rows

    return q.memo("breakdown", run_id, build, by, limit, dtype)


def headline(
    q: StoreQuery,
    run_id: str,
    *,
    task: str = HEADLINE_TASK,
    top: int = HEADLINE_TOP,
    dtype: str | None = None,
) -> dict[str, Any]:
    """Of the distinct architectures behind the `top` most downloaded `task` models, the share
    that pass every stage (an architecture passes when all its models among them pass)."""

    def build() -> dict[str, Any]:
        q.ensure_summaries([run_id])
        models = q.fetch(
            f"""
            SELECT model_id, downloads, architecture, model_type, outcome, skip_reason,
              failed_stage, failed_status, error_signature, error_type, error_message,
              failing_op, fallback_ops, fallback_calls, unverified
            FROM model_runs WHERE run_id = $run AND {IN_DTYPE} AND pipeline_tag = $task
            ORDER BY downloads DESC, model_id LIMIT $top
            """,
            {"run": run_id, "dtype": dtype, "task": task, "top": top},
        )
        archs: dict[str, dict[str, Any]] = {}
        no_arch = []
        for m in models:
            if not m["architecture"]:
                no_arch.append(m)
                continue
            a = archs.setdefault(
                m["architecture"],
                {
                    "architecture": m["architecture"],
                    "models": 0,
                    "passed": 0,
                    "with_evidence": 0,
                    "on_device": 0,
                    "downloads": 0,
                    "example": m["model_id"],
                    "first_problem": None,
                },
            )
            a["models"] += 1
            a["downloads"] += m["downloads"] or 0
            if m["outcome"] == OUTCOME_PASSED:
                a["passed"] += 1
                if not m["unverified"]:
                    a["with_evidence"] += 1
                if not m["fallback_ops"] and not m["fallback_calls"]:
                    a["on_device"] += 1
            elif a["first_problem"] is None:
                a["first_problem"] = _problem(m)
        listing = sorted(archs.values(), key=lambda a: (-a["downloads"], a["architecture"]))
        for a in listing:
            a["passes"] = a["passed"] == a["models"]
            a["passes_with_evidence"] = a["with_evidence"] == a["models"]
            a["passes_on_device"] = a["on_device"] == a["models"]
        # a failed model that one switch of its own code made pass every stage (--alternatives):
        # its architecture passes with that switch, said apart from passing as is
        failed = [m["model_id"] for m in models if m["outcome"] != OUTCOME_PASSED]
        switched = _passing_switches(q, run_id, failed, dtype)
        for a in listing:
            used: set[str] = set()
            ok = True
            for m in models:
                if m["architecture"] != a["architecture"] or m["outcome"] == OUTCOME_PASSED:
                    continue
                if m["model_id"] in switched:
                    used.add(switched[m["model_id"]])
                else:
                    ok = False
            a["passes_with_switch"] = ok
            a["switches"] = sorted(used) if ok else []
        passing = sum(a["passes"] for a in listing)
        with_switch = sum(a["passes_with_switch"] for a in listing)
        with_evidence = sum(a["passes_with_evidence"] for a in listing)
        on_device = sum(a["passes_on_device"] for a in listing)
        return {
            "task": task,
            "top": top,
            "models": len(models),
            "models_without_architecture": len(no_arch),
            "models_without_architecture_list": [
                {"model_id": m["model_id"], "problem": _problem(m)} for m in no_arch
            ],
            "architectures": len(listing),
            "passing": passing,
            "passing_share": share(passing, len(listing)),
            # as is, or with the switches a run's alternatives proved (each named)
            "passing_with_switch": with_switch,
            "passing_with_switch_share": share(with_switch, len(listing)),
            "switches": sorted({s for a in listing for s in a["switches"]}),
            # the band: passing with evidence for every compiler verdict, and at most (above)
            "passing_with_evidence": with_evidence,
            "passing_with_evidence_share": share(with_evidence, len(listing)),
            "passing_on_device": on_device,
            "passing_on_device_share": share(on_device, len(listing)),
            "list": listing,
        }

    return q.memo("headline", run_id, build, task, top, dtype)


def catalog_date(catalog: str | None, started_at: Any = None) -> str | None:
    """The day a run's download counts were taken: the date a bundled or saved catalog names
    (`bundled:hub-top1000-2026-02-09.csv`), else the run's start for a live Hub listing."""
    found = re.search(r"\d{4}-\d{2}-\d{2}", catalog or "")
    if found:
        return found[0]
    if catalog == "hub" and started_at is not None:
        return str(started_at)[:10]
    return None


def _passing_switches(
    q: StoreQuery, run_id: str, model_ids: list[str], dtype: str | None
) -> dict[str, str]:
    """model -> the first switch (`experts_implementation=batched_mm`) with which the run's
    alternatives passed every stage that applies (the latest attempt of each stage)."""
    files = q.files(run_id).alternatives
    if not files or not model_ids:
        return {}
    rows = q.fetch(
        f"""
        WITH latest AS (
          SELECT model_id, implementation, stage, status, reason, finished_at
          FROM alternative_parts WHERE list_contains($models, model_id) AND {IN_DTYPE}
          QUALIFY row_number() OVER (PARTITION BY model_id, dtype, implementation, stage
            ORDER BY attempt DESC NULLS LAST, finished_at DESC NULLS LAST) = 1
        )
        SELECT model_id, implementation FROM latest GROUP BY model_id, implementation
        HAVING bool_and(status = 'pass' OR (status = 'skip' AND reason = '{_NA}'))
        ORDER BY model_id, min(finished_at), implementation
        """,
        {"models": model_ids, "dtype": dtype},
        scans={"alternative_parts": Scan("alternatives", files)},
    )
    out: dict[str, str] = {}
    for r in rows:
        out.setdefault(r["model_id"], r["implementation"])
    return out


def _problem(m: dict[str, Any]) -> str:
    if m["outcome"] == OUTCOME_SKIPPED or m["outcome"] == OUTCOME_PARTIAL:
        return f"skip: {m['skip_reason'] or 'unknown'}"
    if m["outcome"] == OUTCOME_FAILED:  # the op it names, else its real error's first line
        what = m.get("failing_op") or fmt.clip(
            ": ".join(filter(None, (m.get("error_type"), fmt.first_line(m.get("error_message"))))),
            100,
        )
        return f"{m['failed_stage']}: {m['failed_status']}: {what or ''}".strip(": ")
    return ""


def coverage_over_runs(q: StoreQuery) -> list[dict[str, Any]]:
    """Per run (oldest first): models, passed and on-device shares by count and by downloads;
    a run of several dtypes has one line per dtype (`dtypes`: how many its run has). While the
    dashboard warms up, only the runs summarised so far."""
    ids, _ = q.available_runs()

    def build() -> list[dict[str, Any]]:
        rows = q.fetch(
            f"""
            SELECT run_id, dtype, count(*) AS models, coalesce(sum(downloads), 0) AS downloads,
              {_OUTCOME_COUNTS},
              bool_or(device_emulated) AS device_emulated, any_value(device) AS device
            FROM model_runs WHERE list_contains($ids, run_id) GROUP BY run_id, dtype
            """,
            {"ids": ids},
        )
        order = {run: i for i, run in enumerate(reversed(ids))}
        dtypes = {run: q.run_dtypes(run) for run in {r["run_id"] for r in rows}}
        rows.sort(
            key=lambda r: (
                order.get(r["run_id"], -1),
                _position(dtypes[r["run_id"]], r["dtype"]),
            )
        )
        for r in rows:
            r["dtypes"] = len(dtypes[r["run_id"]])
            info = q.run_info(r["run_id"]) or {}
            r["started_at"] = info.get("started_at")
            r["status"] = info.get("status", "unknown")
            r["device_label"] = device_label(r["device"], r["device_emulated"])
            r["passed_share"] = share(r["passed"], r["models"])
            r["passed_downloads_share"] = share(r["passed_downloads"], r["downloads"])
            r["on_device_share"] = share(r["on_device"], r["models"])
            r["on_device_downloads_share"] = share(r["on_device_downloads"], r["downloads"])
        return rows

    return q.memo("coverage_over_runs", None, build, tuple(ids))


def _position(items: list[str], item: str | None) -> int:
    return items.index(item) if item in items else len(items)


def _in(values: Any) -> str:
    return ", ".join(f"'{getattr(v, 'value', v)}'" for v in sorted(values))


__all__ = [
    "BREAKDOWN_KEYS",
    "SkipReason",
    "breakdown",
    "coverage_over_runs",
    "denominators",
    "device_label",
    "funnel",
    "headline",
    "run_stages",
    "share",
]
