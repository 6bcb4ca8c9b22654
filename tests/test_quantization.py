"""Quantized checkpoints as what they are: detection from real quantization_config blocks and
from the catalog's tags, the unsupported_quantization skip and its message, and tiny FP8,
MXFP4 and compressed-tensors checkpoints that load through transformers' quantizer and run on
cpu and on the emulated neuron device with their quantized ops visible."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from ground.schema import SkipReason, Stage
from model_configs import quantization
from model_configs.catalog import load_catalog
from model_configs.resolve import resolve_local
from model_configs.spec import CatalogEntry, TinySpec
from runners.settings import ModelSettings
from sweep.plan import Planned, plan_entry
from tests.neuron_support import forked

# The quantization_config blocks of real checkpoints (their config.json on the Hub), by shape.
REAL_BLOCKS: dict[str, tuple[str, str, dict[str, Any]]] = {
    # Qwen/Qwen3-14B-AWQ
    "awq": ("awq", "qwen3", {
        "bits": 4, "group_size": 128, "modules_to_not_convert": None, "quant_method": "awq",
        "version": "gemm", "zero_point": True,
    }),
    # TheBloke/Mixtral-8x7B-Instruct-v0.1-GPTQ, as TorchNeuron's snapshot keeps it
    # (tests/huggingface/configs/huggingface/CausalLM/, commit 98154b8), experts list cut to two
    "gptq": ("gptq", "mixtral", {
        "bits": 4, "damp_percent": 0.1, "desc_act": True, "group_size": -1,
        "model_file_base_name": "model", "model_name_or_path": None,
        "modules_in_block_to_quantize": [
            ["self_attn.k_proj", "self_attn.v_proj", "self_attn.q_proj"], ["self_attn.o_proj"],
            ["block_sparse_moe.experts.0.w1", "block_sparse_moe.experts.0.w2",
             "block_sparse_moe.experts.0.w3"],
        ],
        "quant_method": "gptq", "sym": True, "true_sequential": True,
    }),
    # Qwen/Qwen3-0.6B-FP8 and deepseek-ai/DeepSeek-V3 (fine-grained FP8, 128x128 blocks)
    "fp8": ("fp8", "qwen3", {
        "activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
        "weight_block_size": [128, 128],
    }),
    # openai/gpt-oss-20b
    "mxfp4": ("mxfp4", "gpt_oss", {
        "modules_to_not_convert": [
            "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
            "lm_head",
        ],
        "quant_method": "mxfp4",
    }),
    # RedHatAI/Llama-3.2-1B-Instruct-FP8-dynamic
    "ct_fp8": ("compressed-tensors", "llama", {
        "config_groups": {"group_0": {
            "input_activations": {"actorder": None, "block_structure": None, "dynamic": True,
                                  "group_size": None, "num_bits": 8, "observer": None,
                                  "observer_kwargs": {}, "strategy": "token", "symmetric": True,
                                  "type": "float"},
            "output_activations": None, "targets": ["Linear"],
            "weights": {"actorder": None, "block_structure": None, "dynamic": False,
                        "group_size": None, "num_bits": 8, "observer": "minmax",
                        "observer_kwargs": {}, "strategy": "channel", "symmetric": True,
                        "type": "float"},
        }},
        "format": "float-quantized", "global_compression_ratio": None, "ignore": ["lm_head"],
        "kv_cache_scheme": None, "quant_method": "compressed-tensors",
        "quantization_status": "compressed",
    }),
    # nm-testing/DeepSeek-Coder-V2-Lite-Instruct-W8A8 (weights and activations INT8)
    "ct_w8a8": ("compressed-tensors", "llama", {
        "config_groups": {"group_0": {
            "input_activations": {"actorder": None, "block_structure": None, "dynamic": True,
                                  "group_size": None, "num_bits": 8, "observer": "memoryless",
                                  "observer_kwargs": {}, "strategy": "token", "symmetric": True,
                                  "type": "int"},
            "output_activations": None, "targets": ["Linear"],
            "weights": {"actorder": None, "block_structure": None, "dynamic": False,
                        "group_size": None, "num_bits": 8, "observer": "minmax",
                        "observer_kwargs": {}, "strategy": "channel", "symmetric": True,
                        "type": "int"},
        }},
        "format": "int-quantized", "global_compression_ratio": 1.2697642717533653,
        "ignore": ["lm_head"], "kv_cache_scheme": None, "quant_method": "compressed-tensors",
        "quantization_status": "compressed",
    }),
    # RedHatAI/*-quantized.w4a16 (INT4 groups of 128 packed into int32)
    "ct_w4a16": ("compressed-tensors", "qwen2", {
        "config_groups": {"group_0": {
            "input_activations": None, "output_activations": None, "targets": ["Linear"],
            "weights": {"actorder": None, "block_structure": None, "dynamic": False,
                        "group_size": 128, "num_bits": 4, "observer": "minmax",
                        "observer_kwargs": {}, "strategy": "group", "symmetric": True,
                        "type": "int"},
        }},
        "format": "pack-quantized", "ignore": ["lm_head"], "kv_cache_scheme": None,
        "quant_method": "compressed-tensors", "quantization_status": "compressed",
    }),
    # unsloth/mistral-7b-v0.3-bnb-4bit
    "bnb": ("bitsandbytes", "mistral", {
        "_load_in_4bit": True, "_load_in_8bit": False, "bnb_4bit_compute_dtype": "bfloat16",
        "bnb_4bit_quant_storage": "uint8", "bnb_4bit_quant_type": "nf4",
        "bnb_4bit_use_double_quant": True, "llm_int8_enable_fp32_cpu_offload": False,
        "llm_int8_has_fp16_weight": False, "llm_int8_skip_modules": None,
        "llm_int8_threshold": 6.0, "load_in_4bit": True, "load_in_8bit": False,
        "quant_method": "bitsandbytes",
    }),
}  # fmt: skip
# lmstudio-community/LFM2-1.2B-MLX-8bit, as TorchNeuron's snapshot keeps it: MLX writes its
# own `quantization` key and a quantization_config with no quant_method
MLX_KEYS = {"quantization": {"bits": 8, "group_size": 64}, "quantization_config": {"bits": 8, "group_size": 64}}  # fmt: skip

STAGES = [Stage.LOAD, Stage.FORWARD, Stage.BACKWARD]
RUNNABLE = ["fp8", "mxfp4", "ct_fp8", "ct_w8a8", "ct_w4a16"]


def config_file(tmp_path: Path, model_type: str, extra: dict[str, Any]) -> Path:
    from transformers import AutoConfig

    config = AutoConfig.for_model(model_type).to_dict()
    config.update(copy.deepcopy(extra))
    path = tmp_path / f"{model_type}-config.json"
    path.write_text(json.dumps(config))
    return path


def plan_local(path: Path) -> Planned:
    return plan_entry(CatalogEntry(model_id=str(path)), STAGES, resolved=resolve_local(path))


def catalog_entry(model_id: str) -> CatalogEntry:
    return next(e for e in load_catalog("bundled").entries if e.model_id == model_id)


@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Planned]:
    tmp = tmp_path_factory.mktemp("quantized-configs")
    out = {
        key: plan_local(config_file(tmp, mt, {"quantization_config": block}))
        for key, (_, mt, block) in REAL_BLOCKS.items()
    }
    out["mlx"] = plan_local(config_file(tmp, "lfm2", MLX_KEYS))
    return out


# ---- detection --------------------------------------------------------------------------------


@pytest.mark.parametrize("key", sorted(REAL_BLOCKS))
def test_method_read_from_a_real_quantization_config(key: str) -> None:
    method, _, block = REAL_BLOCKS[key]
    found = quantization.from_config({"model_type": "x", "quantization_config": block})
    assert found is not None and found.name == method


def test_mlx_recognised_by_its_own_key_and_a_block_without_method_is_unknown() -> None:
    assert quantization.method_of(MLX_KEYS) == "mlx"
    assert quantization.method_of({"quantization_config": {"bits": 4}}) == "unknown"
    assert quantization.method_of({"quantization_config": {"quant_method": "hqq"}}) == "hqq"
    assert quantization.get("hqq").path == "skip"  # a method the table does not assess
    assert quantization.method_of({"model_type": "llama"}) is None
    assert quantization.method_of(None, ("4-bit", "text-generation")) == "unknown"  # width only
    assert quantization.method_of(None, ("fp8", "compressed-tensors")) == "compressed-tensors"


@pytest.mark.parametrize(
    ("model_id", "method"),
    [
        ("Qwen/Qwen3-14B-AWQ", "awq"),
        ("Qwen/Qwen2.5-Coder-7B-Instruct-GPTQ-Int4", "gptq"),
        ("Qwen/Qwen3-0.6B-FP8", "fp8"),
        ("openai/gpt-oss-20b", "mxfp4"),
        ("RedHatAI/Llama-3.2-1B-Instruct-FP8-dynamic", "compressed-tensors"),  # also tagged fp8
        ("unsloth/mistral-7b-v0.3-bnb-4bit", "bitsandbytes"),
        ("lmstudio-community/GLM-4.7-Flash-MLX-8bit", "mlx"),
        ("MaziyarPanahi/Qwen3-4B-GGUF", "gguf"),
        ("google-bert/bert-base-uncased", None),
    ],
)
def test_method_read_from_the_catalog_tags(model_id: str, method: str | None) -> None:
    assert quantization.method_of(None, catalog_entry(model_id).tags) == method


def test_every_method_row_has_a_path_what_it_needs_and_why() -> None:
    rows = quantization.table_rows()
    assert {r["method"] for r in rows} >= {
        "fp8", "mxfp4", "compressed-tensors", "awq", "gptq", "bitsandbytes", "mlx", "gguf",
    }  # fmt: skip
    for r in rows:
        assert r["path"] in quantization.PATHS
        assert r["needs"] and r["here"] and r["reason"]


# ---- skips -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "needs"),
    [("awq", "gptqmodel"), ("gptq", "gptqmodel"), ("bnb", "bitsandbytes"), ("mlx", "MLX")],
)
def test_unsupported_method_is_a_skip_naming_it_and_what_it_needs(
    planned: dict[str, Planned], key: str, needs: str
) -> None:
    p = planned[key]
    method = REAL_BLOCKS[key][0] if key in REAL_BLOCKS else "mlx"
    assert p.spec is None and p.outcome is not None
    assert p.quantization == method
    for stage in p.outcome.stages:
        assert stage.status == "skip"
        assert stage.reason == SkipReason.UNSUPPORTED_QUANTIZATION.value
    message = p.outcome.stages[0].error_message or ""
    assert message.startswith(f"{method} quantization (its quantization_config)")
    assert needs in message


@pytest.mark.parametrize(
    ("model_id", "method"),
    [
        ("Qwen/Qwen3-14B-AWQ", "awq"),
        ("unsloth/mistral-7b-v0.3-bnb-4bit", "bitsandbytes"),
        ("lmstudio-community/GLM-4.7-Flash-MLX-8bit", "mlx"),
        ("MaziyarPanahi/Mistral-7B-Instruct-v0.3-GGUF", "gguf"),
    ],
)
def test_offline_a_tagged_checkpoint_is_skipped_not_run_as_its_architecture(
    model_id: str, method: str
) -> None:
    p = plan_entry(catalog_entry(model_id), STAGES)  # offline: no config, the tags decide
    assert p.spec is None and p.outcome is not None, "a quantized repo ran as a plain model"
    assert p.quantization == method
    assert p.outcome.stages[0].reason == SkipReason.UNSUPPORTED_QUANTIZATION.value
    assert f"{method} quantization (the catalog's tags:" in (
        p.outcome.stages[0].error_message or ""
    )


def test_compressed_tensors_scheme_unknown_offline_is_a_skip() -> None:
    p = plan_entry(catalog_entry("GadflyII/GLM-4.7-Flash-NVFP4"), STAGES)
    assert p.outcome is not None and p.quantization == "compressed-tensors"
    assert p.outcome.stages[0].reason == SkipReason.UNSUPPORTED_QUANTIZATION.value
    assert "which of its schemes" in (p.outcome.stages[0].error_message or "")


# ---- the runnable paths ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model_id", "method", "preset_format"),
    [
        ("Qwen/Qwen3-0.6B-FP8", "fp8", None),
        ("openai/gpt-oss-20b", "mxfp4", None),
        ("RedHatAI/Llama-3.2-1B-Instruct-FP8-dynamic", "compressed-tensors", "float-quantized"),
        ("RedHatAI/Qwen2.5-1.5B-quantized.w8a8", "compressed-tensors", "int-quantized"),
        ("abhishekchohan/gemma-3-12b-it-quantized-W4A16", "compressed-tensors", "pack-quantized"),
    ],
)
def test_offline_a_tagged_checkpoint_gets_its_method_default(
    model_id: str, method: str, preset_format: str | None
) -> None:
    p = plan_entry(catalog_entry(model_id), STAGES)
    assert p.spec is not None, p.outcome
    assert p.quantization == method and p.config_source == "transformers_default"
    block = p.spec.config["quantization_config"]
    assert quantization.from_config(p.spec.config).name == method
    if preset_format:
        assert block["format"] == preset_format


def test_shrunk_blocks_divide_the_tiny_widths(planned: dict[str, Planned]) -> None:
    fp8 = planned["fp8"].spec
    assert fp8 is not None
    block = fp8.config["quantization_config"]["weight_block_size"]
    assert block[0] < 128 and 128 % block[0] == 0
    assert fp8.changes["quantization_config.weight_block_size"] == [[128, 128], block]
    hidden = fp8.config["hidden_size"]
    assert hidden % block[0] == 0 and fp8.config["intermediate_size"] % block[1] == 0
    w4 = planned["ct_w4a16"].spec
    assert w4 is not None
    size = w4.config["quantization_config"]["config_groups"]["group_0"]["weights"]["group_size"]
    assert size < 128 and w4.config["hidden_size"] % size == 0
    assert planned["fp8"].spec.hash != planned["ct_fp8"].spec.hash  # never deduplicated together


def _loaded_with_dispatch(spec: TinySpec, tmp_path: Path) -> tuple[Any, Any, set[tuple[str, str]]]:
    """The full-precision tiny model, the model loaded through the quantizer, and the (op,
    input dtype) pairs the load dispatched."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from model_configs import build

    seen: set[tuple[str, str]] = set()

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            first = args[0] if args else None
            if isinstance(first, torch.Tensor):
                seen.add((func.overloadpacket.__name__, str(first.dtype)))
            return func(*args, **(kwargs or {}))

    original = build.build_model(spec)
    with Record():
        loaded = build.save_and_load(spec, build.build_model(spec), tmp_path)
    return original, loaded, seen


