"""Input builders for time series and trajectories: forecasting windows with their lags and
time features (GluonTS-style, TimesFM), offline-RL trajectories (Decision Transformer) and robot
episodes (PI0: camera views, state, an action chunk) (see the package docstring)."""

from __future__ import annotations

from model_configs.libraries.transformers.build import (
    _token_ids,
)
from model_configs.libraries.transformers.inputs import InputContext, family_inputs
from model_configs.libraries.transformers.inputs.prompt import (
    randn,
)
from model_configs.tiny_inputs import BATCH


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
        "past_values": randn(ctx, *values),
        "past_time_features": randn(ctx, BATCH, past, features),
        "past_observed_mask": torch.ones(values),
        "future_values": randn(ctx, *targets),
        "future_time_features": randn(ctx, BATCH, future, features),
    }
    if int(config.num_static_categorical_features) > 0:
        ctx.inputs["static_categorical_features"] = torch.stack(
            [torch.randint(0, int(c), (BATCH,), generator=ctx.gen) for c in config.cardinality],
            dim=1,
        )
    if int(config.num_static_real_features) > 0:
        ctx.inputs["static_real_features"] = randn(ctx, BATCH, int(config.num_static_real_features))


@family_inputs("decision_transformer", replace=True)
def trajectories(ctx: InputContext) -> None:
    """Offline-RL trajectories as the Decision Transformer is trained on them: per step a state
    (state_dim floats), an action (act_dim, in [-1, 1] as the tanh head predicts), a reward and
    the return-to-go, with the episode's timesteps (below max_ep_len)."""
    import torch

    config, steps = ctx.config, ctx.seq
    start = torch.randint(0, int(config.max_ep_len) - steps, (BATCH, 1), generator=ctx.gen)
    ctx.inputs = {
        "states": randn(ctx, BATCH, steps, int(config.state_dim)),
        "actions": torch.tanh(randn(ctx, BATCH, steps, int(config.act_dim))),
        "rewards": randn(ctx, BATCH, steps, 1),
        "returns_to_go": randn(ctx, BATCH, steps, 1),
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
    pixels = randn(ctx, BATCH, cameras, int(vision.num_channels), size, size)
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
        "state": randn(ctx, BATCH, int(config.max_state_dim)),
        "actions": randn(ctx, BATCH, chunk, action_dim),
        "noise": randn(ctx, BATCH, chunk, action_dim),
        "timestep": torch.rand(BATCH, generator=ctx.gen) * 0.999 + 0.001,
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
        "past_values": [randn(ctx, context) for _ in range(BATCH)],
        "future_values": randn(ctx, BATCH, horizon),
    }
    if "freq" in ctx.params:
        buckets = int(getattr(config, "freq_size", 1) or 1)
        ctx.inputs["freq"] = torch.randint(0, buckets, (BATCH,), generator=ctx.gen)
