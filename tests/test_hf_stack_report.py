"""The Hugging Face training stack section on a hand-built store: the share of downloads
passing each hf_training stage, and what stops the rest ranked by downloads, each blocker placed
in the device (an op) or in a library's device path (a library frame); `lookup`'s lines.

Run "rh", device neuron (emulated); every model ran load, forward, backward:

| model  | dl   | trainer | sft                                   | accelerate_ddp                  |
|--------|------|---------|---------------------------------------|---------------------------------|
| org/a  | 1000 | pass    | pass                                  | fail: accelerator.py (library)  |
| org/b  |  500 | pass    | fail: aten::foo (the device)          | fail: accelerator.py (library)  |
| org/c  |  300 | fail: trained on cpu | skip: not_applicable     | pass                            |
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from reports.query import StoreQuery
from reports.store import Store

T0 = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
FRAME = "accelerate/accelerator.py:prepare_model"


def _row(model: str, downloads: int, stage: str, status: str, **extra: Any) -> dict[str, Any]:
    return {
        "run_id": "rh", "model_id": model, "rank": 1, "downloads": downloads,
        "library": "transformers", "model_type": "qwen2", "architecture": "Qwen2ForCausalLM",
        "config_source": "hub", "device": "neuron", "device_emulated": True, "dtype": "fp32",
        "stage": stage, "status": status, "duration_s": 1.0, "attempt": 1, "finished_at": T0,
        **extra,
    }  # fmt: skip


ACC_FAIL = ("fail", {"library_frame": FRAME, "error_type": "DeviceMismatch", "error_message": "x"})
OP_FAIL = (
    "fail",
    {
        "failing_op": "aten::foo",
        "error_type": "RuntimeError",
        "error_message": "<script>y</script>",
    },
)
CPU = (
    "fail",
    {
        "error_type": "TrainedElsewhere",
        "error_message": "trained on cpu, not on neuron",
        "trained_on": "cpu: 27 parameters, 54 optimizer state tensors",
    },
)
PASS = (
    "pass",
    {
        "trained_on": "neuron: 27 parameters, 54 optimizer state tensors",
        "hf_settings": "dataloader_pin_memory=False (the device cannot pin host memory)",
        "max_abs_error": 3.2e-7,
    },
)
NA = ("skip", {"reason": "not_applicable", "error_message": "not a causal LM"})


def build_store(root: Path) -> Store:
    store = Store(root)
    plans = {
        ("org/a", 1000): {"trainer": PASS, "sft": PASS, "accelerate_ddp": ACC_FAIL},
        ("org/b", 500): {"trainer": PASS, "sft": OP_FAIL, "accelerate_ddp": ACC_FAIL},
        ("org/c", 300): {"trainer": CPU, "sft": NA, "accelerate_ddp": PASS},
    }
    rows = []
    for (model, dl), plan in plans.items():
        rows += [_row(model, dl, s, "pass") for s in ("load", "forward", "backward")]
        rows += [_row(model, dl, s, status, **extra) for s, (status, extra) in plan.items()]
    store.write("results", "rh", rows)
    store.write(
        "runs",
        "rh",
        [
            {
                "run_id": "rh", "status": "finished", "started_at": T0, "updated_at": T0,
                "device": "neuron", "device_emulated": True, "dtype": "fp32",
                "stages": "load,forward,backward,trainer,sft,accelerate_ddp", "world_size": 2,
                "models_requested": 3,
            }
        ],
    )  # fmt: skip
    return store


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("hf_stack") / "store"
    build_store(path)
    return path


@pytest.fixture(scope="module")
def report(root: Path) -> dict[str, Any]:
    from reports.summary import run_report

    return run_report(StoreQuery(Store(root)), "rh")


def test_the_share_of_downloads_passing_each_hf_training_stage(report):
    hf = report["hf_stack"]
    assert hf["ran"] and (hf["models"], hf["downloads"]) == (3, 1800)
    lines = {line["stage"]: line for line in hf["stages"]}
    assert lines["trainer"]["passed"] == 2
    assert lines["trainer"]["passed_downloads_share"] == pytest.approx(1500 / 1800)
    assert (lines["sft"]["passed"], lines["sft"]["failed"], lines["sft"]["skipped"]) == (1, 1, 1)
    assert lines["trainer_compiled"]["rows"] == 0  # not asked for: no line in the text


def test_blockers_say_device_or_library_ranked_by_downloads(report):
    blockers = [(b["blocker"], b["kind"], b["downloads"]) for b in report["hf_stack"]["blockers"]]
    assert blockers == [
        (FRAME, "library", 1500),
        ("aten::foo", "device", 500),
        ("(TrainedElsewhere)", "other", 300),
    ]


def test_the_report_text_and_lookup_show_it(report, root):
    from reports.models import model_detail
    from reports.render.text import render
    from sweep.commands.lookup import render_text

    text = render(report)
    assert "== Hugging Face training stack: do its own trainers train on the device? ==" in text
    assert "== What stops Hugging Face's training stack, ranked by downloads ==" in text
    assert "trainer_compiled" not in text.split("training stack: do")[1].split("==")[1]
    page = render_text(model_detail(StoreQuery(Store(root)), "org/a", "rh"))
    assert "Hugging Face training stack:" in page
    assert f"stopped in {FRAME} (a library's device path)" in page
    assert "trained on neuron: 27 parameters, 54 optimizer state tensors" in page


def test_the_dashboard_card_and_the_model_page_table(root):
    from fastapi.testclient import TestClient

    from dashboard.app import create_app, model_url

    client = TestClient(create_app(str(root), refresh_s=0, warm=False))
    overview = client.get("/", params={"run": "rh"}).text
    card = overview.split('id="hf-stack-card"')[1].split("</ol>")[0]
    # the share of downloads passing each stage that ran (1500, 1000 and 300 of 1800)
    assert "(trainer / sft / accelerate_ddp)" in card and "83.3% / 55.6% / 16.7%" in card
    assert "neuron (emulated)" in card and "on the emulated device" in card
    # the blockers by downloads, each placed: a library's file and function, an op (linked)
    assert card.index("prepare_model") < card.index("aten::foo") < card.index("TrainedElsewhere")
    assert (
        "in accelerate's device path: <code>accelerate/accelerator.py</code>, "
        "<code>prepare_model()</code> (accelerate_ddp; 83.3% of downloads)" in card
    )
    assert 'in the device: the op <a href="/ops/aten%3A%3Afoo?run=rh">aten::foo</a> (sft;' in card
    assert "(TrainedElsewhere) (neither the device nor a library frame) (trainer;" in card
    page = client.get(model_url("org/b", "rh")).text
    table = page.split('<table id="hf-training">')[1].split("</table>")[0]
    assert "neuron: 27 parameters, 54 optimizer state tensors" in table
    assert "dataloader_pin_memory=False (the device cannot pin host memory)" in table
    assert "max abs error 3.2e-07 (both sides in fp32)" in table
    assert 'the device: <a href="/ops/aten%3A%3Afoo?run=rh">aten::foo</a>' in table
    assert "accelerate's device path: <code>accelerate/accelerator.py</code>" in table
    assert "&lt;script&gt;y&lt;/script&gt;" in table and "<script>y" not in page
