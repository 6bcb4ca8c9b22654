"""The device registry and the real-device fallback detectors (parsers tested without hardware)."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field

import pytest
import torch

from ground.errors import DeviceError, UnknownNameError
from runners.devices import DEVICES, get_device
from runners.devices.base import FallbackLog, collecting
from runners.devices.cpu import CpuDevice
from runners.devices.mps import fallbacks_from_warnings
from runners.devices.neuron.profiles import BUNDLED, DEFAULT_PROFILE, base_name, load_profile
from runners.devices.neuron.real import dispatch_entry, fallbacks_from_events
from tests.conftest import ROOT
from tests.neuron_support import forked
from tests.warm_fork import run_code


def test_registry_names() -> None:
    assert {"cpu", "cuda", "mps", "neuron", "neuron-emulated"} <= set(DEVICES)
    assert isinstance(get_device("cpu"), CpuDevice)
    with pytest.raises(UnknownNameError, match="Did you mean 'neuron'"):
        get_device("nueron")


def test_the_cli_offers_the_options_the_devices_declare() -> None:
    """`hfsweep`'s device and model groups are what the registered devices declare; the
    values given reach the device's constructor through `DeviceChoice`, whatever they are."""
    import argparse

    from runners.devices import device_class, device_options
    from runners.settings import DeviceChoice
    from sweep.commands import options

    declared = {o.flag: o for o in device_options()}
    assert set(declared) == {o.flag for name in DEVICES for o in device_class(name).options}
    p = argparse.ArgumentParser()
    options.add_device_arguments(p)
    options.add_model_arguments(p)
    flags = {a for action in p._actions for a in action.option_strings}
    assert set(declared) <= flags
    given = [f"{flag}={o.choices[-1] if o.choices else 'x'}" for flag, o in declared.items()]
    choice = options.device_choice(p.parse_args(["--device", "neuron", "--strict", *given]))
    expect = {o.keyword: o.choices[-1] if o.choices else "x" for o in declared.values()}
    assert choice == DeviceChoice("neuron", strict=True, **expect)
    assert choice.options() == {"strict": True, **expect}
    # an option not given is not passed: the device's own default applies
    assert options.device_choice(p.parse_args([])).options() == {}
    assert DeviceChoice("cpu", profile=None) == DeviceChoice("cpu")
    # it crosses processes and is copied as settings are (pickle, dataclasses.replace)
    import dataclasses
    import pickle

    assert pickle.loads(pickle.dumps(choice)) == choice
    assert dataclasses.replace(choice, strict=False).options() == expect


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_unavailable_device_raises_device_error() -> None:
    with pytest.raises(DeviceError, match="not available") as info:
        get_device("cuda")
    assert info.value.hint and "cpu" in info.value.hint


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_device_runs_and_reports_memory() -> None:
    device = get_device("cuda")
    device.setup()
    model = device.prepare_model(torch.nn.Linear(8, 8))
    device.reset_peak_memory()
    with device.record_fallbacks() as log:
        model(device.to_device(torch.randn(4, 8))).sum().backward()
    device.synchronize()
    assert log.ops == {}
    assert (device.peak_memory_bytes() or 0) > 0


def test_bundled_profiles() -> None:
    """The default is TorchNeuron's registrations (snapshot of 2026-04-21); the Torch-MLIR and
    torch_xla lowering lists stay selectable, with the device's rules."""
    default = load_profile()
    assert default.name == "torchneuron-2026-04-21" == DEFAULT_PROFILE
    assert default.exact and len(default.ops) == 400
    assert load_profile("torchneuron") == default
    assert len(default.views) == 37 and len(default.routed_to_cpu) == 14
    union = load_profile("torch-mlir")
    direct = load_profile("torch-mlir-stablehlo-direct")
    decomposed = load_profile("torch-mlir-decomposed")
    assert union.ops == direct.ops | decomposed.ops
    assert len(direct.ops) == 165 and len(decomposed.ops) == 209
    assert not union.exact and union.views == default.views
    assert union.hash == load_profile("torch-mlir").hash != direct.hash != default.hash
    assert set(BUNDLED) == {
        "torchneuron-2026-04-21",
        "torch-mlir",
        "torch-mlir-stablehlo-direct",
        "torch-mlir-decomposed",
        "torch-xla",
    }
    assert len(load_profile("torch-xla").ops) == 377
    with pytest.raises(DeviceError):
        load_profile("/no/such/profile.txt")


def test_base_name_matching() -> None:
    assert base_name("aten::add_.Tensor") == "aten::add"
    assert base_name("aten::pow.Tensor_Scalar_out") == "aten::pow"
    assert base_name("aten::__and__.Tensor") == "aten::__and__"
    assert load_profile("torch-mlir").is_native("aten::mm.out")
    snapshot = load_profile()
    assert snapshot.is_native("aten::mm.out") and snapshot.is_native("aten::mm")
    assert not snapshot.is_native("aten::sort.values_stable")  # exact: sort is not registered


