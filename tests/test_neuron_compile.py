"""The `neuron` torch.compile backend: unlowerable ops, partitions, graphs and graph breaks."""

from __future__ import annotations

import pytest
import torch

from runners.devices.neuron_emulated import NeuronEmulatedDevice
from runners.devices.profiles import DeviceProfile
from runners.neuron_compile import check_graph, compile_report, short_reason
from tests.neuron_support import forked, tiny_model


@pytest.fixture(scope="module")
def neuron() -> NeuronEmulatedDevice:
    return NeuronEmulatedDevice()  # set up inside the forked test (see tests/neuron_support.py)


class Planted(torch.nn.Module):
    """Linear layers around an op no Torch-MLIR profile lowers (digamma), and a graph break."""

    def __init__(self, graph_break: bool):
        super().__init__()
        self.first = torch.nn.Linear(8, 8)
        self.second = torch.nn.Linear(8, 8)
        self.graph_break = graph_break

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.digamma(self.first(x).abs() + 1)
        if self.graph_break:
            torch._dynamo.graph_break()
        return self.second(h).sum()


@forked
def test_compile_reports_planted_unlowerable_op(neuron: NeuronEmulatedDevice) -> None:
    torch.manual_seed(0)
    reference = Planted(graph_break=False)
    model = neuron.prepare_model(Planted(graph_break=False))
    model.load_state_dict(reference.state_dict())
    x = torch.randn(4, 8)
    with compile_report() as report, neuron.record_fallbacks() as log:
        compiled = torch.compile(model, backend=neuron.compile_backend)
        loss = compiled(x.to("neuron"))
        loss.backward()
    expected = reference(x)
    expected.backward()
    assert abs(float(loss.detach().cpu()) - float(expected.detach())) < 1e-5
    assert report.graph_count == 1 and report.graph_break_count == 0
    assert report.forward_graphs == 1 and report.backward_graphs == 1
    assert report.unlowerable["aten::digamma"] == 1
    assert "aten::polygamma" in report.unlowerable  # digamma's derivative, in the backward graph
    assert "aten::digamma" in log.compile_ops and log.compile_ops["aten::digamma"].count == 1
    assert "aten::addmm" not in report.unlowerable
    # digamma splits the forward graph's lowerable ops in two: before and after it
    assert report.partition_count >= 3
    assert report.profile == "torch-mlir"
    for a, b in zip(model.parameters(), reference.parameters(), strict=True):
        assert float((a.grad.cpu() - b.grad).abs().max()) < 1e-5


@forked
def test_compile_counts_graph_breaks(neuron: NeuronEmulatedDevice) -> None:
    model = neuron.prepare_model(Planted(graph_break=True))
    with compile_report() as report, neuron.record_fallbacks():
        torch.compile(model, backend="neuron")(torch.randn(2, 8).to("neuron")).backward()
    assert report.graph_count == 2
    assert report.graph_break_count == 1
    assert len(report.break_reasons) == 1 and "\n" not in report.break_reasons[0]


@forked
def test_tiny_llama_compiles_to_one_graph(neuron: NeuronEmulatedDevice) -> None:
    model = neuron.prepare_model(tiny_model("llama", use_cache=False))
    ids = torch.randint(0, 128, (2, 8)).to("neuron")
    with compile_report() as report, neuron.record_fallbacks() as log:
        out = torch.compile(model, backend="neuron")(input_ids=ids, labels=ids)
        out.loss.backward()
    assert report.graph_count == 1 and report.graph_break_count == 0
    assert report.backward_graphs == 1
    assert set(log.compile_ops) == set(report.unlowerable)


def test_check_graph_against_a_profile() -> None:
    def fn(x):
        return torch.sin(x).exp() + torch.cos(x)

    gm = torch.fx.experimental.proxy_tensor.make_fx(fn)(torch.randn(3))
    only_sin = DeviceProfile.from_ops("sin", ["aten::sin", "aten::add.Tensor"])
    unlowerable, partitions = check_graph(gm, only_sin)
    assert unlowerable == {"aten::exp": 1, "aten::cos": 1}
    assert partitions >= 1
    everything = DeviceProfile.from_ops("all", ["aten::sin", "aten::exp", "aten::cos", "aten::add"])
    assert check_graph(gm, everything) == ({}, 1)


def test_short_reason() -> None:
    text = "Call to foo\n  Explanation: it cannot be traced\n  Hint: do not"
    assert short_reason(text) == "Call to foo: it cannot be traced"
    assert short_reason("one line") == "one line"


@forked
def test_strict_compile_fails_naming_the_unlowerable_op(neuron: NeuronEmulatedDevice) -> None:
    from runners.devices.neuron_emulated import FallbackDisallowed

    strict = NeuronEmulatedDevice(strict=True)
    model = neuron.prepare_model(Planted(graph_break=False))
    try:
        with compile_report(), strict.record_fallbacks(), pytest.raises(Exception) as info:
            torch.compile(model, backend="neuron")(torch.randn(2, 8).to("neuron"))
    finally:
        neuron.activate()
    error = info.value
    # Dynamo wraps backend errors in BackendCompilerFailed, keeping ours as `inner_exception`
    cause = error if isinstance(error, FallbackDisallowed) else error.inner_exception
    assert isinstance(cause, FallbackDisallowed)
    assert cause.op == "aten::digamma"
    assert "aten::digamma" in str(error)


@forked
def test_backend_python_is_not_traced_by_dynamo(neuron: NeuronEmulatedDevice) -> None:
    """Eager code at a graph break (here `str(tensor)`) calls the backend's Python kernels with
    Dynamo's frame hook on; they must not be compiled as user code."""

    def fn(x: torch.Tensor) -> tuple[torch.Tensor, str]:
        y = torch.digamma(x.abs() + 1)
        text = str(y)
        return y.cos(), text

    x = torch.randn(3)
    with compile_report() as report, neuron.record_fallbacks():
        out, text = torch.compile(fn, backend="neuron")(x.to("neuron"))
    assert text.startswith("tensor(")
    assert torch.allclose(out.cpu(), torch.digamma(x.abs() + 1).cos())
    assert report.graph_count == 2 and report.graph_break_count == 1
