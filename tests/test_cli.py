"""`hfsweep` as users run it: exit codes, one-line errors, output formats."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.conftest import HFSWEEP, ROOT


def hfsweep(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*HFSWEEP, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"},
    )


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in proc.stderr
    return proc.stderr


def test_check_a_local_config_passes(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "model_type": "gpt2",
                "architectures": ["GPT2LMHeadModel"],
                "n_layer": 12,
                "n_embd": 768,
                "n_head": 12,
            }
        )
    )
    proc = hfsweep(
        "check", str(config), "--stages", "load,forward,backward,generate", "--format", "json"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    assert data["ok"] is True
    assert [s["status"] for s in data["stages"]] == ["pass"] * 4
    assert data["stages"][0]["config_source"] == "local"
    assert data["stages"][0]["architecture"] == "GPT2LMHeadModel"


def test_check_a_catalog_model_in_text(tmp_path):
    proc = hfsweep("check", "google-bert/bert-base-uncased", "--stages", "load,forward,generate")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "transformers_default" in proc.stdout
    assert "not_applicable" in proc.stdout  # generate does not apply to an encoder


@pytest.mark.parametrize(
    ("model_id", "library", "architecture"),
    [
        ("timm/mobilenetv3_small_100.lamb_in1k", "timm", "mobilenetv3_small_100"),
        ("laion/CLIP-ViT-B-32-laion2B-s34B-b79K", "open_clip", "CLIP"),
        ("autogluon/chronos-bolt-small", "chronos-forecasting", "ChronosBoltModelForForecasting"),
    ],
)
def test_check_catalog_models_of_other_libraries_offline(model_id, library, architecture):
    proc = hfsweep("check", model_id, "--stages", "load,forward,backward", "--format", "json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = json.loads(proc.stdout)["stages"]
    assert [r["status"] for r in rows] == ["pass"] * 3
    assert {(r["library"], r["architecture"], r["config_source"]) for r in rows} == {
        (library, architecture, "library_default")
    }


def test_check_runs_the_training_stages(tmp_path):
    """`--stages training` brings the stages it builds on; a timm model has no peft LoRA
    defaults (a skip that does not fail the check), and trains with AdamW and autocast."""
    proc = hfsweep(
        "check", "timm/mobilenetv3_small_100.lamb_in1k", "--stages", "training", "--format", "json"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {r["stage"]: r for r in json.loads(proc.stdout)["stages"]}
    assert list(rows) == [
        "load",
        "forward",
        "backward",
        "optimizer",
        "optimizer_fused",
        "amp",
        "lora",
    ]
    assert [rows[s]["status"] for s in list(rows)[:6]] == ["pass"] * 6
    assert (rows["lora"]["status"], rows["lora"]["reason"]) == ("skip", "not_applicable")
    assert (
        rows["lora"]["error_message"] == "peft has no default LoRA target modules for timm models"
    )


def test_check_a_remote_code_model_is_a_skip_exit_1():
    # rank of a custom_code entry in the bundled catalog
    from model_configs.catalog import load_catalog

    remote = next(e for e in load_catalog().entries if e.custom_code)
    proc = hfsweep("check", remote.model_id, "--format", "json")
    assert proc.returncode == 1
    data = json.loads(proc.stdout)
    assert {s["status"] for s in data["stages"]} == {"skip"}
    assert {s["reason"] for s in data["stages"]} == {"remote_code"}


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["check", "nobody/no-such-model"], "unknown model id"),
        (["check", "{bad}.json"], "no such file"),
        (["run", "--device", "nueron"], "Did you mean 'neuron'"),
        (["run", "--top", "0"], "--top must be at least 1"),
        (["run", "--stages", "load,fly"], "unknown stage 'fly'"),
        (["run", "--catalog", "/nonexistent.csv"], "catalog file not found"),
        (["report", "--store", "/nonexistent-store"], ""),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_usage_exits_2_with_one_line(args, needle):
    proc = hfsweep(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert needle in one_line_error(proc)


@pytest.mark.parametrize(
    ("text", "needle"), [("", "empty"), ("{oops", "not valid JSON"), ("[]", "JSON object")]
)
def test_check_malformed_config_exits_2(tmp_path, text, needle):
    path = tmp_path / "config.json"
    path.write_text(text)
    proc = hfsweep("check", str(path))
    assert proc.returncode == 2
    assert needle in one_line_error(proc)


def test_check_unknown_model_type_is_a_skip(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "not_a_real_type", "hidden_size": 8}))
    proc = hfsweep("check", str(path), "--format", "json")
    assert proc.returncode == 1
    assert {s["reason"] for s in json.loads(proc.stdout)["stages"]} == {"unknown_model_type"}


def test_help_and_import_stay_light():
    proc = hfsweep("--help")
    assert proc.returncode == 0 and "check" in proc.stdout
    code = (
        "import sys, sweep.cli, sweep.driver; print('torch' in sys.modules, 'ray' in sys.modules)"
    )
    out = subprocess.run([HFSWEEP[0], "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.strip() == "False False"
