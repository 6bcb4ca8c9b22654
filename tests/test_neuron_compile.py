"""The `neuron` torch.compile backend as TorchNeuron's: compile modes (raise by default, eager,
partition), `dynamic=False` with recompiles counted, graphs and graph breaks, every verdict with
its evidence (a failure names the op and `raises`; an op nothing decides is taken to lower and
recorded as unverified), and backward traces on the device that raise (once a process abort)."""

from __future__ import annotations

import pytest
import torch

from runners.devices.neuron.compiler import (
    UnlowerableOpError,
    check_graph,
    compile_report,
    resolve_compile_mode,
    short_reason,
)
from runners.devices.neuron.emulated import NeuronEmulatedDevice
from runners.stages.core.compile import RecompileWatch
from runners.stages.engine import failing_op
from tests.conftest import TINY_LLAMA
from tests.neuron_support import forked, tiny_model
from tests.warm_fork import run_cli, run_code

POSITIVE = ("registered", "decomposed", "tested", "torch-mlir")  # evidence that an op lowers


@pytest.fixture(scope="module")
def neuron() -> NeuronEmulatedDevice:
    return NeuronEmulatedDevice()  # set up inside the forked test (see tests/neuron_support.py)


class Planted(torch.nn.Module):
    """Linear layers around a boolean-mask `index_put` (TorchNeuron's compile raises on it:
    decompositions.py line 1168), an op no evidence decides (`unverified`: digamma), and an
    optional graph break."""

    def __init__(self, graph_break: bool = False, planted: bool = True, unverified: bool = False):
        super().__init__()
        self.first = torch.nn.Linear(8, 8)
        self.second = torch.nn.Linear(8, 8)
        self.graph_break = graph_break
        self.planted = planted
        self.unverified = unverified

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.first(x).abs() + 1
        if self.planted:  # rows whose first feature is large are reset (8 values each)
            h = h.index_put((h[:, 0] > 1.5,), torch.zeros(8, device=h.device))
        if self.unverified:
            h = torch.digamma(h)
        if self.graph_break:
            torch._dynamo.graph_break()
        return self.second(h).sum()


def _cause(error: BaseException) -> BaseException:
    """Dynamo wraps backend errors in BackendCompilerFailed, keeping ours as `inner_exception`."""
    return getattr(error, "inner_exception", None) or error


@forked
def test_raise_mode_fails_naming_the_unlowerable_op(neuron: NeuronEmulatedDevice) -> None:
    """TorchNeuron's released default: a graph it cannot lower raises; the row's failing op is
    the op, and the op is recorded as a compile fallback (what blocks the compile)."""
    assert neuron.compile_mode == "raise"
    model = neuron.prepare_model(Planted())
    with (
        compile_report() as report,
        neuron.record_fallbacks() as log,
        pytest.raises(Exception) as info,
    ):
        torch.compile(model, backend="neuron", dynamic=False)(torch.randn(4, 8).to("neuron"))
    cause = _cause(info.value)
    assert isinstance(cause, UnlowerableOpError)
    assert cause.op == "aten::index_put" and "aten::index_put" in str(info.value)
    assert cause.evidence == "raises" and "Boolean index_put" in str(cause)
    assert failing_op(info.value) == "aten::index_put"
    assert "aten::index_put" in log.compile_ops
    assert report.mode == "raise" and report.unlowerable["aten::index_put"] == 1
    assert report.row_columns()["compile_evidence"] == "raises"


@forked
def test_an_op_nothing_decides_lowers_unverified(neuron: NeuronEmulatedDevice) -> None:
    """`none` is not a confident failure: the compile passes, and the stage's columns say
    which ops rest on nothing (the reports count the model in the band's upper bound)."""
    model = neuron.prepare_model(Planted(planted=False, unverified=True))
    with neuron.compiling() as seen, neuron.record_fallbacks() as log:
        torch.compile(model, backend="neuron", dynamic=False)(torch.randn(4, 8).to("neuron"))
    assert seen["compile_evidence"] == "none"
    assert seen["unverified_ops"][0] == "aten::digamma"
    assert "aten::polygamma" not in seen["unverified_ops"]  # no backward ran
    assert log.compile_ops == {}
    plain = neuron.prepare_model(Planted(planted=False))
    with neuron.compiling() as seen, neuron.record_fallbacks():
        torch.compile(plain, backend="neuron", dynamic=False)(torch.randn(4, 8).to("neuron"))
    assert seen["unverified_ops"] is None
    assert seen["compile_evidence"] in POSITIVE


