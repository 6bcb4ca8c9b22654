"""At full size (docs/sizing.md): parameter counts of real configs against their published
figures, the cores-needed formula, `hfsweep check` on a real Llama-3.1-8B config, the guards
and errors that never fail a model's stages, the sizing rows of a run and what the reports
make of them."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from ground.schema import SizingStatus
from model_configs.spec import CatalogEntry, ResolvedConfig
from runners.stages import default_stages
from sizing import cores, hardware, measure
from sizing.measure import ModelSize, size_model
from sweep.plan import plan_entry
from tests.cli_in_process import hfsweep_in_process
from tests.conftest import ROOT
from tests.neuron_support import forked
from tests.warm_fork import run_cli

# Published configs (their config.json values) and parameter counts, each with its source.
LLAMA_31_8B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "tie_word_embeddings": False,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "torch_dtype": "bfloat16",
}
MISTRAL_7B_V01 = {
    "architectures": ["MistralForCausalLM"],
    "model_type": "mistral",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 32000,
    "max_position_embeddings": 32768,
    "sliding_window": 4096,
    "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
}
PUBLISHED = [
    # (name, config, published count, significant digits, source)
    (
        "Llama-3.1-8B",
        LLAMA_31_8B,
        8.03e9,
        3,
        "https://huggingface.co/meta-llama/Llama-3.1-8B (Hub: Model size 8.03B params)",
    ),
    (
        "Llama-3.1-70B",
        {
            **LLAMA_31_8B,
            "hidden_size": 8192,
            "intermediate_size": 28672,
            "num_hidden_layers": 80,
            "num_attention_heads": 64,
        },
        70.6e9,
        3,
        "https://huggingface.co/meta-llama/Llama-3.1-70B (Hub: Model size 70.6B params)",
    ),
    (
        "Mistral-7B-v0.1",
        MISTRAL_7B_V01,
        7.24e9,
        3,
        "https://huggingface.co/mistralai/Mistral-7B-v0.1 (Hub: Model size 7.24B params)",
    ),
    (
        "bert-base-uncased",
        {
            "architectures": ["BertForMaskedLM"],
            "model_type": "bert",
            "hidden_size": 768,
            "intermediate_size": 3072,
            "num_hidden_layers": 12,
            "num_attention_heads": 12,
            "vocab_size": 30522,
            "max_position_embeddings": 512,
            "type_vocab_size": 2,
        },
        110e6,
        2,
        "https://arxiv.org/abs/1810.04805 (BERT-BASE: Total Parameters=110M)",
    ),
]


def planned_from(config: dict, tmp_path: Path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    from model_configs.resolve import resolve_local

    resolved = resolve_local(path)
    entry = CatalogEntry(str(path), library="transformers")
    return plan_entry(entry, list(default_stages()), resolved=resolved)


def significant(x: float, digits: int) -> float:
    return float(f"{x:.{digits}g}")


@pytest.mark.parametrize(("name", "config", "published", "digits", "source"), PUBLISHED)
def test_parameters_match_the_published_count(name, config, published, digits, source, tmp_path):
    size = planned_from(config, tmp_path).size
    assert size is not None and size.status == "ok", size
    assert significant(size.parameters, digits) == published, (name, size.parameters, source)


def test_llama_31_8b_at_full_size(tmp_path):
    size = planned_from(LLAMA_31_8B, tmp_path).size
    assert size.parameters == 8_030_261_248
    assert size.bytes_at("bf16") == 2 * size.float_elements
    # 32 layers x 8 KV heads x (128 + 128): 65,536 elements, 128 KiB a token at bf16
    assert size.kv_elements_per_token == 32 * 8 * 256
    assert size.kv_window_elements_per_token == 0
    assert (size.attention_heads, size.kv_heads) == (32, 8)
    # peft's default targets for llama: q_proj (4096 -> 4096) and v_proj (4096 -> 1024), r=8
    assert size.lora_parameters == 32 * 8 * ((4096 + 4096) + (4096 + 1024))


def test_mistral_sliding_window_caps_its_kv_cache(tmp_path):
    size = planned_from(MISTRAL_7B_V01, tmp_path).size
    assert size.kv_elements_per_token == 0
    assert size.kv_window_elements_per_token == 32 * 8 * 256
    assert size.sliding_window == 4096
    # past the window, the cache no longer grows
    at_4k = cores.kv_cache_bytes(size, 4096, 1)
    assert cores.kv_cache_bytes(size, 32768, 1) == at_4k == 4096 * 2 * 32 * 8 * 256


def test_tied_weights_are_counted_once(tmp_path):
    tied = {**LLAMA_31_8B, "tie_word_embeddings": True}
    untied = planned_from(LLAMA_31_8B, tmp_path).size
    (tmp_path / "t").mkdir()
    size = planned_from(tied, tmp_path / "t").size
    assert untied.parameters - size.parameters == 128256 * 4096


def expected_serve_cores(
    size: ModelSize,
    hw: hardware.Hardware,
    context: int = cores.SERVE_CONTEXT,
    batch: int = cores.SERVE_BATCH,
) -> int:
    """The documented formula, written again from docs/sizing.md."""
    weights = 2 * size.float_elements
    kv = 2 * size.kv_elements_per_token * context * batch
    usable = hw.core_memory_bytes * (1 - cores.RUNTIME_RESERVE)
    t = 1
    while True:
        heads_ok = size.attention_heads % t == 0
        kv_ok = size.kv_heads % t == 0 or t % size.kv_heads == 0
        share = 1 / t if size.kv_heads % t == 0 else 1 / size.kv_heads
        if heads_ok and kv_ok and weights / t + kv * share <= usable:
            return t
        t *= 2


def test_formula_on_trainium(tmp_path):
    size = planned_from(LLAMA_31_8B, tmp_path).size
    trn2, trn1, trn3 = (next(h for h in hardware.hardware_for("neuron") if h.name == n)
                        for n in ("trn2", "trn1", "trn3"))  # fmt: skip
    assert trn2.primary and trn2.core_memory_bytes == 24 << 30 and trn2.cores_per_chip == 4
    assert trn2.cores_per_instance == 64 and trn2.cores_per_domain == 256
    assert trn1.core_memory_bytes == 16 << 30 and trn1.cores_per_instance == 32
    need = cores.cores_needed(size, trn2)
    assert need.serve_cores == expected_serve_cores(size, trn2) == 1
    # 16 bytes a parameter and 20% of the bf16 weights: 122.7 GiB over 21.6 GiB cores
    assert need.finetune_bytes == size.bytes_at("bf16") + 14 * size.parameters + int(
        0.2 * size.bytes_at("bf16")
    )
    assert need.finetune_cores == 8
    assert cores.cores_needed(size, trn1).serve_cores == expected_serve_cores(size, trn1) == 2


def test_heads_decide_the_degree():
    """14 heads (not a power of two): only 1 and 2 ranks divide them; a model too big for two
    cores has no degree that fits."""
    hw = next(h for h in hardware.hardware_for("neuron") if h.name == "trn1")
    big = ModelSize(
        "ok",
        "X",
        parameters=30 * 10**9,
        float_elements=30 * 10**9,
        other_bytes=0,
        attention_heads=14,
        kv_heads=2,
    )
    assert cores.degrees(big, hw) == [1, 2]
    need = cores.cores_needed(big, hw)
    assert need.serve_cores is None and "dividing 14 heads" in need.note
    small = replace(big, parameters=10**9, float_elements=10**9)
    assert cores.cores_needed(small, hw).serve_cores == 1


def test_kv_heads_are_replicated_past_their_count():
    hw = next(h for h in hardware.hardware_for("neuron") if h.name == "trn2")
    size = ModelSize(
        "ok",
        "X",
        parameters=10**9,
        float_elements=10**9,
        other_bytes=0,
        kv_elements_per_token=10**6,
        attention_heads=32,
        kv_heads=4,
    )
    assert cores.degrees(size, hw) == [1, 2, 4, 8, 16, 32]  # 64 does not divide 32 heads
    need = cores.cores_needed(size, hw, context=100_000, batch=4)
    # the KV cache (800 GB) needs its 4 heads spread: each rank keeps one head, a quarter
    assert need.serve_cores is None
    assert "replicated" in need.note


def test_every_hardware_figure_names_its_source():
    """Each device's figures, in its own folder (`runners/devices/<name>/data/hardware.json`)."""
    files = hardware.hardware_files()
    assert sorted(files) == ["cuda", "neuron"]
    for device, path in files.items():
        data = json.loads(path.read_text())
        assert data["primary"] in data["hardware"], device
        for name, h in data["hardware"].items():
            for key in (
                "chip_memory",
                "physical_cores_per_chip",
                "lnc",
                "instance",
                "largest_domain",
            ):
                source = h[key]["source"]
                assert ("url" in source and "title" in source) or "definition" in source, (
                    name,
                    key,
                )
                if "unverified" not in source and "definition" not in source:
                    assert source["url"].startswith("https://awsdocs-neuron."), (name, key)
    assert [h.name for h in hardware.hardware_for("neuron")] == ["trn2", "trn1", "trn3"]
    assert [h.primary for h in hardware.hardware_for("neuron")] == [True, False, False]
    trn3 = hardware.hardware_for("neuron")[2]
    assert trn3.unverified == ("LNC",)  # its page gives no default LNC
    assert hardware.hardware_for("cuda")[0].name == "h100-80gb"
    assert all(h.unverified for h in hardware.hardware_for("cuda"))  # NVIDIA's pages unread
    assert hardware.hardware_for("cpu") == hardware.hardware_for("../data") == []


