"""`hfsweep report`: coverage of one run (default: the latest) with its denominators."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ground.errors import UsageError
from sweep.commands.options import add_store_argument, store_to_read

FORMATS = ("text", "markdown", "json", "html")
FILE_NAMES = {"text": "report.txt", "markdown": "report.md", "json": "report.json"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_store_argument(p)
    p.add_argument("--run", help="run id (default: the latest run with results)")
    p.add_argument("--format", default="text", choices=FORMATS, help="output format (default text)")
    p.add_argument(
        "--out",
        help="folder to write into (html: a self-contained static site; required for html)",
    )
    p.add_argument("--top", type=int, default=20, help="rows per ranked table (default 20)")
    p.add_argument(
        "--ops-run",
        help="op-sweep run to join (default: the newest on the model run's device)",
    )


def run(args: argparse.Namespace) -> int:
    store_to_read(args.store)  # a file or a missing folder: one clear error
    from reports.query import StoreQuery
    from reports.render import html_site, jsondoc, markdown, text
    from reports.summary import run_report

    if args.top < 1:
        raise UsageError(f"--top must be 1 or more, not {args.top}")
    if args.format == "html" and not args.out:
        raise UsageError(
            "--format html writes a static site: give --out DIR", hint="e.g. --out site/"
        )
    q = StoreQuery(args.store)
    ops_run = getattr(args, "ops_run", None)
    if args.run is None and not q.run_ids():
        only = _op_sweep_only(q, args, ops_run)
        if only is not None:
            return only
    report = run_report(q, args.run, top=args.top, op_run_id=ops_run)
    if args.format == "html":
        files = html_site.write_site(q, report, args.out)
        print(f"wrote {site_summary(files, Path(args.out))} to {args.out}", file=sys.stderr)
        return 0
    renderer = {"text": text.render, "markdown": markdown.render, "json": jsondoc.render}
    output = renderer[args.format](report)
    if args.out:
        folder = Path(args.out)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / FILE_NAMES[args.format]
        path.write_text(output, encoding="utf-8")
        print(f"wrote {path}", file=sys.stderr)
    else:
        sys.stdout.write(output)
    return 0


def site_summary(files: list[Path], out: Path) -> str:
    """`95 files (1.2 MB): index.html, models.html, 50 model pages, 41 op pages, ...`."""
    size = sum(f.stat().st_size for f in files if f.exists())
    folders: dict[str, int] = {}
    top = []
    for f in files:
        parent = f.parent.name if f.parent != out else ""
        if parent:
            folders[parent] = folders.get(parent, 0) + 1
        else:
            top.append(f.name)
    named = {"models": "model pages", "ops": "op pages"}
    parts = top + [f"{n} {named.get(k, k + ' files')}" for k, n in folders.items()]
    return f"{len(files)} files ({size / 1e6:.1f} MB): {', '.join(parts)}"


def _op_sweep_only(q, args: argparse.Namespace, ops_run: str | None) -> int | None:
    """A store with op-sweep runs and no model run: report the op sweep alone."""
    import json

    from reports.op_sweep import op_sweep_section_data
    from reports.render import markdown
    from reports.render.op_sections import render_op_text

    data = op_sweep_section_data(q, None, op_run_id=ops_run, top=args.top)
    if data is None:
        return None
    if args.format == "html":
        from reports.render.op_site import write_op_site

        files = write_op_site(q, data, args.out)
        print(f"wrote {len(files)} files to {args.out}", file=sys.stderr)
        return 0
    if args.format == "json":
        output = json.dumps(data, indent=2, default=str) + "\n"
    elif args.format == "markdown":
        output = markdown.render_sections(data)
    else:
        output = render_op_text(data)
    if args.out:
        folder = Path(args.out)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / FILE_NAMES[args.format].replace("report", "op-report")
        path.write_text(output, encoding="utf-8")
        print(f"wrote {path}", file=sys.stderr)
    else:
        sys.stdout.write(output)
    return 0
