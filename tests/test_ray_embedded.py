"""A driver whose embedded Ray dies under it ends with one error (that `hfsweep run` without
`--address` starts its own embedded Ray even where a `ray start` cluster runs is tested on the
cluster of tests/test_ray_cluster.py)."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time

import pytest

from reports.store import Store
from runners import containment, faults
from tests.conftest import HFSWEEP, ROOT, write_catalog

pytestmark = pytest.mark.slow

MARK = "HFSWEEP_TEST_MARK"  # what this module's drivers and all they start inherit


def test_a_driver_whose_ray_dies_under_it_ends_with_one_error_and_exit_3(tmp_path):
    """A `ray stop --force` elsewhere on the machine kills a running sweep's embedded Ray: its
    driver ends with one error and exit 3, not Ray's raw C++ line and exit 1. This test kills
    only what its own driver started (found by a marker in their environment, and everything
    below them)."""
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


def test_the_embedded_rays_workers_run_at_the_drivers_niceness():
    """Ray starts its workers at niceness +15: beside any busy process the models starved (the
    fault matrix under load went from 62 s to over 5 minutes, and wall-clock timeouts fired)."""
    code = (
        "import os\n"
        "from sweep.executors.ray_cluster import init_ray\n"
        "ray = init_ray(None, 1)\n"
        "print(ray.get(ray.remote(lambda: os.nice(0)).remote()), os.nice(0))\n"
    )
    proc = subprocess.run(
        [HFSWEEP[0], "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    worker, driver = map(int, proc.stdout.split())
    assert worker == driver
