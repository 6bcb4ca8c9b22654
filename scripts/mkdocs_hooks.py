"""MkDocs hooks for the documentation site (`hooks:` in mkdocs.yml).

- The command-line reference (`docs/cli.md`) is rendered from hfsweep's own parser: each
  sub-command of `sweep.cli.COMMANDS` is built the way `hfsweep` builds it (its module's
  `add_arguments`) and its `--help` is printed into the page, so the page cannot drift from
  the code. Importing `sweep` and the commands' options imports neither torch nor Ray.
- The results section of the navigation and its index (`docs/results/index.md`) list every
  dated page under `docs/results/`, newest first, so a new results page needs no nav edit.

The checkout's own code is imported (the repository root is put first on `sys.path`), so the
site always describes the code beside it.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CLI_MARKER = "<!-- cli-reference -->"
RESULTS_MARKER = "<!-- results-list -->"
RESULTS_NAV = "results/index.md"
HELP_WIDTH = "100"  # columns argparse wraps the help to, whatever the terminal

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


# -- the results pages ------------------------------------------------------------------------


def results_pages(docs_dir: Path) -> list[tuple[str, str]]:
    """(path relative to docs/, title) of every dated results page, newest first."""
    pages = []
    for path in sorted((docs_dir / "results").glob("[0-9]*.md"), reverse=True):
        pages.append((f"results/{path.name}", page_title(path)))
    return pages


def page_title(path: Path) -> str:
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return path.stem


def _expand_results(nav: list[Any], pages: list[tuple[str, str]]) -> list[Any]:
    """The nav with the entry naming `results/index.md` turned into a section of every page."""
    out: list[Any] = []
    for item in nav:
        if isinstance(item, dict):
            (title, value), *_ = item.items()
            if value == RESULTS_NAV:
                item = {title: [RESULTS_NAV, *({t: p} for p, t in pages)]}
            elif isinstance(value, list):
                item = {title: _expand_results(value, pages)}
        out.append(item)
    return out


def results_table(pages: list[tuple[str, str]]) -> str:
    rows = ["| date | page |", "|---|---|"]
    for path, title in pages:
        date = Path(path).name[:10]
        topic = title.removeprefix(f"{date}:").strip()  # the date has its own column
        rows.append(f"| {date} | [{topic}]({Path(path).name}) |")
    return "\n".join(rows)


# -- the command-line reference ---------------------------------------------------------------


def command_parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    """("hfsweep", the top parser), then ("hfsweep NAME", its parser) per sub-command, built
    as `hfsweep` builds them (`sweep.cli.build_parser`, with NAME chosen)."""
    from sweep import cli

    saved = sys.argv
    try:
        sys.argv = ["hfsweep"]
        parsers: list[tuple[str, argparse.ArgumentParser]] = [("hfsweep", cli.build_parser())]
        for name in cli.COMMANDS:
            sys.argv = ["hfsweep", name]
            sub = _subparsers(cli.build_parser())
            parsers.append((f"hfsweep {name}", sub[name]))
    finally:
        sys.argv = saved
    return parsers


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def help_text(parser: argparse.ArgumentParser) -> str:
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_WIDTH
    try:
        return parser.format_help().rstrip()
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved


def cli_reference() -> str:
    """Markdown: a section per command (and per nested action, e.g. `catalog show`), each
    with its one-line purpose and its `--help` as printed."""
    blocks = []
    for i, (name, parser) in enumerate(command_parsers()):
        blocks.append(f"## `{name}`\n")
        if parser.description and i:
            blocks.append(f"{parser.description[0].upper()}{parser.description[1:]}.\n")
        blocks.append(f"```text\n$ {name} --help\n{help_text(parser)}\n```\n")
        if i:
            for action, sub in _subparsers(parser).items():
                blocks.append(f"### `{name} {action}`\n")
                blocks.append(f"```text\n$ {name} {action} --help\n{help_text(sub)}\n```\n")
    return "\n".join(blocks)


# -- MkDocs events ----------------------------------------------------------------------------


def on_config(config: Any, **_: Any) -> Any:
    pages = results_pages(Path(config["docs_dir"]))
    if config.get("nav"):
        config["nav"] = _expand_results(config["nav"], pages)
    return config


def on_page_markdown(markdown: str, page: Any, config: Any, **_: Any) -> str:
    if CLI_MARKER in markdown:
        markdown = markdown.replace(CLI_MARKER, cli_reference())
    if RESULTS_MARKER in markdown:
        pages = results_pages(Path(config["docs_dir"]))
        markdown = markdown.replace(RESULTS_MARKER, results_table(pages))
    return markdown
