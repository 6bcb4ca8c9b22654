"""Shrinking transformers configs: tiny, valid, deterministic, and every tower trained."""

from __future__ import annotations

import importlib.util
import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from ground.errors import ConfigError  # noqa: E402
from ground.schema import ConfigSource, SkipReason  # noqa: E402
from model_configs.build import build_model, compute_loss, make_inputs  # noqa: E402
from model_configs.libraries.transformers.shrink import special_token_ids  # noqa: E402
from model_configs.pass_rule import MIN_GRAD_SHARE  # noqa: E402
from model_configs.shrink import shrink  # noqa: E402
from model_configs.spec import ResolvedConfig  # noqa: E402

# One model type per family the sweep must represent faithfully.
FAMILIES = [
    "llama",  # dense decoder, RoPE
    "mistral",  # sliding window
    "qwen3",  # explicit head_dim, qk-norm
    "gemma3_text",  # sliding + full layer pattern, explicit head_dim
    "phi3",  # partial rotary
    "gpt2",  # attribute_map (n_embd, n_layer), learned positions
    "mixtral",  # MoE
    "qwen3_moe",  # MoE
    "deepseek_v3",  # MLA + grouped MoE routing
    "gpt_oss",  # MoE + sinks + sliding
    "jamba",  # hybrid attention / Mamba + MoE
    "falcon_h1",  # hybrid Mamba-2
    "mamba",  # SSM
    "bert",  # encoder
    "t5",  # encoder-decoder
    "bart",  # encoder-decoder, offset positions
    "vit",  # image classifier
    "clip",  # dual tower
    "llava",  # VLM, image tokens from the vision grid
    "qwen2_5_vl",  # VLM, flattened patches + grid, mrope
    "gemma3",  # VLM, pooled image tokens
    "whisper",  # speech seq2seq, fixed frames
    "wav2vec2",  # CTC on raw audio
    "voxtral",  # speech LLM: audio tokens from the audio tower
    "videomae",  # video clips
    "detr",  # detection on a timm backbone (swapped for timm's tiny test variant)
    "qwen2_5_omni",  # wrapper without a forward: its thinker (text + image + audio) runs
    "qwen2_audio",  # audio tokens counted from the tower's length arithmetic
    "luke",  # entity mentions beside the text
    "sam",  # prompt grid matches the vision grid, a point prompt
    "flava",  # image + text pre-training heads (image_config)
    "hunyuan_vl",  # four-axis multimodal rope
    "zoedepth",  # metric-bins head on the fused neck
    "lightglue",  # image pairs, frozen SuperPoint detector
    "deepseek_v32",  # MLA + a no_grad sparse-attention indexer
    "gemma3n_audio",  # USM conformer: mel frames plus a padding mask
    "mllama",  # tiled images, text cross-attends to them
    "qwen3_omni_moe",  # thinker with MoE text, audio conv front end kept narrow
]


def _resolved(model_type: str) -> ResolvedConfig:
    config = transformers.CONFIG_MAPPING[model_type]().to_dict()
    return ResolvedConfig(
        model_id=f"default/{model_type}",
        library="transformers",
        config=config,
        source=ConfigSource.TRANSFORMERS_DEFAULT.value,
    )


def _run(spec):
    model = build_model(spec)
    inputs = make_inputs(spec, model, purpose="train")
    outputs = model(**inputs)
    loss = compute_loss(spec, model, outputs, inputs)
    loss.backward()
    return model, inputs, loss


def _level_dicts(config: dict):
    yield config
    for value in config.values():
        if isinstance(value, dict) and "model_type" in value:
            yield from _level_dicts(value)


@pytest.mark.parametrize("model_type", FAMILIES)
def test_family_shrinks_runs_and_trains(model_type):
    spec = shrink(_resolved(model_type))
    assert spec.library == "transformers" and spec.model_type == model_type
    model, inputs, loss = _run(spec)

    params = [p for p in model.parameters() if p.requires_grad]
    total = sum(p.numel() for p in params)
    assert total < 2_000_000, f"{model_type}: {total} parameters"
    reached = sum(p.numel() for p in params if p.grad is not None)
    assert reached / total >= MIN_GRAD_SHARE, (
        f"{model_type}: gradient reached {reached / total:.0%}"
    )
    assert torch.isfinite(loss)

    # Heads divide the width, kv heads divide heads, per-layer lists match the layer count.
    for level in _level_dicts(spec.config):
        heads, kv = level.get("num_attention_heads"), level.get("num_key_value_heads")
        hidden, head_dim = level.get("hidden_size"), level.get("head_dim")
        if isinstance(heads, int) and isinstance(hidden, int) and not head_dim:
            assert hidden % heads == 0
        if isinstance(heads, int) and isinstance(kv, int):
            assert heads % kv == 0
        if isinstance(level.get("layer_types"), list):
            assert len(level["layer_types"]) == level["num_hidden_layers"]
    # Random token ids stay off the special ids (VLM prompts hold image tokens on purpose).
    if "input_ids" in inputs and not {"pixel_values", "input_features"} & set(inputs):
        assert not set(inputs["input_ids"].flatten().tolist()) & special_token_ids(spec.config)
    # What changed is recorded as [original, shrunk].
    assert spec.changes
    assert all(isinstance(v, list) and len(v) == 2 and v[0] != v[1] for v in spec.changes.values())


