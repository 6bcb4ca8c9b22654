"""Shrinking diffusers configs: tiny, representative, trainable, deterministic."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

from ground.errors import ConfigError  # noqa: E402
from ground.schema import SkipReason  # noqa: E402
from model_configs.libraries.diffusers import build as dm  # noqa: E402
from model_configs.libraries.diffusers.shrink import (  # noqa: E402
    DATA_DIR,
    default_config,
    evaluate,
    pipeline_denoiser,
    shrink_diffusers,
)
from model_configs.pass_rule import MAX_PARAMS, MIN_GRAD_SHARE  # noqa: E402
from model_configs.shrink import shrink  # noqa: E402
from model_configs.spec import ResolvedConfig  # noqa: E402

CONFIGS = DATA_DIR / "configs"


def _bundled(name: str) -> dict:
    return json.loads((CONFIGS / name).read_text())


def _resolved(config: dict, components: dict | None = None) -> ResolvedConfig:
    return ResolvedConfig(
        model_id="test/model",
        library="diffusers",
        config=config,
        source="local",
        components=components or {},
    )


def _sd15_variant(**overrides) -> dict:
    """SD 1.5's UNet with the keys other UNet families change (SD 2, DeepFloyd IF, Kandinsky 2.2)."""
    return {**_bundled("sd15_unet.json"), **overrides}


SIMPLE_CROSS_ATTN = {
    "down_block_types": ["ResnetDownsampleBlock2D"] + ["SimpleCrossAttnDownBlock2D"] * 3,
    "up_block_types": ["SimpleCrossAttnUpBlock2D"] * 3 + ["ResnetUpsampleBlock2D"],
    "mid_block_type": "UNetMidBlock2DSimpleCrossAttn",
    "resnet_time_scale_shift": "scale_shift",
    "attention_head_dim": 64,
    "layers_per_block": 3,
}

CASES = {
    "sd2_unet": lambda: _sd15_variant(
        attention_head_dim=[5, 10, 20, 20], cross_attention_dim=1024, use_linear_projection=True
    ),
    "if_unet_text_proj": lambda: _sd15_variant(
        **SIMPLE_CROSS_ATTN,
        addition_embed_type="text",
        encoder_hid_dim=4096,
        encoder_hid_dim_type="text_proj",
        in_channels=3,
        out_channels=6,
    ),
    "kandinsky22_unet_image_proj": lambda: _sd15_variant(
        **SIMPLE_CROSS_ATTN,
        addition_embed_type="image",
        encoder_hid_dim=1280,
        encoder_hid_dim_type="image_proj",
        out_channels=8,
    ),
    "sd15_unet": lambda: _bundled("sd15_unet.json"),
    "sdxl_unet": lambda: _bundled("sdxl_base_unet.json"),
    "sdxl_refiner_unet": lambda: _bundled("sdxl_refiner_unet.json"),
    "sd_vae": lambda: _bundled("sd_vae.json"),
    "flux_vae": lambda: _bundled("flux1_vae.json"),
    "flux_transformer": lambda: _bundled("flux1_dev_transformer.json"),
    "sd3_transformer": lambda: _bundled("sd3_medium_transformer.json"),
    "sd35_transformer": lambda: _bundled("sd35_medium_transformer.json"),
    "wan_transformer": lambda: _bundled("wan21_i2v_14b_transformer.json"),
    "wan_vae": lambda: default_config("AutoencoderKLWan"),
    # class defaults of other families: ControlNet, video UNet, DiT/PixArt, Sana, Z-Image,
    # Qwen-Image, HunyuanVideo, LTX-Video, audio VAE, and an adapter run inside its host model
    "controlnet": lambda: default_config("ControlNetModel"),
    "unet_motion": lambda: default_config("UNetMotionModel"),
    "pixart": lambda: default_config("PixArtTransformer2DModel"),
    "sana": lambda: default_config("SanaTransformer2DModel"),
    "z_image": lambda: default_config("ZImageTransformer2DModel"),
    "qwen_image": lambda: default_config("QwenImageTransformer2DModel"),
    "hunyuan_video": lambda: default_config("HunyuanVideoTransformer3DModel"),
    "ltx_video": lambda: default_config("LTXVideoTransformer3DModel"),
    "oobleck_vae": lambda: default_config("AutoencoderOobleck"),
    "motion_adapter": lambda: default_config("MotionAdapter"),
}


