"""`hfsweep run` without `--address` starts its own embedded Ray, even on a machine where a
`ray start` cluster runs (Ray's `ray.init()` would otherwise connect to that one, and refuse
the embedded Ray's CPU count); a driver whose embedded Ray dies under it ends with one error."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import time
from pathlib import Path

import pytest

from reports.store import Store
from runners import containment, faults
from tests.conftest import HFSWEEP, ROOT, forget_cluster, ray_address_file, write_catalog

pytestmark = pytest.mark.slow

PORT = 6399
MARK = "HFSWEEP_TEST_MARK"  # what this module's drivers and all they start inherit


def kill_session(proc: subprocess.Popen) -> None:
    """Kill a `ray start --block` and everything in its session (its node's processes)."""
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    for entry in Path("/proc").iterdir():
        try:
            session = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[3])
        except (OSError, ValueError, IndexError):
            continue
        if session == proc.pid:
            with contextlib.suppress(OSError):
                os.kill(int(entry.name), signal.SIGKILL)


def test_the_embedded_ray_ignores_a_ray_start_cluster_on_the_machine(tmp_path):
    ray_bin = Path(HFSWEEP[0]).with_name("ray")
    env = {
        **os.environ,
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": secrets.token_hex(32),
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    head = subprocess.Popen(
        [str(ray_bin), "start", "--head", "--block", f"--port={PORT}", "--num-cpus=1"]
        + ["--node-ip-address=127.0.0.1", "--include-dashboard=false", "--disable-usage-stats"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    marker = ray_address_file()  # where a bare `ray.init()` looks for a cluster
    try:
        deadline = time.monotonic() + 120
        while not (marker.exists() and marker.read_text().strip().endswith(f":{PORT}")):
            assert time.monotonic() < deadline and head.poll() is None, "ray start failed"
            time.sleep(0.5)
        catalog = write_catalog(
            tmp_path / "c.csv",
            [{"model_id": "org/gpt2", "library_name": "transformers", "model_type_hint": "gpt2"}],
        )
        store = tmp_path / "store"
        proc = subprocess.run(
            [*HFSWEEP, "run", "--catalog", str(catalog), "--top", "1", "--store", str(store)]
            + ["--run-id", "r", "--stages", "load", "--num-cpus", "1", "--no-report"],
            cwd=ROOT,
            env={k: v for k, v in env.items() if not k.startswith("RAY_AUTH")},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert [r["status"] for r in Store(store).read("results", "r").to_pylist()] == ["pass"]
    finally:
        kill_session(head)
        forget_cluster(PORT)


def test_a_driver_whose_ray_dies_under_it_ends_with_one_error_and_exit_3(tmp_path):
    """Before: a `ray stop --force` elsewhere on the machine killed a running sweep's embedded
    Ray, and its driver exited 1 with Ray's raw C++ line. This test kills only what its own
    driver started (found by a marker in their environment, and everything below them)."""
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
