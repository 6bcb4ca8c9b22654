"""The per-family rule files and input builders load, merge and explain themselves."""

from __future__ import annotations

import json

import pytest

from model_configs import family_inputs, family_rules


def test_rules_load_from_every_group_file_and_each_says_why() -> None:
    files = sorted(p.name for p in family_rules.RULES_DIR.glob("*.json"))
    assert "core.json" in files and len(files) >= 2
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
    assert all(b.module.startswith("model_configs.family_inputs.") for b in builders.values())

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
