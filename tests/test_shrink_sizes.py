"""The size cap: families whose shrunk models were once above 5M parameters now stay below it.

Each of these used to escape the generic rules (codec stage widths that double per stride, TTS
predictor widths, detector encoder dims, EfficientNet coefficients, per-stage lists, hash
vocabularies, projector widths). The ones that also train are run forward and backward.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from ground.schema import ConfigSource  # noqa: E402
from model_configs.build import build_model, compute_loss, make_inputs  # noqa: E402
from model_configs.pass_rule import MAX_PARAMS, MIN_GRAD_SHARE  # noqa: E402
from model_configs.shrink import shrink  # noqa: E402
from model_configs.spec import ResolvedConfig  # noqa: E402

CAP = MAX_PARAMS

# model type -> parameters before the fix (bench/shrink_coverage.py, default configs)
ONCE_OVERSIZED = {
    "dac": 19_537_133,  # encoder channels double at each of 4 downsampling stages
    "encodec": 14_392_930,  # num_filters doubles per stage; codebook_dim = hidden
    "univnet": 14_789_153,  # kernel predictor grows with hidden^2
    "vits": 16_431_664,  # HiFi-GAN upsample_initial_channel, flow size
    "fastspeech2_conformer": 12_838_259,  # linear units, variance predictor channels
    "rt_detr": 10_687_090,  # encoder_hidden_dim, encoder/decoder in-channel lists
    "chmv2": 12_064_032,  # DPT-style post-process channels
    "cohere2_vision": 10_953_272,  # alignment_intermediate_size
    "cvt": 19_613_250,  # per-stage embed_dim / depth lists
    "efficientnet": 63_782_098,  # width / depth coefficients, block repeats
    "align": 62_317_521,  # EfficientNet vision tower
    "glm5_next": 6_635_724,  # projection_intermediate_size, linear-attention head dims
    "depth_pro": 16_092_993,  # scaled-image feature dims
    "dia": 9_773_824,  # cross-attention hidden size / head dim
    "deepseek_vl_hybrid": 7_636_737,  # high-resolution projector over the SAM neck
    "blt": 192_722_752,  # hash-embedding vocabulary
    "hgnet_v2": 13_553_634,  # per-stage in / mid / out channel lists
    "grounding-dino": 6_161_423,  # Swin backbone: embed_dim doubles per stage
    "janus": 73_507_403,  # VQ tokenizer: base_channels x channel_multiplier, codebook
    "mgp-str": 5_381_745,  # BPE / wordpiece heads over full vocabularies
    "recurrent_gemma": 7_658_432,  # RG-LRU width
    "pp_lcnet_v3": 5_513_840,  # block_configs channels times `scale`
}
# Of those, the ones that run forward and backward with >= 90% of parameters reached.
TRAINS = ["dac", "univnet", "fastspeech2_conformer", "rt_detr", "chmv2", "cohere2_vision",
          "cvt", "efficientnet", "glm5_next", "hgnet_v2", "grounding-dino"]  # fmt: skip


def _spec(model_type: str):
    config = transformers.CONFIG_MAPPING[model_type]().to_dict()
    resolved = ResolvedConfig(
        model_id=f"default/{model_type}",
        library="transformers",
        config=config,
        source=ConfigSource.TRANSFORMERS_DEFAULT.value,
    )
    return shrink(resolved)


def assert_under_the_cap(model_type: str, model) -> None:
    total = sum(p.numel() for p in model.parameters())
    assert total < CAP, f"{model_type}: {total:,} parameters (was {ONCE_OVERSIZED[model_type]:,})"


@pytest.mark.parametrize("model_type", sorted(set(ONCE_OVERSIZED) - set(TRAINS)))
def test_once_oversized_family_builds_under_the_cap(model_type):
    """The families that train are held to the cap by the next test, on the model it trains."""
    assert_under_the_cap(model_type, build_model(_spec(model_type)))


@pytest.mark.parametrize("model_type", TRAINS)
def test_once_oversized_family_trains(model_type):
    spec = _spec(model_type)
    model = build_model(spec)
    assert_under_the_cap(model_type, model)
    inputs = make_inputs(spec, model, purpose="train")
    loss = compute_loss(spec, model, model(**inputs), inputs)
    loss.backward()
    params = [p for p in model.parameters() if p.requires_grad]
    total = sum(p.numel() for p in params)
    reached = sum(p.numel() for p in params if p.grad is not None)
    assert torch.isfinite(loss)
    assert reached / total >= MIN_GRAD_SHARE, (
        f"{model_type}: gradient reached {reached / total:.0%}"
    )


def test_codec_stage_widths_follow_the_stride_count():
    """DAC doubles its encoder width at each downsampling stage: the base shrinks to match."""
    spec = _spec("dac")
    stages = len(spec.config["downsampling_ratios"])
    assert spec.config["encoder_hidden_size"] * 2**stages <= 128
    assert spec.config["downsampling_ratios"] == [2, 4, 8, 8]  # the strides themselves stay
