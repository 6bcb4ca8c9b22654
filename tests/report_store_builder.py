"""A small hand-built store whose report figures are worked out by hand in the tests.

Run r2 (latest; a "running" row then a later "finished" row), device neuron, emulated:

| model                     | dl   | task            | architecture     | outcome                      |
|---------------------------|------|-----------------|------------------|------------------------------|
| org/a-pass-clean          | 1000 | text-generation | LlamaForCausalLM | passed, no fallback          |
| org/b-pass-fallback       |  500 | text-generation | LlamaForCausalLM | passed, aten::histc fwd+bwd  |
| org/c-fail-compile        |  300 | text-generation | MixtralForCausalLM | compile fail (aten::nonzero); fwd fallback histc+nonzero |
| bert-x (no org)           |  200 | fill-mask       | BertForMaskedLM  | passed, generate n/a         |
| org/e-remote              |  100 | text-generation | CustomForCausalLM | skipped remote_code         |
| org/f-gguf                |   50 | text-generation | -                | skipped no_config            |
| org/g-timeout             |  150 | text-generation | Qwen2ForCausalLM | forward timeout (attempt 2; attempt 1 said crash) |
| evil/<script>...          |   10 | text-classification | EvilModel    | load fail, hostile message   |

Run r1 (older, other torch): c passed (with fallback), b failed at backward, g failed, evil absent,
org/old passed (absent from r2). An orphan fallback part in r2 (no results part) names aten::orphan.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from reports.store import Store
from tests.store_writes import write_model_rows

STAGES = ["load", "forward", "backward", "compile", "generate"]
EVIL_ID = "evil/<script>alert(1)</script>"
EVIL_MESSAGE = "<script>alert('pwned')</script> & <b>bold</b>"
T0 = dt.datetime(2026, 11, 1, 2, 0, tzinfo=dt.UTC)

MODELS: dict[str, dict[str, Any]] = {
    "org/a-pass-clean": dict(
        downloads=1000,
        pipeline_tag="text-generation",
        library="transformers",
        model_type="llama",
        architecture="LlamaForCausalLM",
    ),
    "org/b-pass-fallback": dict(
        downloads=500,
        pipeline_tag="text-generation",
        library="transformers",
        model_type="llama",
        architecture="LlamaForCausalLM",
    ),
    "org/c-fail-compile": dict(
        downloads=300,
        pipeline_tag="text-generation",
        library="transformers",
        model_type="mixtral",
        architecture="MixtralForCausalLM",
    ),
    "bert-x": dict(
        downloads=200,
        pipeline_tag="fill-mask",
        library="transformers",
        model_type="bert",
        architecture="BertForMaskedLM",
    ),
    "org/e-remote": dict(
        downloads=100,
        pipeline_tag="text-generation",
        library="transformers",
        model_type="custom",
        architecture="CustomForCausalLM",
    ),
    "org/f-gguf": dict(
        downloads=50,
        pipeline_tag="text-generation",
        library="gguf",
        model_type=None,
        architecture=None,
    ),
    "org/g-timeout": dict(
        downloads=150,
        pipeline_tag="text-generation",
        library="transformers",
        model_type="qwen2",
        architecture="Qwen2ForCausalLM",
    ),
    EVIL_ID: dict(
        downloads=10,
        pipeline_tag="text-classification",
        library="transformers",
        model_type="evil",
        architecture="EvilModel",
    ),
    "org/old": dict(
        downloads=20,
        pipeline_tag="fill-mask",
        library="transformers",
        model_type="bert",
        architecture="BertForMaskedLM",
    ),
}


def rows_for(
    run_id: str,
    model_id: str,
    statuses: list[str],
    *,
    reason: str | None = None,
    fallbacks: dict[str, dict[str, int]] | None = None,
    error: tuple | None = None,
    attempt: int = 1,
    torch_hint: str = "",
) -> tuple[list[dict], list[dict]]:
    """Result rows for the five stages and fallback rows; `error` = (stage, type, message,
    signature, failing_op)."""
    meta = MODELS[model_id]
    rank = list(MODELS).index(model_id) + 1
    results, fbs = [], []
    fallbacks = fallbacks or {}
    for i, (stage, status) in enumerate(zip(STAGES, statuses, strict=True)):
        ops = fallbacks.get(stage, {})
        row = {
            "run_id": run_id,
            "model_id": model_id,
            "rank": rank,
            **meta,
            "config_source": "none" if status == "skip" and reason != "not_applicable" else "hub",
            "config_hash": "c0ffee",
            "shrunk_config_hash": f"s-{meta['architecture']}",
            "device": "neuron",
            "device_emulated": True,
            "dtype": "fp32",
            "stage": stage,
            "status": status,
            "reason": reason if status == "skip" else None,
            "fallback_op_count": len(ops),
            "fallback_call_count": sum(ops.values()),
            "duration_s": 0.5,
            "attempt": attempt,
            "finished_at": T0 + dt.timedelta(minutes=i + attempt),
        }
        if error and error[0] == stage:
            _, etype, msg, sig, op = error
            row.update(error_type=etype, error_message=msg, error_signature=sig, failing_op=op)
        results.append(row)
        for op, count in ops.items():
            fbs.append(
                {
                    "run_id": run_id,
                    "model_id": model_id,
                    "stage": stage,
                    "device": "neuron",
                    "op": op,
                    "count": count,
                    "source": "eager",
                    "downloads": meta["downloads"],
                }
            )
    return results, fbs


ALL_PASS = ["pass"] * 5
ENCODER_PASS = ["pass"] * 4 + ["skip"]


def build_hand_store(root: str | Path) -> Store:
    store = Store(root)
    # ---- r1 ----
    r1 = "r1"
    batch: list[tuple[list, list]] = [
        rows_for(r1, "org/a-pass-clean", ALL_PASS),
        rows_for(
            r1,
            "org/b-pass-fallback",
            ["pass", "pass", "fail", "not_run", "not_run"],
            error=("backward", "RuntimeError", "bad grad", "RuntimeError: bad grad", None),
        ),
        rows_for(r1, "org/c-fail-compile", ALL_PASS, fallbacks={"forward": {"aten::histc": 1}}),
        _encoder(r1, "bert-x"),
        rows_for(r1, "org/e-remote", ["skip"] * 5, reason="remote_code"),
        rows_for(r1, "org/f-gguf", ["skip"] * 5, reason="no_config"),
        rows_for(
            r1,
            "org/g-timeout",
            ["pass", "timeout", "not_run", "not_run", "not_run"],
            error=(
                "forward",
                "TimeoutError",
                "stage exceeded 300 s",
                "TimeoutError: stage exceeded N s",
                None,
            ),
        ),
        _encoder(r1, "org/old"),
    ]
    _write(store, r1, batch)
    store.write("runs", r1, [_run(r1, T0, "finished", torch="2.13.0", requested=8)])
    # ---- r2 ----
    r2 = "r2"
    batch = [
        rows_for(r2, "org/a-pass-clean", ALL_PASS),
        rows_for(
            r2,
            "org/b-pass-fallback",
            ALL_PASS,
            fallbacks={"forward": {"aten::histc": 3}, "backward": {"aten::histc": 2}},
        ),
        rows_for(
            r2,
            "org/c-fail-compile",
            ["pass", "pass", "pass", "fail", "not_run"],
            fallbacks={"forward": {"aten::histc": 4, "aten::nonzero": 1}},
            error=(
                "compile",
                "RuntimeError",
                "boom in aten::nonzero",
                "RuntimeError: boom",
                "aten::nonzero",
            ),
        ),
        _encoder(r2, "bert-x"),
        rows_for(r2, "org/e-remote", ["skip"] * 5, reason="remote_code"),
    ]
    _write(store, r2, batch)
    batch = [
        rows_for(r2, "org/f-gguf", ["skip"] * 5, reason="no_config"),
        rows_for(
            r2,
            "org/g-timeout",
            ["pass", "crash", "not_run", "not_run", "not_run"],
            error=("forward", "WorkerCrashedError", "died", "WorkerCrashedError: died", None),
        ),
        rows_for(
            r2,
            EVIL_ID,
            ["fail", "not_run", "not_run", "not_run", "not_run"],
            error=(
                "load",
                "ValueError",
                EVIL_MESSAGE,
                "ValueError: <script>alert(N)</script>",
                None,
            ),
        ),
    ]
    _write(store, r2, batch)
    # the retry of g: attempt 2 says timeout (the summary keeps the latest attempt)
    _write(
        store,
        r2,
        [
            rows_for(
                r2,
                "org/g-timeout",
                ["pass", "timeout", "not_run", "not_run", "not_run"],
                attempt=2,
                error=(
                    "forward",
                    "TimeoutError",
                    "stage exceeded 300 s",
                    "TimeoutError: stage exceeded N s",
                    None,
                ),
            )
        ],
    )
    # an orphan fallback part (its results part was never written): invisible
    store.write(
        "fallbacks",
        r2,
        [
            {
                "run_id": r2,
                "model_id": "org/a-pass-clean",
                "stage": "forward",
                "device": "neuron",
                "op": "aten::orphan",
                "count": 7,
                "source": "eager",
                "downloads": 1000,
            }
        ],
        name="part-orphan.parquet",
    )
    t2 = T0 + dt.timedelta(days=1)
    store.write(
        "runs",
        r2,
        [
            _run(
                r2, t2, "running", torch="2.13.1", requested=9, updated=t2 + dt.timedelta(minutes=1)
            )
        ],
    )
    store.write(
        "runs",
        r2,
        [_run(r2, t2, "finished", torch="2.13.1", requested=9, updated=t2 + dt.timedelta(hours=1))],
    )
    return store


def _encoder(run_id: str, model_id: str) -> tuple[list, list]:
    return rows_for(run_id, model_id, ENCODER_PASS, reason="not_applicable")


def configs_for(results: list[dict]) -> list[dict]:
    """The configs rows of models' results: one per (original, shrunk) config pair."""
    pairs = {(r["config_hash"], r["shrunk_config_hash"]): r for r in results}
    return [
        {
            "run_id": r["run_id"],
            "config_hash": original,
            "shrunk_config_hash": shrunk,
            "architecture": r.get("architecture"),
            "shrink_changes": json.dumps({"hidden_size": [4096, 64], "num_hidden_layers": [32, 2]}),
            "shrunk_config": json.dumps({"model_type": r["model_type"], "hidden_size": 64}),
        }
        for (original, shrunk), r in pairs.items()
    ]


def _write(store: Store, run_id: str, batch: list[tuple[list, list]]) -> None:
    results = [r for res, _ in batch for r in res]
    fallbacks = [f for _, fb in batch for f in fb]
    write_model_rows(store, run_id, results, fallbacks, configs_for(results))


def _run(
    run_id: str,
    started: dt.datetime,
    status: str,
    *,
    torch: str,
    requested: int,
    updated: dt.datetime | None = None,
) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "status": status,
        "started_at": started,
        "updated_at": updated or started + dt.timedelta(hours=1),
        "device": "neuron",
        "device_emulated": True,
        "dtype": "fp32",
        "stages": ",".join(STAGES),
        "catalog": "bundled:test",
        "catalog_size": 20,
        "models_requested": requested,
        "torch_version": torch,
        "transformers_version": "5.24.0",
        "git_sha": "abc",
        "command": "hfsweep run --device neuron",
    }
