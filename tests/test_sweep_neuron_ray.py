"""The emulated neuron device through the real Ray driver: rows and per-op fallback rows in
Parquet, the profile and compile mode on every row, the training stages (their rows, where
their fallbacks happened, a resume that doubles nothing); a broken device stops the sweep
before any row."""

from __future__ import annotations

import os
from collections import Counter

import pytest

from reports.store import Store
from sweep.commands.options import stage_list
from sweep.driver import run_sweep
from tests.conftest import ROOT, write_catalog
from tests.neuron_support import forked
from tests.test_driver_faults import config
from tests.warm_fork import run_code

pytestmark = pytest.mark.slow

STAGES = "load,forward,backward,compile,training"
ORDER = ["load", "forward", "backward", "compile", "optimizer", "optimizer_fused", "amp", "lora"]
MODELS = [
    {
        "model_id": "org/llama",
        "library_name": "transformers",
        "model_type_hint": "llama",
        "architectures_hint": "LlamaForCausalLM",
        "pipeline_tag": "text-generation",
    },
    {
        "model_id": "org/resnet",
        "library_name": "transformers",
        "model_type_hint": "resnet",
        "pipeline_tag": "image-classification",
    },
    {"model_id": "org/bert", "library_name": "transformers", "model_type_hint": "bert"},
]


def test_neuron_through_ray_writes_fallback_rows(tmp_path, ray_session):
    catalog = write_catalog(tmp_path / "catalog.csv", MODELS)
    store = tmp_path / "store"
    summary = run_sweep(
        config(
            store,
            catalog,
            device="neuron",
            stages=stage_list(STAGES),
            run_id="n1",
            executor="ray",
            timeout_s=300,
        )
    )
    assert summary.tasks == 3
    results = Store(store).read("results", "n1").to_pylist()
    fallbacks = Store(store).read("fallbacks", "n1").to_pylist()
    assert Counter((r["model_id"], r["stage"]) for r in results) == Counter(
        {(m["model_id"], s): 1 for m in MODELS for s in ORDER}
    )
    assert {r["device"] for r in results} == {"neuron"}
    assert all(r["device_emulated"] for r in results)
    assert {r["device_profile"] for r in results} == {"torchneuron-2026-04-21"}
    assert len({r["device_profile_hash"] for r in results}) == 1
    by = {(r["model_id"], r["stage"]): r for r in results}
    assert all(by[(m["model_id"], "load")]["status"] == "pass" for m in MODELS)
    compile_rows = [r for r in results if r["stage"] == "compile" and r["status"] != "not_run"]
    assert compile_rows and {r["compile_mode"] for r in compile_rows} == {"raise"}
    # a tiny Llama runs entirely on the device under TorchNeuron's registrations, and trains
    # there: default AdamW, fused, bf16 autocast and LoRA, within tolerance of the CPU
    llama = [by[("org/llama", s)] for s in ORDER]
    assert [r["status"] for r in llama] == ["pass"] * len(ORDER)
    assert all(r["fallback_op_count"] == 0 for r in llama)
    assert by[("org/llama", "compile")]["recompile_count"] == 0
    default, fused = by[("org/llama", "optimizer")], by[("org/llama", "optimizer_fused")]
    assert default["step_op_calls"] > fused["step_op_calls"] > 0
    assert default["max_abs_error"] is not None
    # peft has defaults for bert, none for resnet
    assert by[("org/bert", "lora")]["status"] == "pass"
    assert by[("org/resnet", "lora")]["status"] == "skip"
    assert by[("org/resnet", "lora")]["reason"] == "not_applicable"
    # ResNet's training step falls back where its forward and backward do: the model's ops
    # (eager), none in the optimizer's own part
    trained = {(f["op"], f["source"]) for f in fallbacks if f["stage"] == "optimizer"}
    assert ("aten::max_pool2d_with_indices.out", "eager") in trained
    assert {source for _, source in trained} == {"eager"}
    # ResNet's pooling and batch norm are not registered: eager CPU fallbacks, per op
    resnet_ops = {(f["stage"], f["op"]) for f in fallbacks if f["model_id"] == "org/resnet"}
    assert ("forward", "aten::max_pool2d_with_indices.out") in resnet_ops, resnet_ops
    assert all(
        f["count"] >= 1 and f["downloads"] == 1000 // 2 and f["device"] == "neuron"
        for f in fallbacks
        if f["model_id"] == "org/resnet"
    )
    forward = by[("org/resnet", "forward")]
    assert forward["fallback_op_count"] == len(
        {f["op"] for f in fallbacks if f["model_id"] == "org/resnet" and f["stage"] == "forward"}
    )
    assert Store(store).run("n1")["device_profile"] == "torchneuron-2026-04-21"

    # the same command again: nothing to run, nothing doubled
    again = run_sweep(
        config(
            store,
            catalog,
            device="neuron",
            stages=stage_list(STAGES),
            run_id="n1",
            executor="ray",
            timeout_s=300,
        )
    )
    assert again.already_done == len(MODELS) and again.tasks == 0
    assert Store(store).read("results", "n1").num_rows == len(results)


@forked
def test_a_broken_device_stops_the_sweep_before_any_row(tmp_path):
    """The one device check: a torch the emulator was not checked on is one error, exit 3 (the
    environment), and the store has no run and no row (a resume would otherwise take thousands
    of fails as done). The driver is a process of its own forked from the warm one, its torch
    made 2.13 before its first line (and by `sitecustomize` in any interpreter it starts)."""
    site = tmp_path / "site"
    site.mkdir()
    broken = 'import torch\ntorch.__version__ = "2.13.0"\n'
    (site / "sitecustomize.py").write_text(broken)
    catalog = write_catalog(tmp_path / "catalog.csv", MODELS[:1])
    store = tmp_path / "store"
    argv = ["run", "--catalog", str(catalog), "--top", "1", "--device", "neuron"]
    argv += ["--store", str(store), "--no-report", "--local"]
    done = run_code(
        f"{broken}import sys\nfrom sweep.cli import main\nsys.exit(main({argv!r}))\n",
        env={"HF_HUB_OFFLINE": "1", "PYTHONPATH": f"{site}{os.pathsep}{ROOT}"},
    )
    assert done.returncode == 3, done.stderr[-2000:]
    assert "cannot run models" in done.stderr and "2.14" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (store / "results").exists() and not (store / "runs").exists()
