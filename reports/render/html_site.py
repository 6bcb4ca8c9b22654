"""A self-contained static site of one run (inline CSS and SVG, no scripts, nothing fetched):
`index.html` (the report with charts), `models.html` (the most downloaded models),
`models.csv` (every model; a row per model and dtype in a run of several), `report.json`, and with an op sweep on the same device
`op-sweep.html` and `ops/<op>.html`. Publish the folder as is."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from reports.models import ModelFilter, model_table
from reports.query import STAGES, StoreQuery
from reports.render import charts, jsondoc
from reports.render.op_site import write_op_pages
from reports.render.sections import report_sections
from reports.render.site_pages import environment, page_context, write_page

MODELS_ON_PAGE = 1000


def report_charts(report: dict[str, Any]) -> dict[str, Any]:
    if len(report.get("dtypes") or []) > 1 and report.get("by_dtype"):
        return dtype_charts(report)
    d = report["denominators"]
    return {
        "funnel": charts.funnel_chart(report["funnel"]),
        "trend": charts.trend_chart(report["coverage_over_runs"]),
        "skips": charts.reasons_chart(
            report["skip_reasons"], label="reason", title="Skips by reason (models)"
        ),
        "failures": charts.reasons_chart(
            failures_by_stage(d["failed_by_stage"]),
            label="key",
            title="Failures by stage (models)",
        ),
        "signatures": charts.reasons_chart(
            report["failure_clusters"],
            label="signature",
            title="Failures by reason: top error signatures (models)",
            limit=8,
        ),
    }


def dtype_charts(report: dict[str, Any]) -> dict[str, Any]:
    """The charts of a run of several dtypes: each a bar per dtype, side by side."""
    per = report["by_dtype"]
    return {
        "funnel": charts.funnel_by_dtype_chart({d: v["funnel"] for d, v in per.items()}),
        "trend": charts.trend_chart(report["coverage_over_runs"]),
        "skips": charts.by_dtype_chart(
            {d: v["skip_reasons"] for d, v in per.items()},
            label="reason",
            title="Skips by reason (models)",
        ),
        "failures": charts.by_dtype_chart(
            {d: failures_by_stage(v["denominators"]["failed_by_stage"]) for d, v in per.items()},
            label="key",
            title="Failures by stage (models)",
        ),
        "signatures": charts.by_dtype_chart(
            {d: v["failure_clusters"] for d, v in per.items()},
            label="signature",
            title="Failures by reason: top error signatures (models)",
            limit=8,
        ),
    }


def failures_by_stage(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Failed models per stage (all failing statuses together), in stage order."""
    per: dict[str, dict[str, Any]] = {}
    for r in rows:
        item = per.setdefault(r["stage"], {"key": r["stage"], "models": 0, "downloads": 0})
        item["models"] += r["models"]
        item["downloads"] += r["downloads"]
    return [per[s] for s in STAGES if s in per]


def write_site(q: StoreQuery, report: dict[str, Any], out: str | Path) -> list[Path]:
    """Write the site into `out` (created if needed); returns the files written."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    env = environment()
    common = {**page_context(report), "stages": STAGES}
    written = []
    index = env.get_template("site_index.html").render(
        **common, sections=report_sections(report), charts=report_charts(report)
    )
    written.append(write_page(out / "index.html", index))
    table = model_table(
        q, report["run_id"], ModelFilter(per_page=MODELS_ON_PAGE), max_per_page=MODELS_ON_PAGE
    )
    page = env.get_template("site_models.html").render(**common, table=table)
    written.append(write_page(out / "models.html", page))
    written.append(write_page(out / "report.json", jsondoc.render(report)))
    written.append(_write_csv(q, report["run_id"], out / "models.csv"))
    written += write_op_pages(q, report, out, env, common)
    return written


def _write_csv(q: StoreQuery, run_id: str, path: Path) -> Path:
    dtypes = q.run_dtypes(run_id)
    dtype = "dtype, " if len(dtypes) > 1 else ""  # a run of several: a row per model and dtype
    rows = q.fetch(
        f"""
        SELECT model_id, {dtype}rank, downloads, library, pipeline_tag, model_type, architecture,
          device, device_emulated, outcome, skip_reason, failed_stage, failed_status,
          error_signature, failing_op, fallback_ops, {", ".join(f"s_{s}" for s in STAGES)}
        FROM model_runs WHERE run_id = $run
        ORDER BY downloads DESC, model_id, list_position($dtypes, dtype)
        """,
        {"run": run_id, "dtypes": dtypes},
    )
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", newline="", encoding="utf-8") as fh:
        names = list(rows[0]) if rows else ["model_id"]
        writer = csv.DictWriter(fh, fieldnames=names)
        writer.writeheader()
        for r in rows:
            writer.writerow({k: _csv_cell(v) for k, v in r.items()})
    tmp.replace(path)
    return path


def _csv_cell(value: Any) -> Any:
    # Spreadsheets run cells that start with = + - @ as formulas: keep them text.
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@"):
        return "'" + value
    return value
