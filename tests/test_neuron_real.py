"""The real TorchNeuron adapter against a stand-in `torch_neuronx` (tests/fixtures): fallbacks from
get_fallback_ops / get_executed_ops / clear_op_tracking around each stage, strict mode naming
the op, TorchNeuron's compile switch left at its default unless asked, the legacy XLA package
refused. Each case runs in a process of its own (the stand-in installs a PrivateUse1 backend):
a child forked from a `@forked` test's warm process, the stand-in first on its path
(tests/warm_fork.py), as a fresh interpreter with it on PYTHONPATH would run it."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, ROOT, TINY_LLAMA
from tests.neuron_support import forked
from tests.warm_fork import Finished, run_cli, run_code

STANDIN = FIXTURES / "torch_neuronx_standin"


def run_python(code: str, *, path: Path = STANDIN, env: dict | None = None) -> Finished:
    """`python -c CODE` with `path` first on the path and TorchNeuron's compile switch unset
    (unless `env` sets it), in a child forked from this (`@forked`) test's process."""
    environment = {
        "PYTHONPATH": f"{path}{os.pathsep}{ROOT}",
        "HF_HUB_OFFLINE": "1",
        "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION": None,
        **(env or {}),
    }
    return run_code(code, path=[path], env=environment)


def last_json(done: Finished) -> dict:
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@forked
def test_fallbacks_come_from_torchneuron_tracking_per_stage() -> None:
    done = run_python(
        """
        import json, os, torch
        from runners.devices import get_device
        from runners.devices.neuron.real import RealNeuronDevice
        device = get_device("neuron")
        assert isinstance(device, RealNeuronDevice) and not device.emulated
        device.setup()
        x = device.to_device(torch.rand(4) + 0.5)
        torch.digamma(x)  # before the stage: cleared by clear_op_tracking
        with device.record_fallbacks() as log:
            y = torch.digamma(x) + x
            torch.digamma(y)
        print(json.dumps({
            "ops": {op: e.count for op, e in log.ops.items()},
            "executed": sorted(log.executed),
            "env": os.environ.get("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION"),
            "mode": device.compile_mode,
            "versions": device.versions(),
        }))
        """
    )
    out = last_json(done)
    assert out["ops"] == {"aten::digamma.out": 1}  # a set: no counts without the profiler's
    assert "aten::add.Tensor" in out["executed"]
    assert out["env"] is None and out["mode"] == "raise"  # TorchNeuron's default, untouched
    assert out["versions"]["torch_neuronx"] == "2.14.3.0"
    assert next(iter(out["versions"])) == "torch_neuronx"  # the run's device package version


