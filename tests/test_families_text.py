"""Text decoders, MoE/MLA/hybrid models, time series and other families: the default config
shrinks, builds, takes real-shaped inputs and trains (see tests/family_support.py)."""

from __future__ import annotations

import pytest

from tests.family_support import assert_trains, run_default

FAMILIES = [
    "exaone",  # another family's class (Llama), named for it by the auto mappings
    "sarvam_mla",  # the same, onto DeepseekV3's MLA + grouped routing
    "dory",  # input / looped recurrent / output sections
    "deepseek_v4",  # compressed attention windows below the sequence
    "longcat_flash",  # MLA head sum, zero (identity) experts
    "zamba2",  # shared hybrid blocks, derived widths
    "granitemoehybrid",  # Mamba-2 beside attention
    "perceiver",  # latent array, one output per position
    "time_series_transformer",
    "timesfm",
    "decision_transformer",
    "jev",
    "gemma4_unified_assistant",
]


@pytest.mark.parametrize("model_type", FAMILIES)
def test_family_trains(model_type: str) -> None:
    assert_trains(run_default(model_type))


def test_config_only_type_builds_the_mapped_class_from_its_own_config() -> None:
    """exaone has a config but no model class: the auto mappings name LlamaForCausalLM, which
    transformers builds from the ExaoneConfig as it is (not from a part of it)."""
    import transformers

    run = run_default("exaone")
    assert run.spec.architecture == "LlamaForCausalLM"
    assert isinstance(run.model, transformers.LlamaForCausalLM)
    assert type(run.model.config).__name__ == "ExaoneConfig"


def test_vlm_aliased_to_another_family_gets_its_images() -> None:
    run = run_default("glmga")
    assert run.spec.architecture == "Glm46VForConditionalGeneration"
    assert {"pixel_values", "image_grid_thw"} <= set(run.inputs)
    assert_trains(run)


def test_forecasters_train_their_prediction_head_on_the_future_window() -> None:
    """The auto mappings name only the base model; the forecasting head is the class users
    train, and its loss is the distribution's NLL over prediction_length future values."""
    run = run_default("autoformer")
    config = run.model.config
    assert run.spec.architecture == "AutoformerForPrediction"
    past = config.context_length + max(config.lags_sequence)
    assert run.inputs["past_values"].shape == (2, past)
    assert run.inputs["past_time_features"].shape == (2, past, config.num_time_features)
    assert run.inputs["future_values"].shape == (2, config.prediction_length)
    assert_trains(run)


def test_dots3_note_prompt_matches_image_and_audio_features() -> None:
    """One image placeholder per merged 2x2 patch block, one audio placeholder per
    samples_per_token waveform samples of each chunk."""
    run = run_default("dots3_note")
    config = run.model.config
    ids = run.inputs["input_ids"]
    merge = config.vision_config.spatial_merge_size
    grid = run.inputs["image_grid_thw"]
    assert int((ids == config.image_token_id).sum()) == int(grid.prod(-1).sum()) // merge**2
    samples = run.inputs["chunk_sample_lengths"]
    per_chunk = -(-samples // config.audio_config.samples_per_token)  # ceil
    assert int((ids == config.audio_token_id).sum()) == int(per_chunk.sum())
    assert_trains(run)


def test_kv_sharing_keeps_a_producer_of_each_attention_kind() -> None:
    run = run_default("gemma3n_text")
    config = run.model.config
    modes = config.kv_sharing_modes
    first_shared = modes.index("reuse")
    assert set(config.layer_types[:first_shared]) == set(config.layer_types)
    assert_trains(run)


def test_a_drafter_is_not_generative_alone() -> None:
    """The Gemma 4 assistant drafts tokens inside its target's generate only: the generate
    stage does not apply to it (a family rule), while its training step still runs."""
    run = run_default("gemma4_unified_assistant")
    assert run.spec.generative is False
    assert_trains(run)
