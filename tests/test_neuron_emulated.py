"""The emulated neuron device: numerics against the CPU, aliasing, save/load, tied weights, the
per-op fallback log (property-based), strict mode, convolutions, dtypes."""

from __future__ import annotations

import copy
import io
import pickle

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from runners.devices import get_device
from runners.devices.base import FallbackDisallowed
from runners.devices.neuron.emulated import NeuronEmulatedDevice
from runners.devices.neuron.profiles import DeviceProfile, base_name, load_profile
from tests.neuron_support import forked, tiny_model
from tests.warm_fork import run_code


@pytest.fixture(scope="module")
def neuron() -> NeuronEmulatedDevice:
    return NeuronEmulatedDevice()  # set up inside the forked test (see tests/neuron_support.py)


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.detach().cpu() - b.detach().cpu()).abs().max())


@pytest.mark.parametrize("kind", ["llama", "gpt2", "bert"])
@forked
def test_tiny_model_forward_backward_equals_cpu(neuron: NeuronEmulatedDevice, kind: str) -> None:
    """Under TorchNeuron's registrations the three run entirely on the device (fused SDPA,
    embedding and loss backward included); under the Torch-MLIR lists their training ops fall
    back, and every fallback is logged with its bytes."""
    reference = tiny_model(kind)
    ids = torch.randint(0, 128, (2, 8), generator=torch.Generator().manual_seed(1))
    expected = reference(input_ids=ids, labels=ids)
    expected.loss.backward()
    grads = dict(reference.named_parameters())
    torch_mlir = NeuronEmulatedDevice(profile="torch-mlir")
    logs = {}
    try:
        for device in (neuron, torch_mlir):
            model = device.prepare_model(copy.deepcopy(reference))
            with device.record_fallbacks() as log:
                inputs = device.to_device({"input_ids": ids, "labels": ids})
                actual = model(**inputs)
                actual.loss.backward()
            logs[device.profile] = log
            assert actual.logits.device.type == "neuron"
            assert max_diff(actual.logits, expected.logits) < 1e-5
            assert max_diff(actual.loss, expected.loss) < 1e-6
            compared = 0
            for name, param in model.named_parameters():
                if grads[name].grad is None:
                    continue
                assert param.grad is not None, name
                assert param.grad.device.type == "neuron"
                assert max_diff(param.grad, grads[name].grad) < 1e-5, name
                compared += 1
            assert compared > 10
            assert log.copy_bytes_h2d == 2 * ids.numel() * ids.element_size()
            assert not any(device.is_native(op) for op in log.ops)
    finally:
        neuron.activate()
    native = logs[neuron.profile]
    assert native.ops == {}, native.ops
    assert native.executed["aten::embedding_dense_backward"] >= 1
    assert native.classes["aten::_scaled_dot_product_fused_attention_overrideable"] == (
        "conditional"
    )
    lowered = logs["torch-mlir"]
    assert "aten::embedding_dense_backward" in lowered.ops
    entry = lowered.ops["aten::embedding_dense_backward"]
    assert entry.count >= 1 and entry.bytes_d2h > 0 and entry.bytes_h2d > 0


@forked
def test_conjugate_and_negative_views_read_as_on_cpu(neuron: NeuronEmulatedDevice) -> None:
    """`conj()` and `_neg_view()` are bits on the tensor, not in its memory. Complex RoPE's
    backward multiplies by `conj()` (Z-Image, Qwen-Image): an alias that dropped the bit gave
    wrong gradients under TorchNeuron's registrations, and PyTorch's own fallback for the bit
    recursed through `_copy_from` until a SIGSEGV under the Torch-MLIR lists."""
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(4, 3, dtype=torch.complex64, generator=generator)
    freqs = torch.randn(4, 3, dtype=torch.complex64, generator=generator)
    x = torch.randn(4, 6, generator=generator)
    weights = torch.randn(4, 6, generator=generator)

    def rope_grad(device: torch.device | str) -> torch.Tensor:
        leaf = x.clone().to(device).requires_grad_()
        rotated = torch.view_as_complex(leaf.reshape(4, 3, 2)) * freqs.to(device)
        (torch.view_as_real(rotated).flatten(1) * weights.to(device)).sum().backward()
        assert leaf.grad is not None
        return leaf.grad

    torch_mlir = NeuronEmulatedDevice(profile="torch-mlir")
    try:
        for device in (neuron, torch_mlir):
            device.activate()
            on_device = a.to("neuron")
            assert torch.equal(on_device.conj().cpu(), a.conj())
            assert torch.equal(on_device.conj().resolve_conj().cpu(), a.conj())
            assert torch.equal((on_device * freqs.to("neuron").conj()).cpu(), a * freqs.conj())
            assert torch.equal(torch._neg_view(x.to("neuron")).cpu(), -x)
            assert max_diff(rope_grad("neuron"), rope_grad("cpu")) < 1e-6, device.profile
    finally:
        neuron.activate()


