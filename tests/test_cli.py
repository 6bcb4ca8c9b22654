"""`hfsweep` as users run it: exit codes, one-line errors, output formats."""

from __future__ import annotations

import json
import re
import socket
import subprocess

import pytest

from tests.conftest import HFSWEEP, ROOT
from tests.neuron_support import forked
from tests.warm_fork import Finished, run_cli


def hfsweep(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*HFSWEEP, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"},
    )


def in_fork(*args: str) -> Finished:
    """`hfsweep ARGS` in a fork of the warm process of a `@forked` test (tests/warm_fork.py):
    its own exit status, stdout and stderr, without a fresh interpreter importing torch,
    transformers and the compile stack again (`test_check_a_local_config_passes` runs the
    command as a real process)."""
    return run_cli(list(args), env={"HF_HUB_OFFLINE": "1"})


def one_line_error(proc: subprocess.CompletedProcess | Finished) -> str:
    assert "Traceback" not in proc.stderr
    return proc.stderr


@pytest.mark.slow
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
    # what the run took, measured in the model's process and for the whole command
    assert data["verdict"].startswith("passes every stage (load, forward, backward, generate)")
    assert data["error"] is None and data["next_step"]["failure"] == "passes"
    assert data["alternatives"] == []  # a passing model is not run again
    assert 0 < data["wall_s"] <= data["command_wall_s"]
    assert data["wall_s"] == data["stages"][0]["wall_s"]  # the same figure goes into the row
    peak = data["peak_host_memory_bytes"]
    assert 10 << 20 < peak <= data["command_peak_host_memory_bytes"] < 64 << 30
    assert peak == data["stages"][0]["peak_host_memory_bytes"]
    # progress, stage by stage, on stderr (a line per stage: stderr is not a terminal here)
    assert "[check] load       pass" in proc.stderr and "[check] generate   pass" in proc.stderr


@pytest.mark.slow
@forked
def test_check_a_catalog_model_in_text(tmp_path):
    proc = in_fork("check", "google-bert/bert-base-uncased", "--stages", "load,forward,generate")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "transformers_default" in proc.stdout
    # generate does not apply to an encoder
    assert re.search(r"^generate +n/a .* does not apply to this model$", proc.stdout, re.M)
    lines = proc.stdout.splitlines()
    assert "verdict: passes every stage (load, forward; generate does not apply)" in lines[-4]
    assert lines[-3].startswith("time:    stages ") and "model process" in lines[-3]
    assert lines[-2].startswith("memory:  peak host ") and "(the model's process)" in lines[-2]
    assert lines[-1] == "next:    none: every stage passes on the device with no CPU fallback"


@pytest.mark.parametrize(
    ("model_id", "library", "architecture"),
    [
        ("timm/mobilenetv3_small_100.lamb_in1k", "timm", "mobilenetv3_small_100"),
        ("laion/CLIP-ViT-B-32-laion2B-s34B-b79K", "open_clip", "CLIP"),
        ("autogluon/chronos-bolt-small", "chronos-forecasting", "ChronosBoltModelForForecasting"),
    ],
)
@forked
def test_check_catalog_models_of_other_libraries_offline(model_id, library, architecture):
    proc = in_fork("check", model_id, "--stages", "load,forward,backward", "--format", "json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = json.loads(proc.stdout)["stages"]
    assert [r["status"] for r in rows] == ["pass"] * 3
    assert {(r["library"], r["architecture"], r["config_source"]) for r in rows} == {
        (library, architecture, "library_default")
    }


@pytest.mark.slow
@forked
def test_check_runs_the_training_stages(tmp_path):
    """`--stages training` brings the stages it builds on; a timm model has no peft LoRA
    defaults (a skip that does not fail the check), and trains with AdamW and autocast."""
    proc = in_fork(
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


@forked
def test_check_unknown_model_type_is_a_skip(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "not_a_real_type", "hidden_size": 8}))
    proc = in_fork("check", str(path), "--format", "json")
    assert proc.returncode == 1
    assert {s["reason"] for s in json.loads(proc.stdout)["stages"]} == {"unknown_model_type"}


def test_version():
    proc = hfsweep("--version")
    assert proc.returncode == 0, proc.stderr
    assert re.fullmatch(r"hfsweep \S+( \(git [0-9a-f]{12}\))?\n", proc.stdout)


@pytest.mark.skipif(
    __import__("torch").cuda.is_available(), reason="the machine has CUDA: the run would run"
)
@forked
def test_a_device_missing_here_exits_3_and_writes_nothing(tmp_path):
    """The README's exit code 3: the device failed before any model ran (an unknown device
    name stays a usage error, 2)."""
    for args in (
        ["run", "--device", "cuda", "--top", "1", "--local", "--store", str(tmp_path / "s")],
        ["check", "google-bert/bert-base-uncased", "--device", "cuda"],
    ):
        proc = in_fork(*args)
        assert proc.returncode == 3, proc.stdout + proc.stderr
        # check's progress lines come first (a pipe hears what runs), then the error
        lines = [x for x in one_line_error(proc).splitlines() if not x.startswith("[check] ")]
        assert lines[0].startswith("error: Device 'cuda' is not available")
        assert len(lines) == 2  # the error and its hint
    assert not (tmp_path / "s").exists()


def test_a_store_that_is_a_file_or_missing_is_one_clear_error(tmp_path):
    afile = tmp_path / "results.parquet"
    afile.write_text("not a store")
    missing = tmp_path / "no-such-store"
    for command in (["report"], ["lookup", "org/m"], ["diff", "r1", "r2"], ["dashboard"]):
        proc = hfsweep(*command, "--store", str(afile))
        assert proc.returncode == 2, proc.stderr
        assert one_line_error(proc).startswith(f"error: --store '{afile}' is a file, not a store")
        proc = hfsweep(*command, "--store", str(missing))
        assert proc.returncode == 2, proc.stderr
        assert one_line_error(proc).startswith(f"error: --store '{missing}': no such folder")
    for command in (["run", "--top", "1"], ["ops", "--ops", "add"]):
        proc = hfsweep(*command, "--store", str(afile))
        assert proc.returncode == 2, proc.stderr
        assert "is a file, not a store folder" in one_line_error(proc)


def test_a_busy_port_is_one_clear_error_before_the_web_stack_loads(tmp_path):
    """Checked by binding the port before uvicorn, the app and DuckDB are imported."""
    (tmp_path / "store").mkdir()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        proc = hfsweep("dashboard", "--store", str(tmp_path / "store"), "--port", str(port))
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert one_line_error(proc).startswith(f"error: port {port} on 127.0.0.1 is already in use")
        assert "http://" not in proc.stdout  # no URL printed for a server that never ran
        code = (
            "import sys; from sweep.cli import main; "
            f"rc = main(['dashboard', '--store', {str(tmp_path / 'store')!r}, '--port', '{port}']); "
            "print(rc, [m for m in ('uvicorn', 'dashboard.app', 'duckdb', 'torch') if m in sys.modules])"
        )
        out = subprocess.run(
            [HFSWEEP[0], "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
        )
    assert out.stdout.strip() == "2 []", out.stdout + out.stderr


def test_help_and_import_stay_light():
    proc = hfsweep("--help")
    assert proc.returncode == 0 and "check" in proc.stdout
    code = (
        "import sys, sweep.cli, sweep.driver; print('torch' in sys.modules, 'ray' in sys.modules)"
    )
    out = subprocess.run([HFSWEEP[0], "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.strip() == "False False"