def test_the_content_key_covers_the_measure_not_the_hardware_figures():
    """A plan holds the size (the measure and the adapters' answers are in the key); a
    corrected hardware figure or formula reruns no model, though the device folders that hold
    the figures are in the key."""
    from sweep import reuse

    files = {f.relative_to(ROOT).as_posix() for f in reuse.code_files()}
    assert {"sizing/measure.py", "model_configs/libraries/transformers/full_size.py"} <= files
    assert "runners/devices/neuron/compiler.py" in files
    figures = {p.relative_to(ROOT).as_posix() for p in hardware.hardware_files().values()}
    assert figures and not figures & files
    assert not {"sizing/hardware.py", "sizing/cores.py", "sizing/rows.py"} & files


def test_a_config_claiming_absurd_sizes_is_refused_before_a_build(tmp_path):
    planned = planned_from({**LLAMA_31_8B, "vocab_size": 10**12}, tmp_path)
    assert planned.size.status == SizingStatus.REFUSED.value
    assert "vocab_size" in planned.size.error_message and planned.size.parameters is None
    assert planned.spec is not None and planned.outcome is None  # the stages still run


def test_a_build_that_raises_is_an_error_as_raised(tmp_path):
    planned = planned_from(LLAMA_31_8B, tmp_path)
    broken = ResolvedConfig(
        "x", "transformers", {**LLAMA_31_8B, "hidden_size": 4095}, "local"
    )  # 4095 is not a multiple of 32 heads: the attention's projections cannot be built
    size = size_model(broken, planned.spec)
    assert size.status == SizingStatus.ERROR.value
    assert size.error_type and size.error_message


