"""Report aggregations on the hand-built store; every expected figure is worked out by hand
from the table in `report_store_builder`."""

from __future__ import annotations

import datetime as dt

import pytest

from reports import coverage, diff, failures, models, ops
from reports.models import ModelFilter, QueryError, model_detail, model_table
from reports.query import StoreQuery
from reports.store import Store
from tests.report_store_builder import EVIL_ID, build_hand_store, rows_for
from tests.store_writes import write_model_rows


@pytest.fixture(scope="module")
def q(tmp_path_factory: pytest.TempPathFactory) -> StoreQuery:
    root = tmp_path_factory.mktemp("hand") / "store"
    build_hand_store(root)
    return StoreQuery(root)


def test_runs_latest_state_and_order(q: StoreQuery) -> None:
    assert q.run_ids() == ["r2", "r1"]
    assert q.resolve_run(None) == "r2"
    assert q.run_info("r2")["status"] == "finished"  # the later of its two rows


def test_denominators_add_up(q: StoreQuery) -> None:
    d = coverage.denominators(q, "r2")
    assert d["device_emulated"] is True and d["device_label"] == "neuron (emulated)"
    assert d["run_status"] == "finished"
    assert (d["catalog_size"], d["models_requested"], d["models"]) == (20, 9, 8)
    assert d["not_yet_in_store"] == 1
    assert d["downloads"] == 2310
    assert (d["skipped"], d["skipped_downloads"]) == (2, 150)
    assert d["skipped_by_reason"] == [
        {"reason": "no_config", "models": 1, "downloads": 50},
        {"reason": "remote_code", "models": 1, "downloads": 100},
    ]
    assert (d["swept"], d["swept_downloads"]) == (6, 2160)
    assert (d["failed"], d["failed_downloads"]) == (3, 460)
    assert d["failed_by_stage"] == [
        {"stage": "load", "status": "fail", "models": 1, "downloads": 10},
        {"stage": "forward", "status": "timeout", "models": 1, "downloads": 150},  # attempt 2
        {"stage": "compile", "status": "fail", "models": 1, "downloads": 300},
    ]
    assert (d["passed"], d["passed_downloads"]) == (3, 1700)
    assert (d["passed_on_device"], d["passed_on_device_downloads"]) == (2, 1200)
    assert (d["passed_with_fallback"], d["passed_with_fallback_downloads"]) == (1, 500)
    assert d["partial"] == 0
    assert d["skipped"] + d["swept"] == d["models"]
    assert d["failed"] + d["passed"] + d["partial"] == d["swept"]


def test_funnel(q: StoreQuery) -> None:
    lines = {f["line"]: f for f in coverage.funnel(q, "r2")}
    assert [
        (s, lines[s]["passed"], lines[s]["passed_downloads"])
        for s in ("load", "forward", "backward", "compile", "generate")
    ] == [
        ("load", 5, 2150),
        ("forward", 4, 2000),
        ("backward", 4, 2000),
        ("compile", 3, 1700),
        ("generate", 2, 1500),
    ]
    assert (lines["forward"]["no_fallback"], lines["forward"]["no_fallback_downloads"]) == (2, 1200)
    assert (lines["backward"]["no_fallback"], lines["backward"]["no_fallback_downloads"]) == (
        3,
        1500,
    )
    assert lines["forward"]["failed"] == 1 and lines["load"]["failed"] == 1
    assert lines["compile"]["not_run"] == 2  # g and evil
    assert lines["generate"]["skipped"] == 1  # bert-x: not applicable
    # a stage's shares are of the models it applies to: generate's base lacks bert-x
    assert (lines["generate"]["applies"], lines["generate"]["applies_downloads"]) == (7, 2110)
    assert lines["generate"]["passed_share"] == pytest.approx(2 / 7)
    assert lines["generate"]["passed_downloads_share"] == pytest.approx(1500 / 2110)
    assert lines["load"]["applies"] == 8
    assert lines["every stage"]["passed"] == 3
    assert lines["every stage, no CPU fallback"]["passed"] == 2
    assert lines["every stage"]["passed_downloads_share"] == pytest.approx(1700 / 2310)
    assert lines["load"]["passed_share"] == pytest.approx(5 / 8)


