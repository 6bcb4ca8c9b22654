"""`hfsweep report / diff / lookup / dashboard` as a user runs them: exit codes and output.
The CLI's function in this process (tests/cli_in_process.py) for most answers; a process of
its own where the process is the point: the store from the environment, a bad-usage exit
status, the dashboard's server."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.cli_in_process import hfsweep_in_process as hfsweep
from tests.conftest import HFSWEEP, ROOT
from tests.report_store_builder import EVIL_ID, build_hand_store


def hfsweep_process(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """The `hfsweep` script in a process of its own (the other tests call its function)."""
    return subprocess.run(
        [*HFSWEEP, *args], capture_output=True, text=True, timeout=120, cwd=ROOT, env=env
    )


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("cli") / "store"
    build_hand_store(root)
    return str(root)


def test_report_text_states_its_denominators(store: str) -> None:
    p = hfsweep("report", "--store", store)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "run r2 (finished), device neuron (emulated)" in out
    assert "EMULATED DEVICE" in out
    for needle in (
        "catalog",
        "20",
        "requested by this run",
        "models in this run",
        "requested, no rows yet (in flight or lost)",
        "skipped (not attempted)",
        "2 (25.0%)",
        "150 (6.5%)",
        "remote_code",
        "no_config",
        "swept (attempted)",
        "6 (75.0%)",
        "2.16k (93.5%)",
        "at forward: timeout",
        "passed every stage",
        "3 (37.5%)",
        "1.70k (73.6%)",
        "with no CPU fallback",
        "2 (25.0%)",
        "1.20k (51.9%)",
        "every stage, no CPU fallback",
        "aten::histc",
        "RuntimeError: boom",
        "LlamaForCausalLM",
    ):
        assert needle in out, needle
    # per-stage pass counts of the funnel
    load_line = next(line for line in out.splitlines() if line.startswith("load "))
    assert load_line.split()[1:3] == ["8", "5"]  # applies to 8 models, 5 passed
    generate_line = next(line for line in out.splitlines() if line.startswith("generate "))
    assert generate_line.split()[1:4] == ["7", "2", "28.6%"]  # not bert-x: an encoder


def test_report_json_markdown_and_run(store: str) -> None:
    p = hfsweep("report", "--store", store, "--format", "json", "--run", "r1")
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)
    assert data["run_id"] == "r1" and data["denominators"]["models"] == 8
    p = hfsweep("report", "--store", store, "--format", "markdown")
    assert p.returncode == 0
    assert p.stdout.startswith("# hfsweep report") and "| catalog |" in p.stdout
    assert "&lt;script&gt;" in p.stdout and "<script>" not in p.stdout


def test_report_html_site(store: str, tmp_path: Path) -> None:
    out = tmp_path / "site"
    p = hfsweep("report", "--store", store, "--format", "html", "--out", str(out))
    assert p.returncode == 0, p.stderr
    assert {f.name for f in out.iterdir()} == {
        "index.html",
        "models.html",
        "glossary.html",  # the words the pages' tooltips explain
        "report.json",
        "models.csv",
        "models",  # a page per model
        "ops",  # a page per op the models fell back on or failed at
    }
    assert len(list((out / "models").iterdir())) == 8 and len(list((out / "ops").iterdir())) == 2
    assert p.stderr.startswith("wrote 15 files (") and "8 model pages, 2 op pages" in p.stderr
    index = (out / "index.html").read_text()
    assert "<style>" in index and "<svg" in index and 'rel="stylesheet"' not in index
    assert "<script" not in index.replace("&lt;script", "")
    models = (out / "models.html").read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in models and 'data-emulated="true"' in models
    assert "badge-emulated" not in models  # the banner says it once
    assert EVIL_ID in (out / "models.csv").read_text()


def test_report_errors_exit_2(store: str, tmp_path: Path) -> None:
    p = hfsweep("report", "--store", str(tmp_path / "nothing"))
    assert p.returncode == 2 and "no such folder" in p.stderr and "Traceback" not in p.stderr
    (tmp_path / "empty").mkdir()
    p = hfsweep("report", "--store", str(tmp_path / "empty"))
    assert p.returncode == 2 and "no results yet" in p.stderr and "Traceback" not in p.stderr
    p = hfsweep("report", "--store", store, "--run", "r9")
    assert p.returncode == 2 and "no results for run 'r9'" in p.stderr and "r2" in p.stderr
    p = hfsweep("report", "--store", store, "--format", "html")
    assert p.returncode == 2 and "--out" in p.stderr
    p = hfsweep("report", "--store", store, "--format", "pdf")
    assert p.returncode == 2


def test_report_uses_hfsweep_store_env(store: str) -> None:
    import os

    p = hfsweep_process("report", "--format", "json", env={**os.environ, "HFSWEEP_STORE": store})
    assert p.returncode == 0 and json.loads(p.stdout)["run_id"] == "r2"
    # bad usage ends the process with exit status 2 and one line, no traceback
    p = hfsweep_process("report", "--store", store, "--run", "r9")
    assert p.returncode == 2 and "no results for run 'r9'" in p.stderr
    assert "Traceback" not in p.stderr


def test_diff(store: str) -> None:
    p = hfsweep("diff", "r1", "r2", "--store", store)
    assert p.returncode == 0, p.stderr
    assert "r1 (neuron (emulated)) -> r2 (neuron (emulated))" in p.stdout
    assert "torch_version: 2.13.0 -> 2.13.1" in p.stdout
    assert "newly_failing:" in p.stdout and "org/c-fail-compile  passed -> failed" in p.stdout
    assert "newly_passing:" in p.stdout and "org/b-pass-fallback  failed -> passed" in p.stdout
    # the real error (its op), not the normalised signature
    assert "org/c-fail-compile  passed -> failed  300  compile aten::nonzero" in p.stdout
    p = hfsweep("diff", "r1", "r2", "--store", store, "--format", "json")
    assert json.loads(p.stdout)["summary"]["removed"]["models"] == 1
    p = hfsweep("diff", "r1", "nope", "--store", store)
    assert p.returncode == 2 and "no results for run 'nope'" in p.stderr


def test_lookup_exit_codes(store: str) -> None:
    p = hfsweep("lookup", "org/b-pass-fallback", "--store", store)
    assert p.returncode == 0, p.stderr
    assert "org/b-pass-fallback: passed on neuron (emulated), run r2" in p.stdout
    assert "EMULATED" in p.stdout and "aten::histc" in p.stdout
    assert "hidden_size: 4096 -> 64" in p.stdout
    assert "reproduce: hfsweep check org/b-pass-fallback --device neuron" in p.stdout
    p = hfsweep("lookup", "org/c-fail-compile", "--store", store)
    assert (
        p.returncode == 1
        and f"{'compile':<18}fail" in p.stdout
        and "boom in aten::nonzero" in p.stdout
    )
    assert "RuntimeError: boom " not in p.stdout.replace("boom in", "")  # no signature shown
    p = hfsweep("lookup", "org/e-remote", "--store", store)
    assert p.returncode == 1 and "skipped (remote_code)" in p.stdout
    p = hfsweep(
        "lookup", "org/b-pass-fallback", "--store", store, "--run", "r1", "--format", "json"
    )
    assert p.returncode == 1 and json.loads(p.stdout)["summary"]["failed_stage"] == "backward"
    # no results is not bad usage (2): exit 5, the answer on stdout; an id neither the store
    # nor the catalog has gets no command to run (a check of it would exit 2), but the hint
    p = hfsweep("lookup", "nobody/nothing", "--store", store)
    assert p.returncode == 5 and "no results for model 'nobody/nothing'" in p.stdout
    assert "check the id's spelling" in p.stdout and "hfsweep check" not in p.stdout
    assert "DEVICE" not in p.stdout and "Traceback" not in p.stderr
    p = hfsweep("lookup", "org/c-fail", "--store", store)
    assert p.returncode == 5 and "did you mean: org/c-fail-compile (has results)" in p.stdout
    p = hfsweep("lookup", "ORG/C-FAIL-COMPILE", "--store", store)  # the id in another case
    assert p.returncode == 1 and "org/c-fail-compile: failed" in p.stdout
    assert "differs in case" in p.stdout
    p = hfsweep("lookup", "org/old", "--store", store, "--run", "r2")  # only r1 has it
    assert p.returncode == 5 and "other runs or dtypes of the store have it" in p.stdout
    p = hfsweep("lookup", "", "--store", store)
    assert p.returncode == 2 and "MODEL_ID is empty" in p.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_dashboard_command_serves(store: str) -> None:
    port = _free_port()
    proc = subprocess.Popen(
        [*HFSWEEP, "dashboard", "--store", store, "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        body = None
        deadline = time.monotonic() + 600  # a guard against a hang, not a speed
        while body is None:  # until it answers (starting takes what the machine gives it)
            assert proc.poll() is None, proc.stderr.read()[-2000:]
            assert time.monotonic() < deadline, "the dashboard never answered"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health", timeout=30) as r:
                    body = json.loads(r.read())
            except OSError:
                time.sleep(0.2)
        assert body["ok"] is True and body["store"] == store and body["runs"] == 2
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    p = hfsweep("dashboard", "--store", store, "--port", "70000")
    assert p.returncode == 2 and "--port" in p.stderr


def test_diff_against_an_interrupted_run(tmp_path: Path) -> None:
    """A run interrupted before its first results part is in the runs table: it can be
    compared (it has no models yet)."""
    import datetime as dt

    from reports.store import Store

    root = tmp_path / "s"
    build_hand_store(root)
    t = dt.datetime(2026, 11, 3, 2, 0, tzinfo=dt.UTC)
    Store(root).write(
        "runs", "r3", [{"run_id": "r3", "status": "interrupted", "started_at": t, "updated_at": t}]
    )
    p = hfsweep("diff", "r2", "r3", "--store", str(root), "--format", "json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["summary"]["removed"]["models"] == 8
