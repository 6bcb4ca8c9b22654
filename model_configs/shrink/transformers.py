"""Shrink a transformers config to a tiny model that runs the same code paths.

Generic rules walk the config and its sub-configs (`text_config`, `vision_config`, encoder /
decoder, ...) and shrink widths, heads, layers, experts, vocabularies, positions and images while
keeping every choice that decides which ops run (attention variant, GQA/MQA, layer kinds, RoPE
type, activations, norms, tied embeddings). Per-family rules live as data in
`model_configs/data/transformers_families/*.json`, each with a reason. The result is rebuilt
through the config class so the library's own validation runs.
"""

from __future__ import annotations

import copy
import json
import math
from typing import Any

from model_configs.family_rules import shrink_rules, timm_rules
from model_configs.spec import ResolvedConfig, TinySpec
from reports.errors import ConfigError, ShrinkError
from reports.schema import SkipReason

# Target sizes.
HEADS = 4
HEAD_DIM = 16
HIDDEN = HEADS * HEAD_DIM
VOCAB = 512
MAX_POSITIONS = 512
EXPERTS = 4
TOP_K = 2
GRID = 4  # patches per image side
WINDOW = 8  # sliding windows, shorter than the dummy sequence

HIDDEN_KEYS = (
    "hidden_size", "d_model", "n_embd", "embed_dim", "dim", "hidden_dim", "model_dim",
    "word_embed_proj_dim", "embedding_size", "out_hidden_size", "text_hidden_size",
    "vision_hidden_size", "projection_dim", "projector_hidden_size", "output_hidden_size",
    "d_embed", "n_embed", "emb_dim", "width", "encoder_hidden_size", "decoder_hidden_size",
    "hidden_channels", "proj_dim", "text_embed_dim", "vision_embed_dim", "reassemble_hidden_size",
    "projection_size", "pooler_output_size", "vision_output_dim", "text_output_dim",
    "mm_hidden_size", "vision_feature_dim", "encoder_embed_dim", "decoder_embed_dim",
    "fusion_hidden_size", "head_hidden_size", "auxiliary_channels", "decoder_channels",
    "fpn_feature_size", "mask_feature_size", "encoder_feedforward_dim", "d_latent",
    "encoder_hidden_dim", "flow_size", "upsample_initial_channel", "hidden_size_global",
    "backbone_hidden_size", "cross_hidden_size", "image_token_embed_dim",
    "memory_attention_hidden_size", "memory_encoder_hidden_size", "memory_fuser_embed_dim",
    "mask_downsampler_embed_dim", "lru_width",
)  # fmt: skip
FFN_KEYS = (
    "intermediate_size", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim", "n_inner", "d_ff",
    "ffn_hidden_size", "mlp_dim", "moe_intermediate_size", "shared_expert_intermediate_size",
    "moe_shared_expert_intermediate_size",
    "expert_intermediate_size", "ffn_intermediate_size", "mlp_hidden_size", "intermediate_dim",
    "dense_intermediate_size", "moe_ffn_hidden_size", "encoder_intermediate_size",
    "decoder_intermediate_size", "inner_dim", "d_inner", "classifier_proj_size",
    "codevector_dim", "proj_codevector_dim", "xvector_output_dim", "pooler_hidden_size",
    "subsampling_conv_channels", "conv_channels", "adapter_dim", "linear_units",
    "encoder_linear_units", "decoder_linear_units", "speech_decoder_postnet_units",
    "duration_predictor_channels", "energy_predictor_channels", "pitch_predictor_channels",
    "duration_predictor_filter_channels", "kernel_predictor_hidden_channels",
    "alignment_intermediate_size", "number_output_channels", "projection_intermediate_size",
    "memory_attention_mlp_hidden_size", "memory_fuser_intermediate_dim",
)  # fmt: skip
HEAD_KEYS = (
    "num_attention_heads", "n_head", "num_heads", "n_heads", "encoder_attention_heads",
    "decoder_attention_heads", "num_attention_head", "attention_heads",
)  # fmt: skip
KV_KEYS = ("num_key_value_heads", "num_kv_heads", "n_kv_heads", "multi_query_group_num")
HEAD_DIM_KEYS = ("head_dim", "d_kv", "kv_channels", "attention_head_size", "d_head")
# Further per-head sizes (MLA, linear attention, SSM heads): capped independently.
EXTRA_HEAD_DIM_KEYS = (
    "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "linear_key_head_dim",
    "linear_value_head_dim", "global_head_dim", "attention_key_size", "attention_value_size",
    "index_head_dim", "swa_head_dim", "cross_head_dim", "linear_head_dim",
)  # fmt: skip
RANK_KEYS = ("kv_lora_rank", "q_lora_rank", "o_lora_rank", "index_topk")
LAYER_KEYS = (
    "num_hidden_layers", "n_layer", "num_layers", "encoder_layers", "decoder_layers",
    "num_decoder_layers", "n_layers", "depth", "num_encoder_layers", "decoder_num_layers",
    "encoder_num_layers", "num_blocks", "n_layers_per_block",
)  # fmt: skip
EXPERT_KEYS = (
    "num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts", "num_moe_experts",
    "n_experts",
)  # fmt: skip
TOPK_KEYS = ("num_experts_per_tok", "top_k", "moe_top_k", "num_experts_per_token", "moe_topk")
POSITION_KEYS = (
    "max_position_embeddings", "n_positions", "max_target_positions", "n_ctx",
    "max_text_positions", "max_seq_len", "max_sequence_length", "seq_length",
)  # fmt: skip
WINDOW_KEYS = ("sliding_window", "attention_window_size", "local_window_size")
# Conv codecs / vocoders: per-stage stride lists, and base widths that double at every stage
# (DAC's encoder, EnCodec's filters, UnivNet's kernel predictor grows with its square).
STRIDE_LIST_KEYS = ("downsampling_ratios", "upsampling_ratios", "upsample_rates",
                    "resblock_stride_sizes")  # fmt: skip