def test_headline_architectures(q: StoreQuery) -> None:
    h = coverage.headline(q, "r2")
    assert h["models"] == 6  # text-generation models in the run
    assert h["models_without_architecture"] == 1  # the GGUF repo
    by_arch = {a["architecture"]: a for a in h["list"]}
    # the first problem in real words: the op its failure names, else its error's first line
    assert by_arch["MixtralForCausalLM"]["first_problem"] == "compile: fail: aten::nonzero"
    assert by_arch["Qwen2ForCausalLM"]["first_problem"] == (
        "forward: timeout: TimeoutError: stage exceeded 300 s"
    )
    assert set(by_arch) == {
        "LlamaForCausalLM",
        "MixtralForCausalLM",
        "Qwen2ForCausalLM",
        "CustomForCausalLM",
    }
    assert by_arch["LlamaForCausalLM"]["passes"] is True
    assert by_arch["LlamaForCausalLM"]["passes_on_device"] is False  # b falls back
    assert by_arch["CustomForCausalLM"]["first_problem"] == "skip: remote_code"
    assert (h["architectures"], h["passing"]) == (4, 1)
    assert h["passing_share"] == pytest.approx(0.25)
    assert h["passing_on_device"] == 0
    assert coverage.headline(q, "r2", top=1)["architectures"] == 1


def test_breakdown_by_library(q: StoreQuery) -> None:
    rows = {r["key"]: r for r in coverage.breakdown(q, "r2", "library")}
    assert rows["transformers"]["models"] == 7
    assert rows["transformers"]["passed"] == 3 and rows["transformers"]["failed"] == 3
    assert rows["gguf"] == {**rows["gguf"], "models": 1, "skipped": 1, "downloads": 50}
    with pytest.raises(ValueError):
        coverage.breakdown(q, "r2", "downloads; DROP TABLE model_runs")


def test_failure_clusters_and_skips(q: StoreQuery) -> None:
    clusters = failures.failure_clusters(q, "r2")
    assert [(c["signature"], c["models"], c["downloads"]) for c in clusters] == [
        ("RuntimeError: boom", 1, 300),
        ("TimeoutError: stage exceeded N s", 1, 150),
        ("ValueError: <script>alert(N)</script>", 1, 10),
    ]
    assert clusters[0]["failing_op"] == "aten::nonzero"
    # what users read: the real message (of the most downloaded model of the cluster)
    assert [c["example_message"] for c in clusters] == [
        "boom in aten::nonzero",
        "stage exceeded 300 s",
        "<script>alert('pwned')</script> & <b>bold</b>",
    ]
    by_op = failures.failures_by_op(q, "r2")
    assert [(r["key"], r["is_op"], r["models"]) for r in by_op] == [
        ("aten::nonzero", True, 1),
        ("TimeoutError (no op named)", False, 1),
        ("ValueError (no op named)", False, 1),
    ]
    skips = failures.skip_reasons(q, "r2")
    assert {(s["reason"], s["scope"], s["models"]) for s in skips} == {
        ("remote_code", "model", 1),
        ("no_config", "model", 1),
    }


def test_missing_ops(q: StoreQuery) -> None:
    rows = ops.missing_ops(q, "r2")
    assert [r["op"] for r in rows] == ["aten::histc", "aten::nonzero"]  # orphan part invisible
    histc, nonzero = rows
    assert (histc["models"], histc["downloads"], histc["calls"]) == (2, 800, 9)
    assert (histc["sole_models"], histc["sole_downloads"]) == (1, 500)  # b only
    assert (histc["blocked_models"], histc["blocked_downloads"]) == (2, 800)
    assert histc["stages"] == ["backward", "forward"] and histc["sources"] == ["eager"]
    assert (nonzero["models"], nonzero["failing_models"], nonzero["blocked_models"]) == (1, 1, 1)
    assert (nonzero["sole_models"], nonzero["blocked_downloads"]) == (0, 300)


