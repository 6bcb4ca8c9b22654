"""What every page of the static site shares: the templates' Jinja environment (autoescape on
for every template), the inline style sheet, the context each page starts from, and the writer
(a file is complete or absent: written under a hidden name, then renamed).

A leaf: the run's pages (`html_site`) and the op sweep's (`op_site`) both use it, and the
dashboard serves the same style sheet.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup, escape

from ground import fmt
from reports.render.glossary import doc_links, explain
from reports.render.sections import headline_scope, headline_switches

TEMPLATES = Path(__file__).parent / "templates"
STYLE = Path(__file__).parent / "static" / "style.css"


def environment(extra: list[Path] | None = None) -> jinja2.Environment:
    """Jinja environment with autoescape on for every template (html or not)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader([*(extra or []), TEMPLATES]),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    env.globals["fmt"] = fmt
    env.globals["headline_scope"] = headline_scope
    env.globals["headline_switches"] = headline_switches
    # the glossary's tooltips, and where `docs/NAME.md` and the glossary link to: the static
    # site's own copies (the dashboard sets its `/docs/`)
    env.globals["explain"] = explain
    env.globals["docs_base"] = "docs/"
    env.globals["glossary_url"] = "glossary.html"
    env.filters["doc_links"] = doc_links
    env.filters["model_id"] = model_id_html
    env.filters["breakable"] = breakable
    return env


def model_id_html(model_id: str) -> Markup:
    """A model id that wraps only after its "/": `org/` and `name` are each kept on one line
    (escaped; a `<wbr>` between them)."""
    org, sep, name = str(model_id).partition("/")
    if not sep:
        return Markup('<span class="id-seg">{}</span>').format(org)
    return Markup('<span class="id-seg">{}/</span><wbr><span class="id-seg">{}</span>').format(
        org, name
    )


def breakable(text: str) -> Markup:
    """`text` escaped, with a line-break opportunity after each `_` (long stage names)."""
    return Markup("_<wbr>").join(escape(part) for part in str(text).split("_"))


def page_context(report: dict[str, Any]) -> dict[str, Any]:
    """The context every page of the site renders with: the report, the inline style, when."""
    return {
        "report": report,
        "css": jinja2.utils.markupsafe.Markup(STYLE.read_text()),
        "generated_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def write_page(path: Path, text: str) -> Path:
    """Write `text` to `path` whole or not at all (a hidden temporary name, then a rename)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return path
