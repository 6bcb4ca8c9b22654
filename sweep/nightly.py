"""The nightly job, one call: refresh the catalog, run, diff against the previous night, write the
static site, and say whether to alert.

1. The catalog: refreshed from the Hub (`hub`: the top N listed and their config files, into
   `hub-<date>-top<N>.csv` of the catalogs folder; a refresh the Hub stopped goes on where it
   stopped when the job is run again the same day), or, offline, the bundled snapshot or a
   catalog file given.
2. The run: `run_sweep` with the run tagged with its series (`runs.nightly`), reusing by
   default the rows of the previous night's tasks whose content key has not changed
   (`sweep.reuse`): a night costs what changed.
3. The previous night: the newest earlier finished run of the same series, from the runs table
   (`reports.alerts.previous_night`), and the diff of the two (`reports.diff.run_diff`).
4. The static site of tonight's run (`hfsweep report --format html`), with `nightly.json`
   beside it: the two runs, the regressions and the flakes.
5. The alert: a model that passed last night and fails tonight (`reports.alerts`).
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ground import settings
from ground.errors import UsageError
from reports import alerts
from reports.store import Store, new_run_id
from sweep.driver import RunSummary, run_sweep
from sweep.settings import ModelRun

HUB = "hub"
PREVIOUS = "previous"  # --reuse of a night: the rows of the previous night of its series
NIGHTLY_JSON = "nightly.json"


@dataclass
class NightlyResult:
    """What one night did and found."""

    series: str
    run_id: str
    catalog: str
    summary: RunSummary
    previous: str | None = None  # the previous night's run id (None: the series' first)
    diff: dict[str, Any] | None = None
    regressions: list[dict[str, Any]] = field(default_factory=list)
    flakes: list[dict[str, Any]] = field(default_factory=list)
    site_files: list[Path] = field(default_factory=list)


def nightly_catalog(
    choice: str | None,
    top: int | None,
    folder: Path,
    *,
    progress: Callable[[int], None] | None = None,
    client: Any = None,
) -> str:
    """The catalog the night runs on: `choice` as given ('bundled' or a file), or for `hub`
    (the default when the Hub is reachable) a fresh listing of the `top` models, refreshed into
    `folder`; the bundled snapshot by default offline. `client`: a `HubClient` (tests)."""
    if choice is None:
        choice = "bundled" if settings.hub_offline() else HUB
    if choice != HUB:
        return choice
    if settings.hub_offline():
        raise UsageError(
            "the Hub is offline (HF_HUB_OFFLINE=1): cannot refresh the catalog",
            hint="unset HF_HUB_OFFLINE, or give --catalog bundled or a catalog file",
        )
    from model_configs.catalog_refresh import refresh_catalog

    n = top or 1000
    out = folder / f"hub-{dt.date.today().isoformat()}-top{n}.csv"
    refresh_catalog(n, out, client=client, token=settings.hub_token(), progress=progress)
    return str(out)


def run_nightly(
    config: ModelRun,
    *,
    series: str,
    site: str | Path | None,
    report_top: int = 20,
    warn: Callable[[str], None] | None = None,
) -> NightlyResult:
    """Run one night of `series` with `config` (its catalog already chosen), then diff it
    against the previous night and write the site into `site` (None: no site)."""
    from reports.diff import run_diff
    from reports.query import StoreQuery

    run_id = config.job.run_id or f"nightly-{new_run_id()}"
    reuse = config.reuse
    if reuse == PREVIOUS:  # the previous night of the series, if there is one
        reuse = alerts.previous_night(Store(config.job.store).runs(), series, run_id)
    config = replace(config, nightly=series, reuse=reuse, job=replace(config.job, run_id=run_id))
    summary = run_sweep(config, warn=warn)
    q = StoreQuery(config.job.store)
    result = NightlyResult(
        series=series, run_id=summary.run_id, catalog=config.catalog, summary=summary
    )
    result.previous = alerts.previous_night(q.runs(), series, summary.run_id)
    if result.previous is not None:
        result.diff = run_diff(q, result.previous, summary.run_id, limit=sys.maxsize)
        result.regressions = alerts.regressions(result.diff)
        result.flakes = alerts.flakes(result.diff)
    if site is not None:
        result.site_files = write_site(q, result, Path(site), top=report_top)
    return result


def write_site(q: Any, result: NightlyResult, folder: Path, *, top: int) -> list[Path]:
    """Tonight's static site, and `nightly.json` (the runs compared, regressions, flakes)."""
    from reports.render import html_site
    from reports.summary import run_report

    report = run_report(q, result.run_id, top=top)
    files = html_site.write_site(q, report, folder)
    path = folder / NIGHTLY_JSON
    path.write_text(json.dumps(night_record(result), indent=2, default=str) + "\n")
    return [*files, path]


def night_record(result: NightlyResult) -> dict[str, Any]:
    """The night as JSON: what it ran, what it was compared with, what alerts."""
    keep = (
        "model_id",
        "downloads",
        "outcome_a",
        "outcome_b",
        "failed_stage_b",
        "failed_status_b",
        "failing_op_b",
        "error_type_b",
        "error_message_b",
    )
    return {
        "series": result.series,
        "run_id": result.run_id,
        "previous": result.previous,
        "catalog": result.catalog,
        "alert": bool(result.regressions),
        "regressions": [{k: m.get(k) for k in keep} for m in result.regressions],
        "flakes": [{k: m.get(k) for k in keep} for m in result.flakes],
        "diff": None
        if result.diff is None
        else {
            "version_changes": result.diff["version_changes"],
            "summary": result.diff["summary"],
        },
    }