def test_diff_categories_and_versions(q: StoreQuery) -> None:
    d = diff.run_diff(q, "r1", "r2")
    counts = {k: v["models"] for k, v in d["summary"].items() if v["models"]}
    assert counts == {
        "newly_failing": 1,
        "newly_passing": 1,
        "still_failing": 1,
        "still_passing": 2,
        "still_skipped": 2,
        "added": 1,
        "removed": 1,
    }
    assert [m["model_id"] for m in d["models"]["newly_failing"]] == ["org/c-fail-compile"]
    assert [m["model_id"] for m in d["models"]["newly_passing"]] == ["org/b-pass-fallback"]
    assert [m["model_id"] for m in d["models"]["added"]] == [EVIL_ID]
    assert [m["model_id"] for m in d["models"]["removed"]] == ["org/old"]
    assert {"field": "torch_version", "a": "2.13.0", "b": "2.13.1"} in d["version_changes"]


def test_diff_flaky_when_nothing_changed(tmp_path) -> None:
    store = Store(tmp_path / "s")
    t0 = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    for i, (run, status) in enumerate((("n1", "pass"), ("n2", "fail"))):
        res, fb = rows_for(run, "org/a-pass-clean", ["pass", status, "pass", "pass", "pass"])
        write_model_rows(store, run, res, fb)
        store.write(
            "runs",
            run,
            [
                {
                    "run_id": run,
                    "status": "finished",
                    "started_at": t0 + dt.timedelta(days=i),
                    "updated_at": t0 + dt.timedelta(days=i),
                    "torch_version": "2.13.0",
                }
            ],
        )
    d = diff.run_diff(StoreQuery(store), "n1", "n2")
    assert d["version_changes"] == []
    assert d["summary"]["flaky"]["models"] == 1 and d["summary"]["newly_failing"]["models"] == 0


def test_model_table_filters_sort_pages(q: StoreQuery) -> None:
    page = model_table(q, "r2", ModelFilter(per_page=3))
    assert page["total"] == 8 and page["pages"] == 3
    assert [r["model_id"] for r in page["rows"]] == [
        "org/a-pass-clean",
        "org/b-pass-fallback",
        "org/c-fail-compile",
    ]
    last = model_table(q, "r2", ModelFilter(per_page=3, page=3))
    assert [r["model_id"] for r in last["rows"]] == ["org/f-gguf", EVIL_ID]
    assert model_table(q, "r2", ModelFilter(outcome="on_device"))["total"] == 2
    assert model_table(q, "r2", ModelFilter(outcome="with_fallback"))["total"] == 1
    assert model_table(q, "r2", ModelFilter(stage="compile", status="fail"))["total"] == 1
    assert model_table(q, "r2", ModelFilter(stage="forward"))["total"] == 1  # failed there
    assert model_table(q, "r2", ModelFilter(status="timeout"))["total"] == 1
    assert model_table(q, "r2", ModelFilter(library="gguf"))["total"] == 1
    assert model_table(q, "r2", ModelFilter(pipeline_tag="fill-mask"))["total"] == 1
    assert model_table(q, "r2", ModelFilter(search="PASS"))["total"] == 2
    assert model_table(q, "r2", ModelFilter(search="'; drop table x; --"))["total"] == 0
    asc = model_table(q, "r2", ModelFilter(sort="model_id", order="asc", per_page=2))
    assert [r["model_id"] for r in asc["rows"]] == ["bert-x", EVIL_ID]
    for bad in (
        ModelFilter(sort="downloads desc"),
        ModelFilter(outcome="nope"),
        ModelFilter(stage="x"),
        ModelFilter(page=0),
        ModelFilter(per_page=10_000),
        ModelFilter(order="sideways"),
        ModelFilter(status="bogus"),
    ):
        with pytest.raises(QueryError):
            model_table(q, "r2", bad)


def test_model_detail(q: StoreQuery) -> None:
    m = model_detail(q, "org/b-pass-fallback")
    assert m is not None and m["run_id"] == "r2" and m["device_label"] == "neuron (emulated)"
    assert [s["status"] for s in m["stages"]] == ["pass"] * 5
    assert {(f["stage"], f["op"], f["count"]) for f in m["fallbacks"]} == {
        ("forward", "aten::histc", 3),
        ("backward", "aten::histc", 2),
    }
    assert m["shrink_changes"] == {"hidden_size": [4096, 64], "num_hidden_layers": [32, 2]}
    assert m["versions"]["torch_version"] == "2.13.1"
    assert [h["run_id"] for h in m["history"]] == ["r2", "r1"]
    assert [h["outcome"] for h in m["history"]] == ["passed", "failed"]
    assert m["reproduce"] == "hfsweep check org/b-pass-fallback --device neuron"
    old = model_detail(q, "org/b-pass-fallback", "r1")
    assert old["summary"]["failed_stage"] == "backward"
    g = model_detail(q, "org/g-timeout")
    assert [s["status"] for s in g["stages"]][:2] == ["pass", "timeout"]  # latest attempt
    assert model_detail(q, "org/old")["run_id"] == "r1"
    assert model_detail(q, "nobody/nothing") is None
    assert model_detail(q, "org/old", "r2") is None