def test_fp8_is_dequantized_by_transformers_at_load(planned: dict[str, Planned], tmp_path) -> None:
    import torch

    spec = planned["fp8"].spec
    assert spec is not None
    original, loaded, seen = _loaded_with_dispatch(spec, tmp_path)
    assert ("_to_copy", "torch.float8_e4m3fn") in seen  # Fp8Dequantize read the FP8 blocks
    assert not any(p.dtype == torch.float8_e4m3fn for p in loaded.parameters())
    w0 = original.model.layers[0].mlp.down_proj.weight.detach()
    w1 = loaded.model.layers[0].mlp.down_proj.weight.detach()
    error = float((w0 - w1).abs().max())
    assert 0 < error < 0.1 * float(w0.abs().max())  # quantized, and close to the original


def test_mxfp4_experts_are_dequantized_by_transformers_at_load(
    planned: dict[str, Planned], tmp_path
) -> None:
    spec = planned["mxfp4"].spec
    assert spec is not None
    original, loaded, seen = _loaded_with_dispatch(spec, tmp_path)
    assert ("bitwise_and", "torch.uint8") in seen  # Mxfp4Dequantize unpacked the FP4 nibbles
    e0 = original.model.layers[0].mlp.experts.gate_up_proj.detach()
    e1 = loaded.model.layers[0].mlp.experts.gate_up_proj.detach()
    assert e0.shape == e1.shape
    error = float((e0 - e1).abs().max())
    assert 0 < error < 0.5 * float(e0.abs().max())  # FP4: coarse, but the same weights
    attn0 = original.model.layers[0].self_attn.q_proj.weight.detach()
    attn1 = loaded.model.layers[0].self_attn.q_proj.weight.detach()
    assert float((attn0 - attn1).abs().max()) == 0  # not converted (modules_to_not_convert)