def test_a_build_of_too_many_modules_is_stopped(tmp_path, monkeypatch):
    planned = planned_from(LLAMA_31_8B, tmp_path)
    monkeypatch.setattr(measure, "MAX_MODULES", 100)
    measure._CACHE.clear()
    size = size_model(planned.resolved, planned.spec)
    assert size.status == SizingStatus.ERROR.value
    assert size.error_type == "TooManyModules"
    measure._CACHE.clear()


def test_a_library_without_a_builder_is_unsupported(tmp_path):
    planned = planned_from(LLAMA_31_8B, tmp_path)
    other = replace(planned.spec, library="speechbrain")
    size = size_model(planned.resolved, other)
    assert size.status == SizingStatus.UNSUPPORTED.value


def test_a_size_travels_in_the_plan_record(tmp_path):
    from sweep.plans import plan_record
    from sweep.plans import planned_from as from_record

    planned = planned_from(LLAMA_31_8B, tmp_path)
    back = from_record(plan_record(planned), planned.entry)
    assert back is not None and back.size == planned.size


@forked
def test_check_prints_the_published_count_and_the_formula_cores(tmp_path):
    """Done when: `hfsweep check config.json --device neuron` on a real Llama-3.1-8B config,
    here with a serving context and batch of its own (one check: each costs seconds of CPU;
    the default context's cores are test_formula_on_trainium's). The command runs in a process
    of its own forked from the warm one (tests/warm_fork.py), its exit status and stdout
    its own."""
    from ground import fmt
    from runners.devices.neuron.emulated import NeuronEmulatedDevice
    from sweep.rows import RunContext, sizing_rows

    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA_31_8B))
    done = run_cli(
        ["check", str(path), "--device", "neuron", "--stages", "load",
         "--serve-context", "131072", "--serve-batch", "4"],
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "at full size: 8,030,261,248 parameters (8.03B; LlamaForCausalLM" in out
    planned = planned_from(LLAMA_31_8B, tmp_path)
    size = planned.size
    serve_bytes = size.bytes_at("bf16") + 4 * 131072 * 2 * 32 * 8 * 256
    assert (
        f"  memory:   serve {fmt.byte_size(serve_bytes)} (bf16, context 131,072, batch 4);" in out
    )
    table = [line.split() for line in out.splitlines() if line.startswith("  trn")]
    assert [r[0] for r in table] == ["trn2", "trn1", "trn3"]
    trn2 = hardware.hardware_for("neuron")[0]
    serve_cores = expected_serve_cores(size, trn2, context=131072, batch=4)
    assert serve_cores > 1 and table[0][4] == str(serve_cores)  # trn2, 24.0, GiB, 4, serve
    # the rows the text is made of (what --format json prints), to the byte
    rows = sizing_rows(
        RunContext.of("check", NeuronEmulatedDevice(), "bf16"), planned, context=131072, batch=4
    )
    first = rows[0]
    assert [r["hardware"] for r in rows] == ["trn2", "trn1", "trn3"]
    assert first["parameters"] == 8_030_261_248 and first["primary_hardware"]
    assert first["serve_context"] == 131072 and first["serve_batch"] == 4
    assert first["serve_bytes"] == first["bytes_bf16"] + 4 * 131072 * 2 * 32 * 8 * 256
    assert first["serve_bytes"] == serve_bytes and first["serve_cores"] == serve_cores


def test_check_refuses_a_bad_serve_context(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA_31_8B))
    done = hfsweep_in_process(
        "check", str(path), "--serve-context", "zero"
    )  # refused by the parser
    assert done.returncode == 2 and "--serve-context" in done.stderr


