"""The op pages of the static site: `ops/<op>.html` per ATen op the run's models fell back on
or failed at, or the op sweep dispatched (the models, with links to their pages; the op sweep's
samples by dtype), and with an op sweep on the device `op-sweep.html`. Same rules as the rest of
the site: autoescaped, nothing fetched, no script."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jinja2

from reports import op_sweep
from reports.ops import unverified_models_by_op
from reports.query import StoreQuery
from reports.render.op_sections import op_sweep_sections
from reports.render.site_pages import environment, page_context, write_page

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def op_file_name(op: str) -> str:
    """`aten::add` -> `aten__add.html`: a file name that cannot leave the `ops/` folder."""
    return _UNSAFE.sub("_", op.replace("::", "__"))[:150] + ".html"


def op_page_names(q: StoreQuery, report: dict[str, Any]) -> set[str]:
    """The base names of the ops that get a page: every op the run's models fell back on,
    whose failure names it or whose compile took it to lower with no evidence (every op of the
    missing-ops ranking), and every op the joined op sweep dispatched."""
    names: set[str] = set()
    model_run = report.get("run_id")
    if model_run:
        names |= set(op_sweep.models_by_op(q, model_run))
        names |= set(op_sweep.failing_models_by_op(q, model_run))
        names |= set(unverified_models_by_op(q, model_run))
    data = report.get("op_sweep")
    if data:
        names |= {o["op"] for o in op_sweep.op_table(q, data["op_run_id"])}
    return {n for n in names if op_sweep.valid_op_name(n)}


def write_op_pages(
    q: StoreQuery,
    report: dict[str, Any],
    out: Path,
    env: jinja2.Environment,
    common: dict[str, Any],
    *,
    names: set[str] | None = None,
    model_link: Callable[[str], str | None] | None = None,
) -> list[Path]:
    """The op pages (`names`, default `op_page_names`) into `out/ops/`, and `op-sweep.html` when
    the report has an op sweep; `model_link` gives a model's page from the ops folder."""
    data = report.get("op_sweep")
    op_run = data["op_run_id"] if data else None
    model_run = report.get("run_id")
    names = op_page_names(q, report) if names is None else names
    if not names and not data:
        return []
    models_of = op_sweep.models_by_op(q, model_run) if model_run else {}
    folder = out / "ops"
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    if data:
        table = op_sweep.op_table(q, data["op_run_id"])
        index = env.get_template("site_op_sweep.html").render(
            **common,
            data=data,
            sections=op_sweep_sections(data),
            ops=table,
            op_link=lambda op: "ops/" + op_file_name(op),
            op_link_or_none=lambda cell: ("ops/" + op_file_name(cell)) if cell in names else None,
        )
        written.append(write_page(out / "op-sweep.html", index))
    for name in sorted(names):
        page = op_sweep.op_page(
            q, name, model_run_id=model_run, op_run_id=op_run, models_of=models_of
        )
        html = env.get_template("site_op.html").render(
            **common,
            p=page,
            in_subfolder=True,
            op_link=op_file_name,
            model_link=model_link or (lambda mid: None),
        )
        written.append(write_page(folder / op_file_name(name), html))
    return written


def write_op_site(q: StoreQuery, data: dict[str, Any], out: str | Path) -> list[Path]:
    """The op sweep alone as a static site (a store with no model run)."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    report = {
        "run_id": None,
        "store": q.store.uri,
        "op_sweep": data,
        "denominators": {"device_label": data["denominators"]["device_label"]},
    }
    return write_op_pages(q, report, folder, environment(), page_context(report))