@pytest.mark.parametrize("model_type", ["llama", "qwen2_5_vl", "deepseek_v3"])
def test_shrink_is_deterministic(model_type):
    first, second = shrink(_resolved(model_type)), shrink(_resolved(model_type))
    assert first.hash == second.hash
    assert first.config == second.config and first.changes == second.changes


@pytest.mark.parametrize("model_type", ["bert", "llava"])  # one level, and sub-configs
def test_where_a_checkpoint_was_saved_from_does_not_split_a_dedup_group(model_type):
    base = _resolved(model_type)
    saved = {**base.config, "_name_or_path": "/home/someone/checkpoints/checkpoint-500"}
    for sub in ("text_config", "vision_config"):
        if isinstance(saved.get(sub), dict):
            saved[sub] = {**saved[sub], "_name_or_path": "org/base-model"}
    other = ResolvedConfig(
        model_id="org/fine-tune", library="transformers", config=saved, source=base.source
    )
    assert shrink(other).hash == shrink(base).hash
    assert "_name_or_path" not in json.dumps(shrink(other).config)


def test_changes_name_the_touched_fields():
    spec = shrink(_resolved("gpt2"))
    assert spec.changes["n_layer"] == [12, 2]  # attribute_map: the real key, not num_hidden_layers
    assert spec.changes["n_embd"][0] == 768
    assert spec.changes["vocab_size"] == [50257, 512]
    assert spec.config["bos_token_id"] < spec.config["vocab_size"]


def test_layer_kinds_are_kept():
    spec = shrink(_resolved("gemma3_text"))
    kinds = spec.config["layer_types"]
    assert set(kinds) == {"sliding_attention", "full_attention"}
    assert spec.config["sliding_window"] < 16  # shorter than the dummy sequence


def test_moe_routing_constraints():
    spec = shrink(_resolved("deepseek_v3"))
    c = spec.config
    assert c["n_routed_experts"] % c["n_group"] == 0
    assert c["n_routed_experts"] // c["n_group"] >= 2
    assert c["topk_group"] <= c["n_group"]
    assert c["num_experts_per_tok"] <= c["n_routed_experts"]
    assert c["first_k_dense_replace"] < c["num_hidden_layers"]  # a dense and a MoE layer
    mix = shrink(_resolved("mixtral")).config
    assert mix["num_experts_per_tok"] <= mix["num_local_experts"] <= 8


def test_mrope_section_matches_head_dim():
    spec = shrink(_resolved("qwen2_5_vl"))
    text = spec.config["text_config"]
    head_dim = text["hidden_size"] // text["num_attention_heads"]
    assert sum(text["rope_parameters"]["mrope_section"]) == head_dim // 2
    assert spec.config["vision_config"]["out_hidden_size"] == text["hidden_size"]


def test_vlm_prompt_holds_one_token_per_image_feature():
    spec = shrink(_resolved("llava"))
    model = build_model(spec)
    inputs = make_inputs(spec, model)
    image_id = spec.config["image_token_index"]
    assert image_id < spec.config["text_config"]["vocab_size"]
    n_tokens = int((inputs["input_ids"] == image_id).sum())
    with torch.no_grad():
        feats = model.get_image_features(pixel_values=inputs["pixel_values"]).pooler_output
    assert n_tokens == sum(f.shape[0] for f in feats)


def test_whisper_gets_its_exact_frame_count():
    spec = shrink(_resolved("whisper"))
    model = build_model(spec)
    inputs = make_inputs(spec, model)
    assert inputs["input_features"].shape[-1] == 2 * spec.config["max_source_positions"]
    assert inputs["input_features"].shape[1] == spec.config["num_mel_bins"] == 80
    assert "decoder_input_ids" in inputs and "labels" in inputs


def test_generate_inputs_have_no_labels():
    spec = shrink(_resolved("llama"))
    assert spec.generative and spec.task == "causal-lm"
    model = build_model(spec)
    inputs = make_inputs(spec, model, purpose="generate")
    assert "labels" not in inputs and "use_cache" not in inputs
    out = model.generate(**inputs, max_new_tokens=2, do_sample=False)
    assert out.shape[1] == inputs["input_ids"].shape[1] + 2


