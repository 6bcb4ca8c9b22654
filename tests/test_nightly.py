"""`hfsweep nightly`: the previous night from the runs table, the diff, the site, and the alert
rules (exit 4 for a model that passed last night and fails tonight; a timeout or a model passing
again is a flake and does not alert), end to end on tiny catalogs, locally and through Ray on
the s3:// store (tests/test_nightly_recipes.py: the README's cron line and Ray job)."""

from __future__ import annotations

import datetime as dt
import json
import os

import pytest

from reports import alerts
from reports.store import Store
from tests.cli_in_process import hfsweep_in_process
from tests.conftest import write_catalog
from tests.neuron_support import forked
from tests.warm_fork import Finished, run_cli

MODELS = [
    {"model_id": "org/a", "library_name": "transformers", "model_type_hint": "llama"},
    {"model_id": "org/b", "library_name": "transformers", "model_type_hint": "gpt2"},
]
FAIL_B = json.dumps([{"at": "plan", "match": "org/b", "fault": "raise"}])


def model(model_id: str, a: str, b: str, status_b: str | None = None) -> dict:
    return {
        "model_id": model_id,
        "outcome_a": a,
        "outcome_b": b,
        "failed_status_b": status_b,
        "failed_stage_b": "forward" if status_b else None,
    }


def diff_of(*models: dict) -> dict:
    return {"models": {"some_category": list(models)}}


@pytest.mark.parametrize(
    ("a", "b", "status", "alert", "flake"),
    [
        ("passed", "failed", "fail", True, False),
        ("passed", "failed", "fail_accuracy", True, False),
        ("passed", "failed", "crash", True, False),
        ("passed", "failed", "oom", True, False),
        ("passed", "failed", "timeout", False, True),  # a slow night, not the model
        ("failed", "passed", None, False, True),  # passes again
        ("failed", "failed", "fail", False, False),
        ("passed", "skipped", None, False, False),
        ("partial", "failed", "fail", False, False),
        (None, "failed", "fail", False, False),  # new in the catalog
        ("passed", None, None, False, False),  # gone from it
    ],
)
def test_alert_rules(a, b, status, alert, flake):
    diff = diff_of(model("org/x", a, b, status))
    assert bool(alerts.regressions(diff)) is alert
    assert bool(alerts.flakes(diff)) is flake


def test_the_previous_night_is_the_newest_earlier_finished_run_of_the_series():
    t = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)

    def run(run_id: str, hours: int, status: str = "finished", series: str | None = "neuron"):
        return {
            "run_id": run_id,
            "started_at": t + dt.timedelta(hours=hours),
            "status": status,
            "nightly": series,
        }

    runs = [
        run("tonight", 48, "running"),
        run("later", 50),  # started after tonight
        run("killed", 40, "interrupted"),  # no baseline: its missing models would be changes
        run("cpu-night", 30, series="cpu"),
        run("adhoc", 26, series=None),  # `hfsweep run`, not a night
        run("last-night", 24, "incomplete"),
        run("two-nights-ago", 0),
    ]
    assert alerts.previous_night(runs, "neuron", "tonight") == "last-night"
    assert alerts.previous_night(runs, "cpu", "tonight") == "cpu-night"
    assert alerts.previous_night(runs, "neuron", "two-nights-ago") is None
    assert alerts.previous_night(runs, "mps", "tonight") is None


def nightly(*args: str, faults: str | None = None) -> Finished:
    """One night on the emulated device, a process of its own forked from the `@forked` test's
    warm one (tests/warm_fork.py: its own exit status, stdout, stderr and environment), not a
    fresh interpreter importing torch again."""
    argv = ["nightly", "--device", "neuron", "--stages", "load", "--no-report", *args]
    return run_cli(argv, env={"HF_HUB_OFFLINE": "1", "HFSWEEP_TEST_FAULTS": faults})