@forked
def test_views_and_inplace_keep_aliasing(neuron: NeuronEmulatedDevice) -> None:
    base = torch.arange(12, dtype=torch.float32).to("neuron")
    view = base.view(3, 4)
    assert view.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    view[1, 2] = 100.0  # in-place through a view
    assert float(base[6].cpu()) == 100.0
    column = view[:, 1]
    column.mul_(2)  # strided in-place
    assert base.cpu()[[1, 5, 9]].tolist() == [2.0, 10.0, 18.0]
    returned = base.add_(1)
    assert returned is base
    assert float(view[0, 0].cpu()) == 1.0
    transposed = view.t()
    assert transposed.stride() == (1, 4)
    assert torch.equal(transposed.cpu(), view.cpu().t())
    out = torch.empty(0).to("neuron")
    torch.add(base, base, out=out)  # out= resizes an empty tensor
    assert out.shape == (12,)
    assert torch.equal(out.cpu(), base.cpu() * 2)


@forked
def test_copies_counted_separately(neuron: NeuronEmulatedDevice) -> None:
    with neuron.record_fallbacks() as log:
        x = torch.ones(10, dtype=torch.float32).to("neuron")
        back = x.cpu()
        scalar = x.sum().item()
    assert back.device.type == "cpu"
    assert scalar == 10.0
    assert log.copy_bytes_h2d == 40
    assert log.copy_bytes_d2h == 40 + 4  # the tensor, then the scalar read by .item()
    assert log.ops == {}  # sum is native in the default profile
    assert log.executed["aten::sum"] == 1


@forked
def test_torch_save_load_round_trip(neuron: NeuronEmulatedDevice) -> None:
    x = torch.randn(3, 5).to("neuron")
    buffer = io.BytesIO()
    torch.save({"x": x, "view": x[1]}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer)
    assert loaded["x"].device.type == "neuron"
    assert torch.equal(loaded["x"].cpu(), x.cpu())
    assert torch.equal(loaded["view"].cpu(), x[1].cpu())
    buffer.seek(0)
    on_cpu = torch.load(buffer, map_location="cpu")
    assert on_cpu["x"].device.type == "cpu"
    host = io.BytesIO()
    torch.save(x.cpu(), host)
    host.seek(0)
    moved = torch.load(host, map_location="neuron")
    assert moved.device.type == "neuron" and torch.equal(moved.cpu(), x.cpu())


@forked
def test_save_pretrained_round_trip_keeps_ties(neuron: NeuronEmulatedDevice, tmp_path) -> None:
    from transformers import AutoModelForCausalLM

    model = neuron.prepare_model(tiny_model("gpt2"))
    assert model.lm_head.weight is model.transformer.wte.weight
    model.save_pretrained(tmp_path)
    again = neuron.prepare_model(AutoModelForCausalLM.from_pretrained(tmp_path))
    assert again.lm_head.weight.device.type == "neuron"
    assert again.lm_head.weight is again.transformer.wte.weight
    for (name, a), b in zip(model.state_dict().items(), again.state_dict().values(), strict=True):
        assert torch.equal(a.cpu(), b.cpu()), name


@forked
def test_tied_weights_stay_tied_through_training(neuron: NeuronEmulatedDevice) -> None:
    reference = tiny_model("gpt2")
    model = neuron.prepare_model(copy.deepcopy(reference))
    assert model.lm_head.weight is model.transformer.wte.weight
    ids = torch.randint(0, 128, (1, 6))
    reference(input_ids=ids, labels=ids).loss.backward()
    model(input_ids=ids.to("neuron"), labels=ids.to("neuron")).loss.backward()
    grad = model.transformer.wte.weight.grad
    assert max_diff(grad, reference.transformer.wte.weight.grad) < 1e-6


