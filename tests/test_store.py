"""The Parquet store: atomic parts, fallbacks tied to their results, resume, runs table."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from reports.errors import StoreError
from reports.schema import RESULTS_SCHEMA, to_table
from reports.store import Store, utcnow


def result(model: str, stage: str = "load", status: str = "pass") -> dict:
    return {
        "model_id": model,
        "stage": stage,
        "status": status,
        "config_source": "local",
        "device": "cpu",
        "device_emulated": False,
        "dtype": "fp32",
    }


def test_write_and_read_back(store_dir):
    store = Store(store_dir)
    store.write_model_rows(
        "r1",
        [result("a/b"), result("a/b", "forward")],
        [
            {
                "model_id": "a/b",
                "stage": "forward",
                "device": "cpu",
                "op": "aten::add.Tensor",
                "count": 3,
                "source": "eager",
            }
        ],
    )
    table = store.read("results", "r1")
    assert table.schema == RESULTS_SCHEMA
    assert table.num_rows == 2 and set(table.column("run_id").to_pylist()) == {"r1"}
    assert store.read("fallbacks", "r1").column("count").to_pylist() == [3]
    assert store.completed_models("r1") == {"a/b"}
    # what other tools see: a plain hive-partitioned Parquet dataset
    files = list((store_dir / "results" / "run_id=r1").glob("*.parquet"))
    assert len(files) == 1 and pq.read_table(files[0]).num_rows == 2


def test_orphan_fallbacks_and_temporaries_are_invisible(store_dir):
    store = Store(store_dir)
    # a driver killed after the fallbacks part and before the results part
    store.write(
        "fallbacks",
        "r1",
        [
            {
                "model_id": "x/y",
                "stage": "load",
                "device": "cpu",
                "op": "aten::mul.out",
                "count": 1,
                "source": "eager",
            }
        ],
    )
    (store_dir / "results" / "run_id=r1").mkdir(parents=True)
    (store_dir / "results" / "run_id=r1" / ".part-123.parquet.tmp").write_bytes(b"partial")
    assert store.read("fallbacks", "r1").num_rows == 0
    assert store.read("results", "r1").num_rows == 0
    assert store.completed_models("r1") == set()


def test_unknown_columns_and_bad_run_ids_are_refused(store_dir):
    with pytest.raises(KeyError, match="statuss"):
        to_table("results", [{**result("a"), "statuss": "pass"}])
    with pytest.raises(StoreError, match="invalid run id"):
        Store(store_dir).write("results", "../escape", [result("a")])


def test_runs_table_keeps_latest_state(store_dir):
    store = Store(store_dir)
    started = utcnow()
    store.write_run({"run_id": "r1", "status": "running", "started_at": started})
    store.write_run({"run_id": "r1", "status": "finished", "started_at": started})
    store.write_run({"run_id": "r2", "status": "running", "started_at": utcnow()})
    runs = store.runs()
    assert [r["run_id"] for r in runs] == ["r2", "r1"]
    assert store.run("r1")["status"] == "finished"
    assert store.latest_run_id() == "r2"