DOUBLING_BASE_KEYS = ("encoder_hidden_size", "num_filters", "model_hidden_channels")
# Keys never to treat as sizes, whatever their names look like.
NOT_A_SIZE = {"num_labels", "num_channels", "in_channels", "out_channels", "num_mel_bins"}
SKIP_SUBDICTS = {"id2label", "label2id", "rope_parameters", "rope_scaling", "quantization_config",
                 "task_specific_params", "auto_map", "_attn_implementation_autoset"}  # fmt: skip


def family_rules() -> dict[str, dict[str, Any]]:
    """The per-family shrink rules, keyed by model_type (data/transformers_families/)."""
    return shrink_rules()


def _timm_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("timm") is not None


def _replace_timm_backbones(d: dict[str, Any]) -> None:
    """Without timm, timm backbones become the data file's transformers ResNet stand-in."""
    if _timm_installed():
        return
    for key, sub in list(d.items()):
        if not isinstance(sub, dict) or key in SKIP_SUBDICTS:
            continue
        if sub.get("model_type") == "timm_backbone":
            stand_in = copy.deepcopy(timm_rules()["fallback_backbone"])  # the rules are cached
            stand_in.pop("_reason", None)
            outs = sub.get("out_indices") or [1, 2, 3, 4]
            stand_in["out_features"] = [f"stage{i}" for i in outs]
            d[key] = stand_in
            if "use_timm_backbone" in d:
                d["use_timm_backbone"] = False
        else:
            _replace_timm_backbones(sub)


def _tiny_timm_name(name: str) -> str:
    """timm's tiny test variant of the same block type, by the longest matching prefix."""
    table = {k: v for k, v in timm_rules()["tiny"].items() if not k.startswith("_")}
    base = name.split(".")[0]
    for prefix in sorted(table, key=len, reverse=True):
        if base.startswith(prefix):
            return str(table[prefix])
    return name