@forked
def test_a_tie_inside_a_wrapper_without_tie_weights_survives_the_move(
    neuron: NeuronEmulatedDevice,
) -> None:
    """A module sharing a parameter inside a wrapper that cannot re-tie it (sentence-
    transformers around T5: `shared` and `encoder.embed_tokens`): the move to a PrivateUse1
    device would untie it, and the gradient would miss one of the two names."""

    class Inner(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.shared = torch.nn.Embedding(10, 4)
            self.embed = torch.nn.Embedding(10, 4)
            self.embed.weight = self.shared.weight

        def forward(self, ids):
            return self.embed(ids).sum()

    wrapper = torch.nn.Sequential(Inner())
    assert not hasattr(wrapper, "tie_weights")
    model = neuron.prepare_model(copy.deepcopy(wrapper))
    inner = model[0]
    assert inner.embed.weight is inner.shared.weight and inner.shared.weight.device.type == "neuron"
    inner(torch.tensor([1, 2]).to("neuron")).backward()
    assert inner.shared.weight.grad is not None
    # what PyTorch's move alone does on this device (the break the repair undoes)
    plain = copy.deepcopy(wrapper).to("neuron")
    assert plain[0].embed.weight is not plain[0].shared.weight


# Ops whose call reaches the fallback under a base name (checked against an empty profile).
OPS = {
    "aten::sin": lambda x, y: torch.sin(x),
    "aten::exp": lambda x, y: torch.exp(x),
    "aten::tanh": lambda x, y: torch.tanh(x),
    "aten::sigmoid": lambda x, y: torch.sigmoid(x),
    "aten::sqrt": lambda x, y: torch.sqrt(x),
    "aten::erf": lambda x, y: torch.erf(x),
    "aten::add": lambda x, y: x + y,
    "aten::mul": lambda x, y: x * y,
    "aten::div": lambda x, y: x / y,
    "aten::maximum": lambda x, y: torch.maximum(x, y),
    "aten::atan2": lambda x, y: torch.atan2(x, y),
    "aten::pow": lambda x, y: torch.pow(x, y),
    "aten::mm": lambda x, y: x @ y.T,
    "aten::sum": lambda x, y: x.sum(1),
    "aten::amax": lambda x, y: x.amax(1),
    "aten::cumsum": lambda x, y: x.cumsum(1),
    "aten::digamma": lambda x, y: torch.digamma(x),
    "aten::gt": lambda x, y: x > y,
    "aten::_softmax": lambda x, y: x.softmax(-1),
    "aten::gelu": lambda x, y: torch.nn.functional.gelu(x),
    "aten::cat": lambda x, y: torch.cat([x, y]),
    "aten::sort": lambda x, y: torch.sort(x, 1),
    "aten::topk": lambda x, y: torch.topk(x, 2),
    "aten::lerp": lambda x, y: torch.lerp(x, y, 0.3),
}


@forked
@settings(max_examples=25, deadline=None)
@given(
    declared=st.sets(st.sampled_from(sorted(OPS))),
    sample=st.lists(st.sampled_from(sorted(OPS)), min_size=1, max_size=6),
)
def test_declared_ops_never_logged_undeclared_always(declared, sample, neuron) -> None:
    device = NeuronEmulatedDevice(profile=DeviceProfile.from_ops("sampled", declared))
    device.setup()
    try:
        x = (torch.rand(3, 4) + 0.5).to("neuron")
        y = (torch.rand(3, 4) + 0.5).to("neuron")
        for op in sample:
            with device.record_fallbacks() as log:
                OPS[op](x, y)
            logged = {base_name(name) for name in log.ops}
            if op in declared:
                assert op not in logged
            else:
                assert op in logged
                assert all(e.count >= 1 for e in log.ops.values())
            assert not (logged & declared)
    finally:
        neuron.activate()


@forked
def test_strict_mode_raises_naming_the_op(neuron: NeuronEmulatedDevice) -> None:
    strict = NeuronEmulatedDevice(strict=True, profile="torch-mlir")
    x = torch.rand(4, 4).to("neuron")
    try:
        with strict.record_fallbacks():
            assert torch.equal((x + x).cpu(), x.cpu() * 2)  # native: allowed
            with pytest.raises(FallbackDisallowed) as info:
                torch.digamma(x)
            assert info.value.op == "aten::digamma.out"
            assert "aten::digamma.out" in str(info.value)
            # in the backward pass too (the autograd engine's device thread)
            leaf = torch.rand(3, 4).to("neuron").requires_grad_()
            loss = torch.nn.functional.layer_norm(leaf, (4,)).sum()
            with pytest.raises(FallbackDisallowed) as info:
                loss.backward()
            assert info.value.op == "aten::native_layer_norm_backward"
    finally:
        neuron.activate()
    clone = pickle.loads(pickle.dumps(info.value))
    assert clone.op == info.value.op and isinstance(clone, FallbackDisallowed)
    # the same op outside strict mode runs and is logged
    with neuron.record_fallbacks() as log:
        torch.digamma(x)
    assert "aten::digamma.out" in log.ops


@forked
def test_convolution_runs_and_is_recorded(neuron: NeuronEmulatedDevice) -> None:
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 4, 3, padding=1)
    deconv = torch.nn.ConvTranspose2d(4, 2, 2, stride=2, groups=2)
    reference = torch.nn.Sequential(conv, deconv)
    model = neuron.prepare_model(copy.deepcopy(reference))
    x = torch.randn(2, 3, 8, 8)
    reference(x).square().sum().backward()
    profile = DeviceProfile.from_ops(
        "no-conv", [op for op in load_profile("torch-mlir").ops if "conv" not in op]
    )
    device = NeuronEmulatedDevice(profile=profile)
    try:
        with device.record_fallbacks() as log:
            out = model(x.to("neuron"))
            out.square().sum().backward()
    finally:
        neuron.activate()
    assert max_diff(out, reference(x)) < 1e-5
    for a, b in zip(model.parameters(), reference.parameters(), strict=True):
        assert max_diff(a.grad, b.grad) < 1e-5
    assert log.ops["aten::convolution"].count == 2
    assert log.ops["aten::convolution_backward"].count == 2
    with neuron.record_fallbacks() as native_log:  # the default profile lowers convolutions
        model(x.to("neuron"))
    assert "aten::convolution" not in native_log.ops


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@forked
def test_dtypes(neuron: NeuronEmulatedDevice, dtype: torch.dtype) -> None:
    assert neuron.supports_dtype(dtype)
    reference = tiny_model("llama").to(dtype)
    model = neuron.prepare_model(copy.deepcopy(reference))
    ids = torch.randint(0, 128, (2, 8))
    out = model(input_ids=ids.to("neuron")).logits
    assert out.dtype == dtype
    assert max_diff(out.float(), reference(input_ids=ids).logits.float()) < 1e-2
    assert not neuron.supports_dtype(torch.float64)