def test_generate_gets_no_training_inputs_a_family_builder_set():
    # Dia's builder gives its codes as labels for training; generate must not receive them.
    spec = shrink(_resolved("dia"))
    model = build_model(spec)
    assert "labels" in make_inputs(spec, model, purpose="train")
    inputs = make_inputs(spec, model, purpose="generate")
    assert not {"labels", "return_loss"} & set(inputs)
    out = model.generate(**inputs, max_new_tokens=2, min_new_tokens=1, do_sample=False)
    assert out.shape[0] == inputs["input_ids"].shape[0] and out.shape[1] >= 2  # decoder side


def test_timm_backbones_become_tiny_or_stand_in():
    spec = shrink(_resolved("detr"))
    backbone = spec.config["backbone_config"]
    if importlib.util.find_spec("timm") is not None:  # timm's tiny test variant, same blocks
        assert backbone["backbone"] == "test_resnet"
        assert spec.changes["backbone_config.backbone"] == ["resnet50", "test_resnet"]
    else:  # timm is an optional extra: a tiny transformers ResNet stands in, and says so
        assert backbone["model_type"] == "resnet"
        assert spec.changes["backbone_config.model_type"] == ["timm_backbone", "resnet"]
        assert len(backbone["out_features"]) == 4


def test_class_choice_follows_hint_then_pipeline_tag():
    bert = _resolved("bert")
    assert shrink(bert, architecture_hint="BertModel").architecture == "BertModel"
    tagged = shrink(bert, pipeline_tag="text-classification")
    assert tagged.architecture == "BertForSequenceClassification"
    assert tagged.task == "sequence-classification" and not tagged.generative
    assert shrink(bert).architecture == "BertForMaskedLM"  # a head with a loss
    # A hint from another family is ignored, not trusted.
    assert shrink(bert, architecture_hint="LlamaForCausalLM").architecture != "LlamaForCausalLM"
    assert shrink(_resolved("t5")).architecture == "T5ForConditionalGeneration"


@pytest.mark.parametrize(
    ("config", "reason"),
    [
        ({"model_type": "surely_not_a_model"}, SkipReason.UNKNOWN_MODEL_TYPE),
        ({"hidden_size": 8}, SkipReason.MALFORMED_CONFIG),
        (["not", "a", "dict"], SkipReason.MALFORMED_CONFIG),
    ],
)
def test_unusable_configs_are_config_errors(config, reason):
    resolved = ResolvedConfig(model_id="x/y", library="transformers", config=config, source="local")
    with pytest.raises(ConfigError) as info:
        shrink(resolved)
    assert info.value.reason == reason.value


def test_wrapper_without_forward_runs_its_thinker():
    spec = shrink(_resolved("qwen2_5_omni"), pipeline_tag="any-to-any")
    assert spec.architecture == "Qwen2_5OmniThinkerForConditionalGeneration"
    thinker = spec.config["thinker_config"]
    assert thinker["audio_config"]["output_dim"] == thinker["text_config"]["hidden_size"]
    model = build_model(spec)
    inputs = make_inputs(spec, model)
    assert {"pixel_values", "input_features", "input_ids"} <= set(inputs)


@pytest.mark.parametrize("model_type", ["qwen2_audio_encoder", "voxtral_encoder"])
def test_whisper_style_encoders_get_no_integer_mask(model_type):
    spec = shrink(_resolved(model_type))
    model, inputs, loss = _run(spec)
    assert "attention_mask" not in inputs  # these encoders add the mask to attention scores
    assert inputs["input_features"].shape[-1] == 2 * spec.config["max_source_positions"]
    assert torch.isfinite(loss)


def test_keypoint_matchers_get_image_pairs():
    spec = shrink(_resolved("lightglue"))
    assert spec.task == "keypoint-matching"
    model = build_model(spec)
    pixels = make_inputs(spec, model)["pixel_values"]
    assert pixels.dim() == 5 and pixels.shape[1] == 2
    detector = spec.config["keypoint_detector_config"]
    assert detector["descriptor_decoder_dim"] == spec.config["descriptor_dim"]


def test_list_main_input_gets_every_part():
    spec = shrink(_resolved("oneformer"), pipeline_tag="image-segmentation")
    model, inputs, loss = _run(spec)
    assert model.main_input_name == ["pixel_values", "task_inputs"]
    assert inputs["task_inputs"].shape == (2, spec.config["task_seq_len"])
    assert torch.isfinite(loss)
