"""The per-family rule files and input builders load, merge and explain themselves."""

from __future__ import annotations

import json

import pytest

from model_configs.libraries.transformers import families as family_rules
from model_configs.libraries.transformers import inputs as family_inputs


def test_rules_load_from_every_group_file_and_each_says_why() -> None:
    """One rule file per input layout, named as the module that builds that layout."""
    files = sorted(p.stem for p in family_rules.RULES_DIR.glob("*.json"))
    assert files == sorted(set(family_inputs.GROUPS) - {"generic"})
    rules = family_rules.shrink_rules()
    assert "whisper" in rules and all(r["reason"] for r in rules.values())
    assert family_rules.input_rules()["whisper"]["features"] == "mel_channels_first"
    assert family_rules.timm_rules()["fallback_backbone"]["model_type"] == "resnet"


def test_a_model_type_defined_twice_is_refused(tmp_path, monkeypatch) -> None:
    rule = {"shrink": {"llama": {"set": {}, "reason": "x"}}}
    for name in ("a.json", "b.json"):
        (tmp_path / name).write_text(json.dumps(rule))
    monkeypatch.setattr(family_rules, "RULES_DIR", tmp_path)
    family_rules._tables.cache_clear()
    try:
        with pytest.raises(ValueError, match="both a.json and b.json"):
            family_rules.shrink_rules()
        (tmp_path / "b.json").write_text(json.dumps({"inputs": {"bert": {"seq_len": 8}}}))
        family_rules._tables.cache_clear()
        with pytest.raises(ValueError, match="no reason"):
            family_rules.input_rules()
    finally:
        monkeypatch.undo()
        family_rules._tables.cache_clear()


def test_input_builders_register_once_per_model_type() -> None:
    builders = family_inputs.registered()
    assert all(
        b.module.startswith("model_configs.libraries.transformers.inputs.")
        for b in builders.values()
    )

    @family_inputs.family_inputs("__test_type__")
    def first(ctx: family_inputs.InputContext) -> None:
        ctx.inputs["x"] = 1

    try:
        with pytest.raises(ValueError, match="two input builders"):
            family_inputs.family_inputs("__test_type__")(first)
        found = family_inputs.lookup("__test_type__")
        assert found is not None and found.fn is first and not found.replace
    finally:
        family_inputs._REGISTRY.pop("__test_type__", None)


def test_known_failures_name_a_kind_of_cause() -> None:
    known = family_rules.known_failures()
    assert known, "the timm-backed types at least are listed"
    assert {k["kind"] for k in known.values()} <= {"dependency", "upstream", "shrinker"}


def test_signature_entries_apply_in_order_and_each_says_why() -> None:
    """The generic inputs are the registry's signature entries: text first, the decoder's side
    last, each entry named once and explained (the families it was written for)."""
    entries = family_inputs.by_signature()
    names = [e.name for e in entries]
    assert names[0] == "input_ids" and names[-2:] == ["decoder_input_ids", "eos_last"]
    assert len(set(names)) == len(names) >= 20
    assert all(e.fn.__doc__ and e.module.endswith(".generic") for e in entries)
    with pytest.raises(ValueError, match="two signature entries"):
        family_inputs.signature_inputs("input_ids", when=lambda ctx: False)(entries[0].fn)


def test_timm_shrink_exceptions_are_data_with_a_reason() -> None:
    from model_configs.libraries.timm import shrink as tshrink

    rules = json.loads(tshrink.RULES_FILE.read_text())["shrink_rules"]
    tables = {k: v for k, v in rules.items() if not k.startswith("_")}
    assert tables and all(
        entry.get("reason") for table in tables.values() for entry in table.values()
    )
    assert tshrink.DEPTH_FLOOR["IFormer"] == 3 and tshrink.FIXED_ARGS["VGG"]["mlp_ratio"] == 1 / 64
    hooks = [e["hook"] for t in ("class_hooks", "dataclass_hooks") for e in tables[t].values()]
    assert set(hooks) == set(tshrink.HOOKS)  # every hook named exists, and every one is used
