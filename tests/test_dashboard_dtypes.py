"""The dashboard over a run of two dtypes (`tests/dtype_store_builder.py`): the overview, the
models table, a model's page, the missing ops, an op's page and the runs put the dtypes side by
side; a run of one dtype in the same store looks as it always did."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from dashboard.app import create_app
from tests.dtype_store_builder import build_dtype_store


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> TestClient:
    root = tmp_path_factory.mktemp("dash-dtypes") / "store"
    build_dtype_store(root)
    return TestClient(create_app(str(root), refresh_s=0, warm=False))


def test_overview_side_by_side(client: TestClient) -> None:
    html = client.get("/?run=d1").text
    assert "dtypes fp32, bf16" in html
    assert 'id="dtype-cards"' in html and 'data-dtype="bf16"' in html
    assert "Funnel per dtype" in html
    assert "<th>fp32 % downloads</th>" in html and "<th>bf16 % dl no fallback</th>" in html
    assert "Models that differ between dtypes" in html
    assert "bf16 only falls back on aten::erfinv" in html
    data = client.get("/api/overview?run=d1").json()
    assert data["dtypes"] == ["fp32", "bf16"]
    assert data["by_dtype"]["bf16"]["denominators"]["passed_downloads"] == 1900
    assert data["dtype_differences"]["by_kind"]["passes_only"] == 1
    one = client.get("/?run=s0").text
    assert 'id="dtype-cards"' not in one and "dtype fp32" in one
    assert "differ between dtypes" not in one and "fp32 % downloads" not in one


def test_models_table_a_row_per_dtype(client: TestClient) -> None:
    data = client.get("/api/models?run=d1&per_page=2").json()
    assert data["total"] == 14 and data["dtypes"] == ["fp32", "bf16"]
    assert [(r["model_id"], r["dtype"]) for r in data["rows"]] == [
        ("org/llama-same", "fp32"),
        ("org/llama-same", "bf16"),
    ]
    bf16 = client.get("/api/models?run=d1&dtype=bf16&outcome=failed").json()
    assert {r["model_id"] for r in bf16["rows"]} == {
        "org/qwen-bf16-accuracy",
        "org/mixtral-fail",
        "org/same-fail",
    }
    differs = client.get("/api/models?run=d1&differs=true").json()
    assert differs["total"] == 6
    html = client.get("/models?run=d1&differs=true").text
    assert 'id="dtype"' in html and 'id="differs" checked' in html
    assert '<td class="l dtype">bf16</td>' in html
    assert "rows match, a row per model and dtype" in html
    bad = client.get("/api/models?run=d1&dtype=fp16")
    assert bad.status_code == 400 and "no rows of dtype 'fp16'" in bad.json()["error"]
    one = client.get("/models?run=s0").text
    assert 'id="dtype"' not in one and "dtype</th>" not in one


def test_model_page_dtypes(client: TestClient) -> None:
    html = client.get("/models/org/qwen-bf16-accuracy?run=d1").text
    assert "Dtypes side by side" in html and 'id="dtypes"' in html
    assert "What differs: bf16: forward fail_accuracy: AccuracyError: max abs error 0.31" in html
    assert "(of fp32, bf16)" in html
    assert 'href="/models/org/qwen-bf16-accuracy?run=d1&amp;dtype=bf16"' in html
    bf16 = client.get("/models/org/qwen-bf16-accuracy?run=d1&dtype=bf16").text
    assert 'id="outcome">failed</span>' in bf16 and "dtype bf16 (of fp32, bf16)" in bf16
    api = client.get("/api/models/org/qwen-bf16-accuracy?run=d1").json()
    assert api["by_dtype"]["bf16"]["summary"]["failed_status"] == "fail_accuracy"
    missing = client.get("/api/models/org/qwen-bf16-accuracy?run=d1&dtype=fp16")
    assert missing.status_code == 404
    old = client.get("/models/org/llama-same?run=s0").text
    assert "Dtypes side by side" not in old
    assert '<th class="l">dtype</th>' in old  # its history holds d1's two dtypes


def test_missing_ops_per_dtype(client: TestClient) -> None:
    html = client.get("/ops?run=d1").text
    assert 'id="ops-by-dtype"' in html and "0.0% (wrong)" in html
    data = client.get("/api/ops?run=d1").json()
    assert data["dtype"] == "fp32" and [o["op"] for o in data["ops"]] == [
        "aten::histc",
        "aten::nonzero",
    ]
    first = data["side_by_side"][0]
    assert first["op"] == "aten::erfinv" and first["by_dtype"]["fp32"] is None
    assert first["by_dtype"]["bf16"]["op_sweep"]["verdict"] == "wrong"
    bf16 = client.get("/api/ops?run=d1&dtype=bf16").json()
    assert bf16["side_by_side"] is None and bf16["ops"][0]["op"] == "aten::erfinv"
    assert 'id="ops-by-dtype"' not in client.get("/ops?run=d1&dtype=bf16").text
    assert client.get("/api/ops?run=d1&dtype=fp16").status_code == 400
    assert 'id="dtype-links"' not in client.get("/ops?run=s0").text


def test_op_page_per_dtype(client: TestClient) -> None:
    html = client.get("/ops/aten::histc?run=d1").text
    assert "models falling back on it (model run)" in html
    data = client.get("/api/ops/aten::histc?run=d1").json()
    assert [(m["model_id"], m["dtype"]) for m in data["models"]["models"]] == [
        ("org/qwen-bf16-accuracy", "fp32"),
        ("org/qwen-bf16-accuracy", "bf16"),
    ]


def test_runs_a_line_per_dtype(client: TestClient) -> None:
    data = client.get("/api/runs").json()
    assert [(r["run_id"], r["dtype"]) for r in data["runs"]] == [
        ("d1", "fp32"),  # a run's dtypes in the order it asked for them
        ("d1", "bf16"),
        ("s0", "fp32"),
    ]
    assert data["diff"]["by_dtype"] is True
    html = client.get("/runs").text
    assert html.count("<option selected>d1</option>") == 1  # each run once in the pickers
