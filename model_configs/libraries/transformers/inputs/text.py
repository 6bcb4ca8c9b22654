"""Input builders for text decoders, MoE/MLA/hybrid models, time series and other families (see the package docstring)."""

from __future__ import annotations

from typing import Any

from model_configs.libraries.transformers.build import (
    _count_feature_tokens,
    _pixel_inputs,
    _splice,
    _token_ids,
)
from model_configs.libraries.transformers.inputs import InputContext, family_inputs
from model_configs.tiny_inputs import BATCH


def _randn(ctx: InputContext, *shape: int) -> Any:
    import torch

    return torch.randn(*shape, generator=ctx.gen)


@family_inputs("autoformer", "informer", "time_series_transformer", replace=True)
def probabilistic_forecast(ctx: InputContext) -> None:
    """GluonTS-style forecasters: a context window plus the lags in front of it (context_length +
    max(lags_sequence) steps) with its time features and observed mask, and the future window
    (prediction_length steps) whose values the distribution head's NLL is trained on."""
    import torch

    config = ctx.config
    past = int(config.context_length) + max(config.lags_sequence)
    future = int(config.prediction_length)
    features = int(config.num_time_features)
    size = int(config.input_size)
    values = (BATCH, past) if size == 1 else (BATCH, past, size)
    targets = (BATCH, future) if size == 1 else (BATCH, future, size)
    ctx.inputs = {
        "past_values": _randn(ctx, *values),
        "past_time_features": _randn(ctx, BATCH, past, features),
        "past_observed_mask": torch.ones(values),
        "future_values": _randn(ctx, *targets),
        "future_time_features": _randn(ctx, BATCH, future, features),
    }
    if int(config.num_static_categorical_features) > 0:
        ctx.inputs["static_categorical_features"] = torch.stack(
            [torch.randint(0, int(c), (BATCH,), generator=ctx.gen) for c in config.cardinality],
            dim=1,
        )
    if int(config.num_static_real_features) > 0:
        ctx.inputs["static_real_features"] = _randn(
            ctx, BATCH, int(config.num_static_real_features)
        )


@family_inputs("decision_transformer", replace=True)
def trajectories(ctx: InputContext) -> None:
    """Offline-RL trajectories as the Decision Transformer is trained on them: per step a state
    (state_dim floats), an action (act_dim, in [-1, 1] as the tanh head predicts), a reward and
    the return-to-go, with the episode's timesteps (below max_ep_len)."""
    import torch

    config, steps = ctx.config, ctx.seq
    start = torch.randint(0, int(config.max_ep_len) - steps, (BATCH, 1), generator=ctx.gen)
    ctx.inputs = {
        "states": _randn(ctx, BATCH, steps, int(config.state_dim)),
        "actions": torch.tanh(_randn(ctx, BATCH, steps, int(config.act_dim))),
        "rewards": _randn(ctx, BATCH, steps, 1),
        "returns_to_go": _randn(ctx, BATCH, steps, 1),
        "timesteps": start + torch.arange(steps).unsqueeze(0),
        "attention_mask": torch.ones(BATCH, steps, dtype=torch.long),
    }


@family_inputs("pi0", replace=True)
def robot_episode(ctx: InputContext) -> None:
    """PI0 (LeRobot) training batches: camera views (batch, cameras, 3, H, W) with a mask of the
    cameras present, a prompt that starts with one image token per vision feature of every
    camera, the robot state (max_state_dim), and an action chunk (chunk_size x max_action_dim)
    that the flow-matching loss denoises from noise at a sampled timestep."""
    import torch

    config = ctx.config
    vlm = config.vlm_config
    vision = vlm.vision_config
    cameras, size = 2, int(vision.image_size)
    pixels = _randn(ctx, BATCH, cameras, int(vision.num_channels), size, size)
    with torch.no_grad():
        feats = ctx.model.model.vlm.get_image_features(pixels[:1, 0]).pooler_output
    image_id = int(vlm.image_token_id)
    images = torch.full((BATCH, cameras * int(feats.shape[1])), image_id, dtype=torch.long)
    text = _token_ids(ctx.gen, vlm.text_config, (BATCH, ctx.seq), ctx.avoid | {image_id})
    ids = torch.cat([images, text], dim=1)
    chunk, action_dim = int(config.chunk_size), int(config.max_action_dim)
    ctx.inputs = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "pixel_values": pixels,
        "pixel_attention_mask": torch.ones(BATCH, cameras, dtype=torch.bool),
        "state": _randn(ctx, BATCH, int(config.max_state_dim)),
        "actions": _randn(ctx, BATCH, chunk, action_dim),
        "noise": _randn(ctx, BATCH, chunk, action_dim),
        "timestep": torch.rand(BATCH, generator=ctx.gen) * 0.999 + 0.001,
    }


