""" "Can I fine-tune on the device": the training stages in the report, the text renderer, the
dashboard's overview and model page, on a hand-built store whose figures are worked out here.

Run t1, neuron (emulated), stages load,forward,backward + training:

| model       | dl   | backward | optimizer                        | optimizer_fused        | amp  | lora        |
|-------------|------|----------|----------------------------------|------------------------|------|-------------|
| org/clean   | 1000 | pass     | pass, 176 device calls           | pass, 10 calls         | pass | pass        |
| org/lerp    |  500 | pass     | pass; lerp (optimizer), foo (eager) | pass; foo (eager)   | pass | skip n/a    |
| org/both    |  300 | pass     | pass; lerp (optimizer)           | fail                   | fail_accuracy | pass |
| org/broken  |  200 | fail     | not_run                          | not_run                | not_run | not_run  |
| org/remote  |  100 | skip (remote_code) everywhere                                                      |
"""

from __future__ import annotations

import datetime as dt

import pytest
from fastapi.testclient import TestClient

from dashboard.app import create_app
from reports import fine_tune
from reports.query import StoreQuery
from reports.render import text
from reports.store import Store
from reports.summary import run_report
from tests.store_writes import write_model_rows

STAGES = ["load", "forward", "backward", "optimizer", "optimizer_fused", "amp", "lora"]
T0 = dt.datetime(2026, 11, 2, 2, 0, tzinfo=dt.UTC)
DOWNLOADS = {
    "org/clean": 1000,
    "org/lerp": 500,
    "org/both": 300,
    "org/broken": 200,
    "org/remote": 100,
}


def rows(model: str, statuses: dict[str, str], fallbacks: dict, calls: dict | None = None):
    results, fbs = [], []
    for i, stage in enumerate(STAGES):
        status = statuses.get(stage, "pass")
        reason = None
        if status.startswith("skip:"):
            status, reason = "skip", status.split(":", 1)[1]
        ops = fallbacks.get(stage, {})
        results.append(
            {
                "model_id": model,
                "rank": list(DOWNLOADS).index(model) + 1,
                "downloads": DOWNLOADS[model],
                "library": "transformers",
                "pipeline_tag": "text-generation",
                "model_type": "llama",
                "architecture": "LlamaForCausalLM",
                "config_source": "hub",
                "device": "neuron",
                "device_emulated": True,
                "dtype": "fp32",
                "stage": stage,
                "status": status,
                "reason": reason,
                "fallback_op_count": len(ops),
                "fallback_call_count": sum(c for c, _ in ops.values()),
                "step_op_calls": (calls or {}).get(stage),
                "duration_s": 0.5,
                "attempt": 1,
                "finished_at": T0 + dt.timedelta(minutes=i),
            }
        )
        for op, (count, source) in ops.items():
            fbs.append(
                {
                    "model_id": model,
                    "stage": stage,
                    "device": "neuron",
                    "op": op,
                    "count": count,
                    "source": source,
                    "downloads": DOWNLOADS[model],
                }
            )
    return results, fbs


LERP = "aten::lerp.Scalar_out"
FOO = "aten::foo"
NOT_RUN = dict.fromkeys(STAGES[3:], "not_run")


