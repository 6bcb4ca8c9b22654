"""The default profile (TorchNeuron's registrations) and the snapshot's rules: classification from
the data alone, and the emulated device applying each rule at run time (views, routed-to-CPU
ops, conditional ops, float64 computed as float32, complex declined, the SDPA selection)."""

from __future__ import annotations

import pytest
import torch

from runners.devices.neuron.emulated import NeuronEmulatedDevice
from runners.devices.neuron.profiles import (
    PROFILE_DIR,
    DeviceProfile,
    OpClass,
    classify,
    load_profile,
)
from tests.conftest import SHARED
from tests.neuron_support import forked


@pytest.fixture(scope="module")
def neuron() -> NeuronEmulatedDevice:
    return NeuronEmulatedDevice()  # set up inside the forked test (see tests/neuron_support.py)


SNAPSHOT_FILES = ("native-ops.txt", "cpu-fallback-explicit.txt", "view-ops-whitelist.txt")


def _ops(path) -> set[str]:
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return {line for line in lines if line}


def test_default_profile_is_the_snapshot_data() -> None:
    profile = load_profile()
    bundled = PROFILE_DIR / profile.name
    assert profile.ops == _ops(bundled / "native-ops.txt") and len(profile.ops) == 400
    assert profile.routed_to_cpu == _ops(bundled / "cpu-fallback-explicit.txt")
    assert profile.views == _ops(bundled / "view-ops-whitelist.txt")
    assert len(profile.routed_to_cpu) == 14 and len(profile.views) == 37
    assert profile.conditional <= profile.ops
    for name in SNAPSHOT_FILES + ("conditional-ops.md",):  # the bundled copies, byte for byte
        shared = SHARED / "data" / "torchneuron" / name
        if shared.exists():
            assert (bundled / name).read_bytes() == shared.read_bytes(), name


@pytest.mark.parametrize(
    "op, expected",
    [
        ("aten::histc", OpClass.NATIVE),
        ("aten::clone", OpClass.NATIVE),
        ("aten::embedding_dense_backward", OpClass.NATIVE),
        ("aten::native_layer_norm_backward", OpClass.NATIVE),
        ("aten::nll_loss_backward.grad_input", OpClass.NATIVE),
        ("aten::_index_put_impl_", OpClass.NATIVE),
        ("aten::add.out", OpClass.NATIVE),
        ("aten::view", OpClass.VIEW),
        ("aten::transpose.int", OpClass.VIEW),  # a view by its schema, whitelisted or not
        ("aten::view_as_real", OpClass.VIEW),
        ("aten::argsort.stable", OpClass.ROUTED_TO_CPU),
        ("aten::select_backward", OpClass.ROUTED_TO_CPU),
        ("aten::_linalg_eigh.eigenvalues", OpClass.ROUTED_TO_CPU),  # the linalg list, any overload
        ("aten::_grouped_mm", OpClass.CONDITIONAL),
        ("aten::_scaled_dot_product_fused_attention_overrideable", OpClass.CONDITIONAL),
        ("aten::digamma.out", OpClass.FALLBACK),
        ("aten::sort.values_stable", OpClass.FALLBACK),  # exact: sort is not registered
    ],
)
def test_classify_from_the_data(op: str, expected: OpClass) -> None:
    assert classify(op) is expected


def test_routed_to_cpu_even_when_a_list_names_it() -> None:
    listed = DeviceProfile.from_ops("linalg", ["aten::_linalg_eigh", "aten::mm"])
    assert listed.declares("aten::_linalg_eigh")
    assert listed.classify("aten::_linalg_eigh") is OpClass.ROUTED_TO_CPU
    assert not listed.is_native("aten::_linalg_eigh")
    assert classify("aten::mm.out", "torch-mlir") is OpClass.NATIVE
    assert classify("aten::clone", "torch-mlir") is OpClass.FALLBACK  # a gap of that list


def test_compile_evidence_comes_from_the_snapshot_first() -> None:
    """Issue 17: each graph op's verdict rests on TorchNeuron's own material first (a kernel's
    traced body, its compile tests, its decomposition table), upstream torch-mlir after; an op
    nothing decides is `none`. The same sets under every profile (the compiler is one)."""
    from runners.devices.neuron.evidence import evidence_sets

    sets = evidence_sets()
    assert sets.positive("aten::sign") == "registered"  # torch_sign's body calls sign
    assert sets.positive("aten::dot") == "registered"
    assert sets.positive("aten::_native_batch_norm_legit_functional") == "tested"
    assert sets.positive("aten::split.Tensor") == "decomposed"  # aten.split: every overload
    assert sets.positive("aten::as_strided") == "decomposed"  # TorchNeuron's own
    assert sets.positive("aten::new_ones") == "torch-mlir"  # macro-registered upstream
    for op in ("aten::digamma", "aten::masked_scatter_backward", "aten::_fft_r2c"):
        assert sets.positive(op) == "none", op
    assert load_profile().hash != load_profile("torch-mlir").hash