@pytest.mark.slow
@forked
def test_stages_strict_and_compile_modes_through_check(tmp_path: Path) -> None:
    """`hfsweep check` on the real adapter: fallback rows from TorchNeuron's tracking; strict
    fails the stage naming the op; a compile mode sets TorchNeuron's own variable."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY_LLAMA))
    base = ["check", str(config), "--device", "neuron", "--format", "json"]
    env = {
        "PYTHONPATH": f"{STANDIN}{os.pathsep}{ROOT}",
        "STANDIN_PROFILE": "torch-mlir",  # training ops fall back under this list
        "HF_HUB_OFFLINE": "1",
        "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION": None,
    }
    results = {}
    # one check per set of settings, each a process forked from this warm one; the compile
    # mode changes the compile stage only
    plain_stages = "load,forward,backward,optimizer,optimizer_fused,compile"
    for name, extra in {
        "plain": ["--stages", plain_stages, "--compile-mode", "eager"],
        "strict": ["--stages", "load,forward,backward", "--strict"],
    }.items():
        done = run_cli([*base, *extra], path=[STANDIN], env=env)
        assert done.stdout, done.stderr[-3000:]
        results[name] = json.loads(done.stdout)
    plain = {r["stage"]: r for r in results["plain"]["stages"]}
    assert plain["backward"]["status"] == "pass" and not plain["backward"]["device_emulated"]
    ops = {f["op"] for f in results["plain"]["fallbacks"] if f["stage"] == "backward"}
    assert "aten::embedding_dense_backward" in ops
    strict = {r["stage"]: r for r in results["strict"]["stages"]}
    assert strict["forward"]["status"] == "pass"
    assert strict["backward"]["status"] == "fail"
    assert strict["backward"]["error_type"] == "FallbackDisallowed"
    assert strict["backward"]["failing_op"] in ops
    assert plain["compile"]["status"] == "pass" and plain["compile"]["compile_mode"] == "eager"
    # the training stages' fallbacks come from TorchNeuron's tracking too: under the Torch-MLIR
    # lists the fused step's `_fused_adamw_` falls back, the default step's `addcmul` does
    assert plain["optimizer"]["status"] == plain["optimizer_fused"]["status"] == "pass"
    trained = {(f["stage"], f["op"]) for f in results["plain"]["fallbacks"]}
    assert ("optimizer_fused", "aten::_fused_adamw_") in trained
    assert ("optimizer", "aten::_fused_adamw_") not in trained
    assert any(s == "optimizer" and op.startswith("aten::addcmul") for s, op in trained)


@pytest.mark.slow
@forked
def test_compile_mode_sets_torchneuron_variable_only_when_asked() -> None:
    """One process: the user's own setting first (before any set-up set the variable), then
    each mode asked for, each changing what the one before left."""
    done = run_python(
        """
        import json, os
        from ground.errors import DeviceError
        from runners.devices.neuron.real import RealNeuronDevice
        device = RealNeuronDevice()
        device.setup()
        out = {"user": device.compile_mode}
        for mode in ("raise", "eager"):
            device = RealNeuronDevice(compile_mode=mode)
            device.setup()
            out[mode] = [os.environ["TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION"], device.compile_mode]
        try:
            RealNeuronDevice(compile_mode="partition").setup()
        except DeviceError as exc:
            out["partition"] = exc.message
        print(json.dumps(out))
        """,
        env={"TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION": "0"},
    )
    out = last_json(done)
    # the user's own setting is respected when no mode is asked for
    assert out["user"] == "eager"
    assert out["eager"] == ["0", "eager"] and out["raise"] == ["1", "raise"]
    assert "never partitions" in out["partition"]


@pytest.mark.parametrize(
    "version, has_api, refused",
    [("2.9.0.2.11.19482", False, "legacy XLA-based"), ("0.1.0", False, "has no get_fallback_ops")],
)
@forked
def test_legacy_or_foreign_torch_neuronx_is_refused(
    tmp_path: Path, version: str, has_api: bool, refused: str
) -> None:
    package = tmp_path / "torch_neuronx"
    package.mkdir()
    (package / "__init__.py").write_text(f"__version__ = {version!r}\n")
    meta = tmp_path / f"torch_neuronx-{version}.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: torch-neuronx\nVersion: {version}\n"
    )
    done = run_python(
        """
        import json
        from ground.errors import DeviceError
        from runners.devices import get_device
        try:
            get_device("neuron").setup()
            print(json.dumps("accepted"))
        except DeviceError as exc:
            print(json.dumps([exc.message, exc.hint]))
        """,
        path=tmp_path,
    )
    message, hint = last_json(done)
    assert refused in message and "neuron-emulated" in hint


def _sweep_with_legacy_package(tmp_path: Path, *command: str) -> Finished:
    """`hfsweep COMMAND --device neuron --local --store STORE --no-report` where the stand-in is
    installed as the legacy XLA torch-neuronx (2.5.1), in a child forked from this (`@forked`)
    test's process."""
    legacy = tmp_path / "legacy"
    shutil.copytree(STANDIN / "torch_neuronx", legacy / "torch_neuronx")
    meta = legacy / "torch_neuronx-2.5.1.2.4.0.dist-info"
    meta.mkdir(parents=True)
    (meta / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: torch-neuronx\nVersion: 2.5.1.2.4.0\n"
    )
    environment = {"PYTHONPATH": f"{legacy}{os.pathsep}{ROOT}", "HF_HUB_OFFLINE": "1"}
    return run_cli(
        [*command, "--device", "neuron", "--local"]
        + ["--store", str(tmp_path / "store"), "--no-report"],
        path=[legacy],
        env=environment,
    )


@forked
def test_preflight_refuses_the_legacy_package_before_any_row(tmp_path: Path) -> None:
    """`hfsweep run` on a machine with the legacy package: one error, exit 3 (the environment),
    nothing written."""
    done = _sweep_with_legacy_package(tmp_path, "run", "--top", "3")
    assert done.returncode == 3, done.stderr[-2000:]
    assert "legacy XLA-based" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "store" / "results").exists()


@forked
def test_the_op_sweep_checks_the_device_before_any_row(tmp_path: Path) -> None:
    """`hfsweep ops` enters the same run lifecycle as `hfsweep run`, its device check included:
    with the legacy package, one error, exit 3, no run row and no op rows."""
    done = _sweep_with_legacy_package(tmp_path, "ops", "--ops", "sin", "--dtypes", "fp32")
    assert done.returncode == 3, done.stderr[-2000:]
    assert "legacy XLA-based" in done.stderr and "Traceback" not in done.stderr
    store = tmp_path / "store"
    assert not (store / "ops").exists() and not (store / "op_runs").exists()
