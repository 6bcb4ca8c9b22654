"""A hand-built op-sweep run (`o1`, emulated neuron) beside the hand-built model store, with
figures worked out by hand in the tests.

| OpInfo      | dtype | sample | phase    | status  | how                                          |
|-------------|-------|--------|----------|---------|----------------------------------------------|
| histc       | fp32  | 0, 1   | forward  | pass    | aten::histc fell back (no native lowering)   |
| nonzero     | fp32  | 0      | forward  | fail    | at aten::nonzero                             |
| nonzero     | fp32  | 1      | forward  | pass    | aten::nonzero fell back                      |
| add         | fp32  | 0      | forward  | pass    | aten::add.Tensor native                      |
| add         | fp32  | 0      | backward | pass    | (no op dispatched)                           |
| add         | fp32  | 1      | forward  | wrong   | aten::add.Tensor native, max abs error 0.5   |
| add         | fp32  | 1      | backward | pass    |                                              |
| add         | bf16  | 0      | forward  | skip    | device_unsupported_feature (a complex64 arg) |
| special.zeta| bf16  | -      | fwd, bwd | skip    | dtype_not_supported (op level)               |
| sort        | fp32  | 0      | forward  | skip    | device_declared, aten::sort not lowered      |
| crashy      | fp32  | 0      | forward  | timeout | (lost: no dispatched op)                     |
| crashy      | fp32  | 0      | backward | not_run |                                              |
| evil        | fp32  | 0      | forward  | fail    | hostile message and sample text              |

fp32: 12 results; bf16: 3. Skipped by PyTorch: 2 (bf16); by the device: 2 (1 fp32, 1 bf16), of
which 1 for an op with no native lowering (sort). Passed 6 (3 natively: add fwd 0, add bwd 0 and
1), failed 3 (2 fail + 1 timeout), wrong 1, not run 1.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from reports.store import Store

OP_RUN = "o1"
EVIL_SAMPLE = "<script>alert('op')</script>"
T0 = dt.datetime(2026, 11, 2, 2, 0, tzinfo=dt.UTC)


def _d(op: str, execution: str, fallbacks: list[str] | None = None, lowering: bool | None = True):
    return {
        "op": op,
        "execution": execution,
        "fallbacks": fallbacks or [],
        "calls": 1,
        "native_lowering": lowering,
    }


def _row(opinfo: str, dtype: str, index: int | None, phase: str, status: str, **kw: Any) -> dict:
    dispatched = kw.pop("dispatched", [])
    return {
        "opinfo": opinfo,
        "opinfo_name": opinfo.split(".")[0] if opinfo != "special.zeta" else opinfo,
        "variant": None,
        "dtype": dtype,
        "sample_index": index,
        "sample": kw.pop("sample", f"SampleInput({opinfo} #{index})"),
        "phase": phase,
        "status": status,
        "dispatched": dispatched,
        "fallback_op_count": len({f for d in dispatched for f in d["fallbacks"]}),
        "no_native_lowering": any(d["native_lowering"] is False for d in dispatched),
        "device": "neuron",
        "device_emulated": True,
        "device_profile": "torch-mlir",
        "duration_s": 0.01,
        "finished_at": T0,
        **kw,
    }


HISTC = [_d("aten::histc", "fallback", ["aten::histc"], lowering=False)]


def op_rows() -> list[dict[str, Any]]:
    return [
        _row("histc", "fp32", 0, "forward", "pass", dispatched=HISTC),
        _row("histc", "fp32", 1, "forward", "pass", dispatched=HISTC),
        _row(
            "nonzero",
            "fp32",
            0,
            "forward",
            "fail",
            dispatched=[_d("aten::nonzero", "failed", lowering=False)],
            error_type="RuntimeError",
            error_message="nonzero is not supported",
            error_signature="RuntimeError: nonzero is not supported",
            failing_op="aten::nonzero",
        ),
        _row(
            "nonzero",
            "fp32",
            1,
            "forward",
            "pass",
            dispatched=[_d("aten::nonzero", "fallback", ["aten::nonzero"], lowering=False)],
        ),
        _row("add", "fp32", 0, "forward", "pass", dispatched=[_d("aten::add.Tensor", "native")]),
        _row("add", "fp32", 0, "backward", "pass"),
        _row(
            "add",
            "fp32",
            1,
            "forward",
            "wrong",
            dispatched=[_d("aten::add.Tensor", "native")],
            max_abs_error=0.5,
            detail="Tensor-likes are not close!",
        ),
        _row("add", "fp32", 1, "backward", "pass"),
        _row(
            "add",
            "bf16",
            0,
            "forward",
            "skip",
            reason="device_unsupported_feature",
            detail="Complex data types are not supported on Neuron (a complex64 tensor)",
            dispatched=[_d("aten::add.Tensor", "not_run")],
        ),
        _row("special.zeta", "bf16", None, "forward", "skip", reason="dtype_not_supported"),
        _row("special.zeta", "bf16", None, "backward", "skip", reason="dtype_not_supported"),
        _row(
            "sort",
            "fp32",
            0,
            "forward",
            "skip",
            reason="device_declared",
            detail="declared by the device",
            dispatched=[_d("aten::sort", "not_run", lowering=False)],
        ),
        _row(
            "crashy",
            "fp32",
            0,
            "forward",
            "timeout",
            error_type="Timeout",
            error_message="the sample did not finish within 2 s",
        ),
        _row("crashy", "fp32", 0, "backward", "not_run"),
        _row(
            "evil",
            "fp32",
            0,
            "forward",
            "fail",
            sample=EVIL_SAMPLE,
            error_type="RuntimeError",
            error_message=EVIL_SAMPLE,
            dispatched=[_d("aten::evil", "failed", lowering=False)],
        ),
    ]


def build_op_run(root: str | Path) -> Store:
    store = Store(root)
    run = {
        "run_id": OP_RUN,
        "status": "finished",
        "started_at": T0,
        "updated_at": T0,
        "device": "neuron",
        "device_emulated": True,
        "device_profile": "torch-mlir",
        "dtypes": "fp32,bf16",
        "inputs": "sample",
        "opinfos_requested": 7,
        "torch_version": "2.14.1",
    }
    store.write("op_runs", OP_RUN, [run])
    rows = op_rows()
    store.write("ops", OP_RUN, rows[:7])  # two parts, as a run writes them
    store.write("ops", OP_RUN, rows[7:])
    return store