@family_inputs("jev", replace=True)
def decision_questions(ctx: InputContext) -> None:
    """JEV scores packed questions the way `DecisionMixin.decide` feeds it: one sequence (batch
    1) holding every question, the positions just past each question's <|mark|> token, and per
    question its type (noul / score / choice, in `Question.questions_types` order) and how many
    options it offers (2 for yes/no, 5 score levels, 4 choices)."""
    import torch
    from transformers.decision import Question

    config = ctx.config
    text = getattr(config, "text_config", None) or config
    steps = ctx.seq
    kinds = list(Question.questions_types)
    options = {"noul": 2, "score": 5, "choice": 4}
    ids = _token_ids(ctx.gen, text, (1, steps), ctx.avoid)
    marks = [steps * (i + 1) // len(kinds) for i in range(len(kinds))]
    ctx.inputs = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "marks": torch.tensor([marks]),
        "num_options": torch.tensor([[options[k] for k in kinds]]),
        "question_type_ids": torch.tensor([list(range(len(kinds)))]),
    }


@family_inputs("gemma4_unified_assistant", "gemma4_assistant", replace=True)
def drafter_step(ctx: InputContext) -> None:
    """Gemma 4's assistant drafts tokens from the target model's state: per drafted position the
    target's token embedding beside its last hidden state (2 * backbone_hidden_size), and the
    keys/values of the target's last layer of each attention kind (shared_kv_states, (batch,
    kv heads, target length, head dim)), which every assistant layer attends to instead of
    computing its own."""
    import torch

    config = ctx.config
    model = ctx.model.model
    drafted, target = 4, ctx.seq
    shared: dict[str, Any] = {}
    for layer in model.layers:
        attn = layer.self_attn
        if attn.layer_type not in shared:
            kv_heads = int(attn.q_proj.out_features // attn.head_dim // attn.num_key_value_groups)
            shape = (BATCH, kv_heads, target, int(attn.head_dim))
            shared[attn.layer_type] = (_randn(ctx, *shape), _randn(ctx, *shape))
    ctx.inputs = {
        "inputs_embeds": _randn(ctx, BATCH, drafted, 2 * int(config.backbone_hidden_size)),
        "attention_mask": torch.ones(BATCH, target, dtype=torch.long),
        "shared_kv_states": shared,
    }


@family_inputs("timesfm", "timesfm2_5", replace=True)
def forecast_batch(ctx: InputContext) -> None:
    """TimesFM takes a list of 1-D series (one context window each, context_length long), a
    frequency bucket per series (TimesFM 1/2) and, for training, the next horizon_length values
    that its mean and quantile losses compare the forecast with."""
    import torch

    config = ctx.config
    context, horizon = int(config.context_length), int(config.horizon_length)
    ctx.inputs = {
        "past_values": [_randn(ctx, context) for _ in range(BATCH)],
        "future_values": _randn(ctx, BATCH, horizon),
    }
    if "freq" in ctx.params:
        buckets = int(getattr(config, "freq_size", 1) or 1)
        ctx.inputs["freq"] = torch.randint(0, buckets, (BATCH,), generator=ctx.gen)


@family_inputs("dots3_note", replace=True)
def omni_prompt(ctx: InputContext) -> None:
    """dots3 note reads images (Qwen-VL style flattened patches plus their grid) and audio
    (log-mel chunks, 128 bins x frames, with each chunk's waveform length in samples: the conv
    stem masks frames past it and emits one token per samples_per_token). The prompt holds one
    image placeholder per merged patch and one audio placeholder per audio token."""
    import torch

    config, model = ctx.config, ctx.model
    audio_config = config.audio_config
    pixels = _pixel_inputs(config, ctx.params, ctx.gen, model)
    image_tokens = _count_feature_tokens(model, config, pixels) // BATCH
    frames = 64
    audio = {
        "input_features": _randn(ctx, BATCH, int(audio_config.feature_size), frames),
        "chunk_sample_lengths": torch.full((BATCH,), frames * int(audio_config.hop_length)),
    }
    audio_tokens = _count_feature_tokens(model, config, audio, getter="get_audio_features") // BATCH
    text = _token_ids(ctx.gen, config, (BATCH, ctx.seq), ctx.avoid)
    ids = _splice(
        text,
        [int(config.image_token_id)] * image_tokens + [int(config.audio_token_id)] * audio_tokens,
    )
    ctx.inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), **pixels, **audio}
