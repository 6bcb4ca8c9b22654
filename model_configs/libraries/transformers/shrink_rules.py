"""The generic shrink rules for transformers configs, one small named rule each.

`RULES` is the list a shrink runs, top to bottom, on every config level (a model's config, then
each of its sub-configs first: `text_config`, `vision_config`, encoder / decoder ...). Each rule
states the config keys it applies to and why; rules fire only where those keys are present, and
keys a family lists under `keep` are left alone. Per-family values stay in the family data
(`model_configs/libraries/transformers/data/families/*.json`); the family rules run last (`family_data`).

`Level` holds one config level and what the first rules learn about it (its hidden width and
how much it shrank, its head counts), which later rules use: widths are shrunk through one
mapping per model, so widths equal in the original (a projector's input and a tower's hidden
size) stay equal.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from ground.schema import EXPERTS_PER_TOKEN_KEYS
from model_configs.tiny_inputs import GRID  # patches per image side

# Target sizes.
HEADS = 4
HEAD_DIM = 16
HIDDEN = HEADS * HEAD_DIM
VOCAB = 512
MAX_POSITIONS = 512
EXPERTS = 4
TOP_K = 2
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
TOPK_KEYS = EXPERTS_PER_TOKEN_KEYS
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
STAGE_WIDTH_KEYS = (
    "hidden_sizes", "conv_dim", "tdnn_dim", "embed_dims", "hidden_dims", "dims", "channels",
    "encoder_hidden_sizes", "neck_hidden_sizes", "widths", "encoder_in_channels",
    "decoder_in_channels", "post_process_channels", "embed_dim", "scaled_images_feature_dims",
    "intermediate_feature_dims", "embed_dim_per_stage", "backbone_channel_list",
    "stage_in_channels", "stage_mid_channels", "stage_out_channels",
)  # fmt: skip


def _is_int(v: Any) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def _int_list(v: Any) -> TypeGuard[list[int]]:
    return isinstance(v, list) and bool(v) and all(isinstance(x, int) for x in v)


@dataclass
class Level:
    """One config level being shrunk, and what the rules learn about it as they run."""

    d: dict[str, Any]
    widths: dict[int, int]  # original width -> shrunk width, shared by every level of a model
    amap: dict[str, str] = field(default_factory=dict)  # the config class's attribute_map
    keep: set[str] = field(default_factory=set)  # keys the family says to leave alone
    family: dict[str, Any] = field(default_factory=dict)  # the family's shrink rules (data)
    model_type: str = ""
    # learnt from the original values, before any rule ran:
    hidden_key: str | None = None
    hidden: int | None = None
    head_keys: list[str] = field(default_factory=list)
    heads: int | None = None
    kv_key: str | None = None
    kv: int | None = None
    head_dim_key: str | None = None
    head_dim: int | None = None
    # set by the rules:
    new_heads: int | None = None
    factor: float = 1.0
    image: Any = None  # the image size before `image_grid` (ViViT's tubelet rule reads it)

    def __post_init__(self) -> None:
        self.hidden_key, self.hidden = self.first_int(HIDDEN_KEYS[:6])
        self.head_keys = self.keys(HEAD_KEYS)
        self.heads = next(
            (self.d[k] for k in self.head_keys if isinstance(self.d[k], int) and self.d[k] > 0),
            None,
        )
        self.kv_key, self.kv = self.first_int(KV_KEYS)
        self.head_dim_key, self.head_dim = self.first_int(HEAD_DIM_KEYS)

    def real(self, name: str) -> str:
        return self.amap.get(name, name)

    def keys(self, names: tuple[str, ...]) -> list[str]:
        """The config's own names for `names` that are present and not kept."""
        found = []
        for n in names:
            k = self.real(n)
            if k in self.d and k not in found and k not in self.keep:
                found.append(k)
        return found

    def first_int(self, names: tuple[str, ...]) -> tuple[str | None, int | None]:
        for k in self.keys(names):
            v = self.d[k]
            if _is_int(v) and v > 0:
                return k, v
        return None, None

    def width(self, value: int, factor: float) -> int:
        """A width other than the hidden size, divided by the level's factor (mapped once)."""
        if value in self.widths:
            return self.widths[value]
        new = value if value <= HIDDEN else max(8, int(round(value / factor / 8)) * 8)
        new = min(new, value)
        self.widths[value] = new
        return new

    def hidden_like(self, value: int) -> int:
        """A hidden-like width: the hidden target (mapped once)."""
        return self.widths.setdefault(value, min(value, HIDDEN))

    @property
    def new_head_dim(self) -> int | None:
        new_hd = self.d.get(self.head_dim_key) if self.head_dim_key else None
        if not new_hd and self.new_heads and self.hidden_key:
            new_hd = self.d[self.hidden_key] // self.new_heads
        return new_hd

    @property
    def old_head_dim(self) -> int | None:
        if self.head_dim:
            return self.head_dim
        return self.hidden // self.heads if self.hidden and self.heads else None