def test_compressed_tensors_keeps_fp8_weights_in_the_run_dtype(
    planned: dict[str, Planned], tmp_path
) -> None:
    import torch

    from model_configs import build

    spec = planned["ct_fp8"].spec
    assert spec is not None
    loaded = build.save_and_load(spec, build.build_model(spec), tmp_path)
    cast = build.to_dtype(spec, loaded, torch.bfloat16)
    dtypes = {n: p.dtype for n, p in cast.named_parameters()}
    assert dtypes["model.layers.0.mlp.down_proj.weight"] == torch.float8_e4m3fn
    assert dtypes["model.layers.0.input_layernorm.weight"] == torch.bfloat16


@pytest.mark.parametrize("key", RUNNABLE)
def test_runnable_methods_run_on_cpu(planned: dict[str, Planned], key: str) -> None:
    from runners.run_model import run_model

    p = planned[key]
    assert p.spec is not None and p.quantization == REAL_BLOCKS[key][0]
    outcome = run_model(p.spec, ModelSettings(device="cpu", stages=STAGES))
    assert [(s.stage, s.status) for s in outcome.stages] == [(s.value, "pass") for s in STAGES], [
        (s.stage, s.error_message) for s in outcome.stages
    ]


@pytest.fixture(scope="module")
def neuron() -> Any:
    from runners.devices.neuron.emulated import NeuronEmulatedDevice

    return NeuronEmulatedDevice()  # set up inside the forked test


