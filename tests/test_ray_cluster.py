"""A real two-node Ray cluster on loopback (token auth, as Ray 2.60 sets it up), joined with
`hfsweep run --address` and a store on S3 (a local S3-compatible server, reached through the AWS
variables), as the README's cluster section runs it: plan and model tasks run on both nodes,
every row lands in the object store, and the report at the end of the run reads it back. On
the same machine, `hfsweep run` without `--address` starts its own embedded Ray instead of
joining that cluster."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from reports.store import Store
from runners import containment
from tests.conftest import HFSWEEP, ROOT, forget_cluster, ray_address_file, write_catalog
from tests.s3_support import BUCKET, local_s3

# One cluster on a fixed port for the module: its tests share one xdist worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("two_node_cluster")]

PORT = "6391"
MARK = "HFSWEEP_TEST_CLUSTER"


@pytest.fixture(scope="module")
def two_node_cluster():
    ray_bin = Path(HFSWEEP[0]).with_name("ray")
    if not ray_bin.exists():
        ray_bin = Path(shutil.which("ray") or "ray")
    env = {
        **os.environ,
        "RAY_AUTH_MODE": "token",
        # A fresh machine has no ~/.ray/auth_token; every process of this cluster gets this one.
        "RAY_AUTH_TOKEN": secrets.token_hex(32),
        "RAY_USAGE_STATS_ENABLED": "0",
        "PYTHONPATH": str(ROOT),
        MARK: secrets.token_hex(8),  # every process of this cluster inherits it
    }
    common = ["--node-ip-address=127.0.0.1", "--num-cpus=1", "--disable-usage-stats"]
    try:  # a `ray start` that fails or times out may have started processes: they end below
        head = subprocess.run(
            [str(ray_bin), "start", "--head", f"--port={PORT}", "--include-dashboard=false"]
            + common,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if head.returncode != 0:
            pytest.fail(f"ray start --head failed: {head.stderr[-1500:]}")
        worker = subprocess.run(
            [str(ray_bin), "start", f"--address=127.0.0.1:{PORT}", *common],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert worker.returncode == 0, worker.stderr[-1500:]
        yield {k: v for k, v in env.items() if k != MARK}
    finally:
        # Only what this cluster's `ray start`s started (never `ray stop`: it stops every Ray
        # on the machine, another sweep's too), and the address it left for `ray.init()`.
        containment.kill_marked(MARK, env[MARK])
        forget_cluster(PORT)


def test_sweep_on_an_existing_two_node_cluster(tmp_path, two_node_cluster):
    models = [
        {"model_id": f"org/m{i}", "library_name": "transformers", "model_type_hint": t}
        for i, t in enumerate(["llama", "gpt2", "bert", "opt"])
    ]
    catalog = write_catalog(tmp_path / "catalog.csv", models)
    with local_s3() as aws:
        store = f"s3://{BUCKET}/hfsweep"
        proc = subprocess.run(
            [
                *HFSWEEP,
                "run",
                "--address",
                f"127.0.0.1:{PORT}",
                "--catalog",
                str(catalog),
                "--top",
                "4",
                "--device",
                "neuron",
                "--store",
                store,
                "--run-id",
                "cluster",
                "--stages",
                "load,forward,backward",
            ],
            cwd=ROOT,
            env={**two_node_cluster, **aws, "HF_HUB_OFFLINE": "1"},
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "4 models" in proc.stdout and "EMULATED" in proc.stdout.upper()
        rows = Store(store).read("results", "cluster").to_pylist()
    assert Counter(r["status"] for r in rows) == Counter({"pass": 12})
    assert len({(r["model_id"], r["stage"]) for r in rows}) == 12
    assert all(r["device"] == "neuron" and r["device_emulated"] for r in rows)
    nodes = {r["worker"].split(":")[1] for r in rows}
    assert len(nodes) == 2, f"tasks ran on {nodes}, expected both nodes"


def test_a_driver_without_token_mode_is_refused(two_node_cluster):
    env = {
        k: v for k, v in two_node_cluster.items() if k not in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")
    }
    proc = subprocess.run(
        [*HFSWEEP, "run", "--address", f"127.0.0.1:{PORT}", "--top", "1", "--no-report"],
        cwd=ROOT,
        env={**env, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode != 0
    assert "InvalidAuthToken" in proc.stderr or "AuthenticationError" in proc.stderr, proc.stderr[
        -2000:
    ]


def test_the_embedded_ray_ignores_a_ray_start_cluster_on_the_machine(tmp_path, two_node_cluster):
    """Ray's bare `ray.init()` connects to the cluster whose address `ray start` left on the
    machine (and refuses the embedded Ray's CPU count there): without `--address` the driver
    starts its own embedded Ray, whatever cluster runs beside it."""
    marker = ray_address_file()  # where a bare `ray.init()` looks for a cluster
    assert marker.read_text().strip().endswith(f":{PORT}")
    catalog = write_catalog(
        tmp_path / "c.csv",
        [{"model_id": "org/gpt2", "library_name": "transformers", "model_type_hint": "gpt2"}],
    )
    store = tmp_path / "store"
    env = {k: v for k, v in two_node_cluster.items() if not k.startswith("RAY_AUTH")}
    proc = subprocess.run(
        [*HFSWEEP, "run", "--catalog", str(catalog), "--top", "1", "--store", str(store)]
        + ["--run-id", "r", "--stages", "load", "--num-cpus", "1", "--no-report"],
        cwd=ROOT,
        env={**env, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = Store(store).read("results", "r").to_pylist()
    assert [r["status"] for r in rows] == ["pass"]
