"""Each generic transformers shrink rule on its own: a config level before and after the rule.

Rules run in the order of `RULES`, and some read what earlier ones learnt (the hidden factor,
the new head count); `run_until` runs the rules before the one under test, then that rule, so
each case shows the one rule's effect. Every rule has a case here (checked below).
"""

from __future__ import annotations

import copy

import pytest

from model_configs.libraries.transformers.shrink_rules import HIDDEN, RULES, Level, rule_named


def run_until(name: str, d: dict, **level_kw) -> tuple[dict, dict]:
    """(the level just before rule `name`, the level after it)."""
    lv = Level(d=copy.deepcopy(d), widths={}, **level_kw)
    for r in RULES:
        if r.name == name:
            before = copy.deepcopy(lv.d)
            r.apply(lv)
            return before, lv.d
        r.apply(lv)
    raise KeyError(name)


def changed(name: str, d: dict, **kw) -> dict:
    before, after = run_until(name, d, **kw)
    return {k: after.get(k) for k in set(before) | set(after) if before.get(k) != after.get(k)}


CASES = {
    "attention_heads_target": (  # learnt, not written: the heads rule uses it
        {"hidden_size": 768, "num_attention_heads": 12, "num_key_value_heads": 1}, {}),
    "hidden_width": ({"hidden_size": 768}, {"hidden_size": HIDDEN}),
    "encodec_codebook": ({"hidden_size": 128, "codebook_dim": 128}, {"codebook_dim": HIDDEN}),
    "hidden_like_widths": ({"hidden_size": 768, "projection_dim": 768, "text_embed_dim": 512},
                           {"projection_dim": HIDDEN, "text_embed_dim": HIDDEN}),
    "head_counts": ({"hidden_size": 768, "num_attention_heads": 12, "num_heads": [3, 6, 12]},
                    {"num_attention_heads": 4, "num_heads": [1, 2, 4]}),
    "kv_heads": ({"hidden_size": 768, "num_attention_heads": 12, "num_key_value_heads": 4},
                 {"num_key_value_heads": 2}),
    "head_dim": ({"hidden_size": 768, "num_attention_heads": 12, "head_dim": 128},
                 {"head_dim": 16}),
    "norm_groups": ({"num_groups": 32, "norm_num_groups": 2}, {"num_groups": 4}),
    "depthwise_groups": ({"hidden_size": 768, "conv_groups": 768}, {"conv_groups": HIDDEN}),
    "extra_head_dims": ({"qk_rope_head_dim": 64, "v_head_dim": 8}, {"qk_rope_head_dim": 16}),
    "low_rank": ({"kv_lora_rank": 512, "q_lora_rank": 16}, {"kv_lora_rank": 32}),
    "ssm_mixers": ({"hidden_size": 64, "num_heads": 128, "head_dim": 64, "expand": 2,
                    "n_groups": 8, "state_size": 128, "chunk_size": 256},
                   {"num_heads": 8, "state_size": 16, "chunk_size": 16}),  # head_dim: rule above
    "ffn_widths": ({"hidden_size": 768, "intermediate_size": 3072}, {"intermediate_size": 256}),
    "stage_widths": ({"hidden_sizes": [64, 128, 320, 512]}, {"hidden_sizes": [64, 32, 80, 128]}),
    "stage_heads": ({"embed_dim": [16, 18, 30], "num_heads": [4, 8, 16]},  # [1, 2, 4] by now
                    {"num_heads": [1, 2, 3]}),
    "efficientnet_coefficients": (
        {"width_coefficient": 2.0, "depth_coefficient": 3.1, "num_block_repeats": [1, 2, 2],
         "hidden_dim": 2560, "image_size": 600},
        {"width_coefficient": 0.25, "depth_coefficient": 1.0, "num_block_repeats": [1, 1, 1],
         "hidden_dim": 320, "image_size": 64}),
    "swin_stage_widths": ({"depths": [2, 2, 6, 2], "embed_dim": 96}, {"embed_dim": 16}),
    "vq_multipliers": ({"channel_multiplier": [1, 1, 2, 2, 4], "base_channels": 128,
                        "num_embeddings": 8192, "latent_channels": 256},
                       {"base_channels": 32, "num_embeddings": 512, "latent_channels": 64}),
    "codec_doubling_base": ({"upsampling_ratios": [8, 5, 4, 2], "num_filters": 32},
                            {"num_filters": 8}),
    "layers": ({"num_hidden_layers": 24, "layer_types": ["full", "sliding"] * 12},
               {"num_hidden_layers": 2, "layer_types": ["full", "sliding"]}),
    "experts": ({"num_experts": 64, "num_experts_per_tok": 8, "n_group": 8, "topk_group": 4},
                {"num_experts": 4, "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1}),
    "vocabularies": ({"vocab_size": 50000, "num_bpe_labels": 50257, "char_vocab": 38},
                     {"vocab_size": 512, "num_bpe_labels": 512}),
    "positions": ({"max_position_embeddings": 131072}, {"max_position_embeddings": 512}),
    "audio_source_positions": ({"max_source_positions": 1500}, {"max_source_positions": 32}),
    "windows": ({"sliding_window": 4096}, {"sliding_window": 8}),
    "rope": ({"hidden_size": 2048, "num_attention_heads": 16, "head_dim": 128,
              "max_position_embeddings": 4096,
              "rope_scaling": {"rope_type": "longrope", "original_max_position_embeddings": 4096,
                               "short_factor": [1.0] * 64, "long_factor": [2.0] * 64}},
             {"rope_scaling": {"rope_type": "longrope", "original_max_position_embeddings": 512,
                               "short_factor": [1.0] * 8, "long_factor": [2.0] * 8}}),
    "image_grid": ({"patch_size": 14, "image_size": 518, "num_patches": 1369},
                   {"image_size": 56, "num_patches": 16}),
    "video_tubelets": ({"tubelet_size": [2, 16, 16], "image_size": 224, "num_frames": 32},
                       {"image_size": 64, "num_frames": 4}),
    "rotary_dim": ({"hidden_size": 4096, "num_attention_heads": 16, "rotary_dim": 64},
                   {"rotary_dim": 4}),
    "hierarchical_windows": ({"patch_size": 4, "window_size": 7, "depths": [2, 2, 6, 2],
                              "image_size": 224}, {"window_size": 2, "image_size": 64}),
    "speech_quantizer": ({"num_codevectors_per_group": 320, "num_negatives": 100},
                         {"num_codevectors_per_group": 8, "num_negatives": 4}),
    "detection_queries": ({"num_queries": 300}, {"num_queries": 8}),
    "tiling_pinpoints": ({"image_grid_pinpoints": [[336, 672], [672, 336], [672, 672]],
                          "vision_config": {"image_size": 32}},
                         {"image_grid_pinpoints": [[32, 64], [64, 32], [64, 64]]}),
    "family_data": ({"a": {"b": None}, "c": 1}, {"a": {"b": 7}, "c": 2}),
    "timm_backbones": ({"use_timm_backbone": True, "backbone": "resnet50"},
                       {"backbone": "test_resnet"}),
}  # fmt: skip
FAMILY = {"family_data": {"family": {"defaults": {"a.b": 7}, "set": {"c": 2}}}}


def test_every_rule_states_its_keys_and_reason_and_has_a_case():
    names = [r.name for r in RULES]
    assert len(names) == len(set(names))
    for r in RULES:
        assert r.keys and r.reason, r.name
    assert set(CASES) == set(names), set(names) ^ set(CASES)


@pytest.mark.parametrize("name", list(CASES))
def test_rule(name):
    before, expected = CASES[name]
    got = changed(name, before, **FAMILY.get(name, {}))
    assert got == expected, f"{name} ({rule_named(name).reason}): {got}"


def test_kept_keys_are_left_alone():
    got = changed("positions", {"max_position_embeddings": 131072},
                  keep={"max_position_embeddings"})  # fmt: skip
    assert got == {}


@pytest.mark.parametrize(("heads", "target"), [(12, 4), (3, 2), (1, 1)])
def test_attention_heads_target_divides_the_hidden_target(heads, target):
    lv = Level(d={"hidden_size": 768, "num_attention_heads": heads}, widths={})
    rule_named("attention_heads_target").apply(lv)
    assert lv.new_heads == target and HIDDEN % target == 0