@dataclass(frozen=True)
class Rule:
    """A generic shrink rule: its name, the config keys it applies to, and why."""

    name: str
    keys: tuple[str, ...]
    reason: str
    apply: Callable[[Level], None]


RULES: list[Rule] = []


def rule(name: str, keys: tuple[str, ...] | list[str], reason: str) -> Callable:
    """Register the decorated function as the next rule of RULES."""

    def register(fn: Callable[[Level], None]) -> Callable[[Level], None]:
        RULES.append(Rule(name, tuple(keys), reason, fn))
        return fn

    return register


def rule_named(name: str) -> Rule:
    return next(r for r in RULES if r.name == name)


# ----- widths and heads -------------------------------------------------------------------


@rule("attention_heads_target", HEAD_KEYS,
      "at most HEADS heads, a count that divides the hidden target")  # fmt: skip
def _attention_heads_target(lv: Level) -> None:
    if lv.heads:
        new = min(lv.heads, HEADS)
        while HIDDEN % new:
            new -= 1
        lv.new_heads = new


@rule("hidden_width", HIDDEN_KEYS[:6],
      "the level's hidden size comes down to HIDDEN; other widths scale by the same factor")  # fmt: skip
def _hidden_width(lv: Level) -> None:
    if lv.hidden and lv.hidden_key:
        new_hidden = lv.hidden_like(lv.hidden)
        lv.factor = lv.hidden / new_hidden
        lv.d[lv.hidden_key] = new_hidden


@rule("encodec_codebook", ("codebook_dim",),
      "EnCodec: codes are latents, so a codebook as wide as the hidden size stays as wide")  # fmt: skip
def _encodec_codebook(lv: Level) -> None:
    d = lv.d
    if lv.hidden and d.get("codebook_dim") == lv.hidden and "codebook_dim" not in lv.keep:
        d["codebook_dim"] = d[lv.hidden_key]  # type: ignore[index]


@rule("hidden_like_widths", HIDDEN_KEYS,
      "every hidden-like width (projections, tower widths) takes the same target, so widths "
      "that were equal stay equal")  # fmt: skip
def _hidden_like_widths(lv: Level) -> None:
    for k in lv.keys(HIDDEN_KEYS):
        v = lv.d[k]
        if _is_int(v) and v > 0 and k not in NOT_A_SIZE:
            lv.d[k] = lv.hidden_like(v)


@rule("head_counts", HEAD_KEYS,
      "head counts down to the target; per-stage head lists keep their ratios")  # fmt: skip
def _head_counts(lv: Level) -> None:
    d = lv.d
    for k in lv.head_keys:
        v = d[k]
        if _is_int(v) and v > 0:
            d[k] = min(v, lv.new_heads or HEADS)
        elif _int_list(v):
            base = v[0]
            d[k] = [max(1, math.ceil(x / base)) for x in v]