def test_mps_warning_parser() -> None:
    messages = [
        "The operator 'aten::_linalg_eigh.eigenvalues' is not currently supported on the MPS "
        "backend and will fall back to run on the CPU. This may have performance implications.",
        "The operator 'aten::_linalg_eigh.eigenvalues' is not currently supported on the MPS "
        "backend and will fall back to run on the CPU.",
        "some other warning",
    ]
    assert fallbacks_from_warnings(messages) == {"aten::_linalg_eigh.eigenvalues": 2}


@dataclass
class Event:
    name: str
    cpu_children: list[Event] = field(default_factory=list)


def test_profiler_fallback_parser() -> None:
    to_cpu = Event("aten::_to_cpu")
    events = [
        Event("aten::linear", [Event("aten::addmm")]),
        Event("aten::addmm"),
        Event("aten::digamma", [to_cpu, Event("aten::digamma")]),
        Event("aten::digamma", [to_cpu]),
        to_cpu,
    ]
    assert fallbacks_from_events(events) == {"aten::digamma": 2}


@forked
def test_dispatch_table_check_on_the_emulated_backend() -> None:
    get_device("neuron-emulated").setup()
    # the emulator registers a kernel for every op TorchNeuron registers, as TorchNeuron does
    assert dispatch_entry("aten::sin.out") == "kernel"
    assert dispatch_entry("aten::digamma.out") == "fallback"
    assert dispatch_entry("aten::empty_strided") == "kernel"
    assert dispatch_entry("aten::no_such_op") is None


def test_default_device_records_compile_fallbacks_only() -> None:
    device = CpuDevice()
    with device.record_fallbacks() as log:
        from runners.devices.base import active_fallback_logs

        assert active_fallback_logs()[-1] is log
        log.record_compile("aten::foo")
    assert log.op_count == 1 and log.ops == {}
    outer = FallbackLog()
    with collecting(outer):
        pass
    assert not active_fallback_logs()


def test_mps_fallback_switch_is_set_before_torch_loads(monkeypatch) -> None:
    """PyTorch reads PYTORCH_ENABLE_MPS_FALLBACK once, when torch loads: the device's
    `process_env` names it,
    a process that imported torch first runs its models in fresh interpreters, and the MPS
    device refuses to start without it (instead of recording fallbacks that never happen)."""
    from runners import devices
    from runners.devices.mps import FALLBACK_ENV, MpsDevice
    from runners.supervisor import _context, fresh_interpreter

    def start_method(device: str) -> str:  # how the supervisor starts that device's children
        return _context(fresh_interpreter(device, {})).get_start_method()

    assert devices.process_env("mps") == {FALLBACK_ENV: "1"}
    assert devices.process_env("mps", {"strict": True}) == {}
    assert devices.process_env("cpu") == {}
    monkeypatch.delenv(FALLBACK_ENV, raising=False)
    with pytest.raises(DeviceError, match="before torch was imported"):
        MpsDevice().setup()
    MpsDevice(strict=True).setup()  # strict: ops without a kernel raise, as PyTorch does
    monkeypatch.setattr(devices, "_SET_AFTER_TORCH", set())
    from runners.devices.cpu import CpuDevice

    before_torch = {"HFSWEEP_TEST_BEFORE_TORCH": "1"}
    monkeypatch.setattr(CpuDevice, "process_env", classmethod(lambda cls, o=None: before_torch))
    monkeypatch.delenv("HFSWEEP_TEST_BEFORE_TORCH", raising=False)
    assert start_method("cpu") == "spawn"  # torch is loaded here
    assert os.environ["HFSWEEP_TEST_BEFORE_TORCH"] == "1"  # inherited by what starts now
    monkeypatch.setattr(CpuDevice, "process_env", classmethod(lambda cls, o=None: {}))
    assert start_method("cpu") == "fork"


