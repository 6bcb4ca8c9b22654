"""Config resolution: every source labelled, every refusal a skip reason."""

from __future__ import annotations

import json

import pytest

from ground.errors import ConfigError
from model_configs.catalog import load_catalog
from model_configs.resolve import resolve_entry, resolve_local
from model_configs.spec import CatalogEntry


def entry(**kw) -> CatalogEntry:
    return CatalogEntry(**{"model_id": "org/m", "library": "transformers", **kw})


def reason_of(fn, *args, **kw) -> str:
    with pytest.raises(ConfigError) as info:
        fn(*args, **kw)
    return info.value.reason


def test_offline_defaults_for_the_catalog_model_type():
    resolved = resolve_entry(
        entry(model_type_hint="llama", architectures_hint=("LlamaForCausalLM",)), offline=True
    )
    assert resolved.source == "transformers_default"
    assert resolved.config["model_type"] == "llama"
    assert resolved.config["architectures"] == ["LlamaForCausalLM"]
    assert "llama" in resolved.detail


def test_two_candidates_take_the_first_known():
    resolved = resolve_entry(entry(model_type_hint="not_a_type|bert"), offline=True)
    assert resolved.config["model_type"] == "bert"


@pytest.mark.parametrize(
    ("kw", "reason"),
    [
        ({"custom_code": True, "model_type_hint": "llama"}, "remote_code"),
        ({"library": "timm"}, "no_config"),  # timm: "m" names no timm architecture
        ({"library": "not-a-library"}, "unsupported_library"),
        ({"library": "gguf", "model_type_hint": "llama"}, "unsupported_library"),
        ({"library": None}, "unsupported_library"),
        ({"model_type_hint": None}, "no_config"),
        ({"model_type_hint": "definitely_not_a_model_type"}, "unknown_model_type"),
        ({"library": "diffusers", "tags": ("diffusers",)}, "no_config"),
    ],
)
def test_refusals_are_skip_reasons(kw, reason):
    assert reason_of(resolve_entry, entry(**kw), offline=True) == reason


def test_cached_hub_config_wins(tmp_path):
    folder = tmp_path / "org" / "m"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 3}))
    resolved = resolve_entry(entry(model_type_hint="llama"), config_dir=tmp_path, offline=True)
    assert resolved.source == "hub" and resolved.config["n_layer"] == 3


def test_remote_code_config_is_refused(tmp_path):
    folder = tmp_path / "org" / "m"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(
        json.dumps({"model_type": "acme", "auto_map": {"AutoModel": "modeling_acme.AcmeModel"}})
    )
    assert reason_of(resolve_entry, entry(), config_dir=tmp_path, offline=True) == "remote_code"


@pytest.mark.parametrize(
    ("text", "match"),
    [("", "empty"), ("{not json", "not valid JSON"), ("[1, 2]", "JSON object")],
)
def test_malformed_local_configs(tmp_path, text, match):
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match=match) as info:
        resolve_local(path)
    assert info.value.reason == "malformed_config"


def test_local_folder_and_library_detection(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    resolved = resolve_local(tmp_path)
    assert (resolved.source, resolved.library) == ("local", "transformers")
    unet = tmp_path / "unet.json"
    unet.write_text(json.dumps({"_class_name": "UNet2DConditionModel"}))
    assert resolve_local(unet).library == "diffusers"
    assert reason_of(resolve_local, tmp_path / "missing") == "no_config"


def test_bundled_catalog_every_entry_resolves_or_has_a_reason():
    """No entry of the offline snapshot raises anything but a ConfigError with a reason."""
    reasons: dict[str, int] = {}
    for e in load_catalog("bundled").entries:
        try:
            resolve_entry(e, offline=True)
            reasons["resolved"] = reasons.get("resolved", 0) + 1
        except ConfigError as exc:
            reasons[exc.reason] = reasons.get(exc.reason, 0) + 1
    assert sum(reasons.values()) == 1000
    assert reasons["resolved"] > 600
    assert reasons["remote_code"] == 71