@rule("kv_heads", KV_KEYS,
      "GQA / MQA kept: one KV head stays one, as many as the heads stays as many, else half")  # fmt: skip
def _kv_heads(lv: Level) -> None:
    if not (lv.kv and lv.new_heads and lv.kv_key):
        return
    if lv.kv == 1:
        new_kv = 1
    elif lv.heads and lv.kv >= lv.heads:
        new_kv = lv.new_heads
    else:
        new_kv = max(1, lv.new_heads // 2)
    while lv.new_heads % new_kv:
        new_kv -= 1
    lv.d[lv.kv_key] = new_kv


@rule("head_dim", HEAD_DIM_KEYS + ("head_dim",),
      "per-head size at most HEAD_DIM; a head_dim left None is derived (the modeling code may "
      "not)")  # fmt: skip
def _head_dim(lv: Level) -> None:
    d = lv.d
    if lv.head_dim and lv.head_dim > HEAD_DIM and lv.head_dim_key:
        d[lv.head_dim_key] = HEAD_DIM
    if "head_dim" in d and d["head_dim"] is None and lv.new_heads and lv.hidden_key:
        d["head_dim"] = d[lv.hidden_key] // lv.new_heads


@rule("norm_groups", ("num_groups", "norm_num_groups", "num_norm_groups", "group_norm_groups"),
      "GroupNorm groups must divide the (now narrow) channels")  # fmt: skip
def _norm_groups(lv: Level) -> None:
    for k in ("num_groups", "norm_num_groups", "num_norm_groups", "group_norm_groups"):
        v = lv.d.get(k)
        if _is_int(v) and v > 4:
            lv.d[k] = 4


@rule("depthwise_groups", ("*groups",),
      "conv groups equal to the hidden size (depthwise over hidden) follow the new width")  # fmt: skip
def _depthwise_groups(lv: Level) -> None:
    d = lv.d
    for k in list(d):
        v = d[k]
        if k.endswith("groups") and isinstance(v, int) and lv.hidden and v == lv.hidden:
            d[k] = d[lv.hidden_key]  # type: ignore[index]


@rule("extra_head_dims", EXTRA_HEAD_DIM_KEYS,
      "further per-head sizes (MLA, linear attention, SSM heads) capped independently")  # fmt: skip
def _extra_head_dims(lv: Level) -> None:
    for k in lv.keys(EXTRA_HEAD_DIM_KEYS):
        if _is_int(lv.d[k]) and lv.d[k] > HEAD_DIM:
            lv.d[k] = HEAD_DIM


@rule("low_rank", RANK_KEYS, "MLA's low-rank projections and sparse-index top-k: 2 * HEAD_DIM")
def _low_rank(lv: Level) -> None:
    for k in lv.keys(RANK_KEYS):
        if _is_int(lv.d[k]) and lv.d[k] > 2 * HEAD_DIM:
            lv.d[k] = 2 * HEAD_DIM


@rule("ssm_mixers", ("mamba_n_heads", "mamba_d_head", "num_heads", "head_dim", "expand",
                     "state_size", "chunk_size"),
      "Mamba-2 style mixers: heads * head_dim must equal expand * hidden; small states and "
      "chunks")  # fmt: skip
def _ssm_mixers(lv: Level) -> None:
    shrink_ssm(lv.d)


@rule("ffn_widths", FFN_KEYS,
      "FFN and other inner widths scale by the hidden factor (guessed from the widest width "
      "when the level has no hidden size)")  # fmt: skip
def _ffn_widths(lv: Level) -> None:
    d = lv.d
    if lv.factor == 1.0 and not lv.hidden:
        ints = [d[k] for k in lv.keys(HIDDEN_KEYS + FFN_KEYS) if _is_int(d[k]) and d[k] > 0]
        lv.factor = max(1.0, max(ints) / (HIDDEN * 2)) if ints else 1.0
    for k in lv.keys(FFN_KEYS):
        v = d[k]
        if k in NOT_A_SIZE:
            continue
        if _is_int(v) and v > 0:
            d[k] = lv.width(v, lv.factor)
        elif _int_list(v):
            d[k] = [lv.width(x, lv.factor) for x in v]


@rule("stage_widths", STAGE_WIDTH_KEYS,
      "per-stage width lists (conv stages, hierarchical vision) scale so the widest is near "
      "2 * HIDDEN")  # fmt: skip
def _stage_widths(lv: Level) -> None:
    d = lv.d
    for k in STAGE_WIDTH_KEYS:
        v = d.get(k)
        if k in lv.keep or not _int_list(v):
            continue
        f = max(1.0, max(v) / (HIDDEN * 2))
        d[k] = [lv.width(x, f) if x > 8 else x for x in v]


@rule("stage_heads", HEAD_KEYS,
      "per-stage heads must divide the per-stage (shrunk) widths")  # fmt: skip
def _stage_heads(lv: Level) -> None:
    d = lv.d
    widths = next((d[k] for k in ("embed_dim", "hidden_sizes") if isinstance(d.get(k), list)), None)
    for k in lv.head_keys:
        hv = d[k]
        if isinstance(widths, list) and isinstance(hv, list) and len(hv) == len(widths):
            d[k] = [max(h for h in range(1, max(1, x) + 1) if w % h == 0)
                    for x, w in zip(hv, widths, strict=True)]  # fmt: skip


@rule("efficientnet_coefficients", ("width_coefficient", "depth_coefficient",
                                    "num_block_repeats", "hidden_dim", "image_size"),
      "EfficientNet: channels scale by width_coefficient, repeats by depth_coefficient; the top "
      "conv is round_filters(1280); five stride-2 stages leave a 2x2 map at 64 px")  # fmt: skip
def _efficientnet_coefficients(lv: Level) -> None:
    d = lv.d
    if isinstance(d.get("width_coefficient"), (int, float)) and "num_block_repeats" in d:
        d["width_coefficient"] = min(d["width_coefficient"], 0.25)
        d["depth_coefficient"] = 1.0
        d["num_block_repeats"] = [1] * len(d["num_block_repeats"])
        if isinstance(d.get("hidden_dim"), int):
            d["hidden_dim"] = max(8, int(1280 * d["width_coefficient"] + 4) // 8 * 8)
        if isinstance(d.get("image_size"), int) and d["image_size"] > 64:
            d["image_size"] = 64


@rule("swin_stage_widths", ("depths", "embed_dim"),
      "Swin-like: the width doubles at every stage; the last stays at 2 * HIDDEN")  # fmt: skip
def _swin_stage_widths(lv: Level) -> None:
    d = lv.d
    stages = d.get("depths")
    embed_k = lv.real("embed_dim")
    if isinstance(stages, list) and len(stages) > 1 and isinstance(d.get(embed_k), int):
        cap = max(16, (2 * HIDDEN) >> (len(stages) - 1))
        if d[embed_k] > cap and embed_k not in lv.keep and "hidden_sizes" not in d:
            d[embed_k] = cap


@rule("vq_multipliers", ("channel_multiplier", "base_channels", "num_embeddings",
                         "latent_channels"),
      "VQ image tokenizers: stage i is base * multiplier[i] wide (GroupNorm of 32); codebook "
      "entries are the image vocabulary")  # fmt: skip
def _vq_multipliers(lv: Level) -> None:
    d = lv.d
    mult, base = d.get("channel_multiplier"), d.get("base_channels")
    if isinstance(mult, list) and mult and isinstance(base, int) and "base_channels" not in lv.keep:
        d["base_channels"] = min(base, max(32, (2 * HIDDEN) // max(mult)))
        for k, cap in (("num_embeddings", VOCAB), ("latent_channels", HIDDEN)):
            if isinstance(d.get(k), int) and d[k] > cap and k not in lv.keep:
                d[k] = cap


@rule("codec_doubling_base", STRIDE_LIST_KEYS + DOUBLING_BASE_KEYS,
      "conv codecs / vocoders: the base width doubles at every strided stage, so the last "
      "stage (base * 2**stages) stays near 2 * HIDDEN")  # fmt: skip
def _codec_doubling_base(lv: Level) -> None:
    d = lv.d
    ratios = next((d[k] for k in STRIDE_LIST_KEYS if isinstance(d.get(k), list)), None)
    if ratios:
        cap = max(4, (2 * HIDDEN) >> len(ratios))
        for k in lv.keys(DOUBLING_BASE_KEYS):
            if _is_int(d[k]) and d[k] > cap:
                d[k] = cap


# ----- depth, experts, vocabularies, positions ----------------------------------------------


@rule("layers", LAYER_KEYS,
      "as few layers as keep one of each layer kind (layer_types, hybrid patterns), at least "
      "two; per-layer lists and indices follow the layers kept; per-stage depths: one block")  # fmt: skip
def _layers(lv: Level) -> None:
    shrink_layers(lv.d, lv.keys(LAYER_KEYS))


@rule("experts", EXPERT_KEYS + TOPK_KEYS + ("n_group", "num_expert_group", "topk_group"),
      "MoE routing kept with EXPERTS experts, top-k at most TOP_K, two expert groups")  # fmt: skip
def _experts(lv: Level) -> None:
    d = lv.d
    _, experts = lv.first_int(EXPERT_KEYS)
    if not (experts and experts > EXPERTS):
        return
    for k in lv.keys(EXPERT_KEYS):
        if isinstance(d[k], int):
            d[k] = EXPERTS
    for k in lv.keys(TOPK_KEYS):
        if isinstance(d[k], int) and d[k] > 0:
            d[k] = min(d[k], TOP_K, EXPERTS)
    for k in ("n_group", "num_expert_group"):
        if isinstance(d.get(k), int) and d[k] > 1:
            d[k] = 2
            if isinstance(d.get("topk_group"), int):
                d["topk_group"] = min(d["topk_group"], 1)


@rule("vocabularies", ("vocab_size", "*vocab_size*", "*_vocab", "num_bpe_labels",
                       "num_wordpiece_labels"),
      "every vocabulary at most VOCAB (MGP-STR's BPE and wordpiece heads are vocabularies too)")  # fmt: skip
def _vocabularies(lv: Level) -> None:
    d = lv.d
    vocab_like = [k for k in d if ("vocab_size" in k or k.endswith("_vocab")) and k not in lv.keep]
    vocab_like += [k for k in ("num_bpe_labels", "num_wordpiece_labels") if k in d]
    for k in [lv.real("vocab_size")] + vocab_like:
        v = d.get(k)
        if _is_int(v) and v > VOCAB:
            d[k] = VOCAB


@rule("positions", POSITION_KEYS, "position tables at most MAX_POSITIONS")
def _positions(lv: Level) -> None:
    for k in lv.keys(POSITION_KEYS):
        v = lv.d[k]
        if _is_int(v) and v > MAX_POSITIONS:
            lv.d[k] = MAX_POSITIONS


@rule("audio_source_positions", ("max_source_positions",),
      "audio encoders: frames = 2 * positions, so 32 positions keep the input short")  # fmt: skip
def _audio_source_positions(lv: Level) -> None:
    v = lv.d.get("max_source_positions")
    if _is_int(v) and v > 32 and "max_source_positions" not in lv.keep:
        lv.d["max_source_positions"] = 32


@rule("windows", WINDOW_KEYS, "sliding / local windows shorter than the dummy sequence")
def _windows(lv: Level) -> None:
    for k in lv.keys(WINDOW_KEYS):
        v = lv.d[k]
        if _is_int(v) and v > WINDOW:
            lv.d[k] = WINDOW


@rule("rope", ("rope_parameters", "rope_scaling", "mrope_section", "short_factor",
               "long_factor", "original_max_position_embeddings"),
      "RoPE kept: the original context below the new positions, M-RoPE sections and "
      "LongRoPE factors resized to the new rotary half-dimension")  # fmt: skip
def _rope(lv: Level) -> None:
    shrink_rope(lv.d, lv.old_head_dim, lv.new_head_dim, lv.family.get("mrope_fallback"))


# ----- images, video, audio quantizers, detection ---------------------------------------------


@rule("image_grid", ("patch_size", "image_size", "input_size", "num_patches"),
      "GRID x GRID patches per image; convolutional stages that downsample up to 32x keep "
      "64 px")  # fmt: skip
def _image_grid(lv: Level) -> None:
    d = lv.d
    patch = d.get("patch_size")
    image = lv.image = d.get("image_size", d.get("input_size"))
    if isinstance(patch, int) and isinstance(d.get("input_size"), int) and "image_size" not in d:
        d["input_size"] = min(d["input_size"], patch * GRID)
    if isinstance(d.get("num_patches"), int) and d["num_patches"] > GRID * GRID:
        d["num_patches"] = GRID * GRID
    staged = any(k in d for k in ("hidden_sizes", "neck_hidden_sizes", "output_stride"))
    if isinstance(patch, int) and isinstance(image, int) and image > patch * GRID:
        d["image_size"] = min(image, max(patch * GRID, 64 if staged else 0))
    elif isinstance(patch, list) and isinstance(image, list) and len(patch) == len(image):
        d["image_size"] = [min(i, p * GRID) for i, p in zip(image, patch, strict=True)]


@rule("video_tubelets", ("tubelet_size", "num_frames", "image_size"),
      "ViViT: the tubelet is the patch; at most four frames, at least one tubelet")  # fmt: skip
def _video_tubelets(lv: Level) -> None:
    d = lv.d
    tubelet = d.get("tubelet_size")
    image = lv.image
    if isinstance(tubelet, list) and len(tubelet) == 3 and isinstance(image, int):
        d["image_size"] = min(image, tubelet[1] * GRID)
    frames = d.get("num_frames")
    if _is_int(frames) and frames > 4:
        t = tubelet[0] if isinstance(tubelet, list) else tubelet
        d["num_frames"] = max(4, t if isinstance(t, int) else 1)


@rule("rotary_dim", ("rotary_dim",), "a partial rotary dimension keeps its share of the head")
def _rotary_dim(lv: Level) -> None:
    rot = lv.d.get("rotary_dim")
    old_hd, new_hd = lv.old_head_dim, lv.new_head_dim
    if isinstance(rot, int) and old_hd and new_hd and rot > new_hd:
        lv.d["rotary_dim"] = max(2, (rot * new_hd // old_hd) // 2 * 2)


@rule("hierarchical_windows", ("window_size", "depths", "image_size", "patch_size"),
      "hierarchical vision (Swin-like): a small window, and an image that still spans a window "
      "at the last stage")  # fmt: skip
def _hierarchical_windows(lv: Level) -> None:
    d = lv.d
    patch, depths = d.get("patch_size"), d.get("depths")
    if (
        isinstance(patch, int)
        and isinstance(d.get("window_size"), int)
        and isinstance(depths, list)
    ):
        d["window_size"] = min(d["window_size"], 2)
        if isinstance(d.get("image_size"), int):
            d["image_size"] = patch * d["window_size"] * 2 ** max(0, len(depths) - 1)


@rule("speech_quantizer", ("num_codevectors_per_group", "num_negatives"),
      "wav2vec2-style quantizers: 8 codebook entries per group, 4 contrastive negatives")  # fmt: skip
def _speech_quantizer(lv: Level) -> None:
    d = lv.d
    if _is_int(d.get("num_codevectors_per_group")) and d["num_codevectors_per_group"] > 8:
        d["num_codevectors_per_group"] = 8
    if _is_int(d.get("num_negatives")) and d["num_negatives"] > 4:
        d["num_negatives"] = 4


@rule("detection_queries", ("num_queries", "num_detection_tokens", "num_top_queries"),
      "DETR-style detectors: at most 8 object queries")  # fmt: skip
def _detection_queries(lv: Level) -> None:
    for k in ("num_queries", "num_detection_tokens", "num_top_queries"):
        if _is_int(lv.d.get(k)) and lv.d[k] > 8:
            lv.d[k] = 8


@rule("tiling_pinpoints", ("image_grid_pinpoints",),
      "LLaVA-NeXt-style tiling: grid pinpoints scaled to the shrunk vision image size")  # fmt: skip
def _tiling_pinpoints(lv: Level) -> None:
    d = lv.d
    pins, vision = d.get("image_grid_pinpoints"), d.get("vision_config")
    if isinstance(pins, list) and isinstance(vision, dict):
        size = vision.get("image_size")
        big = max((max(p) for p in pins if isinstance(p, list) and p), default=0)
        if isinstance(size, int) and big > size * 4:
            old_size = min(min(p) for p in pins)
            d["image_grid_pinpoints"] = [[x * size // old_size for x in p] for p in pins]


# ----- the family data, last ----------------------------------------------------------------


@rule("family_data", ("defaults", "set"),
      "the family's own values (data/families/*.json): `defaults` fill keys left "
      "None, `set` overrides, each with its reason in the data")  # fmt: skip
def _family_data(lv: Level) -> None:
    for dotted, value in lv.family.get("defaults", {}).items():
        if get_dotted(lv.d, dotted) is None:
            set_dotted(lv.d, dotted, copy.deepcopy(value))
    for dotted, value in lv.family.get("set", {}).items():
        set_dotted(lv.d, dotted, copy.deepcopy(value))


@rule("timm_backbones", ("backbone", "architecture", "use_timm_backbone"),
      "a timm backbone named by a transformers config becomes timm's tiny test variant of the "
      "same block type")  # fmt: skip
def _timm_backbones(lv: Level) -> None:
    d = lv.d
    if lv.model_type in ("timm_backbone", "timm_wrapper") or d.get("use_timm_backbone"):
        for k in ("backbone", "architecture"):
            if isinstance(d.get(k), str):
                d[k] = tiny_timm_name(d[k])


def tiny_timm_name(name: str) -> str:
    """timm's tiny test variant of the same block type, by the longest matching prefix."""
    from model_configs.libraries.transformers.families import timm_rules

    table = {k: v for k, v in timm_rules()["tiny"].items() if not k.startswith("_")}
    base = name.split(".")[0]
    for prefix in sorted(table, key=len, reverse=True):
        if base.startswith(prefix):
            return str(table[prefix])
    return name


# ----- the larger rules' bodies ---------------------------------------------------------------


def shrink_ssm(d: dict[str, Any]) -> None:
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


def shrink_layers(d: dict[str, Any], layer_keys: list[str]) -> None:
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


def shrink_rope(
    d: dict[str, Any], old_head_dim: int | None, new_hd: Any, mrope_fallback: list[int] | None
) -> None:
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
            if "mrope_section" not in params and mrope_fallback:
                params["mrope_section"] = list(mrope_fallback)
            sec = params.get("mrope_section")
            if isinstance(sec, list) and new_hd:
                rot = int(
                    new_hd
                    * float(
                        params.get("partial_rotary_factor") or d.get("partial_rotary_factor") or 1.0
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


def set_dotted(d: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    for p in parts[:-1]:
        d = d.setdefault(p, {})
    d[parts[-1]] = value


def get_dotted(d: dict[str, Any], dotted: str) -> Any:
    for p in dotted.split("."):
        if not isinstance(d, dict) or p not in d:
            return None
        d = d[p]
    return d