@forked
def test_profile_info_and_versions(neuron: NeuronEmulatedDevice) -> None:
    name, digest = neuron.profile_info()
    assert name == "torchneuron-2026-04-21"
    assert digest == load_profile("torchneuron").hash and len(digest) == 16
    assert neuron.compile_mode == "raise"
    assert neuron.emulated is True
    assert "emulated" in neuron.versions()["neuron_backend"]
    assert neuron.compile_backend == "neuron"
    assert torch.neuron.device_count() == 1  # type: ignore[attr-defined]
    with torch.neuron.device(0):  # type: ignore[attr-defined]
        assert torch.empty(2, device="neuron").device.type == "neuron"


def test_registry_returns_emulated_with_user_profile(tmp_path) -> None:
    path = tmp_path / "mine.txt"
    path.write_text("# my device\naten::mm\naten::add.Tensor\n")
    device = get_device("neuron", profile=str(path))
    assert isinstance(device, NeuronEmulatedDevice)  # torch_neuronx is not installed here
    assert device.profile_info()[0] == "mine"
    assert device.is_native("aten::add.out") and device.is_native("aten::add_.Tensor")
    assert not device.is_native("aten::sin.out")
    assert isinstance(get_device("neuron-emulated", strict=True), NeuronEmulatedDevice)


@forked
def test_install_is_first_wins_in_a_fresh_process() -> None:
    """Another PrivateUse1 backend owning the process is refused with a DeviceError (in a
    process of its own: a fork of this warm test process, tests/warm_fork.py)."""
    done = run_code(
        """
        import torch
        torch.utils.rename_privateuse1_backend("other")
        from ground.errors import DeviceError
        from runners.devices.neuron.emulated import NeuronEmulatedDevice
        assert not NeuronEmulatedDevice.is_available()
        try:
            NeuronEmulatedDevice().setup()
        except DeviceError as exc:
            print("refused:", exc)
        """
    )
    assert done.returncode == 0, done.stderr
    assert "refused:" in done.stdout and "'other'" in done.stdout


