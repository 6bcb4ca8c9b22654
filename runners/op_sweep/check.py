"""Run one OpInfo sample on a device and on the CPU, and compare (forward, then backward).

Which ATen ops a sample dispatched is seen by a `TorchDispatchMode` (below autograd, so the
backward's ops are seen too); which of them fell back is read from the device's own fallback log
(`Device.record_fallbacks`) around each op, so a fallback is charged to the op that caused it,
even when it happened inside that op's decomposition. A runner never raises for a sample's
failure: it returns rows.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_leaves, tree_map, tree_unflatten

from ground.errors import is_environment_error, safe_text
from ground.schema import OpExecution, OpSkipReason, OpStatus
from runners import faults
from runners.containment import out_of_memory
from runners.devices.base import Device, FallbackLog
from runners.signature import error_signature, op_in_message, short_message

Lowering = Callable[[str], "bool | None"]


@dataclass
class _Dispatched:
    calls: int = 0
    fallbacks: dict[str, None] = field(default_factory=dict)  # ordered set
    failed: bool = False


class DispatchRecorder(TorchDispatchMode):
    """Every ATen op a block dispatches, and what fell back to the CPU while each one ran."""

    def __init__(self, log: FallbackLog | None = None, *, track_dtypes: bool = False):
        super().__init__()
        self.log = log
        self.ops: dict[str, _Dispatched] = {}
        self.track_dtypes = track_dtypes
        self.dtypes: dict[torch.dtype, None] = {}  # of every op's outputs, when tracked

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = func.name()
        entry = self.ops.get(name)
        if entry is None:
            entry = self.ops[name] = _Dispatched()
        entry.calls += 1
        log = self.log
        before = {k: v.count for k, v in log.ops.items()} if log is not None else None
        try:
            out = func(*args, **(kwargs or {}))
            if self.track_dtypes:
                for x in tree_leaves(out):
                    if isinstance(x, torch.Tensor):
                        self.dtypes[x.dtype] = None
            return out
        except BaseException:
            entry.failed = True
            raise
        finally:
            if log is not None and before is not None:
                for op, fb in log.ops.items():
                    if fb.count != before.get(op, 0):
                        entry.fallbacks[op] = None

    def attribute(self, log: FallbackLog) -> None:
        """Charge the fallbacks a device reported only after the block (a profiler-based log)
        to the dispatched ops of the same base name, or list them as ops of their own."""
        from runners.devices.aten_names import base_name

        seen = {f for entry in self.ops.values() for f in entry.fallbacks}
        for op, fb in log.ops.items():
            if op in seen:
                continue
            owners = [e for name, e in self.ops.items() if base_name(name) == base_name(op)]
            if not owners:
                owners = [self.ops.setdefault(op, _Dispatched(calls=fb.count))]
            for entry in owners:
                entry.fallbacks[op] = None

    def failed_op(self) -> str | None:
        for name, entry in self.ops.items():
            if entry.failed:
                return name
        return None


def dispatched_rows(
    recorder: DispatchRecorder, lowering: Lowering, *, ran: bool = True
) -> list[dict[str, Any]]:
    rows = []
    for name, entry in recorder.ops.items():
        if not ran:
            execution = OpExecution.NOT_RUN
        elif entry.failed:
            execution = OpExecution.FAILED
        elif entry.fallbacks:
            execution = OpExecution.FALLBACK
        else:
            execution = OpExecution.NATIVE
        rows.append(
            {
                "op": name,
                "execution": execution.value,
                "fallbacks": list(entry.fallbacks) if ran else [],
                "calls": entry.calls,
                "native_lowering": lowering(name),
            }
        )
    return rows


# ---- moving samples ------------------------------------------------------------------------


def _to(device: torch.device) -> Callable[[Any], Any]:
    def move(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return x.detach().to(device).requires_grad_(x.requires_grad)
        return x

    return move


def moved(
    sample: Any, device: torch.device, host_only: frozenset[int] = frozenset()
) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    """The sample's (input, args, kwargs) as fresh leaves on `device`, except the tensors the
    OpInfo keeps on the CPU whatever the device (`tensor_split`'s index tensor); a `device=`
    keyword (factory functions) is pointed at `device` too."""
    leaves, spec = tree_flatten((sample.input, tuple(sample.args), dict(sample.kwargs)))
    move, stay = _to(device), _to(torch.device("cpu"))
    with torch.no_grad():
        leaves = [
            (stay if i in host_only else move)(x) if isinstance(x, torch.Tensor) else x
            for i, x in enumerate(leaves)
        ]
    inp, args, kwargs = tree_unflatten(leaves, spec)
    if "device" in kwargs and kwargs["device"] is not None:
        kwargs["device"] = device
    return inp, tuple(args), kwargs


def _tensors(tree: Any) -> list[torch.Tensor]:
    return [x for x in tree_leaves(tree) if isinstance(x, torch.Tensor)]


def _to_cpu(tree: Any) -> Any:
    return tree_map(lambda x: x.detach().cpu() if isinstance(x, torch.Tensor) else x, tree)


def describe(sample: Any, limit: int = 300) -> str:
    try:
        text = sample.summary()
    except Exception:
        text = repr(sample)
    text = " ".join(text.replace(', device="cpu"', "").split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def sample_dtypes(sample: Any) -> list[torch.dtype]:
    found: dict[torch.dtype, None] = {}
    for x in tree_leaves((sample.input, sample.args, sample.kwargs)):
        if isinstance(x, torch.Tensor):
            found[x.dtype] = None
        elif isinstance(x, torch.dtype):
            found[x] = None
    return list(found)


# ---- comparing ---------------------------------------------------------------------------------


@dataclass
class Comparison:
    ok: bool
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    detail: str | None = None


def _errors(actual: torch.Tensor, expected: torch.Tensor) -> tuple[float, float] | None:
    if actual.shape != expected.shape or not (
        expected.is_floating_point() or expected.is_complex()
    ):
        if actual.shape == expected.shape and actual.numel():
            diff = (actual.to(torch.float64) - expected.to(torch.float64)).abs()
            return float(diff.max()), float(diff.max())
        return None
    if not expected.numel():
        return 0.0, 0.0
    a = actual.detach().to(torch.complex128 if expected.is_complex() else torch.float64)
    e = expected.detach().to(a.dtype)
    both_nan = torch.isnan(a) & torch.isnan(e)
    both_inf = torch.isinf(a) & torch.isinf(e) & (a == e)
    diff = (a - e).abs()
    diff = torch.where(both_nan | both_inf, torch.zeros_like(diff), diff)
    diff = torch.nan_to_num(diff, nan=math.inf)
    rel = diff / e.abs().clamp_min(torch.finfo(torch.float64).tiny)
    rel = torch.where(diff == 0, torch.zeros_like(rel), rel)
    return float(diff.max()), float(rel.max())


def compare(actual: Any, expected: Any, *, atol: float, rtol: float) -> Comparison:
    """Device results (moved to the CPU) against the CPU's, with torch.testing.assert_close."""
    max_abs: float | None = None
    max_rel: float | None = None
    a_leaves, a_spec = tree_flatten(actual)
    e_leaves, e_spec = tree_flatten(expected)
    if len(a_leaves) == len(e_leaves):
        for a, e in zip(a_leaves, e_leaves, strict=True):
            if isinstance(a, torch.Tensor) and isinstance(e, torch.Tensor):
                errs = _errors(a, e)
                if errs is not None:
                    max_abs = errs[0] if max_abs is None else max(max_abs, errs[0])
                    max_rel = errs[1] if max_rel is None else max(max_rel, errs[1])
    try:
        torch.testing.assert_close(
            actual,
            expected,
            atol=atol,
            rtol=rtol,
            equal_nan=True,
            check_device=False,
            check_stride=False,
        )
    except AssertionError as exc:
        return Comparison(False, max_abs, max_rel, short_message(str(exc), 400))
    except (TypeError, ValueError, RuntimeError) as exc:  # structures that cannot be compared
        if a_spec == e_spec and all(
            a == e for a, e in zip(a_leaves, e_leaves, strict=True) if not _is_tensor(a)
        ):
            return Comparison(True, max_abs, max_rel)
        return Comparison(False, max_abs, max_rel, short_message(f"{type(exc).__name__}: {exc}"))
    return Comparison(True, max_abs, max_rel)


def _is_tensor(x: Any) -> bool:
    return isinstance(x, torch.Tensor)


# ---- one sample ----------------------------------------------------------------------------


@dataclass
class SampleContext:
    """What is fixed for every sample of one OpInfo x dtype."""

    op: Any  # the OpInfo
    key: str
    dtype: str
    torch_dtype: torch.dtype
    atol: float
    rtol: float
    backward_skip: tuple[str, str] | None
    expected_failure: bool
    lowering: Lowering
    seed: int = 0


def _row(ctx: SampleContext, index: int, sample_text: str, phase: str, **fields: Any) -> dict:
    return {
        "opinfo": ctx.key,
        "opinfo_name": ctx.op.name,
        "variant": ctx.op.variant_test_name or None,
        "dtype": ctx.dtype,
        "sample_index": index,
        "sample": sample_text,
        "phase": phase,
        "atol": ctx.atol,
        "rtol": ctx.rtol,
        "expected_failure": ctx.expected_failure,
        **fields,
    }


def _error_fields(exc: BaseException, recorder: DispatchRecorder | None) -> dict[str, Any]:
    """A sample's failure on the device: `oom` when an allocation failed (the memory budget,
    or the device's memory), else `fail`. The environment's errors are never a sample's."""
    if is_environment_error(exc):
        raise exc
    message = safe_text(exc)
    failing = getattr(exc, "op", None) or (recorder.failed_op() if recorder else None)
    return {
        "status": (OpStatus.OOM if out_of_memory(exc) else OpStatus.FAIL).value,
        "error_type": type(exc).__name__,
        "error_message": short_message(message),
        "error_signature": error_signature(type(exc).__name__, message),
        "failing_op": failing or op_in_message(message),
    }


def _finish(row: dict[str, Any], dispatched: list[dict[str, Any]], start: float) -> dict:
    row["dispatched"] = dispatched
    row["fallback_op_count"] = len({f for d in dispatched for f in d["fallbacks"]})
    row["no_native_lowering"] = any(d["native_lowering"] is False for d in dispatched)
    row["duration_s"] = time.perf_counter() - start
    return row


def _verdict(cmp: Any) -> dict[str, Any]:
    """A comparison's row fields: pass or wrong, and by how much."""
    return {
        "status": OpStatus.PASS.value if cmp.ok else OpStatus.WRONG.value,
        "detail": cmp.detail,
        "max_abs_error": cmp.max_abs_error,
        "max_rel_error": cmp.max_rel_error,
    }


def _seed(seed: int) -> None:
    """Seed the host generator only (random ops of a sample draw from it on the CPU and, on an
    emulated device, on the device too; `torch.manual_seed` would also reseed every device)."""
    torch.random.default_generator.manual_seed(seed)


def _grad_inputs(tree: Any) -> list[torch.Tensor]:
    return [t for t in _tensors(tree) if t.requires_grad]


def _grad_outputs(out: Any) -> list[torch.Tensor]:
    return [
        t
        for t in _tensors(out)
        if t.requires_grad and (t.is_floating_point() or t.is_complex()) and t.grad_fn is not None
    ]


Emit = Callable[..., None]  # (phase, dispatched rows, started, **row fields) -> a row out


def check_sample(
    ctx: SampleContext,
    index: int,
    sample: Any,
    device: Device,
    *,
    device_skip: Callable[[str, list[torch.dtype]], tuple[str, str] | None],
    host_only: frozenset[int] = frozenset(),
    on_row: Callable[[dict[str, Any]], None],
) -> None:
    """Compare one sample's forward (and backward, where it applies) on `device` with the CPU:
    the CPU reference first (`cpu_reference`), then the forward on the device
    (`device_forward`), then its backward (`device_backward`).

    `device_skip(phase, dtypes)` gives (OpSkipReason, detail) when the device declares it will
    not run this sample; `dtypes` are those the CPU reference produced in that phase (a sample
    of real tensors whose op computes in complex numbers needs complex support too). Each row
    goes to `on_row` as soon as it is known (forward before backward), so that a crash during
    the backward leaves the forward's row.
    """
    text = describe(sample)
    phases = ["forward"] if ctx.backward_skip is not None else ["forward", "backward"]
    start = time.perf_counter()

    def emit(phase: str, dispatched: list[dict[str, Any]], started: float, **fields: Any) -> None:
        on_row(_finish(_row(ctx, index, text, phase, **fields), dispatched, started))

    # The CPU reference first: it decides whether there is anything to compare at all, and its
    # dispatched ops describe a sample the device skips.
    ref = cpu_reference(ctx, sample, backward="backward" in phases)
    if ref.error is not None:
        for phase in phases:
            cause = (OpSkipReason.REFERENCE_FAILED.value, ref.error)
            _skipped(emit, phase, ref.forward, ctx, start, cause)
        return
    ran = device_forward(
        ctx,
        sample,
        device,
        ref,
        backward="backward" in phases,
        device_skip=device_skip,
        host_only=host_only,
        emit=emit,
        started=start,
    )
    if ran is not None:
        device_backward(ctx, device, ref, ran, device_skip=device_skip, emit=emit)


def _skipped(
    emit: Emit,
    phase: str,
    cpu: DispatchRecorder,
    ctx: SampleContext,
    started: float,
    skip: tuple[str, str],
) -> None:
    """A phase not run on the device, `skip` (reason, detail) saying why: its row lists the ops
    the CPU dispatched in it, none of them run."""
    reason, detail = skip
    dispatched = dispatched_rows(cpu, ctx.lowering, ran=False)
    emit(phase, dispatched, started, status=OpStatus.SKIP.value, reason=reason, detail=detail)


def _on_device(
    device: Device, ctx: SampleContext, run: Callable[[DispatchRecorder], Any]
) -> tuple[Any, list[dict[str, Any]], dict[str, Any] | None]:
    """`run(recorder)` on the device, the ops it dispatches in `recorder` and what fell back to
    the CPU charged to them: (its result, the dispatched ops' rows, None or the row fields of
    its failure: `fail` or `oom`; the environment's errors are raised, never a sample's)."""
    recorder = DispatchRecorder()
    result: Any = None
    error: dict[str, Any] | None = None
    with device.record_fallbacks() as log:
        recorder.log = log
        try:
            result = run(recorder)
        except Exception as exc:
            error = _error_fields(exc, recorder)
    recorder.attribute(log)
    return result, dispatched_rows(recorder, ctx.lowering), error


@dataclass
class Reference:
    """The CPU's answer for one sample: what it dispatched in each phase, its outputs (on the
    CPU), and for the backward the gradients fed in and those it got, or why there is no
    backward to compare (`backward_skip`). `error`: the sample raised on the CPU (nothing to
    compare)."""

    forward: DispatchRecorder
    backward: DispatchRecorder
    expected: Any = None
    grads: tuple[list[torch.Tensor], list[Any]] | None = None  # (fed in, expected)
    backward_skip: tuple[str, str] | None = None
    error: str | None = None


def cpu_reference(ctx: SampleContext, sample: Any, *, backward: bool) -> Reference:
    """Run the sample on the CPU (and, with `backward`, its backward from seeded random output
    gradients), recording what each phase dispatched."""
    ref = Reference(DispatchRecorder(track_dtypes=True), DispatchRecorder(track_dtypes=True))
    ref.backward_skip = ctx.backward_skip
    cpu_input, cpu_args, cpu_kwargs = moved(sample, torch.device("cpu"))
    _seed(ctx.seed)
    try:
        with ref.forward:
            expected_raw = ctx.op(cpu_input, *cpu_args, **cpu_kwargs)
        expected = sample.output_process_fn_grad(expected_raw)
    except Exception as exc:
        ref.error = (
            f"the sample raised on the CPU: {type(exc).__name__}: {short_message(str(exc), 200)}"
        )
        return ref
    if backward:
        outs = _grad_outputs(expected)
        ins = _grad_inputs((cpu_input, cpu_args, cpu_kwargs))
        if not outs or not ins:
            ref.backward_skip = (
                OpSkipReason.NO_AUTOGRAD.value,
                "this sample's outputs carry no gradient to its inputs",
            )
        else:
            gen = torch.Generator().manual_seed(ctx.seed + 1)
            grads_out = [torch.randn(o.shape, dtype=o.dtype, generator=gen) for o in outs]
            try:
                with ref.backward:
                    grads = torch.autograd.grad(outs, ins, grads_out, allow_unused=True)
                ref.grads = (grads_out, list(grads))
            except Exception as exc:
                ref.backward_skip = (
                    OpSkipReason.REFERENCE_FAILED.value,
                    f"the backward raised on the CPU: {type(exc).__name__}: "
                    f"{short_message(str(exc), 200)}",
                )
    ref.expected = _to_cpu(expected)
    return ref


@dataclass
class DeviceRun:
    """A forward that passed on the device, for its backward: its outputs and its inputs."""

    outputs: Any
    inputs: tuple[Any, tuple[Any, ...], dict[str, Any]]


def device_forward(
    ctx: SampleContext,
    sample: Any,
    device: Device,
    ref: Reference,
    *,
    backward: bool,
    device_skip: Callable[[str, list[torch.dtype]], tuple[str, str] | None],
    host_only: frozenset[int],
    emit: Emit,
    started: float,
) -> DeviceRun | None:
    """The forward on the device against `ref`: its row (and, where no backward can follow, the
    backward's: skipped, or not run after a forward that failed). Returns what the backward
    needs when one is to run."""
    skip = device_skip("forward", list(ref.forward.dtypes))
    if skip is not None:
        _skipped(emit, "forward", ref.forward, ctx, started, skip)
        if backward:
            bw_skip = ref.backward_skip or device_skip("backward", list(ref.backward.dtypes))
            _skipped(emit, "backward", ref.backward, ctx, time.perf_counter(), bw_skip or skip)
        return None
    d_input, d_args, d_kwargs = moved(sample, device.torch_device, host_only)

    def forward(recorder: DispatchRecorder) -> Any:
        _seed(ctx.seed)
        faults.inject("sample", ctx.key)  # the test-only hook: a fault as the op runs
        with recorder:
            raw = ctx.op(d_input, *d_args, **d_kwargs)
        device.synchronize()
        return sample.output_process_fn_grad(raw)

    actual, dispatched, error = _on_device(device, ctx, forward)
    if error is not None:
        emit("forward", dispatched, started, **error)
        if backward:
            reason = {"status": OpStatus.NOT_RUN.value, "detail": "the forward pass failed"}
            if ref.backward_skip is not None:
                reason = {
                    "status": OpStatus.SKIP.value,
                    "reason": ref.backward_skip[0],
                    "detail": ref.backward_skip[1],
                }
            emit("backward", [], time.perf_counter(), **reason)
        return None
    cmp = compare(_to_cpu(actual), ref.expected, atol=ctx.atol, rtol=ctx.rtol)
    emit("forward", dispatched, started, **_verdict(cmp))
    return DeviceRun(actual, (d_input, d_args, d_kwargs)) if backward else None


def device_backward(
    ctx: SampleContext,
    device: Device,
    ref: Reference,
    ran: DeviceRun,
    *,
    device_skip: Callable[[str, list[torch.dtype]], tuple[str, str] | None],
    emit: Emit,
) -> None:
    """The backward on the device, from the forward that passed there (`ran`), fed the CPU
    reference's output gradients and compared with its input gradients: its row."""
    start = time.perf_counter()
    skip = ref.backward_skip or device_skip("backward", list(ref.backward.dtypes))
    if skip is not None:
        _skipped(emit, "backward", ref.backward, ctx, start, skip)
        return
    assert ref.grads is not None
    grads_out, expected_grads = ref.grads
    outs = _grad_outputs(ran.outputs)
    ins = _grad_inputs(ran.inputs)
    if len(outs) != len(grads_out) or [o.shape for o in outs] != [g.shape for g in grads_out]:
        emit(
            "backward",
            [],
            start,
            status=OpStatus.WRONG.value,
            detail="the device's outputs carry gradients unlike the CPU's",
        )
        return

    def backward(recorder: DispatchRecorder) -> Any:
        g_out = [g.to(device.torch_device) for g in grads_out]
        with recorder:
            grads = torch.autograd.grad(outs, ins, g_out, allow_unused=True)
        device.synchronize()
        return grads

    grads, dispatched, error = _on_device(device, ctx, backward)
    if error is not None:
        emit("backward", dispatched, start, **error)
        return
    cmp = compare(_to_cpu(list(grads)), expected_grads, atol=ctx.atol, rtol=ctx.rtol)
    emit("backward", dispatched, start, **_verdict(cmp))


def iter_samples(
    op: Any, dtype: torch.dtype, *, inputs: str, requires_grad: bool, seed: int
) -> Iterator[tuple[Any, frozenset[int]]]:
    """The OpInfo's samples on the CPU, in a fixed order for a fixed seed (a restarted process
    regenerates the same list and skips what was done), each with the positions of the tensors
    it keeps on the CPU whatever the device."""
    import random

    _seed(seed)
    random.seed(seed)
    source = op.reference_inputs if inputs == "reference" else op.sample_inputs
    # The same generator on the meta device, in step, tells which tensors the OpInfo makes on
    # the CPU whatever the device it is asked for; the host RNG is restored around each step so
    # the CPU samples are those of a plain run.
    probe: Iterator[Any] | None = None
    try:
        probe = iter(source("meta", dtype, requires_grad=False))
    except Exception:
        probe = None
    for sample in source("cpu", dtype, requires_grad=requires_grad):
        if probe is not None:
            state = torch.random.get_rng_state()
            py_state = random.getstate()
            try:
                host_only = _host_only(sample, next(probe))
            except Exception:  # value-dependent generators cannot run on meta: move all
                probe, host_only = None, frozenset()
            finally:
                torch.random.set_rng_state(state)
                random.setstate(py_state)
        else:
            host_only = frozenset()
        yield sample, host_only


def _host_only(sample: Any, twin: Any) -> frozenset[int]:
    leaves = tree_leaves((sample.input, tuple(sample.args), dict(sample.kwargs)))
    meta = tree_leaves((twin.input, tuple(twin.args), dict(twin.kwargs)))
    if len(leaves) != len(meta):
        return frozenset()
    return frozenset(
        i
        for i, (a, b) in enumerate(zip(leaves, meta, strict=True))
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and b.device.type == "cpu"
    )
