"""Generate a synthetic store with the real schema and realistic distributions.

Models have Hub-like ids (`org/name`, a few without an org), downloads follow a Zipf law, skips
come with their reasons (remote code, no config, unsupported library, gated, ...), failures with
clustered error signatures, and the emulated neuron device records CPU fallbacks per op. Runs differ
a little from night to night (a few models flip, versions change every few runs), so diffs and
"coverage over runs" have something to show. Rows are written run by run in chunks, so 10M rows
need little memory.

    python bench/synthetic_store.py --out /tmp/store --models 100000 --runs 2   # 1M result rows
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ground.schema import (  # noqa: E402
    CONFIGS_SCHEMA,
    FALLBACKS_SCHEMA,
    RESULTS_SCHEMA,
    STAGE_ORDER,
)
from reports.store import Store  # noqa: E402

STAGES = [s.value for s in STAGE_ORDER]
ORGS = [
    "google",
    "meta-llama",
    "microsoft",
    "Qwen",
    "mistralai",
    "openai",
    "facebook",
    "sentence-transformers",
    "BAAI",
    "stabilityai",
    "runwayml",
    "intfloat",
    "TheBloke",
    "unsloth",
    "mlx-community",
    "bartowski",
    "deepseek-ai",
    "allenai",
    "nvidia",
    "timm",
    "laion",
    "openai-community",
    "FacebookAI",
    "distilbert",
    "cardiffnlp",
    "jonatasgrosman",
    "pyannote",
    "Salesforce",
    "tiiuae",
    "bigscience",
    "EleutherAI",
    "HuggingFaceTB",
]
WORDS = [
    "bert",
    "llama",
    "qwen",
    "mistral",
    "gpt",
    "t5",
    "vit",
    "clip",
    "whisper",
    "roberta",
    "phi",
    "gemma",
    "falcon",
    "bloom",
    "opt",
    "bart",
    "deberta",
    "electra",
    "xlm",
    "mpnet",
    "minilm",
    "wav2vec2",
    "beit",
    "convnext",
    "resnet",
    "sd",
    "sdxl",
    "flux",
    "mamba",
    "yolos",
]
SIZES = ["tiny", "small", "base", "large", "xl", "1b", "3b", "7b", "8b", "13b", "70b", "mini"]
# model_type -> (architecture, library, pipeline_tag, generative)
FAMILIES = [
    ("bert", "BertModel", "transformers", "feature-extraction", False),
    ("bert", "BertForMaskedLM", "transformers", "fill-mask", False),
    ("roberta", "RobertaForSequenceClassification", "transformers", "text-classification", False),
    ("llama", "LlamaForCausalLM", "transformers", "text-generation", True),
    ("qwen2", "Qwen2ForCausalLM", "transformers", "text-generation", True),
    ("qwen3", "Qwen3ForCausalLM", "transformers", "text-generation", True),
    ("mistral", "MistralForCausalLM", "transformers", "text-generation", True),
    ("mixtral", "MixtralForCausalLM", "transformers", "text-generation", True),
    ("gemma2", "Gemma2ForCausalLM", "transformers", "text-generation", True),
    ("phi3", "Phi3ForCausalLM", "transformers", "text-generation", True),
    ("gpt2", "GPT2LMHeadModel", "transformers", "text-generation", True),
    ("falcon", "FalconForCausalLM", "transformers", "text-generation", True),
    ("t5", "T5ForConditionalGeneration", "transformers", "text2text-generation", True),
    ("bart", "BartForConditionalGeneration", "transformers", "summarization", True),
    ("vit", "ViTForImageClassification", "transformers", "image-classification", False),
    ("clip", "CLIPModel", "transformers", "zero-shot-image-classification", False),
    (
        "whisper",
        "WhisperForConditionalGeneration",
        "transformers",
        "automatic-speech-recognition",
        True,
    ),
    ("wav2vec2", "Wav2Vec2ForCTC", "transformers", "automatic-speech-recognition", False),
    (
        "deberta-v2",
        "DebertaV2ForSequenceClassification",
        "transformers",
        "text-classification",
        False,
    ),
    ("xlm-roberta", "XLMRobertaModel", "sentence-transformers", "sentence-similarity", False),
    ("mpnet", "MPNetModel", "sentence-transformers", "sentence-similarity", False),
    ("bert", "BertModel", "sentence-transformers", "sentence-similarity", False),
    ("mamba", "MambaForCausalLM", "transformers", "text-generation", True),
    ("unet", "UNet2DConditionModel", "diffusers", "text-to-image", False),
    ("flux", "FluxTransformer2DModel", "diffusers", "text-to-image", False),
    ("resnet", "ResNetForImageClassification", "timm", "image-classification", False),
    (None, None, "gguf", "text-generation", True),
    (None, None, "mlx", "text-generation", True),
    (None, None, None, None, False),
]
FAMILY_WEIGHTS = np.array(
    [8, 5, 5, 9, 6, 3, 4, 1, 2, 2, 3, 1, 3, 2, 4, 2, 2, 2, 2, 4, 3, 4, 1, 2, 1, 3, 6, 4, 3],
    dtype=float,
)
SIGNATURES = [
    ("RuntimeError", "RuntimeError: \"histogram_cpu\" not implemented for 'Int'", "aten::histc"),
    (
        "NotImplementedError",
        "NotImplementedError: convolution_overrideable not implemented",
        "aten::convolution_overrideable",
    ),
    (
        "RuntimeError",
        "RuntimeError: shape mismatch: value tensor of shape [?] cannot be broadcast",
        None,
    ),
    (
        "TorchRuntimeError",
        "TorchRuntimeError: Dynamo failed to run FX node with fake tensors",
        None,
    ),
    (
        "BackendCompilerFailed",
        "BackendCompilerFailed: backend='neuron' raised: "
        "unsupported op aten::_scaled_dot_product_flash_attention",
        "aten::_scaled_dot_product_flash_attention",
    ),
    ("AssertionError", "AssertionError: max abs error N above tolerance N", None),
    ("TimeoutError", "TimeoutError: stage exceeded N s", None),
    ("WorkerCrashedError", "WorkerCrashedError: the worker process died (signal N)", None),
    ("OutOfMemoryError", "OutOfMemoryError: N bytes requested", None),
    (
        "ValueError",
        "ValueError: Unrecognized configuration class <class '?'> for this kind of AutoModel",
        None,
    ),
    ("TypeError", "TypeError: forward() got an unexpected keyword argument 'N'", None),
    ("RuntimeError", "RuntimeError: expected scalar type Float but found BFloat16", None),
    ("KeyError", "KeyError: 'N'", None),
    ("RuntimeError", "RuntimeError: aten::_fft_r2c not implemented on neuron", "aten::_fft_r2c"),
]
STATUS_BY_SIG = {5: "fail_accuracy", 6: "timeout", 7: "crash", 8: "oom"}
OPS = [
    "aten::histc",
    "aten::_fft_r2c",
    "aten::nonzero",
    "aten::unique_dim",
    "aten::cumsum.out",
    "aten::sort.values_stable",
    "aten::topk.values",
    "aten::index_put_",
    "aten::scatter_add.out",
    "aten::masked_select",
    "aten::_local_scalar_dense",
    "aten::repeat_interleave.Tensor",
    "aten::upsample_bilinear2d.out",
    "aten::grid_sampler_2d",
    "aten::_embedding_bag",
    "aten::bucketize.Tensor",
    "aten::searchsorted.Tensor",
    "aten::linalg_vector_norm.out",
    "aten::erfinv.out",
    "aten::polar.out",
    "aten::complex",
    "aten::_unique2",
    "aten::argsort",
    "aten::multinomial",
    "aten::bernoulli_.float",
    "aten::rrelu_with_noise",
    "aten::kthvalue",
    "aten::median.dim",
    "aten::mode",
    "aten::col2im",
    "aten::im2col",
    "aten::max_pool3d",
    "aten::avg_pool3d.out",
    "aten::adaptive_max_pool2d.out",
    "aten::_ctc_loss",
    "aten::convolution_overrideable",
    "aten::convolution_backward_overrideable",
    "aten::_scaled_dot_product_flash_attention",
    "aten::logcumsumexp",
    "aten::cummax",
]
SKIP_BY_LIBRARY = {
    "gguf": "no_config",
    "mlx": "unsupported_library",
    None: "no_config",
    "timm": "unsupported_library",
}


def zipf_downloads(n: int, rng: np.random.Generator) -> np.ndarray:
    ranks = np.arange(1, n + 1, dtype=float)
    base = 1.5e8 / ranks**1.05
    noise = rng.lognormal(0.0, 0.15, n)
    d = np.maximum((base * noise).astype(np.int64), 10)
    return -np.sort(-d)


def make_models(n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    fam = rng.choice(len(FAMILIES), size=n, p=FAMILY_WEIGHTS / FAMILY_WEIGHTS.sum())
    org = rng.choice(len(ORGS), size=n)
    ids = []
    for i in range(n):
        mt, _, lib = FAMILIES[fam[i]][:3]
        word = mt or f"{WORDS[rng.integers(len(WORDS))]}-{lib or 'export'}"
        name = f"{word}-{SIZES[rng.integers(len(SIZES))]}-{i:06d}"
        mid = name if rng.random() < 0.03 else f"{ORGS[org[i]]}/{name}"
        ids.append(mid)
    skip = np.full(n, None, dtype=object)
    for i in range(n):
        lib = FAMILIES[fam[i]][2]
        if lib in SKIP_BY_LIBRARY:
            skip[i] = SKIP_BY_LIBRARY[lib]
    u = rng.random(n)
    skip[(skip == None) & (u < 0.04)] = "remote_code"  # noqa: E711
    skip[(skip == None) & (u >= 0.04) & (u < 0.06)] = "gated"  # noqa: E711
    skip[(skip == None) & (u >= 0.06) & (u < 0.075)] = "unknown_model_type"  # noqa: E711
    skip[(skip == None) & (u >= 0.075) & (u < 0.08)] = "malformed_config"  # noqa: E711
    # per-model traits that stay stable across runs
    fail_stage = rng.choice([-1, 0, 1, 2, 3, 4], size=n, p=[0.62, 0.04, 0.07, 0.05, 0.17, 0.05])
    sig = np.minimum(rng.zipf(1.6, size=n) - 1, len(SIGNATURES) - 1)
    n_fb = np.minimum(rng.zipf(1.8, size=n) - 1, 8)  # distinct fallback ops per model
    configs = []
    changes = []
    for i in range(n):
        mt = FAMILIES[fam[i]][0] or "unknown"
        hidden = int(rng.choice([768, 1024, 2048, 4096]))
        layers = int(rng.choice([6, 12, 24, 32]))
        changes.append(
            json.dumps(
                {
                    "hidden_size": [hidden, 64],
                    "num_hidden_layers": [layers, 2],
                    "intermediate_size": [hidden * 4, 128],
                    "vocab_size": [32000, 1024],
                }
            )
        )
        configs.append(
            json.dumps(
                {
                    "model_type": mt,
                    "hidden_size": 64,
                    "num_hidden_layers": 2,
                    "num_attention_heads": 4,
                    "intermediate_size": 128,
                    "vocab_size": 1024,
                    "max_position_embeddings": 512,
                    "architectures": [FAMILIES[fam[i]][1]],
                }
            )
        )
    return {
        "model_id": np.array(ids, dtype=object),
        "family": fam,
        "downloads": zipf_downloads(n, rng),
        "skip": skip,
        "fail_stage": fail_stage,
        "sig": sig,
        "n_fb": n_fb,
        "shrink_changes": np.array(changes, dtype=object),
        "shrunk_config": np.array(configs, dtype=object),
        "fb_ops": rng.choice(len(OPS), size=(n, 8), p=_op_weights()),
    }


def _op_weights() -> np.ndarray:
    w = 1.0 / np.arange(1, len(OPS) + 1) ** 1.1
    return w / w.sum()


def versions_for(run_index: int) -> dict[str, str]:
    return {
        "torch_version": f"2.13.{run_index // 5}",
        "transformers_version": f"5.24.{run_index // 3}",
        "diffusers_version": "0.42.1",
        "ray_version": "2.60.0",
        "device_package_version": f"0.9.{run_index // 4}",
        "git_sha": f"{run_index:07x}",
    }


def write_run(
    store: Store,
    models: dict[str, np.ndarray],
    run_index: int,
    run_id: str,
    started: dt.datetime,
    *,
    chunk: int,
    seed: int,
) -> tuple[int, int]:
    """Write one run's results and fallbacks in chunks; returns (result rows, fallback rows)."""
    rng = np.random.default_rng(seed + 1000 + run_index)
    n = len(models["model_id"])
    fam = models["family"]
    flip = rng.random(n) < 0.02  # a few models change outcome from night to night
    fail_stage = np.where(flip, rng.choice([-1, 3], size=n), models["fail_stage"])
    n_results = n_fallbacks = 0
    pairs_seen: set[tuple[str, str]] = set()  # configs rows: once per run and config pair
    for lo in range(0, n, chunk):
        hi = min(lo + chunk, n)
        cols: dict[str, list] = {name: [] for name in RESULTS_SCHEMA.names}
        fb: dict[str, list] = {name: [] for name in FALLBACKS_SCHEMA.names}
        cf: dict[str, list] = {name: [] for name in CONFIGS_SCHEMA.names}
        for i in range(lo, hi):
            mt, arch, lib, tag, generative = FAMILIES[fam[i]]
            skip = models["skip"][i]
            fs = int(fail_stage[i])
            sig = int(models["sig"][i])
            mid = models["model_id"][i]
            dl = int(models["downloads"][i])
            done = False
            for s_idx, stage in enumerate(STAGES):
                status, reason, etype, emsg, esig, fop = "pass", None, None, None, None, None
                if skip is not None:
                    status, reason = "skip", skip
                elif stage == "generate" and not generative:
                    status, reason = "skip", "not_applicable"
                elif done:
                    status = "not_run"
                elif s_idx == fs:
                    etype, esig, fop = SIGNATURES[sig]
                    status = STATUS_BY_SIG.get(sig, "fail")
                    emsg = esig.split(": ", 1)[1].replace("N", str(rng.integers(1, 4096)))
                    done = True
                n_ops = 0
                if status == "pass" and stage in ("forward", "backward", "compile"):
                    n_ops = int(models["n_fb"][i]) if stage != "compile" else 0
                    n_ops = min(n_ops, 8)
                ops = {OPS[j] for j in models["fb_ops"][i][:n_ops]}
                calls = 0
                for op in sorted(ops):
                    c = int(rng.integers(1, 200))
                    calls += c
                    fb["run_id"].append(run_id)
                    fb["model_id"].append(mid)
                    fb["stage"].append(stage)
                    fb["device"].append("neuron")
                    fb["op"].append(op)
                    fb["count"].append(c)
                    fb["bytes_h2d"].append(c * 4096)
                    fb["bytes_d2h"].append(c * 4096)
                    fb["source"].append("eager")
                    fb["downloads"].append(dl)
                row = {
                    "run_id": run_id,
                    "model_id": mid,
                    "rank": i + 1,
                    "downloads": dl,
                    "library": lib,
                    "pipeline_tag": tag,
                    "model_type": mt,
                    "architecture": arch,
                    "config_source": "none" if skip in ("no_config", "gated") else "hub",
                    "config_hash": f"{hash((mid, 'c')) & 0xFFFFFFFF:08x}",
                    "shrunk_config_hash": None if skip else f"{hash((arch, 's')) & 0xFFFFFF:06x}",
                    "shrink_changes": None if skip else models["shrink_changes"][i],
                    "shrunk_config": None if skip else models["shrunk_config"][i],
                    "param_count": None if skip else 120_000,
                    "device": "neuron",
                    "device_emulated": True,
                    "device_profile": "trn2-emulated",
                    "device_profile_hash": "a1b2c3",
                    "dtype": "float32",
                    "stage": stage,
                    "status": status,
                    "reason": reason,
                    "error_type": etype,
                    "error_message": emsg,
                    "error_signature": esig,
                    "failing_op": fop,
                    "duration_s": float(rng.gamma(2.0, 0.5)) if status != "skip" else 0.0,
                    "fallback_op_count": len(ops),
                    "fallback_call_count": calls,
                    "bytes_h2d": calls * 4096,
                    "bytes_d2h": calls * 4096,
                    "max_abs_error": 1e-7 if status == "pass" else None,
                    "graph_count": 1 if stage == "compile" else None,
                    "graph_break_count": 0 if stage == "compile" else None,
                    "partition_count": None,
                    "compile_s": None,
                    "step_s": None,
                    "peak_memory_bytes": 1 << 20,
                    "dedup_of": None,
                    "attempt": 1,
                    "finished_at": started + dt.timedelta(seconds=i * 0.1),
                }
                for k in RESULTS_SCHEMA.names:  # columns added to the schema later stay null
                    cols[k].append(row.get(k))
                pair = (row["config_hash"], row["shrunk_config_hash"])
                if row["shrunk_config_hash"] and pair not in pairs_seen:
                    pairs_seen.add(pair)
                    for k in CONFIGS_SCHEMA.names:
                        cf[k].append(row.get(k))
        name = f"part-{time.time_ns():020d}-{run_index:04d}{lo:09d}.parquet"
        _write(store, "fallbacks", run_id, name, pa.table(fb, schema=FALLBACKS_SCHEMA))
        _write(store, "configs", run_id, name, pa.table(cf, schema=CONFIGS_SCHEMA))
        _write(store, "results", run_id, name, pa.table(cols, schema=RESULTS_SCHEMA))
        n_results += hi - lo
        n_fallbacks += len(fb["op"])
    return n_results * len(STAGES), n_fallbacks


