"""A hand-built store of a run of two dtypes, whose figures the tests work out by hand.

Run d1 (`--dtype fp32,bf16`), device neuron, emulated; every model has rows at both dtypes:

| model                    | dl   | fp32                                 | bf16                                  |
|--------------------------|------|--------------------------------------|---------------------------------------|
| org/llama-same           | 1000 | passed, no fallback                  | passed, no fallback                   |
| org/gemma-bf16-fallback  |  600 | passed, no fallback                  | passed, aten::erfinv falls back (fwd) |
| org/qwen-bf16-accuracy   |  400 | passed, aten::histc falls back (fwd) | forward fail_accuracy (histc fwd)     |
| bert-enc                 |  300 | passed (generate n/a)                | passed (generate n/a)                 |
| org/mixtral-fail         |  200 | compile fail at aten::nonzero        | forward fail at aten::cumsum          |
| org/remote               |  100 | skipped remote_code                  | skipped remote_code                   |
| org/same-fail            |   50 | load fail, same error                | load fail, same error                 |

fp32: passed 4 (2,300 dl), no fallback 3 (1,900 dl); bf16: passed 3 (1,900 dl), no fallback 2
(1,300 dl). Differing: gemma (on device in fp32 only), qwen (passes in fp32 only), mixtral
(fails differently). The bf16 rows' parts are written after the fp32 ones, and the bf16 part of
qwen is written twice (attempt 1 said crash; the summary keeps attempt 2).

Run s0 (older, fp32 only): org/llama-same passed with aten::histc falling back, written in a
fallbacks part of the schema from before fallbacks carried a dtype (no `dtype` column at all).

An op-sweep run `od` on the same device: aten::erfinv passes natively in fp32 and gives wrong
results in bf16; aten::histc falls back in both.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from ground.schema import to_table
from reports.store import Store
from tests.store_writes import write_model_rows

RUN = "d1"
OLD_RUN = "s0"
OP_RUN = "od"
DTYPES = ("fp32", "bf16")
STAGES = ["load", "forward", "backward", "compile", "generate"]
T0 = dt.datetime(2026, 11, 5, 2, 0, tzinfo=dt.UTC)

MODELS: dict[str, dict[str, Any]] = {
    "org/llama-same": dict(
        downloads=1000,
        pipeline_tag="text-generation",
        model_type="llama",
        architecture="LlamaForCausalLM",
    ),
    "org/gemma-bf16-fallback": dict(
        downloads=600,
        pipeline_tag="text-generation",
        model_type="gemma2",
        architecture="Gemma2ForCausalLM",
    ),
    "org/qwen-bf16-accuracy": dict(
        downloads=400,
        pipeline_tag="text-generation",
        model_type="qwen2",
        architecture="Qwen2ForCausalLM",
    ),
    "bert-enc": dict(
        downloads=300, pipeline_tag="fill-mask", model_type="bert", architecture="BertForMaskedLM"
    ),
    "org/mixtral-fail": dict(
        downloads=200,
        pipeline_tag="text-generation",
        model_type="mixtral",
        architecture="MixtralForCausalLM",
    ),
    "org/remote": dict(
        downloads=100,
        pipeline_tag="text-generation",
        model_type="custom",
        architecture="CustomForCausalLM",
    ),
    "org/same-fail": dict(
        downloads=50,
        pipeline_tag="text-classification",
        model_type="odd",
        architecture="OddModel",
    ),
}

ALL_PASS = ["pass"] * 5
ENCODER = ["pass"] * 4 + ["skip"]
ACCURACY_SIGNATURE = "forward outputs differ from the CPU beyond the bf16 tolerance"


def model_rows(
    run_id: str,
    model_id: str,
    dtype: str,
    statuses: list[str],
    *,
    reason: str | None = None,
    fallbacks: dict[str, dict[str, int]] | None = None,
    error: tuple[str, str, str, str, str | None] | None = None,
    attempt: int = 1,
    fallback_dtype: bool = True,
) -> tuple[list[dict], list[dict]]:
    """Result rows of the five stages at one dtype and their fallback rows; `error` = (stage,
    type, message, signature, failing_op); `fallback_dtype` False: fallback rows without one."""
    meta = MODELS[model_id]
    rank = list(MODELS).index(model_id) + 1
    results, fbs = [], []
    for i, (stage, status) in enumerate(zip(STAGES, statuses, strict=True)):
        ops = (fallbacks or {}).get(stage, {})
        row = {
            "run_id": run_id,
            "model_id": model_id,
            "rank": rank,
            "library": "transformers",
            **meta,
            "config_source": "none" if status == "skip" and reason == "remote_code" else "hub",
            "config_hash": f"c-{model_id}",
            "shrunk_config_hash": f"s-{meta['architecture']}",
            "device": "neuron",
            "device_emulated": True,
            "dtype": dtype,
            "stage": stage,
            "status": status,
            "reason": reason if status == "skip" else None,
            "fallback_op_count": len(ops),
            "fallback_call_count": sum(ops.values()),
            "duration_s": 0.25,
            "attempt": attempt,
            "finished_at": T0 + dt.timedelta(minutes=i + attempt),
        }
        if error and error[0] == stage:
            _, etype, msg, sig, op = error
            row.update(error_type=etype, error_message=msg, error_signature=sig, failing_op=op)
        results.append(row)
        for op, count in ops.items():
            fb = {
                "run_id": run_id,
                "model_id": model_id,
                "stage": stage,
                "device": "neuron",
                "op": op,
                "count": count,
                "source": "eager",
                "downloads": meta["downloads"],
            }
            if fallback_dtype:
                fb["dtype"] = dtype
            fbs.append(fb)
    return results, fbs


def _rows(dtype: str) -> list[tuple[list, list]]:
    fp32 = dtype == "fp32"
    same_fail = ("load", "ValueError", "bad config", "ValueError: bad config", None)
    return [
        model_rows(RUN, "org/llama-same", dtype, ALL_PASS),
        model_rows(
            RUN,
            "org/gemma-bf16-fallback",
            dtype,
            ALL_PASS,
            fallbacks=None if fp32 else {"forward": {"aten::erfinv": 2}},
        ),
        model_rows(
            RUN,
            "org/qwen-bf16-accuracy",
            dtype,
            ALL_PASS if fp32 else ["pass", "fail_accuracy", "not_run", "not_run", "not_run"],
            fallbacks={"forward": {"aten::histc": 1}},
            error=None
            if fp32
            else ("forward", "AccuracyError", "max abs error 0.31", ACCURACY_SIGNATURE, None),
            attempt=1 if fp32 else 2,
        ),
        model_rows(RUN, "bert-enc", dtype, ENCODER, reason="not_applicable"),
        model_rows(
            RUN,
            "org/mixtral-fail",
            dtype,
            ["pass", "pass", "pass", "fail", "not_run"]
            if fp32
            else ["pass", "fail", "not_run", "not_run", "not_run"],
            error=("compile", "RuntimeError", "no lowering", "RuntimeError: no lowering", "aten::nonzero")
            if fp32
            else ("forward", "RuntimeError", "no bf16 kernel", "RuntimeError: no bf16 kernel", "aten::cumsum"),
        ),
        model_rows(RUN, "org/remote", dtype, ["skip"] * 5, reason="remote_code"),
        model_rows(
            RUN,
            "org/same-fail",
            dtype,
            ["fail", "not_run", "not_run", "not_run", "not_run"],
            error=same_fail,
        ),
    ]  # fmt: skip


def _write(store: Store, run_id: str, batch: list[tuple[list, list]]) -> None:
    write_model_rows(
        store, run_id, [r for res, _ in batch for r in res], [f for _, fb in batch for f in fb]
    )


def build_dtype_store(root: str | Path) -> Store:
    store = Store(root)
    # ---- s0: an older run of one dtype, its fallbacks part without a dtype column ----
    results, fbs = model_rows(
        OLD_RUN,
        "org/llama-same",
        "fp32",
        ALL_PASS,
        fallbacks={"forward": {"aten::histc": 1}},
        fallback_dtype=False,
    )
    write_model_rows(store, OLD_RUN, results, [])
    part = store.part_files("results", OLD_RUN)[0].rsplit("/", 1)[-1]
    folder = Path(store.root) / "fallbacks" / f"run_id={OLD_RUN}"
    folder.mkdir(parents=True)
    pq.write_table(to_table("fallbacks", fbs).drop_columns(["dtype"]), folder / part)
    store.write("runs", OLD_RUN, [_run(OLD_RUN, T0 - dt.timedelta(days=1), "fp32")])
    # ---- d1: fp32 then bf16, as a run writes them ----
    fp32, bf16 = _rows("fp32"), _rows("bf16")
    _write(store, RUN, fp32[:4])
    _write(store, RUN, fp32[4:])
    crashed = model_rows(
        RUN,
        "org/qwen-bf16-accuracy",
        "bf16",
        ["pass", "crash", "not_run", "not_run", "not_run"],
        error=("forward", "WorkerCrashedError", "died", "WorkerCrashedError: died", None),
    )
    _write(store, RUN, [crashed])  # attempt 1, replaced by attempt 2 below
    _write(store, RUN, bf16)
    store.write("runs", RUN, [_run(RUN, T0, "fp32,bf16")])
    _op_run(store)
    return store


def _run(run_id: str, started: dt.datetime, dtype: str) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "status": "finished",
        "started_at": started,
        "updated_at": started + dt.timedelta(hours=1),
        "device": "neuron",
        "device_emulated": True,
        "dtype": dtype,
        "stages": ",".join(STAGES),
        "catalog": "bundled:test",
        "catalog_size": 20,
        "models_requested": len(MODELS) if run_id == RUN else 1,
        "torch_version": "2.14.1",
        "transformers_version": "5.24.0",
        "git_sha": "abc",
        "command": f"hfsweep run --device neuron --dtype {dtype}",
    }


def _op_run(store: Store) -> None:
    def row(opinfo: str, dtype: str, status: str, op: str, execution: str, **kw: Any) -> dict:
        fell = [op] if execution == "fallback" else []
        return {
            "run_id": OP_RUN,
            "opinfo": opinfo,
            "opinfo_name": opinfo,
            "dtype": dtype,
            "sample_index": 0,
            "sample": f"SampleInput({opinfo})",
            "phase": "forward",
            "status": status,
            "dispatched": [
                {
                    "op": op,
                    "execution": execution,
                    "fallbacks": fell,
                    "calls": 1,
                    "native_lowering": execution != "fallback",
                }
            ],
            "fallback_op_count": len(fell),
            "no_native_lowering": execution == "fallback",
            "device": "neuron",
            "device_emulated": True,
            "duration_s": 0.01,
            "finished_at": T0,
            **kw,
        }

    store.write(
        "op_runs",
        OP_RUN,
        [
            {
                "run_id": OP_RUN,
                "status": "finished",
                "started_at": T0,
                "updated_at": T0,
                "device": "neuron",
                "device_emulated": True,
                "dtypes": "fp32,bf16",
                "inputs": "sample",
                "opinfos_requested": 2,
                "torch_version": "2.14.1",
            }
        ],
    )
    store.write(
        "ops",
        OP_RUN,
        [
            row("erfinv", "fp32", "pass", "aten::erfinv", "native"),
            row("erfinv", "bf16", "wrong", "aten::erfinv", "native", max_abs_error=0.5),
            row("histc", "fp32", "pass", "aten::histc", "fallback"),
            row("histc", "bf16", "pass", "aten::histc", "fallback"),
        ],
    )