@forked
def test_peak_memory_tracks_live_device_storage(neuron: NeuronEmulatedDevice) -> None:
    import gc

    gc.collect()
    neuron.reset_peak_memory()
    base = neuron.peak_memory_bytes() or 0
    big = torch.empty(1000, dtype=torch.float32, device="neuron")
    doubled = big * 2  # a fallback/native output is device memory too
    assert (neuron.peak_memory_bytes() or 0) >= base + 8000
    del big, doubled
    gc.collect()
    neuron.reset_peak_memory()
    assert (neuron.peak_memory_bytes() or 0) < base + 8000


@forked
def test_pickle_deepcopy_and_autocast(neuron: NeuronEmulatedDevice) -> None:
    x = torch.randn(2, 3).to("neuron")
    clone = pickle.loads(pickle.dumps(x))  # torch.save of a storage goes through at::from_blob
    assert clone.device.type == "neuron" and torch.equal(clone.cpu(), x.cpu())
    model = neuron.prepare_model(torch.nn.Linear(3, 2))
    twin = copy.deepcopy(model)
    assert twin.weight.device.type == "neuron"
    assert twin.weight.data_ptr() != model.weight.data_ptr()
    assert torch.equal(twin.weight.cpu(), model.weight.cpu())
    with torch.autocast("neuron", dtype=torch.bfloat16):  # TorchNeuron's autocast policy
        assert (x @ x.T).dtype == torch.bfloat16  # matmul: lower precision
        assert (x + x).dtype == torch.float32  # not listed: its own dtype


@forked
def test_native_op_is_not_limited_by_the_borrowed_cpu_kernel(neuron: NeuronEmulatedDevice) -> None:
    """MoE routing calls histc on integer expert ids on any device that is not the CPU.
    TorchNeuron registers histc (any dtype); the CPU kernel the emulator borrows has no integer
    histc. Declared native, it runs (in a wider dtype) and gives the CPU's float result."""
    from runners.devices.neuron.dtypes import widened_calls

    ids = torch.tensor([0, 1, 1, 3], dtype=torch.int32)
    with neuron.record_fallbacks() as log:
        counts = torch.histc(ids.to("neuron"), bins=4, min=0, max=3)
    assert counts.dtype == torch.int32
    assert counts.cpu().tolist() == torch.histc(ids.float(), bins=4, min=0, max=3).tolist()
    assert log.ops == {} and log.executed["aten::histc"] == 1
    assert widened_calls()[("aten::histc", "int32")] >= 1
    # an op that falls back runs the CPU kernel as a real fallback does: the error is the
    # CPU's, with its type, and names the op (for the stage's `failing_op`)
    lowered = NeuronEmulatedDevice(profile=DeviceProfile.from_ops("no-histc", ["aten::add"]))
    try:
        with lowered.record_fallbacks(), pytest.raises(NotImplementedError) as info:
            torch.histc(ids.to("neuron"), bins=4, min=0, max=3)
    finally:
        neuron.activate()
    assert "histogram_cpu" in str(info.value)
    assert info.value.op == "aten::histc"  # type: ignore[attr-defined]


@forked
def test_install_after_a_backward_is_refused_clearly() -> None:
    """In a process of its own (a fork of this warm test process, which never ran a backward
    pass: tests/warm_fork.py)."""
    done = run_code(
        """
        import torch
        leaf = torch.ones(1, requires_grad=True)
        (leaf * 2).sum().backward()  # sizes autograd's device threads: none yet
        from ground.errors import DeviceError
        from runners.devices.neuron.emulated import NeuronEmulatedDevice
        try:
            NeuronEmulatedDevice().setup()
        except DeviceError as exc:
            print("refused:", exc, exc.hint)
        """
    )
    assert done.returncode == 0, done.stderr
    assert "refused: A backward pass ran" in done.stdout


