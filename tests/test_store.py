"""The Parquet store: atomic parts, fallbacks tied to their results, resume, runs table."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from ground.errors import StoreError
from ground.schema import RESULTS_SCHEMA, TABLES, to_table
from reports.store import Store, utcnow
from tests.neuron_support import forked
from tests.store_writes import completed_models, write_model_rows


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
    write_model_rows(
        store,
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
    assert completed_models(store, "r1") == {"a/b"}
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
    assert completed_models(store, "r1") == set()


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


def test_a_run_gives_every_table_a_part_the_store_reads_past(store_dir):
    """Each table the run has no part of yet gets one of no rows (`empty-*`, the table's
    schema): a folder for outside readers, no data for the store's own."""
    store = Store(store_dir)
    write_model_rows(store, "r1", [result("a/b")], [])
    created = store.create_tables("r1", ("results", "fallbacks", "ops"))
    assert created == ["fallbacks", "ops"]  # results had a part already
    empty = sorted((store_dir / "fallbacks" / "run_id=r1").glob("*.parquet"))
    assert [p.name.split("-")[0] for p in empty] == ["empty"]
    assert pq.read_table(empty[0]).schema.names == list(TABLES["fallbacks"].names)
    assert store.part_files("fallbacks", "r1") == [] and store.read("ops").num_rows == 0
    assert store.create_tables("r1", ("fallbacks", "ops")) == []  # once per run
    assert store.damaged_parts("r1") == []


@pytest.mark.slow
@forked  # the commands in forks of a warm process (tests/warm_fork.py), not fresh interpreters
def test_every_table_exists_after_a_run_where_nothing_fell_back(tmp_path):
    """A real sweep on the CPU (nothing falls back) and a real op sweep into one folder:
    pyarrow.dataset, DuckDB and pandas read every table of the store, fallbacks and the op
    tables included, without being told which exist. Each command is a process of its own,
    forked from this test's warm one (its exit status, its output), not an interpreter that
    imports torch again."""
    from tests.conftest import write_catalog
    from tests.store_readers import rows_per_table
    from tests.warm_fork import run_cli

    catalog = write_catalog(
        tmp_path / "c.csv",
        [{"model_id": "org/gpt2", "library_name": "transformers", "model_type_hint": "gpt2"}],
    )
    root = tmp_path / "store"
    env: dict[str, str | None] = {"HF_HUB_OFFLINE": "1", "HFSWEEP_TEST_FAULTS": None}
    run = ["run", "--local", "--catalog", str(catalog), "--top", "1", "--device", "cpu"]
    run += ["--stages", "load,forward", "--store", str(root), "--run-id", "m", "--no-report"]
    p = run_cli(run, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    counts = rows_per_table(str(root))
    assert counts["results"] == 2 and counts["runs"] >= 1 and counts["configs"] == 1
    assert counts["fallbacks"] == 0  # nothing fell back, and the table is there
    assert counts["ops"] == counts["op_summary"] == counts["op_runs"] == 0

    ops = ["ops", "--local", "--ops", "abs", "--dtypes", "fp32", "--device", "cpu"]
    ops += ["--store", str(root), "--run-id", "o", "--no-report"]
    p = run_cli(ops, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    after = rows_per_table(str(root))
    assert after["ops"] > 0 and after["op_summary"] > 0 and after["op_runs"] >= 1
    assert after["results"] == 2 and after["fallbacks"] == 0
