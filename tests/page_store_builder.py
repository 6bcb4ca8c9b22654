"""A store shaped like the demo's for the page tests (links, widths): the hand-built model runs
(`report_store_builder`: r1, r2) and op-sweep run (`op_store_builder`: o1), and in r2 what the
demo's store has that they lack:

- `org/h-no-evidence` (400 downloads, zero-shot-image-classification, sentence-transformers):
  passed; its compile took aten::hamming_window.periodic_alpha_beta and
  aten::_native_batch_norm_legit_no_training to lower with no evidence either way, the only
  rows that name them (ops of the missing-ops ranking with absence of evidence only);
- a Mixtral with a long id (40): failed at forward on aten::_grouped_mm, with a long error;
- a pyannote pipeline with a long id (30): failed at compile on a long op, with the demo's long
  facets (pyannote-audio, automatic-speech-recognition, PyanNet+WeSpeakerResNet34);
- a run row with a git sha of 40 characters, as a real run records.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from reports.store import Store
from tests import report_store_builder as b
from tests.op_store_builder import build_op_run
from tests.store_writes import write_model_rows

NO_EVIDENCE_ID = "org/h-no-evidence"
NO_EVIDENCE_OPS = [
    "aten::hamming_window.periodic_alpha_beta",
    "aten::_native_batch_norm_legit_no_training",
]
# long facets, as the demo's: the models table's filters must still fit on one line
NO_EVIDENCE_META = {
    "library": "sentence-transformers",
    "pipeline_tag": "zero-shot-image-classification",
    "model_type": "clip",
    "architecture": "CLIPModel",
}
GIT_SHA = "2c91adb353f0e6c4ab8e8b0d9d3f1e2a7c5b4d60"
LONG_FAILURES = [
    (
        "an-organisation-with-a-long-name/Mixtral-8x22B-Instruct-v0.1-with-a-long-suffix",
        40,
        "forward",
        "ValueError",
        "offs must be divisible by 128: the per-expert routing offsets [35, 56, 88, 128] "
        "(cumulative tokens per expert) are not; TorchNeuron's _grouped_mm precondition "
        "(TORCH_NEURONX_SKIP_OP_PRECONDITIONS=1 skips it)",
        "aten::_grouped_mm",
        {},
    ),
    (
        "pyannote/speaker-diarization-community-1-with-a-long-name",
        30,
        "compile",
        "UnlowerableOpError",
        "aten::_thnn_fused_lstm_cell_backward_impl cannot be lowered by the neuron compiler; "
        "TorchNeuron raises when a graph fails to compile",
        "aten::_thnn_fused_lstm_cell_backward_impl",
        {
            "library": "pyannote-audio",
            "pipeline_tag": "automatic-speech-recognition",
            "model_type": "PyanNet+WeSpeakerResNet34",
            "architecture": "PipelineModels",
        },
    ),
]


def build_pages_store(root: str | Path) -> Store:
    store = b.build_hand_store(root)
    build_op_run(root)
    res, fbs = b.rows_for("r2", "org/a-pass-clean", b.ALL_PASS)
    for r in res:
        r.update(model_id=NO_EVIDENCE_ID, downloads=400, rank=20, **NO_EVIDENCE_META)
        if r["stage"] == "compile":
            r.update(compile_evidence="none", unverified_ops=NO_EVIDENCE_OPS)
    batch = [(res, fbs)]
    for model_id, downloads, stage, kind, message, op, meta in LONG_FAILURES:
        at = b.STAGES.index(stage)
        statuses = ["pass"] * at + ["fail"] + ["not_run"] * (len(b.STAGES) - at - 1)
        res, fbs = b.rows_for(
            "r2", "org/c-fail-compile", statuses, error=(stage, kind, message, kind, op)
        )
        for r in res:
            r.update(model_id=model_id, downloads=downloads, rank=30, **meta)
        batch.append((res, fbs))
    results = [r for res, _ in batch for r in res]
    write_model_rows(store, "r2", results, [], b.configs_for(results))
    started = b.T0 + dt.timedelta(days=1)  # r2's, updated after its last row
    run = b._run(
        "r2",
        started,
        "finished",
        torch="2.13.1",
        requested=12,
        updated=started + dt.timedelta(hours=2),
    )
    run["git_sha"] = GIT_SHA
    store.write("runs", "r2", [run])
    return store