def _train_step(spec):
    model = dm.build_model(spec)
    inputs = dm.make_inputs(spec, model)
    model.train()
    outputs = model(**inputs)
    loss = dm.compute_loss(spec, model, outputs, inputs)
    loss.backward()
    trainable = [p for p in model.parameters() if p.requires_grad]
    reached = sum(p.numel() for p in trainable if p.grad is not None and p.grad.abs().sum() > 0)
    return model, inputs, loss, reached / sum(p.numel() for p in trainable)


@pytest.mark.parametrize("case", sorted(CASES))
def test_shrunk_model_trains(case):
    spec = shrink(_resolved(CASES[case]()))
    model, _, loss, grad_share = _train_step(spec)
    params = sum(p.numel() for p in model.parameters())
    assert params <= MAX_PARAMS, params
    assert torch.isfinite(loss)
    assert grad_share >= MIN_GRAD_SHARE, grad_share
    assert spec.library == "diffusers" and spec.architecture == spec.config["_class_name"]


def test_shrink_keeps_architecture_and_records_changes():
    sdxl = shrink(_resolved(_bundled("sdxl_base_unet.json")))
    cfg = sdxl.config
    assert cfg["addition_embed_type"] == "text_time"
    assert cfg["down_block_types"] == [
        "DownBlock2D",
        "CrossAttnDownBlock2D",
        "CrossAttnDownBlock2D",
    ]
    assert len(cfg["block_out_channels"]) == 3
    assert all(c % cfg["norm_num_groups"] == 0 for c in cfg["block_out_channels"])
    # 6 time ids of addition_time_embed_dim each, plus the 16-wide pooled text embedding
    assert cfg["projection_class_embeddings_input_dim"] == 6 * cfg["addition_time_embed_dim"] + 16
    assert sdxl.changes["cross_attention_dim"] == [2048, 16]
    assert sdxl.task == "unet"

    refiner = shrink(_resolved(_bundled("sdxl_refiner_unet.json"))).config
    assert refiner["projection_class_embeddings_input_dim"] == 5 * 8 + 16

    flux = shrink(_resolved(_bundled("flux1_dev_transformer.json"))).config
    assert flux["guidance_embeds"] is True and flux["in_channels"] == 64
    assert sum(flux["axes_dims_rope"]) == flux["attention_head_dim"]
    assert all(a % 2 == 0 for a in flux["axes_dims_rope"])

    sd35 = shrink(_resolved(_bundled("sd35_medium_transformer.json"))).config
    assert sd35["dual_attention_layers"] and max(sd35["dual_attention_layers"]) < sd35["num_layers"]
    assert sd35["qk_norm"] == "rms_norm"
    assert (
        sd35["caption_projection_dim"] == sd35["num_attention_heads"] * sd35["attention_head_dim"]
    )

    vae = shrink(_resolved(_bundled("flux1_vae.json"))).config
    assert vae["latent_channels"] == 16 and vae["use_quant_conv"] is False

    wan = shrink(_resolved(_bundled("wan21_i2v_14b_transformer.json"))).config
    assert wan["patch_size"] == [1, 2, 2] and wan["in_channels"] == 36
    assert wan["added_kv_proj_dim"] == wan["num_attention_heads"] * wan["attention_head_dim"]


def test_added_conditioning_is_fed():
    spec = shrink(_resolved(_bundled("sdxl_base_unet.json")))
    model = dm.build_model(spec)
    inputs = dm.make_inputs(spec, model)
    assert set(inputs["added_cond_kwargs"]) == {"text_embeds", "time_ids"}
    assert inputs["added_cond_kwargs"]["time_ids"].shape == (dm.BATCH, 6)
    flux = shrink(_resolved(_bundled("flux1_dev_transformer.json")))
    flux_inputs = dm.make_inputs(flux, dm.build_model(flux))
    assert "guidance" in flux_inputs
    assert flux_inputs["img_ids"].shape == (flux_inputs["hidden_states"].shape[1], 3)


def test_shrink_is_deterministic():
    a = shrink(_resolved(_bundled("sdxl_base_unet.json")))
    b = shrink(_resolved(_bundled("sdxl_base_unet.json")))
    assert a.hash == b.hash and a.changes == b.changes
    ma, mb = dm.build_model(a), dm.build_model(b)
    ia, ib = dm.make_inputs(a, ma), dm.make_inputs(b, mb)
    assert torch.equal(ia["sample"], ib["sample"])
    with torch.no_grad():
        assert torch.equal(ma(**ia).sample, mb(**ib).sample)