@forked
def test_eager_mode_runs_the_graph_eagerly(neuron: NeuronEmulatedDevice) -> None:
    """TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=0 (or asked for): the graph runs op by op on
    the device, so index_put runs as any eager op; numerics as on the CPU."""
    torch.manual_seed(0)
    reference = Planted()
    eager = NeuronEmulatedDevice(compile_mode="eager")
    try:
        model = eager.prepare_model(Planted())
        model.load_state_dict(reference.state_dict())
        x = torch.randn(4, 8)
        with compile_report() as report, eager.record_fallbacks() as log:
            loss = torch.compile(model, backend="neuron", dynamic=False)(x.to("neuron"))
            loss.backward()
    finally:
        neuron.activate()
    expected = reference(x)
    expected.backward()
    assert abs(float(loss.detach().cpu()) - float(expected.detach())) < 1e-5
    for a, b in zip(model.parameters(), reference.parameters(), strict=True):
        assert float((a.grad.cpu() - b.grad).abs().max()) < 1e-5
    assert report.mode == "eager" and report.eager_graphs == 2  # forward and backward graphs
    assert report.forward_graphs == 1 and report.backward_graphs == 1
    assert report.unlowerable["aten::index_put"] == 2  # forward, and its gradient's mask
    assert "aten::index_put" in log.compile_ops
    assert "aten::addmm" not in report.unlowerable


@forked
def test_partition_mode_counts_partitions(neuron: NeuronEmulatedDevice) -> None:
    partition = NeuronEmulatedDevice(compile_mode="partition")
    try:
        model = partition.prepare_model(Planted())
        with compile_report() as report, partition.record_fallbacks():
            torch.compile(model, backend="neuron")(torch.randn(4, 8).to("neuron")).backward()
    finally:
        neuron.activate()
    # index_put splits the forward graph's lowerable ops in two: before and after it
    assert report.mode == "partition" and report.partition_count >= 3
    assert report.eager_graphs == 0


@forked
def test_strict_fails_in_every_mode(neuron: NeuronEmulatedDevice) -> None:
    strict = NeuronEmulatedDevice(strict=True, compile_mode="eager")
    model = neuron.prepare_model(Planted())
    try:
        with compile_report(), strict.record_fallbacks(), pytest.raises(Exception) as info:
            torch.compile(model, backend="neuron")(torch.randn(2, 8).to("neuron"))
    finally:
        neuron.activate()
    cause = _cause(info.value)
    assert isinstance(cause, UnlowerableOpError) and cause.op == "aten::index_put"
    assert "strict" in str(cause)


@forked
def test_compile_counts_graph_breaks(neuron: NeuronEmulatedDevice) -> None:
    model = neuron.prepare_model(Planted(graph_break=True, planted=False))
    with compile_report() as report, neuron.record_fallbacks():
        torch.compile(model, backend="neuron")(torch.randn(2, 8).to("neuron")).backward()
    assert report.graph_count == 2
    assert report.graph_break_count == 1
    assert len(report.break_reasons) == 1 and "\n" not in report.break_reasons[0]


@forked
def test_dynamic_false_makes_a_new_shape_a_counted_recompile(
    neuron: NeuronEmulatedDevice,
) -> None:
    model = neuron.prepare_model(Planted(planted=False))
    watch = RecompileWatch("neuron")
    with compile_report() as report, neuron.record_fallbacks():
        compiled = torch.compile(model, backend=watch, dynamic=False)
        compiled(torch.randn(2, 8).to("neuron")).backward()
        compiled(torch.randn(2, 8).to("neuron")).backward()  # same shape: cached
        assert watch.recompiles == 0 and report.recompile_count == 0
        compiled(torch.randn(3, 8).to("neuron")).backward()  # a new shape: a new graph
    assert watch.recompiles == 1 and report.recompile_count == 1
    assert report.graph_count == 2


@forked
def test_tiny_llama_compiles_to_one_lowerable_graph(neuron: NeuronEmulatedDevice) -> None:
    """Under TorchNeuron's profile a tiny Llama's graphs lower entirely (fused attention too):
    the compile passes in the default raise mode, with nothing left on the CPU."""
    model = neuron.prepare_model(tiny_model("llama", use_cache=False))
    ids = torch.randint(0, 128, (2, 8)).to("neuron")
    with compile_report() as report, neuron.record_fallbacks() as log:
        out = torch.compile(model, backend="neuron", dynamic=False)(input_ids=ids, labels=ids)
        out.loss.backward()
    assert report.graph_count == 1 and report.graph_break_count == 0
    assert report.backward_graphs == 1
    assert report.unlowerable == {} and log.compile_ops == {} and log.ops == {}


