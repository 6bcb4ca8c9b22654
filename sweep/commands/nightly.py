"""`hfsweep nightly`: the nightly job in one command, from the catalog to the alert.

Refresh the catalog (offline: the bundled one or a file), run, diff against the previous night of
the same series (found in the runs table), write the static site, and exit 4 when a model that
passed the night before fails tonight (a timeout, or a model passing again, does not alert).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ground import settings
from sweep.commands import run as run_command

EXIT_REGRESSION = 4
DEFAULT_SITE = "hfsweep-site"
CATALOG_HELP = (
    "'hub' (refresh the top --top models from the Hub; the default when the Hub is reachable), "
    "'bundled' (the offline snapshot; the default with HF_HUB_OFFLINE=1) or a catalog CSV path"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    run_command.add_arguments(p)
    for action in p._actions:  # the run's options, with the night's defaults
        if action.dest == "catalog":
            action.help = CATALOG_HELP
        elif action.dest == "top":
            action.help = "the N most downloaded models (default 1000)"
        elif action.dest == "run_id":
            action.help = "name the night's run (default nightly-<time>); an existing id resumes it"
        elif action.dest == "reuse":
            action.metavar = "previous|latest|RUN_ID|all|none"
            action.help = (
                "copy the rows of every task whose content key an earlier run has, run only the "
                "rest: the previous night of the series (default), the newest run, that run, "
                "every run, or none"
            )
    p.set_defaults(catalog=None, top=1000, reuse="previous")
    p.add_argument(
        "--series",
        help="the nightly series this run continues (default: the device's name); the "
        "previous night is the newest earlier finished run of the same series in the store",
    )
    p.add_argument(
        "--site",
        default=DEFAULT_SITE,
        help=f"folder for tonight's static site and nightly.json (default ./{DEFAULT_SITE})",
    )
    p.add_argument(
        "--catalogs",
        default=None,
        help="folder for refreshed catalogs and their configs (default: <cache>/catalogs)",
    )


def run(args: argparse.Namespace) -> int:
    from sweep.commands.options import store_to_write

    store_to_write(args.store)
    from ground.errors import UsageError
    from reports.store import check_run_id
    from sweep.driver import abandoned_error
    from sweep.nightly import nightly_catalog, run_nightly

    series = args.series or args.device
    try:
        check_run_id(series)  # a name, as run ids are
    except Exception:
        raise UsageError(
            f"--series {series!r}: use letters, digits, '.', '_' or '-'",
            hint="e.g. --series neuron",
        ) from None
    site = Path(args.site)
    if site.exists() and not site.is_dir():
        raise UsageError(f"--site {args.site!r} is a file, not a folder")
    args.catalog = nightly_catalog(
        args.catalog,
        args.top,
        Path(args.catalogs) if args.catalogs else settings.cache_dir() / "catalogs",
        progress=_refresh_progress(args.top),
    )
    config = run_command.settings_from(args)
    night = run_nightly(config, series=series, site=site)
    print(run_command.run_line(night.summary, args.store), file=sys.stderr)
    if not args.no_report:
        from sweep.commands import report

        report.run(
            argparse.Namespace(store=args.store, run=night.run_id, format="text", out=None, top=10)
        )
    if night.diff is not None:
        from sweep.commands.diff import render_text

        sys.stdout.write("\n" + render_text(night.diff))
    print(verdict_line(night), file=sys.stderr)
    if night.site_files:
        print(f"site: {site}/index.html ({len(night.site_files)} files)", file=sys.stderr)
    if night.regressions:
        return EXIT_REGRESSION
    if night.summary.abandoned:
        raise abandoned_error(night.summary)
    return 0


def verdict_line(night) -> str:
    """The night's verdict on stderr: the runs compared, then what alerts (or why not)."""
    from reports.alerts import describe

    head = f"nightly {night.series}: run {night.run_id}"
    if night.previous is None:
        return f"{head}: the series' first night, nothing to compare with (no alert)"
    head += f" against {night.previous}"
    flakes = f"; {len(night.flakes)} flake(s), no alert" if night.flakes else ""
    if not night.regressions:
        return f"{head}: no model that passed last night fails tonight{flakes}"
    lines = [
        f"{head}: ALERT: {len(night.regressions)} model(s) passed last night and fail tonight"
        f"{flakes} (exit {EXIT_REGRESSION})"
    ]
    lines += [f"  {describe(m)}" for m in night.regressions]
    return "\n".join(lines)


def _refresh_progress(top: int | None):
    def progress(n: int) -> None:
        if n % 100 == 0 or n == top:
            print(f"catalog: {n}/{top}", file=sys.stderr, flush=True)

    return progress