def test_pipeline_index_resolves_to_denoiser():
    index = {
        "_class_name": "StableDiffusionXLPipeline",
        "_diffusers_version": "0.19.0",
        "scheduler": ["diffusers", "EulerDiscreteScheduler"],
        "text_encoder": ["transformers", "CLIPTextModel"],
        "text_encoder_2": ["transformers", "CLIPTextModelWithProjection"],
        "tokenizer": ["transformers", "CLIPTokenizer"],
        "unet": ["diffusers", "UNet2DConditionModel"],
        "vae": ["diffusers", "AutoencoderKL"],
        "feature_extractor": [None, None],
    }
    assert pipeline_denoiser(index) == ("unet", "UNet2DConditionModel")
    spec = shrink_diffusers(
        _resolved(index, {"unet": _bundled("sdxl_base_unet.json")}),
        architecture_hint=None,
        pipeline_tag="text-to-image",
    )
    assert spec.architecture == "UNet2DConditionModel"
    assert spec.config["addition_embed_type"] == "text_time"
    assert spec.changes["pipeline"] == ["StableDiffusionXLPipeline", "unet"]
    assert "vae" in spec.changes["pipeline.components"][0]
    # without the component's config the class defaults stand in, and the spec says so
    bare = shrink_diffusers(_resolved(index), architecture_hint=None, pipeline_tag=None)
    assert bare.changes["pipeline.component_config"] == ["missing", "diffusers_default"]


def test_default_config_for_pipeline():
    resolved = dm.default_config_for_pipeline("FluxPipeline")
    assert resolved is not None and resolved.source == "diffusers_default"
    spec = shrink(resolved)
    assert spec.architecture == "FluxTransformer2DModel"
    assert spec.config["guidance_embeds"] is True
    assert dm.default_config_for_pipeline("NoSuchPipeline") is None


def test_unknown_and_malformed_configs():
    with pytest.raises(ConfigError) as exc:
        shrink(_resolved({"_class_name": "NoSuchModel2DModel"}))
    assert exc.value.reason == SkipReason.NO_MODEL_CLASS.value
    with pytest.raises(ConfigError) as exc:
        shrink(_resolved({"in_channels": 4}))
    assert exc.value.reason == SkipReason.MALFORMED_CONFIG.value


def test_iter_default_configs_covers_model_classes():
    names = dm.model_class_names()
    assert {"UNet2DConditionModel", "AutoencoderKL", "FluxTransformer2DModel"} <= set(names)
    assert "MultiControlNetModel" not in names  # wraps a list of models, no config of its own
    first = next(dm.iter_default_configs())
    assert first.config["_class_name"] in names and first.source == "diffusers_default"


def test_adapter_runs_inside_its_host():
    spec = shrink(_resolved(default_config("MotionAdapter")))
    model = dm.build_model(spec)
    assert type(model).__name__ == "UNetMotionModel"  # the adapter's modules are inside
    assert dm.inputs_are_curated(spec)
    assert dm.make_inputs(spec, model)["sample"].ndim == 5


def test_list_of_models_wrapper_trains():
    resolved = next(r for r in dm.iter_wrapper_configs() if r.model_type == "MultiControlNetModel")
    spec = shrink(resolved)
    assert len(spec.config["parts"]) == 2 and spec.changes["parts"] == [None, 2]
    model, inputs, loss, grad_share = _train_step(spec)
    assert len(inputs["controlnet_cond"]) == 2
    assert torch.isfinite(loss) and grad_share >= MIN_GRAD_SHARE


def test_unrunnable_class_is_a_named_skip():
    with pytest.raises(ConfigError) as exc:
        shrink(_resolved(default_config("AutoencoderKLAllegro")))
    assert exc.value.reason == SkipReason.NO_MODEL_CLASS.value
    assert "tile" in exc.value.message


def test_every_class_rule_has_a_reason():
    from model_configs.libraries.diffusers.shrink import load_rules

    classes = load_rules()["classes"]
    assert len(classes) > 100
    assert all(entry.get("reason") for entry in classes.values())


def test_rule_expressions_are_restricted():
    assert evaluate("2 * a + first(b)", {"a": 3, "b": [4, 5]}) == 10
    assert evaluate("x if c is None else y", {"x": 1, "y": 2, "c": None}) == 1
    assert evaluate("a or 3", {"a": None}) == 3  # Python semantics, not a bool
    assert evaluate("orig['k'] // 2", {"orig": {"k": 9}}) == 4
    with pytest.raises(ValueError):
        evaluate("__import__('os')", {})