NEURON_CASES: dict[str, tuple[set[str], set[str]]] = {
    # key: (ops of which one must fall back on the emulated device: the quantized ops, on the
    # device; the forward statuses expected)
    # dequantized at load, on the host: the device runs the plain architecture
    "fp8": (set(), {"pass"}),
    "ct_fp8": ({"aten::amax.out", "aten::amin.out", "aten::maximum.out", "aten::minimum.out"},
               {"pass"}),
    # INT8 activations, rounded per token: a rounding step apart from the CPU is past fp32's
    # tolerance (measured: 1.3e-3 at the logits of this tiny Llama), so either status is real
    "ct_w8a8": ({"aten::round.out"}, {"pass", "fail_accuracy"}),
    "ct_w4a16": ({"aten::__rshift__.Scalar"}, {"pass"}),  # the int4 unpack, at the first forward
}  # fmt: skip


@pytest.mark.parametrize("key", sorted(NEURON_CASES))
def test_runnable_methods_on_the_emulated_neuron_device(
    planned: dict[str, Planned], neuron: Any, key: str
) -> None:
    ops, statuses = NEURON_CASES[key]
    _on_neuron(planned[key].spec, neuron, sorted(ops), sorted(statuses))


@forked
def _on_neuron(spec: TinySpec, neuron: Any, quantized_ops: list[str], statuses: list[str]) -> None:
    from runners.run_model import run_model

    settings = ModelSettings(device="neuron", stages=[Stage.LOAD, Stage.FORWARD])
    outcome = run_model(spec, settings, device=neuron)
    load, forward = outcome.stages
    assert load.status == "pass", load.error_message
    assert forward.status in statuses, forward.error_message
    fell_back = {f["op"] for f in forward.fallbacks}
    if quantized_ops:
        assert fell_back & set(quantized_ops), fell_back
    else:
        assert not any("float8" in op for op in fell_back)