@forked
def test_a_run_writes_one_sizing_row_per_config_and_hardware_and_the_reports_join_it(tmp_path):
    from reports.models import ModelFilter, model_detail, model_table
    from reports.query import StoreQuery
    from reports.render.text import render as render_text
    from reports.store import Store
    from reports.summary import run_report
    from tests.conftest import write_catalog

    models = [
        {"model_id": "org/llama", "library_name": "transformers", "model_type_hint": "llama",
         "architectures_hint": "LlamaForCausalLM", "pipeline_tag": "text-generation"},
        {"model_id": "org/llama-copy", "library_name": "transformers",
         "model_type_hint": "llama", "architectures_hint": "LlamaForCausalLM",
         "pipeline_tag": "text-generation"},
        {"model_id": "org/bert", "library_name": "transformers", "model_type_hint": "bert"},
    ]  # fmt: skip
    catalog = write_catalog(tmp_path / "catalog.csv", models)
    store = tmp_path / "store"

    def sweep(run_id: str, *extra: str) -> None:
        # a process of its own, forked from the warm one that never set a device up (the
        # emulated device cannot run in a fork of pytest's: see tests/neuron_support.py)
        done = run_cli(
            ["run", "--catalog", str(catalog), "--top", "3", "--device", "neuron",
             "--stages", "load", "--store", str(store), "--run-id", run_id, "--local",
             "--no-report", *extra],
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]

    sweep("s1")
    rows = Store(store).read("sizing", "s1").to_pylist()
    configs = {r["config_hash"] for r in rows}
    assert len(configs) == 2  # the two llamas share their (default) config: sized once
    assert sorted(r["hardware"] for r in rows) == sorted(["trn1", "trn2", "trn3"] * 2)
    assert all(r["status"] == "ok" and r["parameters"] > 0 for r in rows)
    q = StoreQuery(str(store))
    # offline, each config is its library's default: not the model's size anywhere it is counted
    table = model_table(q, "s1", ModelFilter(sort="parameters"))
    assert all(r["parameters"] is None and r["serve_cores"] is None for r in table["rows"])
    assert {r["sizing_status"] for r in table["rows"]} == {"no_own_config"}
    assert model_table(q, "s1", ModelFilter(fit="serve_one_core"))["total"] == 0
    assert model_table(q, "s1", ModelFilter(fit="not_sized"))["total"] == 3
    with pytest.raises(Exception, match="unknown fit"):
        model_table(q, "s1", ModelFilter(fit="; DROP TABLE model_runs"))
    # the page still has what the default would need, labelled so
    detail = model_detail(q, "org/llama-copy", "s1")
    assert [r["hardware"] for r in detail["full_size"]] == ["trn2", "trn1", "trn3"]
    assert detail["config_is_default"] and detail["full_size"][0]["parameters"] > 0
    report = run_report(q, "s1")
    assert report["cores_needed"]["sized"] == 0 and report["cores_needed"]["no_own_config"] == 3
    text = render_text(report)
    assert "Cores needed, by downloads" in text and "No model of this run has a size" in text
    # a run that reuses the plans reuses their sizes: nothing is built again, rows are written
    sweep("s2", "--reuse", "latest")
    again = Store(store).read("sizing", "s2").to_pylist()
    assert {r["config_hash"] for r in again} == configs


