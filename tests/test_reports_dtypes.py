"""The reading side of a run of several dtypes, against the hand-built store of
`tests/dtype_store_builder.py` (figures worked out by hand there)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ground.schema import run_dtypes
from reports import coverage, diff, dtypes, failures, models, op_sweep, ops
from reports.models import ModelFilter, QueryError, model_detail, model_table
from reports.query import StoreQuery
from reports.render import html_site, jsondoc, markdown, text
from reports.summary import run_report
from tests.dtype_store_builder import ACCURACY_SIGNATURE, OP_RUN, build_dtype_store, model_rows
from tests.store_writes import write_model_rows


@pytest.fixture(scope="module")
def q(tmp_path_factory: pytest.TempPathFactory) -> StoreQuery:
    root = tmp_path_factory.mktemp("dtypes") / "store"
    build_dtype_store(root)
    return StoreQuery(str(root))


def test_run_dtypes_in_the_order_asked(q: StoreQuery) -> None:
    assert q.run_dtypes("d1") == ["fp32", "bf16"]
    assert q.run_dtypes("s0") == ["fp32"]  # a run row of one dtype, as every old one
    assert run_dtypes("fp32") == ["fp32"]
    assert run_dtypes("bf16, fp32,bf16") == ["bf16", "fp32"]
    assert run_dtypes(None) == []


def test_denominators_and_funnel_per_dtype(q: StoreQuery) -> None:
    fp32 = coverage.denominators(q, "d1", "fp32")
    bf16 = coverage.denominators(q, "d1", "bf16")
    assert (fp32["models"], fp32["downloads"], fp32["dtype"]) == (7, 2650, "fp32")
    assert (fp32["passed"], fp32["passed_downloads"]) == (4, 2300)
    assert (fp32["passed_on_device"], fp32["passed_on_device_downloads"]) == (3, 1900)
    assert (bf16["passed"], bf16["passed_downloads"]) == (3, 1900)
    assert (bf16["passed_on_device"], bf16["passed_on_device_downloads"]) == (2, 1300)
    # the crash of qwen's first bf16 attempt is replaced by its retry: fail_accuracy
    assert {(r["stage"], r["status"]) for r in bf16["failed_by_stage"]} == {
        ("load", "fail"),
        ("forward", "fail"),
        ("forward", "fail_accuracy"),
    }
    assert {(r["stage"], r["status"]) for r in fp32["failed_by_stage"]} == {
        ("load", "fail"),
        ("compile", "fail"),
    }
    forward = {d: coverage.funnel(q, "d1", d)[1] for d in ("fp32", "bf16")}
    assert forward["fp32"]["passed"] == 5 and forward["bf16"]["passed"] == 3
    # fp32: histc falls back in qwen's forward; bf16: erfinv in gemma's (qwen failed there)
    assert forward["fp32"]["no_fallback_downloads"] == 2100
    assert forward["bf16"]["no_fallback_downloads"] == 1300


def test_dtype_differences(q: StoreQuery) -> None:
    d = dtypes.dtype_differences(q, "d1")
    assert d is not None and d["dtypes"] == ["fp32", "bf16"]
    (pair,) = d["pairs"]
    assert (pair["a"], pair["b"], pair["models"], pair["downloads"]) == ("fp32", "bf16", 7, 2650)
    passed = {k: (v["models"], v["downloads"]) for k, v in pair["passed"].items()}
    assert passed == {
        "both": (3, 1900),
        "only_a": (1, 400),
        "only_b": (0, 0),
        "neither": (3, 350),
    }
    on_device = {k: (v["models"], v["downloads"]) for k, v in pair["on_device"].items()}
    assert on_device == {
        "both": (2, 1300),
        "only_a": (1, 600),
        "only_b": (0, 0),
        "neither": (4, 750),
    }
    assert [m["model_id"] for m in d["models"]] == [
        "org/gemma-bf16-fallback",
        "org/qwen-bf16-accuracy",
        "org/mixtral-fail",
    ]
    gemma, qwen, mixtral = d["models"]
    assert gemma["kind"] == "on_device_only"
    assert gemma["cause"] == "bf16 only falls back on aten::erfinv"
    assert qwen["kind"] == "passes_only"
    # the error as raised (the signature only groups failures)
    assert qwen["cause"] == "bf16: forward fail_accuracy: AccuracyError: max abs error 0.31"
    assert mixtral["kind"] == "fails_differently"
    assert mixtral["cause"] == "fp32: compile fail: aten::nonzero; bf16: forward fail: aten::cumsum"
    assert (d["differing"], d["differing_downloads"]) == (3, 1200)
    assert dtypes.dtype_differences(q, "s0") is None


def test_missing_ops_per_dtype_and_old_fallback_parts(q: StoreQuery) -> None:
    bf16 = {r["op"]: r for r in ops.missing_ops(q, "d1", dtype="bf16")}
    fp32 = {r["op"]: r for r in ops.missing_ops(q, "d1", dtype="fp32")}
    assert set(bf16) == {"aten::erfinv", "aten::histc", "aten::cumsum"}
    assert set(fp32) == {"aten::histc", "aten::nonzero"}
    assert (bf16["aten::erfinv"]["sole_models"], bf16["aten::erfinv"]["blocked_downloads"]) == (
        1,
        600,
    )
    assert fp32["aten::histc"]["sole_models"] == 1  # qwen passes in fp32 with histc alone
    assert bf16["aten::histc"]["sole_models"] == 0  # and fails in bf16
    # s0's fallbacks part predates the dtype column: its op still counts
    (old,) = ops.missing_ops(q, "s0")
    assert (old["op"], old["models"], old["sole_models"]) == ("aten::histc", 1, 1)
    assert coverage.denominators(q, "s0")["passed_on_device"] == 0


def test_op_sweep_joined_per_dtype(q: StoreQuery) -> None:
    assert op_sweep.op_run_for_model_run(q, "d1") == OP_RUN
    per = {
        d: {
            r["op"]: r["op_sweep"]
            for r in op_sweep.with_op_sweep(q, "d1", ops.missing_ops(q, "d1", dtype=d), OP_RUN, d)
        }
        for d in ("fp32", "bf16")
    }
    assert per["bf16"]["aten::erfinv"]["verdict"] == "wrong"  # bf16 samples only
    assert per["bf16"]["aten::erfinv"]["dtypes"] == ["bf16"]
    assert per["fp32"]["aten::histc"]["verdict"] == "correct_not_native"
    report = op_sweep.op_sweep_report(q, op_sweep.op_query(q), OP_RUN, model_run_id="d1")
    joined = report["joined_by_dtype"]
    assert list(joined) == ["fp32", "bf16"]
    assert joined["bf16"]["by_verdict"]["wrong"] == 1 and joined["fp32"]["by_verdict"]["wrong"] == 0
    models = op_sweep.op_models(q, "d1", "aten::histc")
    assert [(m["model_id"], m["dtype"]) for m in models["models"]] == [
        ("org/qwen-bf16-accuracy", "fp32"),
        ("org/qwen-bf16-accuracy", "bf16"),
    ]
    assert models["total"] == 1 and models["downloads"] == 400
    assert models["by_dtype"]["bf16"]["models"] == 1


def test_failures_and_skips_per_dtype(q: StoreQuery) -> None:
    bf16 = {r["signature"] for r in failures.failure_clusters(q, "d1", dtype="bf16")}
    assert ACCURACY_SIGNATURE in bf16 and "RuntimeError: no lowering" not in bf16
    assert [r["models"] for r in failures.skip_reasons(q, "d1", "fp32")] == [1]


def test_report_of_several_dtypes(q: StoreQuery) -> None:
    r = run_report(q, "d1")
    assert r["dtypes"] == ["fp32", "bf16"] and r["dtype"] == "fp32"
    assert list(r["by_dtype"]) == ["fp32", "bf16"]
    assert r["denominators"] == r["by_dtype"]["fp32"]["denominators"]
    assert r["by_dtype"]["bf16"]["denominators"]["passed"] == 3
    assert r["dtype_differences"]["differing"] == 3
    trend = [(t["run_id"], t["dtype"]) for t in r["coverage_over_runs"]]
    assert trend == [("s0", "fp32"), ("d1", "fp32"), ("d1", "bf16")]
    one = run_report(q, "s0")
    assert one["dtypes"] == ["fp32"] and one["by_dtype"] == {} and one["dtype_differences"] is None


def test_text_and_markdown_side_by_side(q: StoreQuery) -> None:
    r = run_report(q, "d1")
    out = text.render(r)
    assert out.splitlines()[0].endswith("dtypes fp32, bf16")
    wide = text.render(r, width=1000)  # every header on one line
    assert "fp32 % downloads" in wide and "bf16 % dl no fallback" in wide
    assert "== Models that differ between dtypes ==" in out
    assert "bf16 only falls back on aten::erfinv" in out
    assert "== Missing ops per dtype" in out and "0.0% (wrong)" in out
    md = markdown.render(r)
    assert "## Dtypes compared" in md and "| org/mixtral-fail |" in md
    # a run of one dtype looks as it always did: no dtype columns, no comparison
    single = text.render(run_report(q, "s0"))
    assert "fp32 models" not in single and "differ between dtypes" not in single
    assert single.splitlines()[0].endswith("dtype fp32")
    assert jsondoc.render(r)  # serialisable


def test_static_site_of_several_dtypes(q: StoreQuery, tmp_path: Path) -> None:
    r = run_report(q, "d1")
    html_site.write_site(q, r, tmp_path / "site")
    index = (tmp_path / "site" / "index.html").read_text()
    assert 'id="dtype-cards"' in index and 'data-dtype="bf16"' in index
    assert "Funnel per dtype" in index and "Models that differ between dtypes" in index
    models_page = (tmp_path / "site" / "models.html").read_text()
    assert '<th class="l">dtype</th>' in models_page
    csv_lines = (tmp_path / "site" / "models.csv").read_text().splitlines()
    assert csv_lines[0].startswith("model_id,dtype,")
    assert csv_lines[1].startswith("org/llama-same,fp32,") and csv_lines[2].startswith(
        "org/llama-same,bf16,"
    )
    op_page = (tmp_path / "site" / "ops" / "aten__erfinv.html").read_text()
    assert "org/gemma-bf16-fallback" in op_page
    # one page per model, its dtypes side by side on it (no page per dtype to link to)
    page = (tmp_path / "site" / "models" / html_site.model_file_name("org/llama-same")).read_text()
    assert 'id="dtypes"' in page and "in the table above" in page
    # one dtype: no dtype column in the CSV, no dtypes table on a model's page
    html_site.write_site(q, run_report(q, "s0"), tmp_path / "one")
    assert (tmp_path / "one" / "models.csv").read_text().startswith("model_id,rank,")
    pages = list((tmp_path / "one" / "models").glob("*.html"))
    assert pages and not any('id="dtypes"' in p.read_text() for p in pages)


def test_model_table_side_by_side(q: StoreQuery) -> None:
    t = model_table(q, "d1", ModelFilter(per_page=4))
    assert t["dtypes"] == ["fp32", "bf16"] and t["total"] == 14
    assert [(r["model_id"], r["dtype"]) for r in t["rows"]] == [
        ("org/llama-same", "fp32"),
        ("org/llama-same", "bf16"),
        ("org/gemma-bf16-fallback", "fp32"),
        ("org/gemma-bf16-fallback", "bf16"),
    ]
    bf16 = model_table(q, "d1", ModelFilter(dtype="bf16", outcome="passed"))
    assert {r["model_id"] for r in bf16["rows"]} == {
        "org/llama-same",
        "org/gemma-bf16-fallback",
        "bert-enc",
    }
    differs = model_table(q, "d1", ModelFilter(differs=True))
    assert differs["total"] == 6
    assert {r["model_id"] for r in differs["rows"]} == {
        "org/gemma-bf16-fallback",
        "org/qwen-bf16-accuracy",
        "org/mixtral-fail",
    }
    with pytest.raises(QueryError, match="no rows of dtype 'fp16'"):
        model_table(q, "d1", ModelFilter(dtype="fp16"))


def test_model_detail_per_dtype(q: StoreQuery) -> None:
    m = model_detail(q, "org/qwen-bf16-accuracy", "d1")
    assert m is not None and m["dtypes"] == ["fp32", "bf16"] and m["dtype"] == "fp32"
    assert m["summary"]["outcome"] == "passed"
    bf16 = m["by_dtype"]["bf16"]
    assert bf16["summary"]["outcome"] == "failed"
    assert [r["status"] for r in bf16["stages"]][:2] == ["pass", "fail_accuracy"]
    assert bf16["stages"][1]["attempt"] == 2
    assert [(f["stage"], f["op"]) for f in bf16["fallbacks"]] == [("forward", "aten::histc")]
    differs = m["dtype_differences"]
    assert differs["kind"] == "passes_only"
    assert [s["stage"] for s in differs["stages"]] == [
        "forward",
        "backward",
        "compile",
        "generate",
    ]
    assert differs["stages"][0]["by_dtype"] == {"fp32": "pass", "bf16": "fail_accuracy"}
    assert m["reproduce"].endswith("--dtype fp32,bf16")
    chosen = model_detail(q, "org/qwen-bf16-accuracy", "d1", dtype="bf16")
    assert chosen is not None and chosen["dtype"] == "bf16"
    assert chosen["summary"]["failed_status"] == "fail_accuracy"
    assert model_detail(q, "org/qwen-bf16-accuracy", "d1", dtype="fp16") is None
    # history: one line per run and dtype, newest run first
    hist = [(h["run_id"], h["dtype"]) for h in model_detail(q, "org/llama-same")["history"]]
    assert hist == [("d1", "fp32"), ("d1", "bf16"), ("s0", "fp32")]
    old = model_detail(q, "org/llama-same", "s0")
    assert old["by_dtype"] == {} and old["dtype_differences"] is None
    assert [f["op"] for f in old["fallbacks"]] == ["aten::histc"]  # no dtype column: its run's


def test_diff_by_model_and_dtype(q: StoreQuery) -> None:
    d = diff.run_diff(q, "s0", "d1")
    assert d["by_dtype"] is True
    assert d["summary"]["added"]["models"] == 13  # 6 new models x 2, and llama at bf16
    assert d["summary"]["still_passing"]["models"] == 1  # llama at fp32


def test_new_dtype_part_keeps_the_other_dtypes_summary(tmp_path: Path) -> None:
    """A part with a model's rows at one dtype updates that dtype's summary only."""
    store = build_dtype_store(tmp_path / "s")
    q = StoreQuery(store)
    assert coverage.denominators(q, "d1", "fp32")["passed"] == 4
    res, fb = model_rows(
        "d1",
        "org/mixtral-fail",
        "bf16",
        ["pass"] * 5,
        attempt=3,
    )
    write_model_rows(store, "d1", res, fb)
    assert coverage.denominators(q, "d1", "bf16")["passed"] == 4
    assert coverage.denominators(q, "d1", "fp32")["passed"] == 4
    assert models.model_detail(q, "org/mixtral-fail", "d1")["summary"]["outcome"] == "failed"


@pytest.mark.slow
def test_lookup_and_report_commands(q: StoreQuery) -> None:
    """`hfsweep lookup` shows every dtype of the run side by side (exit 0 only when the model
    passes at each), or one with --dtype; `hfsweep report` says the run's dtypes."""
    import json
    import subprocess

    from tests.cli_in_process import hfsweep_in_process

    def hfsweep(*args: str) -> subprocess.CompletedProcess:
        # the CLI's function in this process: its answer and exit code are under test
        return hfsweep_in_process(*args, "--store", q.store.uri)

    p = hfsweep("lookup", "org/qwen-bf16-accuracy")
    assert p.returncode == 1, p.stderr
    assert "org/qwen-bf16-accuracy: fp32 passed, bf16 failed on neuron (emulated)" in p.stdout
    assert "they differ: bf16: forward fail_accuracy: AccuracyError: max abs error 0.31" in (
        p.stdout
    )
    assert "at fp32:" in p.stdout and "at bf16:" in p.stdout
    assert "history (newest first): d1 fp32 passed, d1 bf16 failed" in p.stdout
    assert "reproduce: hfsweep check org/qwen-bf16-accuracy --device neuron --dtype fp32,bf16" in (
        p.stdout
    )
    p = hfsweep("lookup", "org/qwen-bf16-accuracy", "--dtype", "fp32")
    assert p.returncode == 0 and "at fp32:" not in p.stdout
    assert "--dtype fp32" not in p.stdout  # fp32 is check's default
    p = hfsweep("lookup", "org/qwen-bf16-accuracy", "--dtype", "bf16", "--format", "json")
    assert p.returncode == 1 and json.loads(p.stdout)["summary"]["failed_stage"] == "forward"
    p = hfsweep("lookup", "org/llama-same")
    assert p.returncode == 0 and "fp32 passed, bf16 passed" in p.stdout
    p = hfsweep("lookup", "org/llama-same", "--dtype", "fp16")
    assert p.returncode == 5  # no results there: not bad usage; the answer says where it is
    assert "no results for model 'org/llama-same' in any run at dtype fp16 of " in p.stdout
    assert "other runs or dtypes of the store have it" in p.stdout
    p = hfsweep("report", "--run", "d1", "--top", "5")
    assert p.returncode == 0 and "dtypes fp32, bf16" in p.stdout.splitlines()[0]