@forked
def test_backward_trace_that_raises_on_the_device_does_not_abort(
    neuron: NeuronEmulatedDevice,
) -> None:
    """Qwen3-VL's deepstack merge (`h[mask] = h[mask] + e`): tracing its backward on the device
    raises inside the autograd engine (nonzero has a data-dependent shape). That used to
    abort the process (SIGIOT in compile, emulated device only); now Dynamo gets the error and
    handles it as on the CPU."""

    def merge(h: torch.Tensor, mask: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        h = h.clone()
        h[mask, :] = h[mask, :] + e
        return h

    torch.manual_seed(0)
    h = torch.randn(6, 4)
    e = torch.randn(3, 4)
    mask = torch.tensor([1, 0, 1, 0, 0, 1], dtype=torch.bool)
    leaves = [t.to("neuron").requires_grad_() for t in (h, e)]
    with compile_report(), neuron.record_fallbacks():
        out = torch.compile(merge, backend="neuron")(leaves[0], mask.to("neuron"), leaves[1])
        out.square().sum().backward()
    cpu = [t.clone().requires_grad_() for t in (h, e)]
    merge(cpu[0], mask, cpu[1]).square().sum().backward()
    for device_leaf, cpu_leaf in zip(leaves, cpu, strict=True):
        torch.testing.assert_close(device_leaf.grad.cpu(), cpu_leaf.grad)


def test_check_graph_gives_every_op_its_evidence() -> None:
    def fn(x, mask):
        y = torch.sign(x).exp() + torch.digamma(x)
        return y.index_put((mask,), torch.zeros(3, 2))

    gm = torch.fx.experimental.proxy_tensor.make_fx(fn)(
        torch.randn(4, 2), torch.tensor([True, False, True, True])
    )
    checked = check_graph(gm)
    evidence = {v.op: str(v.evidence) for v in checked.verdicts}
    assert evidence["aten::sign"] == "registered"
    assert evidence["aten::digamma"] == "none" and checked.unverified == {"aten::digamma": 1}
    assert evidence["aten::index_put"] == "raises"
    assert checked.unlowerable == {"aten::index_put": 1}
    assert "Boolean index_put" in checked.reasons["aten::index_put"]
    assert checked.partitions == 1  # index_put ends the graph: one lowerable partition before
    # one value for every masked row goes through `torch.where`: no raise (lines 1072-1108)
    where = torch.fx.experimental.proxy_tensor.make_fx(
        lambda x, m: x.index_put((m,), torch.tensor(0.0))
    )(torch.randn(4, 2), torch.tensor([True, False, True, True]))
    assert check_graph(where).unlowerable == {}


def test_short_reason() -> None:
    text = "Call to foo\n  Explanation: it cannot be traced\n  Hint: do not"
    assert short_reason(text) == "Call to foo: it cannot be traced"
    assert short_reason("one line") == "one line"


def test_compile_mode_follows_torchneuron_variable(monkeypatch) -> None:
    monkeypatch.delenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", raising=False)
    assert resolve_compile_mode() == "raise"  # the released default
    monkeypatch.setenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", "0")
    assert resolve_compile_mode() == "eager"
    monkeypatch.setenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", "1")
    assert resolve_compile_mode() == "raise"
    assert resolve_compile_mode("partition") == "partition"  # asked for: wins
    from ground.errors import DeviceError

    with pytest.raises(DeviceError, match="Unknown compile mode"):
        resolve_compile_mode("lazy")


@forked
def test_backend_python_is_not_traced_by_dynamo(neuron: NeuronEmulatedDevice) -> None:
    """Eager code at a graph break (here `str(tensor)`) calls the backend's Python kernels with
    Dynamo's frame hook on; they must not be compiled as user code."""

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, str]:
        y = x.abs() + 1
        text = str(y)
        return y.cos(), text

    x = torch.randn(3)
    with compile_report() as report, neuron.record_fallbacks():
        out, text = torch.compile(fn, backend="neuron")(x.to("neuron"))
    assert text.startswith("tensor(")
    assert torch.allclose(out.cpu(), (x.abs() + 1).cos())
    assert report.graph_count == 2 and report.graph_break_count == 1


@pytest.mark.slow
@forked
def test_check_cli_reports_the_compile_mode(tmp_path) -> None:
    """`hfsweep check` on the emulated device: the compile row says which mode ran, and what
    its verdicts rest on, under the default profile and under torch-mlir's (whose evidence is
    the compiler's, whatever runs natively in eager mode). Each check is a process of its own,
    forked from this warm one (tests/warm_fork.py)."""
    import json

    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY_LLAMA))
    for mode, profile in (("raise", ["--profile", "torch-mlir"]), ("eager", [])):
        done = run_cli(
            ["check", str(config), "--device", "neuron"]
            + ["--stages", "load,compile", "--compile-mode", mode, *profile, "--format", "json"],
            env={"HF_HUB_OFFLINE": "1"},
        )
        assert done.returncode == 0, done.stderr[-2000:]
        rows = {r["stage"]: r for r in json.loads(done.stdout)["stages"]}
        assert rows["compile"]["status"] == "pass", rows["compile"]
        assert rows["compile"]["compile_mode"] == mode
        assert rows["compile"]["recompile_count"] == 0
        # every verdict rests on evidence: no unverified op in a tiny Llama's graphs
        assert rows["compile"]["compile_evidence"] in POSITIVE
        assert rows["compile"]["unverified_ops"] is None


@forked
def test_emulator_refuses_another_torch() -> None:
    """In a process of its own (forked: tests/warm_fork.py) whose torch says it is 2.13."""
    done = run_code(
        """
        import torch
        torch.__version__ = "2.13.0"
        from ground.errors import DeviceError
        from runners.devices.neuron.emulated import NeuronEmulatedDevice
        try:
            NeuronEmulatedDevice().setup()
        except DeviceError as exc:
            print("refused:", exc.message, "|", exc.hint)
        """
    )
    assert done.returncode == 0, done.stderr
    assert "refused:" in done.stdout and "2.14" in done.stdout