def test_cache_follows_new_part_files(tmp_path) -> None:
    store = build_hand_store(tmp_path / "s")
    q = StoreQuery(store)
    assert coverage.denominators(q, "r2")["models"] == 8
    res, fb = rows_for("r2", "org/old", ["pass"] * 4 + ["skip"], reason="not_applicable")
    write_model_rows(store, "r2", res, fb)
    d = coverage.denominators(q, "r2")
    assert d["models"] == 9 and d["passed"] == 4
    assert coverage.denominators(q, "r1")["models"] == 8  # other run untouched


def test_removed_run_leaves_the_trend(tmp_path) -> None:
    import shutil

    store = build_hand_store(tmp_path / "s")
    q = StoreQuery(store)
    assert [r["run_id"] for r in coverage.coverage_over_runs(q)] == ["r1", "r2"]
    for table in ("results", "fallbacks", "runs"):
        shutil.rmtree(tmp_path / "s" / table / "run_id=r1")
    assert [r["run_id"] for r in coverage.coverage_over_runs(q)] == ["r2"]


def test_appended_parts_update_only_their_models(tmp_path) -> None:
    store = build_hand_store(tmp_path / "s")
    q = StoreQuery(store)
    assert coverage.denominators(q, "r2")["failed"] == 3
    # a retry of c that now passes, written as a new part while the run goes on
    res, fb = rows_for(
        "r2",
        "org/c-fail-compile",
        ["pass"] * 5,
        attempt=3,
        fallbacks={"forward": {"aten::histc": 1}},
    )
    write_model_rows(store, "r2", res, fb)
    d = coverage.denominators(q, "r2")
    assert (d["models"], d["failed"], d["passed"]) == (8, 2, 4)
    c = model_detail(q, "org/c-fail-compile")
    assert [s["status"] for s in c["stages"]] == ["pass"] * 5
    assert [(f["op"], f["count"]) for f in c["fallbacks"]] == [("aten::histc", 1)]
    assert model_detail(q, "org/a-pass-clean")["stages"][0]["status"] == "pass"  # first part
    assert ops.missing_ops(q, "r2")[0]["op"] == "aten::histc"
    # the superseded attempt's fallbacks no longer count
    assert [r["op"] for r in ops.missing_ops(q, "r2")] == ["aten::histc"]
    histc = ops.missing_ops(q, "r2")[0]
    assert (histc["models"], histc["calls"]) == (2, 6)  # b: 3 + 2, c: 1


def test_parts_written_before_a_column_was_added(tmp_path) -> None:
    """An older writer did not know some columns: its parts still read, the columns are null."""
    import pyarrow.parquet as pq

    from ground.schema import to_table

    store = build_hand_store(tmp_path / "s")
    res, _ = rows_for("r2", "org/old", ["pass"] * 4 + ["skip"], reason="not_applicable")
    old = to_table("results", res).drop_columns(
        ["dedup_of", "param_count", "wall_s", "peak_host_memory_bytes"]
    )
    folder = tmp_path / "s" / "results" / "run_id=r2"
    pq.write_table(old, folder / "part-99999999999999999999-old.parquet")
    q = StoreQuery(store)
    assert coverage.denominators(q, "r2")["models"] == 9
    m = model_detail(q, "org/old", "r2")
    assert m["stages"][0]["status"] == "pass" and m["stages"][0]["dedup_of"] is None
    assert model_detail(q, "org/b-pass-fallback")["model"]["param_count"] is None
    assert (m["wall_s"], m["peak_host_memory_bytes"]) == (None, None)
    row = model_table(q, "r2", ModelFilter(search="org/old"))["rows"][0]
    assert (row["wall_s"], row["peak_host_memory_bytes"]) == (None, None)
    assert len(ops.missing_ops(q, "r2")) == 2