def _write(store: Store, table: str, run_id: str, name: str, data: pa.Table) -> None:
    if data.num_rows == 0:
        return
    folder = Path(store.root) / table / f"run_id={run_id}"
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{name}.tmp"
    pq.write_table(data, tmp, row_group_size=64_000)
    os.replace(tmp, folder / name)


def generate(
    out: str,
    *,
    models: int,
    runs: int,
    chunk: int = 10_000,
    seed: int = 0,
    catalog_size: int | None = None,
    quiet: bool = False,
) -> dict[str, int]:
    """Write `runs` nightly runs of `models` models each; returns row counts."""
    store = Store(out)
    table = make_models(models, seed)
    start = dt.datetime(2026, 11, 1, 2, 0, tzinfo=dt.UTC)
    totals = {"results": 0, "fallbacks": 0, "runs": runs}
    for r in range(runs):
        t0 = time.perf_counter()
        started = start + dt.timedelta(days=r)
        run_id = started.strftime("%Y%m%d-%H%M%S-") + f"{r:06x}"
        res, fb = write_run(store, table, r, run_id, started, chunk=chunk, seed=seed)
        store.write(
            "runs",
            run_id,
            [
                {
                    "run_id": run_id,
                    "status": "finished",
                    "started_at": started,
                    "updated_at": started + dt.timedelta(hours=5),
                    "device": "neuron",
                    "device_emulated": True,
                    "device_profile": "trn2-emulated",
                    "device_profile_hash": "a1b2c3",
                    "dtype": "float32",
                    "stages": ",".join(STAGES),
                    "catalog": "hub",
                    "catalog_size": catalog_size or models * 2,
                    "models_requested": models,
                    **versions_for(r),
                    "project_version": "0.1.0",
                    "python_version": "3.11",
                    "hostname": "synthetic",
                    "command": "hfsweep run --device neuron",
                }
            ],
        )
        totals["results"] += res
        totals["fallbacks"] += fb
        if not quiet:
            print(
                f"run {run_id}: {res:,} result rows, {fb:,} fallback rows "
                f"({time.perf_counter() - t0:.1f} s)",
                file=sys.stderr,
            )
    return totals


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--models", type=int, default=100_000)
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    totals = generate(args.out, models=args.models, runs=args.runs, seed=args.seed)
    print(json.dumps(totals))
    return 0


if __name__ == "__main__":
    sys.exit(main())
