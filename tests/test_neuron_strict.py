"""Where TorchNeuron is stricter than a plain host run, the emulated device is too (issue 17).

Each rule cites the snapshot (github.com/parmoham-aws/test-repo-parmoham at 98154b8), and each
test fails without its rule:
- a native op given a non-scalar host tensor raises, as the default `can_handle` does
  (python_ops/base.py lines 49-87, not caught at lines 720-721); 0-dim host tensors are scalars;
- `_grouped_mm` without offsets raises the TypeError its `validate_offs` raises;
- a Torch-MLIR kernel computes float64 as float32 and int64 as int32, and returns the dtypes the
  op gives for the original inputs (dtype_autocast.py; kernel.py lines 479-509); other Python
  kernels return float32 (base.py);
- a Python kernel's outputs are fresh and contiguous (kernel.py `io_tensor.empty`,
  kernels/xla_kernel.py `torch.empty`), so a later composite that views them works (the
  diffusers VAE's group norm after a permuted residual add), eager and compiled.
"""

from __future__ import annotations

import pytest
import torch

from runners.devices.neuron import rules
from runners.devices.neuron.dispatch import HostArgumentError
from runners.devices.neuron.emulated import NeuronEmulatedDevice
from runners.devices.neuron.profiles import load_profile
from tests.neuron_support import forked


@pytest.fixture(scope="module")
def neuron() -> NeuronEmulatedDevice:
    return NeuronEmulatedDevice()  # set up inside the forked test (see tests/neuron_support.py)


def test_the_rules_data_comes_from_the_snapshot() -> None:
    profile = load_profile()
    assert profile.raises_on_host_args("aten::add.Tensor")  # AddXLAImpl calls base can_handle
    assert profile.raises_on_host_args("aten::addmm")  # a Torch-MLIR kernel
    assert not profile.raises_on_host_args("aten::index.Tensor")  # its own can_handle
    assert profile.is_mlir_kernel("aten::exp") and not profile.is_mlir_kernel("aten::gelu")
    assert profile.has_fresh_outputs("aten::gelu") and profile.has_fresh_outputs("aten::exp")
    assert not profile.has_fresh_outputs("aten::clone")  # C++ m.impl: keeps the layout


@forked
def test_a_host_tensor_argument_raises_as_can_handle(neuron: NeuronEmulatedDevice) -> None:
    a = torch.ones(4).to("neuron")
    with neuron.record_fallbacks(), pytest.raises(HostArgumentError) as info:
        a + torch.ones(4)
    assert info.value.op == "aten::add.Tensor"
    assert "Non-scalar tensor arg1 is on cpu device, expected neuron" in str(info.value)
    with neuron.record_fallbacks(), pytest.raises(HostArgumentError, match=r"arg0\[1\]"):
        torch.cat([a, torch.ones(4)])
    with neuron.record_fallbacks() as log:
        scalar = a + torch.tensor(2.0)  # a 0-dim host tensor is a scalar: allowed
        picked = a[torch.tensor([0, 2])]  # index.Tensor: its own can_handle takes host indices
    assert scalar.cpu().tolist() == [3.0] * 4 and picked.cpu().tolist() == [1.0, 1.0]
    assert "aten::add.Tensor" in log.executed


@forked
def test_grouped_mm_without_offsets_raises(neuron: NeuronEmulatedDevice, monkeypatch) -> None:
    a, b = torch.randn(128, 8).to("neuron"), torch.randn(2, 8, 4).to("neuron")
    with neuron.record_fallbacks(), pytest.raises(TypeError, match="without offs") as info:
        torch._grouped_mm(a, b)
    assert info.value.op == "aten::_grouped_mm"  # type: ignore[attr-defined]
    monkeypatch.setenv(rules.SKIP_PRECONDITIONS_ENV, "1")
    with neuron.record_fallbacks() as log, pytest.raises(RuntimeError):
        torch._grouped_mm(a, b)  # declined: the CPU fallback runs it, and PyTorch raises
    assert "offs" in log.declined["aten::_grouped_mm"]


def test_grouped_mm_without_offsets_raises_in_compile() -> None:
    """decompositions.py line 1490 indexes the offsets of a 2-D x 3-D grouped matmul."""
    graph = torch.fx.Graph()
    a, b = graph.placeholder("a"), graph.placeholder("b")
    a.meta["val"], b.meta["val"] = torch.empty(128, 8, device="meta"), torch.empty(2, 8, 4)
    node = graph.call_function(torch.ops.aten._grouped_mm.default, (a, b))
    assert "offs" in (rules.compile_raise_reason("aten::_grouped_mm", node) or "")
    offs = graph.placeholder("offs")
    with_offs = graph.call_function(torch.ops.aten._grouped_mm.default, (a, b, offs))
    assert rules.compile_raise_reason("aten::_grouped_mm", with_offs) is None


