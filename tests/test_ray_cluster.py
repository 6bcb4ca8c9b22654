"""A real two-node Ray cluster on loopback (token auth, as Ray 2.60 sets it up), joined with
`hfsweep run --address`: the sweep's tasks run on both nodes and every row lands."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from reports.store import Store
from tests.conftest import HFSWEEP, ROOT, write_catalog

pytestmark = pytest.mark.slow

PORT = "6391"


@pytest.fixture
def two_node_cluster(tmp_path):
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
    }
    common = ["--node-ip-address=127.0.0.1", "--num-cpus=1", "--disable-usage-stats"]
    head = subprocess.run(
        [str(ray_bin), "start", "--head", f"--port={PORT}", "--include-dashboard=false", *common],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if head.returncode != 0:
        pytest.fail(f"ray start --head failed: {head.stderr[-1500:]}")
    try:
        worker = subprocess.run(
            [str(ray_bin), "start", f"--address=127.0.0.1:{PORT}", *common],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert worker.returncode == 0, worker.stderr[-1500:]
        yield env
    finally:
        subprocess.run([str(ray_bin), "stop", "--force"], env=env, capture_output=True, timeout=120)


def test_sweep_on_an_existing_two_node_cluster(tmp_path, two_node_cluster):
    models = [
        {"model_id": f"org/m{i}", "library_name": "transformers", "model_type_hint": t}
        for i, t in enumerate(["llama", "gpt2", "bert", "opt"])
    ]
    catalog = write_catalog(tmp_path / "catalog.csv", models)
    store = tmp_path / "store"
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
            "--store",
            str(store),
            "--run-id",
            "cluster",
            "--stages",
            "load,forward,backward",
            "--no-report",
        ],
        cwd=ROOT,
        env={**two_node_cluster, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = Store(store).read("results", "cluster").to_pylist()
    assert Counter(r["status"] for r in rows) == Counter({"pass": 12})
    assert len({(r["model_id"], r["stage"]) for r in rows}) == 12
    nodes = {r["worker"].split(":")[1] for r in rows}
    assert len(nodes) == 2, f"tasks ran on {nodes}, expected both nodes"