@pytest.fixture(scope="module")
def store_root(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = str(tmp_path_factory.mktemp("fine") / "store")
    store = Store(root)
    batch = [
        rows("org/clean", {}, {}, {"optimizer": 176, "optimizer_fused": 10}),
        rows(
            "org/lerp",
            {"lora": "skip:not_applicable"},
            {
                "backward": {FOO: (2, "eager")},
                "optimizer": {LERP: (24, "optimizer"), FOO: (4, "eager")},
                "optimizer_fused": {FOO: (4, "eager")},
                "amp": {FOO: (2, "eager")},
            },
            {"optimizer": 96, "optimizer_fused": 10},
        ),
        rows(
            "org/both",
            {"optimizer_fused": "fail", "amp": "fail_accuracy"},
            {"optimizer": {LERP: (12, "optimizer")}},
            {"optimizer": 548},
        ),
        rows("org/broken", {"backward": "fail", **NOT_RUN}, {}),
        rows("org/remote", dict.fromkeys(STAGES, "skip:remote_code"), {}),
    ]
    results = [r for res, _ in batch for r in res]
    fbs = [f for _, fb in batch for f in fb]
    for r in results + fbs:
        r["run_id"] = "t1"
    write_model_rows(store, "t1", results, fbs, [])
    store.write(
        "runs",
        "t1",
        [
            {
                "run_id": "t1",
                "status": "finished",
                "started_at": T0,
                "updated_at": T0 + dt.timedelta(hours=1),
                "device": "neuron",
                "device_emulated": True,
                "stages": ",".join(STAGES),
                "models_requested": 5,
            }
        ],
    )
    return root


@pytest.fixture(scope="module")
def q(store_root: str) -> StoreQuery:
    return StoreQuery(store_root)


def test_fine_tune_shares_by_models_and_downloads(q: StoreQuery) -> None:
    f = fine_tune.fine_tune(q, "t1")
    assert f["ran"] and (f["models"], f["downloads"]) == (5, 2100)
    lines = {line["stage"]: line for line in f["stages"]}
    default, fused = lines["optimizer"], lines["optimizer_fused"]
    # optimizer passed: clean, lerp, both (1800); with no fallback: clean only (1000)
    assert (default["passed"], default["passed_downloads"]) == (3, 1800)
    assert (default["no_fallback"], default["no_fallback_downloads"]) == (1, 1000)
    assert default["not_run"] == 1 and default["skipped"] == 0  # remote is a model skip
    # fused passed: clean, lerp (1500); no fallback: clean (foo is the model's own op)
    assert (fused["passed"], fused["no_fallback"], fused["failed"]) == (2, 1, 1)
    assert f["default_no_fallback_downloads_share"] == pytest.approx(1000 / 2100)
    assert f["fused_no_fallback_downloads_share"] == pytest.approx(1000 / 2100)
    assert (lines["amp"]["passed"], lines["amp"]["failed"]) == (2, 1)
    # LoRA ran on clean and both (1300), both trained; lerp is not applicable
    lora = f["lora"]
    assert (lora["ran"], lora["ran_downloads"], lora["passed"]) == (2, 1300, 2)
    reasons = {r["reason"]: r["models"] for r in lora["skipped_by_reason"]}
    assert reasons == {"not_applicable": 1, "remote_code": 1}


def test_optimizer_ops_ranked_and_what_fused_removes(q: StoreQuery) -> None:
    ops = fine_tune.fine_tune(q, "t1")["optimizer_ops"]
    assert [o["op"] for o in ops] == [LERP]  # foo fell back outside the step too: not listed
    lerp = ops[0]
    assert (lerp["models"], lerp["downloads"], lerp["calls"]) == (2, 800, 36)
    assert (lerp["fused_models"], lerp["fused_downloads"]) == (0, 0)
    # fused removes it where the fused step passed (lerp), not where it failed (both)
    assert (lerp["removed_by_fused"], lerp["removed_by_fused_downloads"]) == (1, 500)
    assert lerp["top_models"] == ["org/lerp", "org/both"]


def test_step_op_calls_medians(q: StoreQuery) -> None:
    calls = fine_tune.fine_tune(q, "t1")["step_op_calls"]
    assert calls["optimizer"]["median"] == 176 and calls["optimizer"]["models"] == 3
    assert calls["optimizer_fused"]["median"] == 10 and calls["optimizer_fused"]["models"] == 2


def test_report_text_funnel_and_fine_tune_section(q: StoreQuery) -> None:
    report = run_report(q, "t1")
    assert report["stages"] == STAGES  # compile and generate were not asked for
    assert [line["line"] for line in report["funnel"]][:7] == STAGES
    out = text.render(report)
    assert "== Fine-tuning: can I train on the device? ==" in out
    words = " ".join(out.split())  # notes wrap to the report's width
    assert "47.6% with PyTorch's default AdamW, 47.6% with AdamW(fused=True)" in words
    assert "optimizer: median 176" in words and "optimizer_fused: median 10" in words
    assert "== Optimizer ops that fall back to the CPU, ranked by downloads ==" in out
    assert LERP in out.split("== Optimizer ops")[1].split("\n== ")[0]


def test_dashboard_overview_and_model_page(store_root: str) -> None:
    client = TestClient(create_app(store_root, refresh_s=0, warm=False))
    html = client.get("/").text
    assert 'id="fine-tune-card"' in html and "47.6%" in html
    assert 'id="fine_tune"' in html and 'id="optimizer_ops"' in html
    page = client.get("/models/org/lerp").text
    fine = page.split('id="fine-tune"')[1].split("</table>")[0]
    assert "optimizer_fused" in fine and LERP in fine
    assert "--stages load,forward,backward,optimizer,optimizer_fused,amp,lora" in page
    assert '<th class="l">compile</th>' not in page  # history columns: the run's stages
    data = client.get("/api/models/org/lerp").json()
    default = next(t for t in data["fine_tune"] if t["stage"] == "optimizer")
    assert default["optimizer_ops"] == [LERP] and default["no_fallback"] is False
    models = client.get("/models").text
    assert ">lora</th>" in models and ">compile</th>" not in models