def test_a_process_without_torch_sets_the_switch_and_forks() -> None:
    code = textwrap.dedent(
        """
        import os, sys
        from runners.devices import prepare_process_env
        assert "torch" not in sys.modules
        print(prepare_process_env("mps"), os.environ["PYTORCH_ENABLE_MPS_FALLBACK"])
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTORCH_ENABLE_MPS_FALLBACK"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "1"]


FORKED_CHECK = """
import json, sys
import torch
from runners import preflight
from runners.preflight import DeviceCheckError, check_device

def fresh(*args):
    sys.exit("a fresh interpreter, not a fork")

preflight._fresh = fresh
report = check_device("neuron", {"profile": "torch-mlir", "compile_mode": "eager"})
cpu = check_device("cpu")
try:
    check_device("neuron", {"compile_mode": "lazy"})
except DeviceCheckError as exc:
    error = [exc.message, bool(exc.hint), exc.exit_code]
print(json.dumps([report.device, report.emulated, report.profile, report.compile_mode,
                  cpu.emulated, error, torch._C._get_privateuse1_backend_name()]))
"""


@pytest.mark.slow
@forked
def test_device_check_before_a_sweep() -> None:
    """One check in a child forked from a process that has torch loaded and no device set up
    (as a `--local` driver or the op sweep's is): the device set up, one op and its backward;
    no fresh interpreter is started, and no device stays set up in the parent. The parent is a
    process of its own forked from this `@forked` test's (tests/warm_fork.py), which never ran
    a backward pass: a test worker may have run one in-process already, after which no neuron
    backend can be installed in its forks."""
    done = run_code(FORKED_CHECK)
    assert done.returncode == 0, done.stderr[-3000:]
    device, emulated, profile, mode, cpu_emulated, error, backend = json.loads(
        done.stdout.strip().splitlines()[-1]
    )
    assert (device, emulated, profile, mode) == ("neuron", True, "torch-mlir", "eager")
    assert cpu_emulated is False
    message, hint, exit_code = error
    assert "cannot run models" in message and hint and exit_code == 3
    assert backend == "privateuseone"  # none stayed in the parent


FRESH_CHECK = """
import json, sys
from runners.preflight import DeviceCheckError, check_device
report = check_device("neuron", {"profile": "torch-mlir"})
try:
    check_device("neuron", {"compile_mode": "lazy"})
except DeviceCheckError as exc:
    error = exc.message
print(json.dumps([report.profile, report.emulated, error, "torch" in sys.modules]))
"""


@pytest.mark.slow
def test_a_driver_without_torch_checks_in_a_fresh_interpreter_and_stays_without() -> None:
    """A Ray driver never imports torch: its check runs in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", FRESH_CHECK], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    profile, emulated, error, torch_here = json.loads(done.stdout.strip().splitlines()[-1])
    assert (profile, emulated, torch_here) == ("torch-mlir", True, False)
    assert "cannot run models" in error and "lazy" in error


def test_a_forked_check_that_hangs_or_dies_is_one_device_error(monkeypatch) -> None:
    """The child is forked after the patches below: it hangs (never answers) or dies (exits
    without a word); each is one DeviceCheckError (exit 3), and the child is gone."""
    from runners import preflight
    from runners.preflight import DeviceCheckError, check_device

    monkeypatch.setattr(preflight, "_fresh", lambda *a: pytest.fail("a fresh interpreter"))

    def hang(name, options):
        time.sleep(3600)

    monkeypatch.setattr(preflight, "probe", hang)
    with pytest.raises(DeviceCheckError, match="did not finish in 0.5 s") as info:
        check_device("cpu", timeout_s=0.5)
    assert info.value.exit_code == 3 and not multiprocessing.active_children()

    def die(name, options):
        os._exit(7)

    monkeypatch.setattr(preflight, "probe", die)
    with pytest.raises(DeviceCheckError, match=r"died before reporting \(exit 7\)"):
        check_device("cpu")
    assert not multiprocessing.active_children()


def test_a_driver_killed_while_its_check_runs_takes_the_check_with_it(tmp_path) -> None:
    """A driver (torch loaded: the check is forked) is SIGKILLed once its check is inside its
    probe (the probe wrote its pid, then waits): the check dies with it (PR_SET_PDEATHSIG)
    rather than running on, an orphan. The kill's moment is that file, not a time."""
    from tests.kill_support import alive, wait_dead

    script = textwrap.dedent(
        """
        import os, sys, time
        import torch
        from runners import preflight

        def probe(name, options):
            with open(sys.argv[1] + ".tmp", "w") as fh:
                fh.write(str(os.getpid()))
            os.rename(sys.argv[1] + ".tmp", sys.argv[1])
            time.sleep(3600)

        preflight.probe = probe
        preflight._fresh = lambda *a: sys.exit("a fresh interpreter, not a fork")
        preflight.check_device("cpu", timeout_s=3600)
        """
    )
    pid_file = tmp_path / "check.pid"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    driver = subprocess.Popen([sys.executable, "-c", script, str(pid_file)], cwd=ROOT, env=env)
    try:
        deadline = time.monotonic() + 600  # a guard against a hang, not a speed
        while not pid_file.exists():
            assert driver.poll() is None, f"the driver ended (exit {driver.returncode})"
            assert time.monotonic() < deadline, "the check never reached its probe"
            time.sleep(0.05)
        check = int(pid_file.read_text())
        assert check != driver.pid and alive(check)
    finally:
        driver.kill()
        driver.wait()
    assert wait_dead(check), "the device check outlived its driver"