# ---- end to end: a sweep's rows, its report, lookup and the model page --------------------------

SWEPT = ["Qwen/Qwen3-0.6B-FP8", "Qwen/Qwen3-14B-AWQ", "google-bert/bert-base-uncased"]


@pytest.mark.slow
@forked
def test_a_sweep_names_the_method_in_rows_report_lookup_and_model_page(tmp_path: Path) -> None:
    """The sweep is `hfsweep run` in a process forked from the warm one (`run_cli`): its own
    exit status and a driver that plans and forks its model children, without the fresh
    interpreter that imported torch again; the readers are the CLI's function here."""
    from fastapi.testclient import TestClient

    from dashboard.app import create_app
    from reports.query import StoreQuery
    from reports.store import Store
    from tests.cli_in_process import hfsweep_in_process
    from tests.warm_fork import run_cli

    store = str(tmp_path / "store")
    ran = run_cli([
        "run", "--models", ",".join(SWEPT), "--device", "cpu", "--local", "--stages",
        "load,forward", "--store", store, "--run-id", "q1", "--no-report",
    ])  # fmt: skip
    assert ran.returncode in (0, 1), ran.stderr
    rows = Store(store).read("results", run_id="q1").to_pylist()
    method = {r["model_id"]: r["quantization"] for r in rows}
    assert method == {SWEPT[0]: "fp8", SWEPT[1]: "awq", SWEPT[2]: None}
    awq = [r for r in rows if r["model_id"] == SWEPT[1]]
    assert {r["reason"] for r in awq} == {"unsupported_quantization"}
    assert {r["status"] for r in rows if r["model_id"] == SWEPT[0]} == {"pass"}

    # the readers: the CLI's function in this process (their answers are under test)
    report = hfsweep_in_process("report", "--store", store, "--run", "q1")
    assert report.returncode == 0, report.stderr
    text = report.stdout
    assert "quantized checkpoints" in text and "Quantized checkpoints by method" in text
    assert "awq (unsupported_quantization)" in text
    assert "transformers_default (a default, not the repo's own)" in text
    assert "3 of the swept models" not in text  # AWQ is skipped: 2 swept, both from defaults
    assert "2 of the swept models" in text

    lookup = hfsweep_in_process("lookup", SWEPT[1], "--store", store)
    assert lookup.returncode == 1
    assert "skipped (unsupported_quantization)" in lookup.stdout
    assert "quantization: awq" in lookup.stdout

    from reports.coverage import denominators

    quantized = denominators(StoreQuery(store), "q1")["quantized"]
    assert (quantized["models"], quantized["run"], quantized["skipped"]) == (2, 1, 1)
    fp8 = next(r for r in quantized["by_method"] if r["method"] == "fp8")
    assert fp8["stages_passed"]["forward"] == 1

    client = TestClient(create_app(store, refresh_s=0, warm=False))
    page = client.get(f"/api/models/{SWEPT[1]}")
    assert page.status_code == 200 and page.json()["model"]["quantization"] == "awq"
    html = client.get(f"/models/{SWEPT[0]}").text
    assert 'id="quantization">fp8<' in html


@forked
def test_check_a_local_quantized_config_names_the_method(tmp_path: Path) -> None:
    """`hfsweep check` in a process forked from the warm one (its exit status, its stdout)."""
    from tests.warm_fork import run_cli

    _, model_type, block = REAL_BLOCKS["gptq"]
    path = config_file(tmp_path, model_type, {"quantization_config": block})
    proc = run_cli(["check", str(path), "--device", "cpu"])
    assert proc.returncode == 1, proc.stderr
    assert "quant:   gptq (the method this checkpoint needs)" in proc.stdout
    assert "unsupported_quantization" in proc.stdout and "gptqmodel" in proc.stdout