@pytest.mark.slow
@forked
def test_nightly_alerts_on_a_regression_and_not_on_flakes(tmp_path):
    catalog = write_catalog(tmp_path / "catalog.csv", MODELS)
    common = [
        "--local",
        "--catalog",
        str(catalog),
        "--store",
        str(tmp_path / "store"),
        "--site",
        str(tmp_path / "site"),
    ]
    first = nightly(*common)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "first night, nothing to compare with" in first.stderr
    night = json.loads((tmp_path / "site" / "nightly.json").read_text())
    assert night["previous"] is None and night["alert"] is False
    assert (tmp_path / "site" / "index.html").is_file()
    assert len(list((tmp_path / "site" / "models").glob("*.html"))) == 2

    # org/b fails tonight: the diff names it, the alert names it, exit 4
    second = nightly(*common, faults=FAIL_B)
    assert second.returncode == 4, second.stderr[-3000:]
    assert "newly_failing:" in second.stdout
    assert "org/b  passed -> failed" in second.stdout
    assert "ALERT: 1 model(s) passed last night and fail tonight" in second.stderr
    assert "org/b: passed -> fail at load (RuntimeError)" in second.stderr
    night2 = json.loads((tmp_path / "site" / "nightly.json").read_text())
    assert night2["previous"] == night["run_id"] and night2["alert"] is True
    assert [m["model_id"] for m in night2["regressions"]] == ["org/b"]
    runs = {r["run_id"]: r for r in Store(tmp_path / "store").runs()}
    assert runs[night2["run_id"]]["nightly"] == "neuron"
    # by default a night reuses the previous night's rows: org/a's task is the same, so its
    # rows are copied (a fault at planning acts before a task, it is not in the key)
    assert runs[night["run_id"]]["reuse"] is None  # the first night has nothing to reuse
    assert runs[night2["run_id"]]["reuse"] == night["run_id"]
    reused = {
        r["model_id"]: r["reused_from"]
        for r in Store(tmp_path / "store").read("results", night2["run_id"]).to_pylist()
    }
    assert reused == {"org/a": night["run_id"], "org/b": None}
    assert "1 reused from earlier runs" in second.stderr

    # org/b passes again and org/a times out: two flakes, no alert (the row says timeout)
    hang_a = json.dumps([{"at": "stage:load", "match": "llama", "fault": "hang"}])
    third = nightly(*common, "--timeout", "5", faults=hang_a)
    assert third.returncode == 0, third.stderr[-3000:]
    assert "no model that passed last night fails tonight; 2 flake(s), no alert" in third.stderr
    night3 = json.loads((tmp_path / "site" / "nightly.json").read_text())
    assert sorted(
        (m["model_id"], m["outcome_b"], m["failed_status_b"]) for m in night3["flakes"]
    ) == [("org/a", "failed", "timeout"), ("org/b", "passed", None)]
    assert night3["alert"] is False and night3["previous"] == night2["run_id"]


def refused(*args: str):
    """A night refused before it starts, from the CLI's function in this process: the answer
    and the exit code are under test, not the process (tests/cli_in_process.py)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("HFSWEEP_TEST_FAULTS", None)
    base = ["nightly", "--device", "neuron", "--stages", "load", "--no-report"]
    return hfsweep_in_process(*base, *args, env=env)


def test_nightly_bad_usage_is_one_line_exit_2(tmp_path):
    (tmp_path / "site").write_text("a file")
    bad_site = refused("--catalog", "bundled", "--site", str(tmp_path / "site"))
    assert bad_site.returncode == 2 and "is a file, not a folder" in bad_site.stderr
    bad_series = refused("--series", "a/b")
    assert bad_series.returncode == 2 and "--series 'a/b'" in bad_series.stderr
    hub = refused("--catalog", "hub", "--site", str(tmp_path / "s"))
    assert hub.returncode == 2 and "the Hub is offline" in hub.stderr
    assert "Traceback" not in bad_site.stderr + bad_series.stderr + hub.stderr