class _Shrinker:
    """One shrink of one config tree. `widths` maps original widths to shrunk ones globally, so
    widths equal in the original (a projector's input and a tower's hidden size) stay equal."""

    def __init__(self) -> None:
        self.widths: dict[int, int] = {}
        self.token_ids: dict[int, int] = {}
        self.vocab_free: list[int] = []
        self.mrope_fallback: list[int] | None = None

    # ----- width mapping -----
    def width(self, value: int, factor: float) -> int:
        if value in self.widths:
            return self.widths[value]
        new = value if value <= HIDDEN else max(8, int(round(value / factor / 8)) * 8)
        new = min(new, value)
        self.widths[value] = new
        return new

    # ----- one config level -----
    def shrink_level(self, d: dict[str, Any], cls: Any, path: str) -> None:
        amap: dict[str, str] = dict(getattr(cls, "attribute_map", {}) or {})
        model_type = str(d.get("model_type") or getattr(cls, "model_type", "") or "")
        rules = family_rules().get(model_type, {})
        keep = set(rules.get("keep", []))
        self.mrope_fallback = rules.get("mrope_fallback")

        def real(name: str) -> str:
            return amap.get(name, name)

        def keys(names: tuple[str, ...]) -> list[str]:
            found = []
            for n in names:
                k = real(n)
                if k in d and k not in found and k not in keep:
                    found.append(k)
            return found

        def first_int(names: tuple[str, ...]) -> tuple[str | None, int | None]:
            for k in keys(names):
                v = d[k]
                if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                    return k, v
            return None, None

        # Recurse into sub-configs first (their model_type decides their rules).
        for key, sub in list(d.items()):
            if key in SKIP_SUBDICTS or not isinstance(sub, dict):
                continue
            sub_cls = _sub_config_class(cls, key, sub)
            if sub_cls is not None:
                self.shrink_level(sub, sub_cls, f"{path}{key}.")

        # --- heads and widths ---
        hidden_key, hidden = first_int(HIDDEN_KEYS[:6])
        head_keys = keys(HEAD_KEYS)
        heads_val = next((d[k] for k in head_keys if isinstance(d[k], int) and d[k] > 0), None)
        kv_key, kv = first_int(KV_KEYS)
        hd_key, hd = first_int(HEAD_DIM_KEYS)

        new_heads = None
        if heads_val:
            new_heads = min(heads_val, HEADS)
            while HIDDEN % new_heads:
                new_heads -= 1
        factor = 1.0
        if hidden:
            new_hidden = self.widths.setdefault(hidden, min(hidden, HIDDEN))
            factor = hidden / new_hidden
            d[hidden_key] = new_hidden  # type: ignore[index]
        if hidden and d.get("codebook_dim") == hidden and "codebook_dim" not in keep:
            d["codebook_dim"] = d[hidden_key]  # type: ignore[index]  # EnCodec: codes = latents
        for k in keys(HIDDEN_KEYS):  # every hidden-like width: the same target
            v = d[k]
            if isinstance(v, int) and not isinstance(v, bool) and v > 0 and k not in NOT_A_SIZE:
                d[k] = self.widths.setdefault(v, min(v, HIDDEN))
        for k in head_keys:
            v = d[k]
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                d[k] = min(v, new_heads or HEADS)
            elif isinstance(v, list) and v and all(isinstance(x, int) for x in v):
                base = v[0]
                d[k] = [max(1, math.ceil(x / base)) for x in v]
        if kv and new_heads:
            if kv == 1:
                new_kv = 1
            elif heads_val and kv >= heads_val:
                new_kv = new_heads
            else:
                new_kv = max(1, new_heads // 2)
            while new_heads % new_kv:
                new_kv -= 1
            d[kv_key] = new_kv  # type: ignore[index]
        if hd and hd > HEAD_DIM:
            d[hd_key] = HEAD_DIM  # type: ignore[index]
        if "head_dim" in d and d["head_dim"] is None and new_heads and hidden_key:
            d["head_dim"] = d[hidden_key] // new_heads  # the modeling code may not derive it
        for k in ("num_groups", "norm_num_groups", "num_norm_groups", "group_norm_groups"):
            v = d.get(k)
            if isinstance(v, int) and not isinstance(v, bool) and v > 4:
                d[k] = 4  # GroupNorm groups must divide the (now narrow) channels
        for k in list(d):  # conv groups that follow the width (depthwise over hidden)
            v = d[k]
            if k.endswith("groups") and isinstance(v, int) and hidden and v == hidden:
                d[k] = d[hidden_key]  # type: ignore[index]
        for k in keys(EXTRA_HEAD_DIM_KEYS):
            if isinstance(d[k], int) and not isinstance(d[k], bool) and d[k] > HEAD_DIM:
                d[k] = HEAD_DIM
        for k in keys(RANK_KEYS):
            if isinstance(d[k], int) and not isinstance(d[k], bool) and d[k] > 2 * HEAD_DIM:
                d[k] = 2 * HEAD_DIM
        self._shrink_ssm(d)

        # Other widths scale with the level's hidden factor.
        if factor == 1.0 and not hidden:
            factor = self._guess_factor(d, keys(HIDDEN_KEYS + FFN_KEYS))
        for k in keys(FFN_KEYS):
            v = d[k]
            if k in NOT_A_SIZE:
                continue
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                d[k] = self.width(v, factor)
            elif isinstance(v, list) and v and all(isinstance(x, int) for x in v):
                d[k] = [self.width(x, factor) for x in v]
        for k in (
            "hidden_sizes",
            "conv_dim",
            "tdnn_dim",
            "embed_dims",
            "hidden_dims",
            "dims",
            "channels",
            "encoder_hidden_sizes",
            "neck_hidden_sizes",
            "widths",
            "encoder_in_channels",
            "decoder_in_channels",
            "post_process_channels",
            "embed_dim",
            "scaled_images_feature_dims",
            "intermediate_feature_dims",
            "embed_dim_per_stage",
            "backbone_channel_list",
            "stage_in_channels",
            "stage_mid_channels",
            "stage_out_channels",
        ):
            v = d.get(k)
            if k in keep or not (isinstance(v, list) and v and all(isinstance(x, int) for x in v)):
                continue
            f = max(1.0, max(v) / (HIDDEN * 2))
            d[k] = [self.width(x, f) if x > 8 else x for x in v]

        widths = next(
            (d[k] for k in ("embed_dim", "hidden_sizes") if isinstance(d.get(k), list)), None
        )
        for k in head_keys:  # per-stage heads must divide the per-stage (shrunk) widths
            hv = d[k]
            if isinstance(widths, list) and isinstance(hv, list) and len(hv) == len(widths):
                d[k] = [max(h for h in range(1, max(1, x) + 1) if w % h == 0)
                        for x, w in zip(hv, widths, strict=True)]  # fmt: skip
        if isinstance(d.get("width_coefficient"), (int, float)) and "num_block_repeats" in d:
            # EfficientNet: channels scale by width_coefficient, repeats by depth_coefficient.
            d["width_coefficient"] = min(d["width_coefficient"], 0.25)
            d["depth_coefficient"] = 1.0
            d["num_block_repeats"] = [1] * len(d["num_block_repeats"])
            if isinstance(d.get("hidden_dim"), int):  # the top conv: round_filters(1280)
                d["hidden_dim"] = max(8, int(1280 * d["width_coefficient"] + 4) // 8 * 8)
            if isinstance(d.get("image_size"), int) and d["image_size"] > 64:
                d["image_size"] = 64  # five stride-2 stages: a 2x2 map at the top
        stages = d.get("depths")
        embed_k = real("embed_dim")
        if isinstance(stages, list) and len(stages) > 1 and isinstance(d.get(embed_k), int):
            # Swin-like: the width doubles at every stage; the last stays at 2 * HIDDEN.
            cap = max(16, (2 * HIDDEN) >> (len(stages) - 1))
            if d[embed_k] > cap and embed_k not in keep and "hidden_sizes" not in d:
                d[embed_k] = cap
        mult = d.get("channel_multiplier")
        base = d.get("base_channels")
        if (
            isinstance(mult, list)
            and mult
            and isinstance(base, int)
            and "base_channels" not in keep
        ):
            # VQ image tokenizers: stage i is base * multiplier[i] wide (GroupNorm of 32).
            d["base_channels"] = min(base, max(32, (2 * HIDDEN) // max(mult)))
            for k, cap in (("num_embeddings", VOCAB), ("latent_channels", HIDDEN)):
                if isinstance(d.get(k), int) and d[k] > cap and k not in keep:
                    d[k] = cap  # codebook entries (the image vocabulary), latent width
        ratios = next((d[k] for k in STRIDE_LIST_KEYS if isinstance(d.get(k), list)), None)
        if ratios:  # the last stage is base * 2**stages wide: keep it near 2 * HIDDEN
            cap = max(4, (2 * HIDDEN) >> len(ratios))
            for k in keys(DOUBLING_BASE_KEYS):
                if isinstance(d[k], int) and not isinstance(d[k], bool) and d[k] > cap:
                    d[k] = cap

        # --- layers ---
        self._shrink_layers(d, keys(LAYER_KEYS))

        # --- experts ---
        ek, experts = first_int(EXPERT_KEYS)
        if experts and experts > EXPERTS:
            new_e = EXPERTS
            for k in keys(EXPERT_KEYS):
                if isinstance(d[k], int):
                    d[k] = new_e
            for k in keys(TOPK_KEYS):
                if isinstance(d[k], int) and d[k] > 0:
                    d[k] = min(d[k], TOP_K, new_e)
            for k in ("n_group", "num_expert_group"):
                if isinstance(d.get(k), int) and d[k] > 1:
                    d[k] = 2
                    for tk in ("topk_group",):
                        if isinstance(d.get(tk), int):
                            d[tk] = min(d[tk], 1)

        # --- vocab, positions, windows ---
        vocab_like = [k for k in d if ("vocab_size" in k or k.endswith("_vocab")) and k not in keep]
        vocab_like += [k for k in ("num_bpe_labels", "num_wordpiece_labels") if k in d]  # MGP-STR
        for k in [real("vocab_size")] + vocab_like:
            v = d.get(k)
            if isinstance(v, int) and not isinstance(v, bool) and v > VOCAB:
                d[k] = VOCAB
        for k in keys(POSITION_KEYS):
            v = d[k]
            if isinstance(v, int) and not isinstance(v, bool) and v > MAX_POSITIONS:
                d[k] = MAX_POSITIONS
        v = d.get("max_source_positions")
        if (
            isinstance(v, int)
            and not isinstance(v, bool)
            and v > 32
            and "max_source_positions" not in keep
        ):
            d["max_source_positions"] = 32  # audio encoders: frames = 2 * positions
        for k in keys(WINDOW_KEYS):
            v = d[k]
            if isinstance(v, int) and not isinstance(v, bool) and v > WINDOW:
                d[k] = WINDOW
        new_hd = d.get(hd_key) if hd_key else None
        if not new_hd and new_heads and hidden_key:
            new_hd = d[hidden_key] // new_heads
        old_hd = hd or (hidden // heads_val if hidden and heads_val else None)
        self._shrink_rope(d, old_hd, new_hd)

        # --- images ---
        patch = d.get("patch_size")
        image = d.get("image_size", d.get("input_size"))
        if (
            isinstance(patch, int)
            and isinstance(d.get("input_size"), int)
            and "image_size" not in d
        ):
            d["input_size"] = min(d["input_size"], patch * GRID)
        if isinstance(d.get("num_patches"), int) and d["num_patches"] > GRID * GRID:
            d["num_patches"] = GRID * GRID
        # Convolutional stages downsample up to 32x: keep such images at 64 px at least.
        staged = any(k in d for k in ("hidden_sizes", "neck_hidden_sizes", "output_stride"))
        if isinstance(patch, int) and isinstance(image, int) and image > patch * GRID:
            d["image_size"] = min(image, max(patch * GRID, 64 if staged else 0))
        elif isinstance(patch, list) and isinstance(image, list) and len(patch) == len(image):
            d["image_size"] = [min(i, p * GRID) for i, p in zip(image, patch, strict=True)]

        tubelet = d.get("tubelet_size")
        if isinstance(tubelet, list) and len(tubelet) == 3 and isinstance(image, int):
            d["image_size"] = min(image, tubelet[1] * GRID)  # ViViT: the tubelet is the patch
        frames = d.get("num_frames")
        if isinstance(frames, int) and not isinstance(frames, bool) and frames > 4:
            t = tubelet[0] if isinstance(tubelet, list) else tubelet
            d["num_frames"] = max(4, t if isinstance(t, int) else 1)
        rot = d.get("rotary_dim")
        if isinstance(rot, int) and old_hd and new_hd and rot > new_hd:
            d["rotary_dim"] = max(2, (rot * new_hd // old_hd) // 2 * 2)

        # Hierarchical vision (Swin-like): a small window, and an image that still spans a
        # window at the last stage.
        depths = d.get("depths")
        if (
            isinstance(patch, int)
            and isinstance(d.get("window_size"), int)
            and isinstance(depths, list)
        ):
            d["window_size"] = min(d["window_size"], 2)
            if isinstance(d.get("image_size"), int):
                d["image_size"] = patch * d["window_size"] * 2 ** max(0, len(depths) - 1)
        if (
            isinstance(d.get("num_codevectors_per_group"), int)
            and d["num_codevectors_per_group"] > 8
        ):
            d["num_codevectors_per_group"] = 8  # quantizer codebook entries per group
        if isinstance(d.get("num_negatives"), int) and d["num_negatives"] > 4:
            d["num_negatives"] = 4  # contrastive negatives per masked frame
        for k in ("num_queries", "num_detection_tokens", "num_top_queries"):
            if isinstance(d.get(k), int) and not isinstance(d[k], bool) and d[k] > 8:
                d[k] = 8

        pins = d.get("image_grid_pinpoints")
        vision = d.get("vision_config")
        if isinstance(pins, list) and isinstance(vision, dict):
            size = vision.get("image_size")
            big = max((max(p) for p in pins if isinstance(p, list) and p), default=0)
            if isinstance(size, int) and big > size * 4:
                old_size = min(min(p) for p in pins)
                d["image_grid_pinpoints"] = [[x * size // old_size for x in p] for p in pins]

        # --- family rules (after the generic ones) ---
        for dotted, value in rules.get("defaults", {}).items():
            if _get_dotted(d, dotted) is None:
                _set_dotted(d, dotted, copy.deepcopy(value))
        for dotted, value in rules.get("set", {}).items():
            _set_dotted(d, dotted, copy.deepcopy(value))
        if model_type in ("timm_backbone", "timm_wrapper") or d.get("use_timm_backbone"):
            for k in ("backbone", "architecture"):
                if isinstance(d.get(k), str):
                    d[k] = _tiny_timm_name(d[k])

    def _shrink_ssm(self, d: dict[str, Any]) -> None:
        """Mamba-2 style mixers: heads * head_dim must equal expand * hidden."""
        for heads_k, dim_k, expand_k, groups_k in (
            ("mamba_n_heads", "mamba_d_head", "mamba_expand", "mamba_n_groups"),
            ("num_heads", "head_dim", "expand", "n_groups"),
            ("mamba_num_heads", "mamba_head_dim", "mamba_expand", "mamba_n_groups"),
            ("mamba_num_heads", "mamba_head_dim", "expand", "n_groups"),  # Nemotron-H
        ):
            hidden = d.get("hidden_size")
            expand = d.get(expand_k)
            if not all(isinstance(d.get(k), int) for k in (heads_k, dim_k)) or not isinstance(
                hidden, int
            ):
                continue
            if not isinstance(expand, (int, float)):
                continue
            inner = int(expand * hidden)
            head_dim = min(d[dim_k], HEAD_DIM)
            d[dim_k] = head_dim
            d[heads_k] = max(1, inner // head_dim)
            if isinstance(d.get(groups_k), int):
                g = min(d[groups_k], d[heads_k])
                while d[heads_k] % g:
                    g -= 1
                d[groups_k] = g
            for k in ("mamba_intermediate_size", "ssm_intermediate_size", "mamba_d_ssm"):
                if isinstance(d.get(k), int):
                    d[k] = inner
        for k in ("state_size", "mamba_d_state", "ssm_state_size", "d_state"):
            if isinstance(d.get(k), int) and d[k] > 16:
                d[k] = 16
        for k in ("chunk_size", "mamba_chunk_size"):
            if isinstance(d.get(k), int) and d[k] > 16:
                d[k] = 16

    def _guess_factor(self, d: dict[str, Any], width_keys: list[str]) -> float:
        ints = [d[k] for k in width_keys if isinstance(d[k], int) and d[k] > 0]
        return max(1.0, max(ints) / (HIDDEN * 2)) if ints else 1.0

    def _shrink_layers(self, d: dict[str, Any], layer_keys: list[str]) -> None:
        for k in ("depths", "encoder_layers_per_stage", "num_layers_per_stage", "stage_depths",
                  "stage_num_blocks"):  # fmt: skip
            v = d.get(k)
            if isinstance(v, list) and v and all(isinstance(x, int) for x in v):
                d[k] = [min(x, 1) for x in v]  # per-stage depths: one block per stage
        depths = d.get("depths")
        if isinstance(depths, list):  # a count of stages, not of layers
            layer_keys = [k for k in layer_keys if d[k] != len(depths)]
        counts = [d[k] for k in layer_keys if isinstance(d[k], int) and not isinstance(d[k], bool)]
        if not counts:
            for k in layer_keys:  # only per-stage depth lists (CvT's `depth`)
                v = d[k]
                if isinstance(v, list) and v and all(isinstance(x, int) for x in v):
                    d[k] = [min(x, 1) for x in v]
            return
        n = max(counts)
        kinds_src = None
        for k in ("layer_types", "hybrid_override_pattern", "layers_block_type", "block_types"):
            v = d.get(k)
            if isinstance(v, (list, str)) and len(v) == n:
                kinds_src = list(v)
                break
        if kinds_src:
            seen: dict[Any, int] = {}
            for i, kind in enumerate(kinds_src):
                seen.setdefault(json.dumps(kind, sort_keys=True), i)
            picked = sorted(seen.values())
            target = max(2, len(picked))
            i = 0
            while len(picked) < min(target, n):
                if i not in picked:
                    picked.append(i)
                i += 1
            picked.sort()
        else:
            outs = d.get("out_indices") or d.get("backbone_out_indices")
            want = max(2, len(outs) if isinstance(outs, list) else 0)
            picked = list(range(min(n, want)))
        new_n = len(picked)
        for k in layer_keys:
            v = d[k]
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                d[k] = min(v, new_n)
            elif isinstance(v, list) and v and all(isinstance(x, int) for x in v):
                d[k] = [min(x, 1) for x in v]  # per-stage depths
        # Per-layer lists (length == n) follow the picked layers; index lists are filtered.
        for k, v in list(d.items()):
            if k in layer_keys:
                continue
            if k in HEAD_KEYS or k in STAGE_LIST_KEYS or k == "architectures":
                continue  # per-stage lists, not per-layer ones
            if isinstance(v, list) and len(v) == n and n > new_n:
                d[k] = [v[i] for i in picked]
            elif isinstance(v, str) and len(v) == n and n > new_n and k.endswith("pattern"):
                d[k] = "".join(v[i] for i in picked)
        for k, v in list(d.items()):  # {layer index: overrides}
            if k.startswith("per_layer") and isinstance(v, dict) and v:
                try:
                    idx = {int(i): i for i in v}
                except (TypeError, ValueError):
                    continue
                width = max(len(str(i)) for i in v)
                d[k] = {
                    str(picked.index(i)).zfill(width): _cap_dims(copy.deepcopy(v[orig]))
                    for i, orig in sorted(idx.items())
                    if i in picked
                }
        bouts = d.get("backbone_out_indices")
        if n > new_n and isinstance(bouts, list) and bouts:  # hidden-state indices (DPT)
            m = min(len(bouts), new_n)
            d["backbone_out_indices"] = list(range(new_n - m, new_n))
        stages = d.get("stage_names")
        if n > new_n and isinstance(stages, list) and len(stages) == n + 1:
            # A backbone over layers: keep as many outputs, on the last layers.
            outs = d.get("out_indices") or []
            m = min(len(outs), new_n) if isinstance(outs, list) else 0
            d["stage_names"] = ["stem"] + [f"stage{i}" for i in range(1, new_n + 1)]
            if m:
                d["out_indices"] = list(range(new_n - m + 1, new_n + 1))
                d["out_features"] = [f"stage{i}" for i in d["out_indices"]]
        for k in (
            "mlp_only_layers",
            "deepstack_visual_indexes",
            "full_attn_idxs",
            "fullatt_block_indexes",
            "global_attn_indexes",
            "attn_layer_indices",
            "dual_attention_layers",
            "no_rope_layer_idxs",
        ):
            v = d.get(k)
            if isinstance(v, list) and all(isinstance(x, int) for x in v) and len(v) != new_n:
                kept = [picked.index(x) for x in v if x in picked]
                if v and not kept:
                    kept = [new_n - 1]
                d[k] = kept
        for k in ("first_k_dense_replace", "max_window_layers", "num_kv_shared_layers"):
            v = d.get(k)
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                d[k] = min(v, 1) if k != "max_window_layers" else min(v, new_n)
        for k in list(d):
            if k.endswith("_period") and isinstance(d[k], int) and d[k] > new_n:
                off = k[: -len("period")] + "offset"
                d[k] = new_n
                if isinstance(d.get(off), int):
                    d[off] = d[off] % new_n

    def _shrink_rope(self, d: dict[str, Any], old_head_dim: int | None, new_hd: Any) -> None:
        new_hd = new_hd if isinstance(new_hd, int) else None
        for key in ("rope_parameters", "rope_scaling"):
            rp = d.get(key)
            if not isinstance(rp, dict):
                continue
            per_type = [rp[k] for k in rp if isinstance(rp[k], dict)] or [rp]
            for params in per_type:
                omax = params.get("original_max_position_embeddings")
                mp = d.get("max_position_embeddings")
                if isinstance(omax, int) and isinstance(mp, int) and omax > mp:
                    params["original_max_position_embeddings"] = max(
                        1, mp // max(1, int(params.get("factor", 1) or 1))
                    )
                if "mrope_section" not in params and self.mrope_fallback:
                    params["mrope_section"] = list(self.mrope_fallback)
                sec = params.get("mrope_section")
                if isinstance(sec, list) and new_hd:
                    rot = int(
                        new_hd
                        * float(
                            params.get("partial_rotary_factor")
                            or d.get("partial_rotary_factor")
                            or 1.0
                        )
                    )
                    if sum(sec) > rot // 2:
                        params["mrope_section"] = _rescale_section(sec, rot // 2)
                for fk in ("short_factor", "long_factor"):
                    fac = params.get(fk)
                    if isinstance(fac, list) and new_hd:
                        rot = int(new_hd * d.get("partial_rotary_factor", 1.0))
                        params[fk] = _resample(fac, max(1, rot // 2))


STAGE_LIST_KEYS = {
    "depths", "hidden_sizes", "embed_dims", "hidden_dims", "dims", "widths", "strides",
    "patch_sizes", "patch_stride", "mlp_ratios", "sr_ratios", "kernel_sizes", "channels",
}  # fmt: skip


def _cap_dims(overrides: dict[str, Any]) -> dict[str, Any]:
    """Shrink the sizes inside one layer's overrides (a wider head on full-attention layers)."""
    for k, v in overrides.items():
        if isinstance(v, int) and not isinstance(v, bool):
            if k in HEAD_DIM_KEYS or k.endswith("head_dim"):
                overrides[k] = min(v, 2 * HEAD_DIM)
            elif k in HEAD_KEYS or k in KV_KEYS:
                overrides[k] = min(v, 2)
    return overrides


def _rescale_section(section: list[int], total: int) -> list[int]:
    s = sum(section)
    out = [max(1, x * total // s) for x in section]
    out[0] += total - sum(out)
    return out


def _resample(values: list[float], n: int) -> list[float]:
    if len(values) == n:
        return values
    return [values[min(len(values) - 1, i * len(values) // n)] for i in range(n)]


def _set_dotted(d: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    for p in parts[:-1]:
        d = d.setdefault(p, {})
    d[parts[-1]] = value


def _get_dotted(d: dict[str, Any], dotted: str) -> Any:
    for p in dotted.split("."):
        if not isinstance(d, dict) or p not in d:
            return None
        d = d[p]
    return d


def _sub_config_class(cls: Any, key: str, sub: dict[str, Any]) -> Any:
    from transformers import CONFIG_MAPPING

    sub_configs = getattr(cls, "sub_configs", {}) or {}
    target = sub_configs.get(key)
    mt = sub.get("model_type")
    if target is not None and getattr(target, "__name__", "") != "AutoConfig":
        return target
    if mt and mt in CONFIG_MAPPING:
        return CONFIG_MAPPING[mt]
    if key.endswith("_config") or key in ("encoder", "decoder"):
        return type("_Plain", (), {"attribute_map": {}})
    return None


# ----------------------------------------------------------------------------------------------


def _ensure_pad_token(d: dict[str, Any]) -> None:
    """Sequence-classification heads find the last token through pad_token_id; users of
    decoder-only checkpoints (GPT-2, Qwen2) set it to eos, as done here when it is missing."""
    text = d.get("text_config")
    target: dict[str, Any] = text if isinstance(text, dict) else d
    if target.get("pad_token_id") is None:
        eos = target.get("eos_token_id")
        eos = eos[0] if isinstance(eos, list) and eos else eos
        target["pad_token_id"] = eos if isinstance(eos, int) else 0


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            if isinstance(v, dict) and k not in ("id2label", "label2id"):
                out.update(_flatten(v, f"{prefix}{k}."))
            else:
                out[f"{prefix}{k}"] = v
    return out


def _diff(before: dict[str, Any], after: dict[str, Any]) -> dict[str, list[Any]]:
    a, b = _flatten(_jsonable(before)), _flatten(_jsonable(after))
    skip = {"transformers_version", "_name_or_path", "architectures", "dtype", "torch_dtype"}
    changes: dict[str, list[Any]] = {}
    for k in sorted(set(a) | set(b)):
        if k.split(".")[-1] in skip:
            continue
        if a.get(k) != b.get(k):
            changes[k] = [_jsonable(a.get(k)), _jsonable(b.get(k))]
    return changes


def _jsonable(v: Any) -> Any:
    return json.loads(json.dumps(v, default=str))


def _fix_token_ids(root: dict[str, Any]) -> None:
    """Keep every special token id inside the shrunk vocabulary of its config (and distinct)."""
    mapping: dict[int, int] = {}

    def vocab_here(d: dict[str, Any], inherited: int | None) -> int | None:
        v = d.get("vocab_size")
        return v if isinstance(v, int) and v > 0 else inherited

    def fix(d: dict[str, Any], vocab: int | None, text_vocab: int | None) -> None:
        vocab = vocab_here(d, vocab)
        tc = d.get("text_config")
        if isinstance(tc, dict):
            text_vocab = vocab_here(tc, text_vocab)
        limit = text_vocab or vocab
        for k, v in list(d.items()):
            if isinstance(v, dict) and k not in SKIP_SUBDICTS:
                fix(v, vocab, text_vocab)
                continue
            if not _is_token_key(k) or limit is None:
                continue
            if isinstance(v, int) and not isinstance(v, bool):
                d[k] = _map_id(v, limit, mapping)
            elif isinstance(v, list) and all(isinstance(x, int) for x in v):
                d[k] = [_map_id(x, limit, mapping) for x in v]

    reserved = {i for i in special_token_ids(root) if 0 <= i < VOCAB}
    mapping.update({i: i for i in reserved})
    fix(root, None, None)


def _is_token_key(k: Any) -> bool:
    if not isinstance(k, str):
        return False
    return (
        k.endswith(("_token_id", "_token_ids", "_token_index", "_token_idx"))
        or k in ("suppress_tokens", "begin_suppress_tokens", "image_token", "decoder_start_token")
        or (k.endswith("_id") and k.startswith(("image_", "video_", "audio_", "boi_", "eoi_")))
    )


def _map_id(v: int, limit: int, mapping: dict[int, int]) -> int:
    if v in mapping and mapping[v] < limit:
        return mapping[v]
    if v < 0 or (v < limit and v not in mapping):
        return v
    used = set(mapping.values())
    new = limit - 1
    while new in used:
        new -= 1
    mapping[v] = new
    return new


def special_token_ids(config: dict[str, Any]) -> set[int]:
    """Every token id a config names (random inputs avoid them)."""
    ids: set[int] = set()
    for k, v in _flatten(config).items():
        if not _is_token_key(k.split(".")[-1]):
            continue
        if isinstance(v, int) and not isinstance(v, bool):
            ids.add(v)
        elif isinstance(v, list):
            ids.update(x for x in v if isinstance(x, int))
    return ids


def _load_config(resolved: ResolvedConfig) -> Any:
    from transformers import CONFIG_MAPPING

    cfg = resolved.config
    if not isinstance(cfg, dict) or not isinstance(cfg.get("model_type"), str):
        raise ConfigError(
            "config is not a JSON object with a model_type",
            reason=SkipReason.MALFORMED_CONFIG.value,
            model_id=resolved.model_id,
        )
    mt = cfg["model_type"]
    if mt not in CONFIG_MAPPING:
        raise ConfigError(
            f"transformers {_tf_version()} does not know model_type {mt!r}",
            reason=SkipReason.UNKNOWN_MODEL_TYPE.value,
            model_id=resolved.model_id,
            hint="upgrade transformers, or the repo needs remote code",
        )
    try:
        return CONFIG_MAPPING[mt].from_dict(copy.deepcopy(cfg))
    except Exception as exc:  # the library's validation of the original config
        raise ConfigError(
            f"transformers rejects the {mt} config: {type(exc).__name__}: {exc}",
            reason=SkipReason.MALFORMED_CONFIG.value,
            model_id=resolved.model_id,
        ) from exc


def _tf_version() -> str:
    import transformers

    return transformers.__version__


def shrink_transformers(
    resolved: ResolvedConfig,
    *,
    architecture_hint: str | None = None,
    pipeline_tag: str | None = None,
) -> TinySpec:
    """Shrink a transformers config and choose the class to build (see the module docstring)."""
    from model_configs.transformers_classes import choose_class

    config = _load_config(resolved)
    mt = config.model_type
    original = config.to_dict()
    default_class = family_rules().get(mt, {}).get("default_class")
    if default_class and not (architecture_hint or pipeline_tag or config.architectures):
        architecture_hint = str(default_class)  # a bare config: the class its users train
    arch, task, generative = choose_class(
        config, architecture_hint=architecture_hint, pipeline_tag=pipeline_tag,
        model_id=resolved.model_id,
    )  # fmt: skip
    if family_rules().get(mt, {}).get("generate") is False:
        generative = False  # e.g. a drafter that only runs inside its target's generate
    d = copy.deepcopy(original)
    try:
        _replace_timm_backbones(d)
        shrinker = _Shrinker()
        shrinker.shrink_level(d, type(config), "")
        _fix_token_ids(d)
        for dst, src in family_rules().get(mt, {}).get("link", {}).items():
            _set_dotted(d, dst, copy.deepcopy(_get_dotted(d, src)))
        if task == "sequence-classification":
            _ensure_pad_token(d)
        d["architectures"] = [arch]
        tiny = type(config).from_dict(d)
        final = tiny.to_dict()
    except ConfigError:
        raise
    except Exception as exc:
        raise ShrinkError(
            f"shrinking the {mt} config failed: {type(exc).__name__}: {exc}",
            model_id=resolved.model_id,
            stage="load",
            hint=f"add a shrink rule for {mt!r} to model_configs/data/transformers_families/",
        ) from exc
    final = _jsonable(final)
    return TinySpec(
        library="transformers",
        model_type=mt,
        architecture=arch,
        config=final,
        generative=generative,
        task=task,
        changes=_diff(original, final),
    )