@forked
def test_views_are_never_fallbacks(neuron: NeuronEmulatedDevice) -> None:
    empty = NeuronEmulatedDevice(profile=DeviceProfile.from_ops("none", []))
    x = torch.arange(12.0).to("neuron")
    try:
        with empty.record_fallbacks() as log:
            y = x.view(3, 4).t().unsqueeze(0)[..., 1:]
            torch.view_as_real(torch.zeros(2, dtype=torch.complex64).to("neuron"))
            assert y.shape == (1, 4, 2)
    finally:
        neuron.activate()
    assert not log.ops
    assert set(log.classes.values()) == {"view"}


@forked
def test_routed_to_cpu_is_a_fallback(neuron: NeuronEmulatedDevice) -> None:
    a = torch.randn(4, 4)
    a = a @ a.T + torch.eye(4)
    listed = NeuronEmulatedDevice(profile=DeviceProfile.from_ops("linalg", ["aten::_linalg_eigh"]))
    for device in (neuron, listed):
        with device.record_fallbacks() as log:
            values = torch.linalg.eigvalsh(a.to("neuron"))
        assert torch.allclose(values.cpu(), torch.linalg.eigvalsh(a), atol=1e-5)
        assert any(op.startswith("aten::_linalg_eigh") for op in log.ops), log.ops
        assert log.classes[next(iter(log.ops))] == "routed_to_cpu"
    neuron.activate()


@forked
def test_conditional_grouped_mm(neuron: NeuronEmulatedDevice, monkeypatch) -> None:
    """TorchNeuron's `_grouped_mm`: 2-D x 3-D only with rows and offsets aligned to 128 (else
    ValueError, naming the op, as TorchNeuron raises); other shapes run on the CPU."""
    torch.manual_seed(0)
    a, b = torch.randn(256, 8), torch.randn(2, 8, 4)
    aligned = torch.tensor([128, 256], dtype=torch.int32)
    with neuron.record_fallbacks() as log:
        out = torch._grouped_mm(a.to("neuron"), b.to("neuron"), offs=aligned.to("neuron"))
    assert torch.allclose(out.cpu(), torch._grouped_mm(a, b, offs=aligned), atol=1e-5)
    assert log.ops == {} and log.classes["aten::_grouped_mm"] == "conditional"
    ragged = torch.tensor([100, 256], dtype=torch.int32).to("neuron")
    with neuron.record_fallbacks(), pytest.raises(ValueError, match="divisible by 128") as info:
        torch._grouped_mm(a.to("neuron"), b.to("neuron"), offs=ragged)
    assert info.value.op == "aten::_grouped_mm"  # type: ignore[attr-defined]
    monkeypatch.setenv("TORCH_NEURONX_SKIP_OP_PRECONDITIONS", "1")
    with neuron.record_fallbacks() as log:
        torch._grouped_mm(a.to("neuron"), b.to("neuron"), offs=ragged)
    assert log.ops == {}
    monkeypatch.delenv("TORCH_NEURONX_SKIP_OP_PRECONDITIONS")
    batched = torch.randn(2, 4, 8), torch.randn(2, 8, 4)  # 3-D x 3-D: declined
    with neuron.record_fallbacks() as log:
        out = torch._grouped_mm(*(t.to("neuron") for t in batched))
    assert torch.allclose(out.cpu(), torch._grouped_mm(*batched), atol=1e-5)
    assert "aten::_grouped_mm" in log.ops
    assert "3-D x 3-D" in log.declined["aten::_grouped_mm"]


@forked
def test_float64_is_computed_as_float32(neuron: NeuronEmulatedDevice) -> None:
    """python_ops/base.py (non Torch-MLIR kernels): float64 inputs are computed, and returned,
    as float32; a float64 `out` with no float64 input is a TypeError. Torch-MLIR kernels
    return the original dtype (tests/test_neuron_strict.py)."""
    x = torch.tensor([1.0 + 1e-12, 2.0], dtype=torch.float64)
    with neuron.record_fallbacks() as log:
        native = torch.nn.functional.gelu(x.to("neuron"))  # registered: computed in float32
        fallback = torch.digamma(x.to("neuron"))  # not registered: the CPU computes float64
        inplace = x.to("neuron")
        inplace.mul_(3.0)
    assert native.dtype == torch.float32
    assert torch.allclose(native.cpu().double(), torch.nn.functional.gelu(x), rtol=1e-6)
    assert fallback.dtype == torch.float64
    assert torch.equal(fallback.cpu(), torch.digamma(x))
    assert inplace.dtype == torch.float64  # written in place: its dtype stays
    assert inplace.cpu().tolist() == (x.float() * 3.0).double().tolist()
    assert "aten::digamma.out" in log.ops and "aten::gelu" not in log.ops
    with pytest.raises(TypeError, match="float64"):
        torch.ops.aten.gelu.out(
            x.float().to("neuron"), out=torch.empty(2, dtype=torch.float64).to("neuron")
        )


