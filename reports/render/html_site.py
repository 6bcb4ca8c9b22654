"""A self-contained static site of one run, to publish as is and look models up in.

`index.html` (the report with charts), `models.html` (the most downloaded models, with a
client-side search), one page per model (`models/<id>.html`: its stages, errors, fallbacks, the
command that reproduces it, a link to it on the Hub) and per ATen op its models fell back on or
failed at (`ops/<op>.html`: the models, and the op sweep's samples when one ran on the device),
linked both ways, `models.csv` (every model; a row per model and dtype in a run of several) and `report.json`; with an op sweep on the same
device also `op-sweep.html`. Inline CSS and SVG; nothing is fetched (each page's
Content-Security-Policy says so), and the one script is the search of `models.html`, allowed by
its hash."""

from __future__ import annotations

import base64
import csv
import hashlib
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from markupsafe import Markup

from reports.models import ModelFilter, model_details, model_table
from reports.op_sweep import base_name
from reports.query import STAGES, StoreQuery
from reports.render import charts, jsondoc
from reports.render.glossary import GLOSSARY, anchor
from reports.render.op_site import op_file_name, op_page_names, write_op_pages
from reports.render.sections import report_sections
from reports.render.site_pages import STYLE, environment, page_context, write_page

DOCS = Path(__file__).resolve().parents[2] / "docs"  # the checkout's documentation, if any
_DOC_HREF = re.compile(r'href="(?:\.\./)?docs/([a-z0-9-]+\.md)"')
MODELS_ON_PAGE = 1000  # the models listed on models.html, each with its own page
SEARCH_SCRIPT = (STYLE.parent / "site_search.js").read_text(encoding="utf-8")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def model_file_name(model_id: str) -> str:
    """`org/name` -> `org--name-1a2b3c4d.html`: a file name that cannot leave `models/`, unique
    (the hash) even where two ids differ only in characters it replaces."""
    digest = hashlib.sha1(model_id.encode("utf-8")).hexdigest()[:8]
    return _UNSAFE.sub("_", model_id.replace("/", "--"))[:120].lstrip(".") + f"-{digest}.html"


def script_hash(script: str) -> str:
    """The CSP source that allows exactly this inline script."""
    digest = hashlib.sha256(script.encode("utf-8")).digest()
    return "'sha256-" + base64.b64encode(digest).decode("ascii") + "'"


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
        "failing_ops": charts.reasons_chart(
            report.get("failures_by_op") or [],
            label="key",
            title="Failures by the op they name (models)",
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
        "failing_ops": charts.by_dtype_chart(
            {d: v.get("failures_by_op") or [] for d, v in per.items()},
            label="key",
            title="Failures by the op they name (models)",
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


def write_site(
    q: StoreQuery, report: dict[str, Any], out: str | Path, *, models_on_page: int = MODELS_ON_PAGE
) -> list[Path]:
    """Write the site into `out` (created if needed); returns the files written."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    env = environment()
    run_id = report["run_id"]
    common = {**page_context(report), "stages": report.get("stages") or STAGES}
    table = model_table(
        q, run_id, ModelFilter(per_page=models_on_page), max_per_page=models_on_page
    )
    model_files = {r["model_id"]: "models/" + model_file_name(r["model_id"]) for r in table["rows"]}
    ops = op_page_names(q, report)

    def op_link(op: str, up: str = "") -> str | None:
        base = base_name(op)
        return f"{up}ops/{op_file_name(base)}" if base in ops else None

    written = []
    index = env.get_template("site_index.html").render(
        **common,
        sections=report_sections(report),
        charts=report_charts(report),
        links={"ops": op_link, "op_problems": op_link, "op_cheapest": op_link},
    )
    written.append(write_page(out / "index.html", index))
    page = env.get_template("site_models.html").render(
        **common,
        table=table,
        model_link=model_files.get,
        op_link=op_link,
        search_script=Markup(SEARCH_SCRIPT),
        script_src=script_hash(SEARCH_SCRIPT),
    )
    written.append(write_page(out / "models.html", page))
    (out / "models").mkdir(exist_ok=True)
    links = SimpleNamespace(
        op=lambda op: op_link(op, "../"),
        run=lambda rid: "../index.html" if rid == run_id else None,
        history=lambda rid: None,
        cluster=lambda sig: None,
        dtype=lambda d: None,  # one page per model: every dtype of the run side by side on it
        docs="../docs/",
    )
    template = env.get_template("site_model.html")
    for model_id, m in model_details(q, run_id, list(model_files)).items():
        html = template.render(**common, m=m, links=links, in_subfolder=True)
        written.append(write_page(out / model_files[model_id], html))
    written += _write_docs(env, common, out)
    written.append(write_page(out / "report.json", jsondoc.render(report)))
    written.append(_write_csv(q, run_id, out / "models.csv", common["stages"]))
    written += write_op_pages(
        q, report, out, env, common, names=ops, model_link=lambda mid: _up(model_files.get(mid))
    )
    written += _copy_linked_docs(written, out)
    return written


def _write_docs(env: Any, common: dict[str, Any], out: Path) -> list[Path]:
    """`glossary.html`: the words the pages explain in their tooltips."""
    glossary = [{"term": t, "anchor": anchor(t), "text": x} for t, x in GLOSSARY.items()]
    page = env.get_template("site_glossary.html").render(**common, glossary=glossary)
    return [write_page(out / "glossary.html", page)]


def _copy_linked_docs(pages: list[Path], out: Path) -> list[Path]:
    """The documentation pages the site's pages link to (`docs/NAME.md`), copied from this
    checkout's docs/ as they are (text, nothing that runs); none from an install without it."""
    names = sorted(
        {n for p in pages if p.suffix == ".html" for n in _DOC_HREF.findall(p.read_text())}
    )
    found = [DOCS / n for n in names if (DOCS / n).is_file()]
    if found:
        (out / "docs").mkdir(exist_ok=True)
    return [write_page(out / "docs" / f.name, f.read_text(encoding="utf-8")) for f in found]


def _up(path: str | None) -> str | None:
    return f"../{path}" if path else None


def _write_csv(q: StoreQuery, run_id: str, path: Path, stages: Any = STAGES) -> Path:
    """models.csv: a row per model (and dtype), each stage's status as the models table says
    it (`n/a` for a stage that does not apply, as `skip (not_applicable)` is stored)."""
    dtypes = q.run_dtypes(run_id)
    dtype = "dtype, " if len(dtypes) > 1 else ""  # a run of several: a row per model and dtype
    rows = q.fetch(
        f"""
        SELECT model_id, {dtype}rank, downloads, library, pipeline_tag, model_type, architecture,
          device, device_emulated, outcome, skip_reason, failed_stage, failed_status,
          error_signature, failing_op, fallback_ops,
          {", ".join(f"CASE WHEN n_{s} THEN 'n/a' ELSE s_{s} END AS s_{s}" for s in stages)}
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
