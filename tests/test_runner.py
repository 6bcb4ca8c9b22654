"""One model through the stages, in process and isolated: statuses, not_run, hangs, crashes."""

from __future__ import annotations

import os
import signal
import time

import pytest

from model_configs.pass_rule import MAX_PARAMS
from model_configs.resolve import transformers_default_config
from model_configs.shrink import shrink
from model_configs.spec import ResolvedConfig
from runners.isolation import run_isolated
from runners.run_model import run_model
from runners.settings import ModelSettings
from runners.signature import error_signature, op_in_message
from runners.stages.core import backward, forward

FAST = ["load", "forward", "backward", "generate"]


def tiny(model_type: str, arch: str | None = None):
    resolved = ResolvedConfig(
        model_id=f"test/{model_type}",
        library="transformers",
        config=transformers_default_config(model_type),
        source="transformers_default",
    )
    return shrink(resolved, architecture_hint=arch)


@pytest.fixture(scope="module")
def llama():
    return tiny("llama", "LlamaForCausalLM")


def statuses(outcome) -> dict[str, str]:
    return {r.stage: r.status for r in outcome.stages}


def test_tiny_llama_passes_every_stage_on_cpu(llama):
    outcome = run_model(llama, ModelSettings(device="cpu", stages=FAST))
    assert statuses(outcome) == dict.fromkeys(FAST, "pass")
    assert 0 < outcome.param_count <= MAX_PARAMS
    assert all(r.duration_s is not None and r.duration_s >= 0 for r in outcome.stages)


def test_generate_is_not_applicable_to_an_encoder():
    outcome = run_model(tiny("bert", "BertForMaskedLM"), ModelSettings(device="cpu", stages=FAST))
    assert statuses(outcome)["generate"] == "skip"
    assert outcome.stages[-1].reason == "not_applicable"


def test_a_failing_stage_makes_later_ones_not_run(llama, monkeypatch):
    def broken(self, ctx):
        raise RuntimeError("shape mismatch: [2, 7] vs [3, 8] at 0x7f00ff")

    monkeypatch.setattr(forward.ForwardStage, "run", broken)
    outcome = run_model(llama, ModelSettings(device="cpu", stages=FAST))
    assert statuses(outcome) == {
        "load": "pass",
        "forward": "fail",
        "backward": "not_run",
        "generate": "not_run",
    }
    failed = outcome.stages[1]
    assert failed.error_type == "RuntimeError"
    assert failed.error_signature == "RuntimeError: shape mismatch: [?] vs [?] at <addr>"


def test_a_model_needing_a_missing_package_is_a_skip_of_every_stage():
    # DiNAT needs natten, which has no build here: that is a fact of the environment, not a
    # failure of the device, so every stage is a skip with its reason.
    pytest.importorskip("transformers")
    import importlib.util

    if importlib.util.find_spec("natten") is not None:
        pytest.skip("natten is installed here")
    outcome = run_model(tiny("dinat"), ModelSettings(device="cpu", stages=FAST))
    assert statuses(outcome) == dict.fromkeys(FAST, "skip")
    assert {r.reason for r in outcome.stages} == {"missing_package"}
    assert "needs the natten package" in (outcome.stages[0].error_message or "")


def test_missing_package_reads_both_kinds_of_import_error():
    from model_configs.build import missing_package

    assert (
        missing_package(ModuleNotFoundError("No module named 'natten'", name="natten")) == "natten"
    )
    message = "LayoutLMv2Model requires the detectron2 library but it was not found"
    assert missing_package(ImportError(message)) == "detectron2"
    assert missing_package(ImportError("cannot import name 'x' from 'y'")) is None
    assert missing_package(RuntimeError("requires the timm library")) is None


def test_isolated_run_matches_in_process(llama):
    outcome = run_isolated(llama, ModelSettings(device="cpu", stages=FAST, timeout_s=120))
    assert statuses(outcome) == dict.fromkeys(FAST, "pass")
    assert outcome.param_count > 0


def test_a_hang_becomes_a_timeout_of_that_stage(llama, monkeypatch):
    monkeypatch.setattr(backward.BackwardStage, "run", lambda self, ctx: time.sleep(60))
    outcome = run_isolated(llama, ModelSettings(device="cpu", stages=FAST, timeout_s=8))
    assert statuses(outcome) == {
        "load": "pass",
        "forward": "pass",
        "backward": "timeout",
        "generate": "not_run",
    }
    assert "8 s" in outcome.stages[2].error_message


def test_a_segfault_becomes_a_crash_of_that_stage(llama, monkeypatch):
    monkeypatch.setattr(
        forward.ForwardStage, "run", lambda self, ctx: os.kill(os.getpid(), signal.SIGSEGV)
    )
    outcome = run_isolated(llama, ModelSettings(device="cpu", stages=FAST, timeout_s=60))
    assert statuses(outcome) == {
        "load": "pass",
        "forward": "crash",
        "backward": "not_run",
        "generate": "not_run",
    }
    assert "SIGSEGV" in outcome.stages[1].error_message


def test_signatures_cluster_and_name_ops():
    a = error_signature("RuntimeError", "size 32 vs 64 in /x/y/model.py:12")
    b = error_signature("RuntimeError", "size 16 vs 8 in /a/b/other.py:99")
    assert a == b
    assert op_in_message("Could not run 'aten::histc' with arguments") == "aten::histc"
    assert op_in_message("\"histogram_cpu\" not implemented for 'Int'") == "kernel:histogram_cpu"


def test_quieting_the_libraries_imports_no_diffusers_yet_quiets_it_once_imported():
    """`quiet_libraries` runs in every model process; importing diffusers there only to quiet
    it cost about 2 s of CPU in each that never builds a diffusers model."""
    import json
    import subprocess
    import sys

    from tests.conftest import ROOT

    code = (
        "import json, logging, sys\n"
        "from runners.run_model import quiet_libraries\n"
        "quiet_libraries()\n"
        "imported = 'diffusers' in sys.modules\n"
        "from diffusers.utils import logging as dl\n"
        "dl.get_logger('diffusers.models').warning('this must not print')\n"
        "print(json.dumps([imported, dl.get_verbosity() == logging.ERROR]))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "DIFFUSERS_VERBOSITY"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [False, True], done.stderr[-2000:]
    assert "this must not print" not in done.stderr