@forked
def test_python_scalars_wrapped_as_tensors(neuron: NeuronEmulatedDevice) -> None:
    """`x % 4` reaches the fallback as `remainder.Tensor_out` with `4` a wrapped-number tensor,
    which arrives in Python as a plain int (Qwen3-VL's rotary code does this)."""
    empty = NeuronEmulatedDevice(profile=DeviceProfile.from_ops("none", []))
    with empty.record_fallbacks() as log:
        for dtype in (torch.int32, torch.int64, torch.float16):
            x = torch.arange(6, dtype=dtype)
            on_device = x.to("neuron")
            for result, expected in [
                (on_device % 4, x % 4),
                (torch.fmod(on_device, 4), torch.fmod(x, 4)),
                (3 - on_device, 3 - x),
                (on_device[2] % 4, x[2] % 4),  # 0-dim: the result keeps the tensor's dtype
            ]:
                assert result.dtype == expected.dtype
                assert torch.equal(result.cpu(), expected)
    assert "aten::remainder.Tensor_out" in log.ops


@forked
def test_native_op_with_a_decomposition_runs_as_one_op(neuron: NeuronEmulatedDevice) -> None:
    """`native_layer_norm` has no kernel for new backends but a decomposition (it uses
    `addcmul`). A profile that declares it native must not report the decomposition's ops;
    a profile that does not declare it must report them, as a backend without the op would.
    The decomposition rounds differently from the fused kernel (a few float32 ulps), so its
    result is compared with float32's standard tolerances, on seeded inputs."""
    torch.manual_seed(0)
    x = torch.randn(2, 5, 8)
    weight, bias = torch.randn(8), torch.randn(8)
    expected = torch.nn.functional.layer_norm(x, (8,), weight, bias)
    inputs = [t.to("neuron") for t in (x, weight, bias)]
    with neuron.record_fallbacks() as log:
        actual = torch.nn.functional.layer_norm(inputs[0], (8,), inputs[1], inputs[2])
    assert neuron.is_native("aten::native_layer_norm")
    assert log.ops == {}
    assert max_diff(actual, expected) < 1e-6

    without = NeuronEmulatedDevice(
        profile=DeviceProfile.from_ops(
            "no-layer-norm",
            set(load_profile("torch-mlir").ops) - {"aten::native_layer_norm", "aten::layer_norm"},
        )
    )
    without.setup()
    with without.record_fallbacks() as log:
        again = torch.nn.functional.layer_norm(inputs[0], (8,), inputs[1], inputs[2])
    assert "aten::addcmul.out" in log.ops
    torch.testing.assert_close(again.cpu(), expected)


@pytest.mark.parametrize(
    ("cell", "op"),
    [(torch.nn.LSTM, "aten::_thnn_fused_lstm_cell"), (torch.nn.GRU, "aten::_thnn_fused_gru_cell")],
)
@forked
def test_recurrent_cells_fail_as_on_torchneuron(
    neuron: NeuronEmulatedDevice, cell: type, op: str
) -> None:
    """PyTorch's LSTM and GRU cells call their fused op on any non-CPU device (RNN.cpp:
    `input.is_privateuseone()`). TorchNeuron registers neither, so its boxed CPU fallback runs
    them on the CPU, which has no kernel for them (CUDA only): the real device fails there, as
    the snapshot's own test specs record. The emulator does the same, records the op as the
    stage's fallback (TorchNeuron marks it before running it), and names it."""
    from runners.devices.neuron.dispatch import NoHostKernelError

    profile = load_profile()
    assert not profile.declares(op) and profile.classify(op).value == "fallback"
    assert not torch._C._dispatch_has_kernel_for_dispatch_key(op, "CPU")  # CUDA only
    model = cell(4, 8, batch_first=True).to("neuron")
    with neuron.record_fallbacks() as log, pytest.raises(NoHostKernelError) as info:
        model(torch.randn(2, 3, 4).to("neuron"))
    assert info.value.op == op and op in str(info.value)
    assert "no kernel for it either" in str(info.value)
    assert isinstance(info.value.__cause__, NotImplementedError)
    assert "with arguments from the 'CPU' backend" in str(info.value.__cause__)
    assert list(log.ops) == [op] and log.classes[op] == "fallback"
    clone = pickle.loads(pickle.dumps(info.value))
    assert clone.op == op and str(clone) == str(info.value)
    # strict mode refuses it before the CPU is tried
    strict = NeuronEmulatedDevice(strict=True)
    try:
        with strict.record_fallbacks(), pytest.raises(FallbackDisallowed) as refused:
            model(torch.randn(2, 3, 4).to("neuron"))
        assert refused.value.op == op
    finally:
        neuron.activate()
    # the same module runs on the CPU (its unfused cell)
    model.cpu()(torch.randn(2, 3, 4))
