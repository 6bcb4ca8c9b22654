"""The op sweep's pages of the static site: `op-sweep.html` (denominators, ops, the join to the
model sweep) and `ops/<op>.html` per ATen op (its samples by dtype, the models that fall back on
it). Same rules as the rest of the site: autoescaped, no scripts, nothing fetched."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jinja2

from reports import op_sweep
from reports.query import StoreQuery
from reports.render.op_sections import op_sweep_sections
from reports.render.site_pages import environment, page_context, write_page

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def op_file_name(op: str) -> str:
    """`aten::add` -> `aten__add.html`: a file name that cannot leave the `ops/` folder."""
    return _UNSAFE.sub("_", op.replace("::", "__"))[:150] + ".html"


def write_op_pages(
    q: StoreQuery,
    report: dict[str, Any],
    out: Path,
    env: jinja2.Environment,
    common: dict[str, Any],
) -> list[Path]:
    """The op sweep's pages into `out` (none without an op sweep in the report)."""
    data = report.get("op_sweep")
    if not data:
        return []
    op_run = data["op_run_id"]
    model_run = report.get("run_id")
    table = op_sweep.op_table(q, op_run)
    names = {o["op"] for o in table}
    models_of = op_sweep.models_by_op(q, model_run) if model_run else {}
    names |= set(models_of)
    folder = out / "ops"
    folder.mkdir(parents=True, exist_ok=True)
    written = []
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
            in_ops_folder=True,
            op_link=op_file_name,
            model_link=lambda mid: None,
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