@forked
def test_complex_tensors_are_declined(neuron: NeuronEmulatedDevice) -> None:
    z = torch.tensor([1 + 2j, 3 - 1j], dtype=torch.complex64)
    with neuron.record_fallbacks() as log:
        product = z.to("neuron") * z.to("neuron")
        real = (torch.ones(2) * 2).to("neuron") * 3
    assert torch.equal(product.cpu(), z * z)
    assert torch.equal(real.cpu(), torch.full((2,), 6.0))
    declined = {op for op, why in log.declined.items() if "complex" in why}
    assert declined and declined <= set(log.ops)
    assert all("mul" in op for op in declined)


@pytest.mark.parametrize("shape", ["4d", "3d"])
@forked
def test_sdpa_takes_the_fused_path_only_where_the_rule_says(
    neuron: NeuronEmulatedDevice, shape: str
) -> None:
    torch.manual_seed(0)
    dims = (2, 4, 6, 8) if shape == "4d" else (4, 6, 8)
    q, k, v = (torch.randn(*dims, requires_grad=True) for _ in range(3))
    mask = torch.ones(6, 6, dtype=torch.bool).tril()
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    expected.square().sum().backward()
    leaves = [t.detach().to("neuron").requires_grad_() for t in (q, k, v)]
    with neuron.record_fallbacks() as log:
        out = torch.nn.functional.scaled_dot_product_attention(*leaves, attn_mask=mask.to("neuron"))
        out.square().sum().backward()
    assert torch.allclose(out.cpu(), expected, atol=1e-5)
    for leaf, ref in zip(leaves, (q, k, v), strict=True):
        assert torch.allclose(leaf.grad.cpu(), ref.grad, atol=1e-5)
    fused = "aten::_scaled_dot_product_fused_attention_overrideable" in log.executed
    assert fused == (shape == "4d")
    if shape == "4d":
        assert "aten::_scaled_dot_product_fused_attention_overrideable_backward" in log.executed


@forked
def test_sdpa_grouped_heads_and_causal(neuron: NeuronEmulatedDevice) -> None:
    torch.manual_seed(0)
    q = torch.randn(1, 4, 5, 8, requires_grad=True)
    k, v = (torch.randn(1, 2, 5, 8, requires_grad=True) for _ in range(2))
    expected = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=True, enable_gqa=True
    )
    expected.sum().backward()
    leaves = [t.detach().to("neuron").requires_grad_() for t in (q, k, v)]
    with neuron.record_fallbacks() as log:
        out = torch.nn.functional.scaled_dot_product_attention(
            *leaves, is_causal=True, enable_gqa=True
        )
        out.sum().backward()
    assert torch.allclose(out.cpu(), expected, atol=1e-5)
    for leaf, ref in zip(leaves, (q, k, v), strict=True):
        assert torch.allclose(leaf.grad.cpu(), ref.grad, atol=1e-5)
    assert log.ops == {}
    # under a profile without the fused op, the math decomposition runs
    lowered = NeuronEmulatedDevice(profile="torch-mlir")
    try:
        with lowered.record_fallbacks() as log:
            torch.nn.functional.scaled_dot_product_attention(
                *leaves, is_causal=True, enable_gqa=True
            )
    finally:
        neuron.activate()
    assert "aten::_scaled_dot_product_fused_attention_overrideable" not in log.classes


@forked
def test_a_declined_fused_attention_call_raises_on_the_cpu(neuron: NeuronEmulatedDevice) -> None:
    """The CPU has no kernel for TorchNeuron's fused attention op: a call its kernel declines
    (query heads not a multiple of the key/value heads) falls back and raises there."""
    q = torch.randn(1, 3, 4, 8).to("neuron")
    kv = torch.randn(1, 2, 4, 8).to("neuron")
    with neuron.record_fallbacks(), pytest.raises(NotImplementedError) as info:
        torch.ops.aten._scaled_dot_product_fused_attention_overrideable(q, kv, kv)
    op = "aten::_scaled_dot_product_fused_attention_overrideable"
    assert info.value.op == op  # type: ignore[attr-defined]
    assert "not a multiple" in info.value.declined  # type: ignore[attr-defined]
    assert "not implemented" in str(info.value)