@forked
def test_torch_mlir_kernels_return_the_original_dtypes(neuron: NeuronEmulatedDevice) -> None:
    x = torch.tensor([1.0 + 1e-12, 2.0], dtype=torch.float64)
    big = torch.tensor([2**31 - 1, 1], dtype=torch.int64)
    assert torch.bitwise_left_shift(big, 1).tolist() == [2**32 - 2, 2]  # int64 on the CPU
    with neuron.record_fallbacks() as log:
        mlir = torch.exp(x.to("neuron"))  # a Torch-MLIR kernel: float32 inside, float64 out
        xla = torch.nn.functional.gelu(x.to("neuron"))  # an XLA kernel: base.py, float32 out
        shifted = torch.bitwise_left_shift(big.to("neuron"), 1)  # int64 computed as int32
        into = torch.empty(2, dtype=torch.float64).to("neuron")
        torch.exp(x.float().to("neuron"), out=into)  # a float64 out: taken (validate_output_dtypes)
    assert mlir.dtype == torch.float64
    assert mlir.cpu().tolist() == torch.exp(x.float()).double().tolist()
    assert xla.dtype == torch.float32
    assert shifted.dtype == torch.int64 and shifted.cpu().tolist() == [-2, 2]
    assert into.cpu().tolist() == torch.exp(x.float()).double().tolist()
    assert "aten::exp" in log.executed and not log.ops


def _vae_residual(x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """diffusers' attention block: tokens back to an image (a permuted view), the residual
    added, rescaled, then a group norm (PyTorch's composite views its input)."""
    image = x.transpose(1, 2).reshape(2, 32, 4, 4)
    return torch.nn.functional.group_norm((image + residual) / 1.0, 8)


@forked
def test_python_kernels_return_contiguous_outputs(neuron: NeuronEmulatedDevice) -> None:
    torch.manual_seed(0)
    x, residual = torch.randn(2, 16, 32), torch.randn(2, 32, 4, 4)
    permuted = x.transpose(1, 2).reshape(2, 32, 4, 4)
    assert not (permuted + residual).is_contiguous()  # the CPU keeps the permuted layout
    on_device = [t.to("neuron") for t in (x, residual)]
    with neuron.record_fallbacks():
        assert (on_device[0].transpose(1, 2).reshape(2, 32, 4, 4) + on_device[1]).is_contiguous()
        eager = _vae_residual(*on_device)
        compiled = torch.compile(_vae_residual, backend="neuron", dynamic=False)(*on_device)
    expected = _vae_residual(x, residual)
    torch.testing.assert_close(eager.cpu(), expected)
    torch.testing.assert_close(compiled.cpu(), expected)


def test_a_mixture_of_experts_routes_rows_as_a_padded_batch() -> None:
    """Tiny inputs meet the size preconditions a real (padded) batch meets: a mixture of
    experts routes a multiple of 128 rows (tokens x experts per token)."""
    from types import SimpleNamespace

    from model_configs.libraries.transformers.build import experts_per_token
    from model_configs.tiny_inputs import BATCH, ROUTED_ROWS_MULTIPLE, SEQ, routed_seq

    for k in (1, 2, 3, 6, 8):
        seq = routed_seq(SEQ, k)
        assert seq >= SEQ and (BATCH * seq * k) % ROUTED_ROWS_MULTIPLE == 0, k
    assert routed_seq(SEQ, 2) == 32
    assert experts_per_token(SimpleNamespace(num_local_experts=4, num_experts_per_tok=2)) == 2
    text = SimpleNamespace(n_routed_experts=8, num_experts_per_tok=3)
    assert experts_per_token(SimpleNamespace(text_config=text)) == 3
    assert experts_per_token(SimpleNamespace(top_k=50)) is None  # a sampling setting, no experts


@forked
def test_a_tiny_mixtral_fails_on_its_routing_offsets_not_its_size(
    neuron: NeuronEmulatedDevice, monkeypatch
) -> None:
    """The failure names what a real input meets too: the per-expert routing offsets (a real
    batch's router spreads tokens the same way), not the tiny input's row count; with
    TORCH_NEURONX_SKIP_OP_PRECONDITIONS=1 (the released beta's behaviour is not known) it runs."""
    from model_configs import build
    from model_configs.resolve import resolve_entry
    from model_configs.shrink import shrink
    from model_configs.spec import CatalogEntry

    entry = CatalogEntry(model_id="t/mixtral", library="transformers", model_type_hint="mixtral")
    spec = shrink(resolve_entry(entry, offline=True))
    torch.manual_seed(0)
    model = neuron.prepare_model(build.build_model(spec))
    inputs = neuron.to_device(build.make_inputs(spec, model, seed=0, purpose="train"))
    with neuron.record_fallbacks(), pytest.raises(ValueError) as info, torch.no_grad():
        model(**inputs)
    assert "per-expert routing offsets" in str(info.value), str(info.value)
    assert info.value.op == "aten::_grouped_mm"  # type: ignore[attr-defined]
    monkeypatch.setenv(rules.SKIP_PRECONDITIONS_ENV, "1")
    with neuron.record_fallbacks() as log, torch.no_grad():
        model(**inputs)
    assert log.classes["aten::_grouped_mm"] == "conditional"
