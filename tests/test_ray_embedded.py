"""A driver whose embedded Ray dies under it ends with one error, and that Ray's workers ran at
the driver's niceness (that `hfsweep run` without `--address` starts its own embedded Ray even
where a `ray start` cluster runs is tested on the cluster of tests/test_ray_cluster.py)."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
from pathlib import Path

import pytest

from reports.store import Store
from runners import containment, faults
from tests.conftest import HFSWEEP, ROOT, write_catalog

pytestmark = pytest.mark.slow

MARK = "HFSWEEP_TEST_MARK"  # what this module's drivers and all they start inherit


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_a_driver_whose_ray_dies_under_it_ends_with_one_error_and_exit_3(tmp_path):
    """A `ray stop --force` elsewhere on the machine kills a running sweep's embedded Ray: its
    driver ends with one error and exit 3, not Ray's raw C++ line and exit 1. This test kills
    only what its own driver started (found by a marker in their environment, and everything
    below them).

    Before the kill, while the model waits in its stage: the Ray worker that runs it, and the
    model's child, run at the driver's niceness. Ray starts its workers at +15: beside any busy
    process the models starved (the fault matrix under load went from 62 s to over 5 minutes,
    and wall-clock timeouts fired)."""
    catalog = write_catalog(
        tmp_path / "c.csv",
        [{"model_id": "org/gpt2", "library_name": "transformers", "model_type_hint": "gpt2"}],
    )
    state, mark = tmp_path / "faults", secrets.token_hex(8)
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        MARK: mark,
        # the task waits until Ray is killed under it: in flight whatever the machine's speed
        faults.ENV: json.dumps([{"at": "stage:load", "match": "*", "fault": "wait"}]),
        faults.STATE_ENV: str(state),
    }
    driver = subprocess.Popen(
        [*HFSWEEP, "run", "--catalog", str(catalog), "--top", "1", "--store", str(tmp_path / "s")]
        + ["--run-id", "r", "--stages", "load", "--num-cpus", "1", "--no-report"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 600  # a guard against a hang, not a speed
        while not faults.fired(str(state)):  # a model task is in flight
            assert time.monotonic() < deadline and driver.poll() is None, "no task started"
            time.sleep(0.5)
        (child,) = faults.fired(str(state))  # the model's child, waiting in its load stage
        worker = _parent(child)  # the Ray worker that runs its task
        assert worker != driver.pid
        assert "ray" in Path(f"/proc/{worker}/cmdline").read_text().lower()
        niceness = os.getpriority(os.PRIO_PROCESS, driver.pid)
        assert os.getpriority(os.PRIO_PROCESS, worker) == niceness
        assert os.getpriority(os.PRIO_PROCESS, child) == niceness
        killed = containment.kill_marked(MARK, mark, spare={driver.pid})
        assert killed
        _, err = driver.communicate(timeout=120)
    finally:
        driver.kill()
        containment.kill_marked(MARK, mark)
    assert driver.returncode == 3, err[-3000:]
    last = err.rstrip().splitlines()[-2:]
    assert last[0].startswith("error: the embedded Ray stopped under the driver"), err[-3000:]
    assert last[1].startswith("hint: "), err[-3000:]
    assert "Traceback" not in err and "Failed to connect to GCS" not in err
    assert not Store(tmp_path / "s").read("results", "r").num_rows  # nothing was recorded
    assert Store(tmp_path / "s").run("r")["status"] == "interrupted"