@pytest.mark.parametrize(
    ("model_id", "published", "source"),
    [
        (
            "stable-diffusion-v1-5/stable-diffusion-v1-5",
            860e6,
            "https://huggingface.co/stable-diffusion-v1-5/stable-diffusion-v1-5 (an 860M UNet)",
        ),
        (
            "stabilityai/stable-diffusion-xl-base-1.0",
            2.6e9,
            "https://arxiv.org/abs/2307.01952 (SDXL: a UNet of 2.6B parameters)",
        ),
    ],
)
def test_a_diffusion_unet_matches_its_published_count(model_id, published, source):
    """The bundled known component configs (model_configs/libraries/diffusers/data/configs/)."""
    from model_configs.catalog import load_catalog

    planned = plan_entry(load_catalog("bundled").get(model_id), list(default_stages()))
    assert planned.size.status == "ok", planned.size
    assert significant(planned.size.parameters, 2) == published, (planned.size.parameters, source)


def test_lora_counts_peft_targets_of_any_two_dimensional_weight():
    """GPT-2's peft target, `c_attn`, is transformers' Conv1D (weight in x out), not Linear."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from model_configs.libraries import get_adapter

    with torch.device("meta"):
        model = GPT2LMHeadModel(GPT2Config())
    targets = get_adapter("transformers").lora_targets(model)
    assert targets.modules == {"c_attn"} and targets.excluded == (model.lm_head,)
    assert measure.lora_parameters(model, targets) == 12 * measure.LORA_RANK * (768 + 3 * 768)
