"""Canonical task keys: tiny configs that differ only in fields that change no op hash alike;
fields that change the ops keep them apart (bench/key_pairs.py runs merged pairs to show it)."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("transformers")

from ground.schema import ConfigSource  # noqa: E402
from model_configs.libraries import ADAPTERS, get_adapter  # noqa: E402
from model_configs.libraries.base import Adapter  # noqa: E402
from model_configs.shrink import shrink  # noqa: E402
from model_configs.spec import ResolvedConfig, TinySpec  # noqa: E402


def _config(model_type: str, **fields: Any) -> dict[str, Any]:
    from transformers import AutoConfig

    return AutoConfig.for_model(model_type, **fields).to_dict()


def _tiny(
    config: dict[str, Any], arch: str | None = None, library: str = "transformers"
) -> TinySpec:
    resolved = ResolvedConfig(
        model_id="test/model", library=library, config=config, source=ConfigSource.HUB.value
    )
    return shrink(resolved, architecture_hint=arch)


SEQ_CLS = "LlamaForSequenceClassification"
LLAMA = {"num_attention_heads": 8, "num_key_value_heads": 8, "hidden_size": 512}


def _labels(names: list[str]) -> dict[str, Any]:
    return {"id2label": dict(enumerate(names)), "label2id": {n: i for i, n in enumerate(names)}}


# Pairs whose tiny configs differ only where no op changes: one task each.
MERGED = {
    "label names": ({**_labels(["neg", "pos"])}, {**_labels(["LABEL_0", "LABEL_1"])}),
    "label counts of two and more": (_labels([f"c{i}" for i in range(7)]), _labels(["a", "b"])),
    "stored dtype": ({"torch_dtype": "bfloat16"}, {"torch_dtype": "float32"}),
    "special token id values": (
        {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2},
        {"bos_token_id": 128000, "eos_token_id": 128001, "pad_token_id": 128001},
    ),
}
# Pairs that differ in what runs: two tasks.
APART = {
    "one label or several": (_labels(["score"]), _labels(["a", "b"])),
    "problem_type": (
        {**_labels(["a", "b"]), "problem_type": "multi_label_classification"},
        {**_labels(["a", "b"]), "problem_type": "single_label_classification"},
    ),
    "a special token set or not": ({"pad_token_id": None}, {"pad_token_id": 0}),
    "special tokens equal or distinct": (
        {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2},
        {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 3},
    ),
    "MHA or GQA": ({"num_key_value_heads": 8}, {"num_key_value_heads": 2}),
    "GQA or MQA": ({"num_key_value_heads": 2}, {"num_key_value_heads": 1}),
    "rope_type": (
        {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}},
        {"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}},
    ),
    "activation": ({"hidden_act": "silu"}, {"hidden_act": "gelu"}),
    "tie_word_embeddings": ({"tie_word_embeddings": True}, {"tie_word_embeddings": False}),
}


@pytest.mark.parametrize("what", list(MERGED))
def test_fields_that_change_no_op_merge(what: str) -> None:
    a, b = (_tiny(_config("llama", **{**LLAMA, **fields}), SEQ_CLS) for fields in MERGED[what])
    raw = [
        get_adapter("transformers").shrink(
            ResolvedConfig("test/model", "transformers", _config("llama", **{**LLAMA, **f}), "hub"),
            architecture_hint=SEQ_CLS,
        )
        for f in MERGED[what]
    ]
    assert raw[0].hash != raw[1].hash, "the pair differs before the canonical form"
    assert a.hash == b.hash
    assert a.config == b.config


@pytest.mark.parametrize("what", list(APART))
def test_fields_that_change_ops_stay_apart(what: str) -> None:
    a, b = (_tiny(_config("llama", **{**LLAMA, **fields}), SEQ_CLS) for fields in APART[what])
    assert a.hash != b.hash


def test_a_sliding_window_set_or_not_stays_apart_whatever_its_size() -> None:
    mistral = {"num_attention_heads": 8, "num_key_value_heads": 2}
    none, small, large = (
        _tiny(_config("mistral", **mistral, sliding_window=w), "MistralForCausalLM")
        for w in (None, 4096, 32768)
    )
    assert none.hash != small.hash
    assert small.config["sliding_window"] == large.config["sliding_window"]


def test_quantization_stays_apart() -> None:
    block = {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128],
             "activation_scheme": "dynamic"}  # fmt: skip
    plain = _tiny(_config("llama", **LLAMA), "LlamaForCausalLM")
    quantized = _tiny(
        {**_config("llama", **LLAMA), "quantization_config": block}, "LlamaForCausalLM"
    )
    assert plain.hash != quantized.hash


def test_canonical_form_is_stable_and_says_what_it_changed() -> None:
    fields = {**_labels(["neg", "pos"]), "torch_dtype": "bfloat16", "pad_token_id": 128001,
              "bos_token_id": 128000, "eos_token_id": 128001}  # fmt: skip
    spec = _tiny(_config("llama", **{**LLAMA, **fields}), SEQ_CLS)
    adapter = get_adapter("transformers")
    assert adapter.canonical(spec) == spec  # applying it again changes nothing
    assert "dtype" not in spec.config and "torch_dtype" not in spec.config
    assert spec.config["id2label"] == {0: "LABEL_0", 1: "LABEL_1"}
    assert spec.changes["id2label"][0] == {"0": "neg", "1": "pos"}
    assert spec.changes["pad_token_id"] == [128001, spec.config["pad_token_id"]]
    assert spec.config["eos_token_id"] == spec.config["pad_token_id"] != spec.config["bos_token_id"]


def test_token_ids_keep_inside_every_vocabulary() -> None:
    """Renumbering never raises an id: each stays inside the vocabulary of its sub-config."""
    spec = _tiny(_config("llava"), "LlavaForConditionalGeneration")
    vocab = spec.config["text_config"]["vocab_size"]
    ids = [spec.config["image_token_index"], spec.config["text_config"]["eos_token_id"]]
    assert all(0 <= i < vocab for i in ids)


def test_open_clip_model_name_changes_no_op() -> None:
    pytest.importorskip("open_clip")
    import open_clip

    config = open_clip.get_model_config("ViT-B-32")
    a = _tiny({"model_name": "ViT-B-32", **config}, library="open_clip")
    b = _tiny({"model_name": "ViT-B-32-quickgelu-custom", **config}, library="open_clip")
    assert a.hash == b.hash and "model_name" not in a.config
    assert a.model_type == "ViT-B-32"  # still said in the rows


def _stack(backbone: dict[str, Any]) -> dict[str, Any]:
    modules = [
        {"type": "Transformer", "path": "", "config": {"max_seq_length": 128}},
        {"type": "Pooling", "path": "1_Pooling", "config": {"pooling_mode": "mean"}},
    ]
    return {"modules": modules, "backbone": backbone}


def test_sentence_transformers_backbones_that_shrink_alike_hash_alike() -> None:
    """The stack's tiny config holds its backbone's tiny config, not what the shrink changed
    (full-size values): two backbones that shrink to one tiny model are one task."""
    adapter = get_adapter("sentence-transformers")
    specs = [
        adapter.shrink(
            ResolvedConfig(
                "test/st", "sentence-transformers", _stack(_config("bert", **fields)), "hub"
            )
        )
        for fields in ({"max_position_embeddings": 512}, {"max_position_embeddings": 8192})
    ]
    assert specs[0].config["backbone"]["config"] == specs[1].config["backbone"]["config"]
    assert specs[0].hash == specs[1].hash
    assert "backbone.max_position_embeddings" in specs[1].changes  # the rows still say it
    assert specs[0].config["backbone"]["changes"] == {}


def test_sentence_transformers_backbone_is_canonical_too() -> None:
    pytest.importorskip("sentence_transformers")
    a, b = (
        _tiny(_stack(_config("bert", **fields)), library="sentence-transformers")
        for fields in (
            {"torch_dtype": "float16", "pad_token_id": 0},
            {"torch_dtype": "float32", "pad_token_id": 5},
        )  # fmt: skip
    )
    assert a.hash == b.hash


def test_every_canonical_form_says_why() -> None:
    """An adapter with a canonical form lists each field it sets, with why it changes no op."""
    for library in ADAPTERS:
        adapter = get_adapter(library)
        if type(adapter).canonical is not Adapter.canonical:
            assert adapter.canonical_fields, library
            assert all(len(why) > 40 for why in adapter.canonical_fields.values()), library


def test_a_new_key_version_gives_new_task_and_plan_keys(monkeypatch, tmp_path) -> None:
    """Stores written before a key changed meaning match nothing: they are planned and run
    again, never read as if their keys meant what they mean now."""
    from model_configs.spec import CatalogEntry
    from sweep import reuse
    from sweep.plans import PlanKeys

    spec = _tiny(_config("llama", **LLAMA), "LlamaForCausalLM")
    entry = CatalogEntry(model_id="org/model", library="transformers", model_type_hint="llama")
    before = (
        reuse.KeyContext.of({"device": "cpu"}).key(spec, "fp32"),
        PlanKeys.of(["load"], tmp_path).key(entry),
    )
    monkeypatch.setattr(reuse, "KEY_VERSION", reuse.KEY_VERSION + 1)
    after = (
        reuse.KeyContext.of({"device": "cpu"}).key(spec, "fp32"),
        PlanKeys.of(["load"], tmp_path).key(entry),
    )
    assert before[0] != after[0] and before[1] != after[1]


def test_a_label_map_saving_leaves_out_stays_apart_where_the_class_reloads_another_count() -> None:
    """transformers saves no label map equal to its default (LABEL_0, LABEL_1), and BART's
    config class then reloads its own three labels (the load stage's round trip fails on the
    head). So for BART the default map stays apart, and every other map of several labels is
    one canonical map that saving keeps: each reloads as many labels as its original does."""
    from transformers import BartConfig

    cls = "BartForSequenceClassification"
    default = _tiny(_config("bart", **_labels(["LABEL_0", "LABEL_1"])), cls)
    custom = _tiny(_config("bart", **_labels(["neg", "pos"])), cls)
    many = _tiny(_config("bart", **_labels([f"LABEL_{i}" for i in range(7)])), cls)
    assert default.hash != custom.hash and custom.hash == many.hash
    for spec, reloaded in ((default, 3), (custom, 2)):
        saved = BartConfig.from_dict(dict(spec.config)).to_diff_dict()
        assert BartConfig.from_dict(saved).num_labels == reloaded


def test_token_ids_a_vocabulary_map_also_names_are_kept() -> None:
    """Chameleon reads its image token from `vocabulary_map` as well as `image_token_id`: a
    config whose string-to-id map names its special ids keeps them, so the two still agree."""
    spec = _tiny(_config("chameleon"), "ChameleonForConditionalGeneration")
    assert spec.config["vocabulary_map"]["<image>"] == spec.config["image_token_id"]