def test_views_over_runs_do_not_wait_for_a_warm_up(tmp_path) -> None:
    build_hand_store(tmp_path / "s")
    q = StoreQuery(tmp_path / "s")
    q.ensure_summaries(["r2"])
    q.warming = True  # as while the dashboard summarises earlier runs in the background
    assert q.available_runs() == (["r2"], False)
    assert [r["run_id"] for r in coverage.coverage_over_runs(q)] == ["r2"]
    assert [h["run_id"] for h in model_detail(q, "org/a-pass-clean")["history"]] == ["r2"]
    assert model_detail(q, "org/b-pass-fallback", "r1")["summary"]["outcome"] == "failed"
    assert model_detail(q, "org/old")["run_id"] == "r1"  # only in r1: waits for it
    q.warming = False
    assert [r["run_id"] for r in coverage.coverage_over_runs(q)] == ["r1", "r2"]
    assert [h["run_id"] for h in model_detail(q, "org/a-pass-clean")["history"]] == ["r2", "r1"]


def test_funnel_attempted_is_passed_plus_failed(q: StoreQuery) -> None:
    lines = {f["line"]: f for f in coverage.funnel(q, "r2")}
    assert [
        lines[s]["attempted"] for s in ("load", "forward", "backward", "compile", "generate")
    ] == [6, 5, 4, 4, 2]


def test_parts_from_before_the_configs_table_keep_their_shrink(tmp_path) -> None:
    """An older writer put shrink_changes and shrunk_config on every results row."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from ground.schema import to_table

    store = build_hand_store(tmp_path / "s")
    res, _ = rows_for("r9", "org/old", ["pass"] * 4 + ["skip"], reason="not_applicable")
    old = to_table("results", res)
    old = old.append_column("shrink_changes", pa.array([json.dumps({"n_layer": [12, 2]})] * 5))
    folder = tmp_path / "s" / "results" / "run_id=r9"
    folder.mkdir(parents=True)
    pq.write_table(old, folder / "part-00000000000000000001-old.parquet")
    m = model_detail(StoreQuery(store), "org/old", "r9")
    assert m["shrink_changes"] == {"n_layer": [12, 2]}
    assert "shrink_changes" not in m["stages"][0]


def test_model_details_of_many_equal_each_model_detail(q: StoreQuery) -> None:
    """The static site's batch of model pages says what one model's page says, model by model
    (retried models, fallbacks, shrink, history included)."""
    import json

    ids = [r["model_id"] for r in model_table(q, "r2", ModelFilter(per_page=50))["rows"]]
    many = models.model_details(q, "r2", ids)
    assert sorted(many) == sorted(ids)
    for model_id in ids:
        one = model_detail(q, model_id, "r2")
        assert json.dumps(many[model_id], default=str, sort_keys=True) == json.dumps(
            one, default=str, sort_keys=True
        ), model_id
    assert [s["status"] for s in many["org/g-timeout"]["stages"]][:2] == ["pass", "timeout"]


def test_wall_time_and_peak_memory_in_the_summary_and_model_page(tmp_path) -> None:
    store = Store(tmp_path / "s")
    res, fb = rows_for("r1", "org/a-pass-clean", ["pass"] * 5)
    for i, r in enumerate(res):
        r.update(wall_s=12.5, peak_host_memory_bytes=700 << 20, peak_memory_bytes=(i + 1) << 20)
    write_model_rows(store, "r1", res, fb)
    q = StoreQuery(store)
    row = model_table(q, "r1", ModelFilter())["rows"][0]
    assert (row["wall_s"], row["peak_host_memory_bytes"]) == (12.5, 700 << 20)
    m = model_detail(q, "org/a-pass-clean")
    assert (m["wall_s"], m["peak_host_memory_bytes"]) == (12.5, 700 << 20)
    assert m["peak_device_memory_bytes"] == 5 << 20  # the largest of the stages'
    assert model_table(q, "r1", ModelFilter(sort="wall_s"))["total"] == 1
