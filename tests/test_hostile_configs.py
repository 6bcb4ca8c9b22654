"""Hostile configs, property-based: random and adversarial config dicts (wrong types, huge or
negative sizes, deep nesting, unknown types, absurd sub-config graphs) go through resolve ->
shrink -> build as a sweep runs them. Planning never raises, every model gets rows with a
reason, and no model is built over the build budget: a huge declared size that survives the
shrink is refused on PyTorch's `meta` device, before any allocation (`model_configs/guards.py`,
`model_configs/build.py`)."""

from __future__ import annotations

import copy
import functools
import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from ground.schema import Stage, Status
from model_configs import build, guards
from model_configs.resolve import transformers_default_config
from model_configs.spec import CatalogEntry
from reports.store import Store
from sweep.driver import run_sweep
from sweep.plan import plan_entry
from tests.conftest import write_catalog
from tests.neuron_support import forked
from tests.test_driver_faults import config as run_config

STAGES = [Stage.LOAD, Stage.FORWARD]
# Small to build, and between them: decoder, encoder, encoder-decoder, two towers, a vision
# tower inside a language model, mixture of experts (sub-configs for the graphs).
TYPES = ["llama", "gpt2", "bert", "t5", "clip", "llava", "mixtral", "whisper"]


@functools.cache
def base_config(model_type: str) -> dict[str, Any]:
    return transformers_default_config(model_type)


HOSTILE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**15), max_value=10**15),
    st.sampled_from([0, -1, -(2**31), 2**31, 2**63 - 1, 10**12, 10**9 + 7]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.lists(st.integers(min_value=-(10**9), max_value=10**9), max_size=4),
    st.dictionaries(st.text(max_size=6), st.integers(), max_size=3),
)
SIZE_KEYS = [
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "vocab_size",
    "max_position_embeddings",
    "head_dim",
    "n_embd",
    "n_layer",
    "n_head",
    "d_model",
    "d_ff",
    "num_local_experts",
    "num_experts_per_tok",
    "projection_dim",
    "image_size",
    "patch_size",
    "num_mel_bins",
]


def _paths(config: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = []
    for key, value in config.items():
        out.append((*prefix, key))
        if isinstance(value, dict) and len(prefix) < 3:
            out += _paths(value, (*prefix, key))
    return out


def _set(config: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = config
    for key in path[:-1]:
        nxt = node.get(key)
        if not isinstance(nxt, dict):
            nxt = node[key] = {}
        node = nxt
    node[path[-1]] = value


@st.composite
def hostile_configs(draw) -> dict[str, Any]:
    config = copy.deepcopy(base_config(draw(st.sampled_from(TYPES))))
    for _ in range(draw(st.integers(min_value=1, max_value=6))):
        kind = draw(
            st.sampled_from(
                ["value", "size", "huge", "delete", "type", "nest", "graph", "arch", "remote"]
            )
        )
        paths = _paths(config) or [("hidden_size",)]
        if kind == "value":  # any key, any wrong value
            _set(config, draw(st.sampled_from(paths)), draw(HOSTILE))
        elif kind == "size":  # a size key (top level or in a sub-config), negative or absurd
            where = draw(st.sampled_from([(), *[p for p in paths if len(p) == 1]]))
            key = draw(st.sampled_from(SIZE_KEYS))
            value = draw(st.sampled_from([-(10**6), -1, 0, 3, 10**7, 10**12, 2**62]))
            _set(config, (*where, key), value)
        elif kind == "huge":  # a size the shrinker may not know: declared, enormous
            key = draw(st.sampled_from(SIZE_KEYS + ["ffn_dim", "encoder_ffn_dim", "n_inner"]))
            config[key] = draw(st.integers(min_value=10**9, max_value=10**15))
        elif kind == "delete" and len(paths) > 1:
            path = draw(st.sampled_from(paths))
            node: Any = config
            for key in path[:-1]:
                node = node.get(key) if isinstance(node, dict) else None
            if isinstance(node, dict):
                node.pop(path[-1], None)
        elif kind == "type":  # an unknown, empty or foreign model type
            config["model_type"] = draw(
                st.one_of(st.text(max_size=10), st.sampled_from(TYPES), st.integers())
            )
        elif kind == "nest":  # deep nesting of an extra key
            depth = draw(st.integers(min_value=1, max_value=200))
            leaf: Any = draw(HOSTILE)
            for _ in range(depth):
                leaf = {"x": leaf} if draw(st.booleans()) else [leaf]
            config[draw(st.sampled_from(["extra", "rope_scaling", "text_config"]))] = leaf
        elif kind == "graph":  # sub-configs holding sub-configs, of other types, to some depth
            sub: dict[str, Any] = {}
            for _ in range(draw(st.integers(min_value=1, max_value=40))):
                other = copy.deepcopy(base_config(draw(st.sampled_from(TYPES))))
                other[draw(st.sampled_from(["text_config", "vision_config", "encoder"]))] = sub
                sub = other
            config[draw(st.sampled_from(["text_config", "vision_config", "decoder"]))] = sub
        elif kind == "arch":
            config["architectures"] = draw(
                st.one_of(
                    st.lists(st.text(max_size=20), max_size=3),
                    st.lists(st.sampled_from(["LlamaForCausalLM", "BertModel", "T5Model"])),
                    HOSTILE,
                )
            )
        elif kind == "remote":  # data asking for repo code
            config["auto_map"] = {"AutoModel": "modeling_evil.EvilModel"}
    return config


def _plan(config: dict[str, Any], folder: Path):
    model_dir = folder / "org" / "hostile"
    model_dir.mkdir(parents=True, exist_ok=True)
    try:
        text = json.dumps(config, allow_nan=True)
    except (RecursionError, ValueError):
        text = "{" * 100_000  # what such a config looks like on disk: too deep to parse
    (model_dir / "config.json").write_text(text)
    entry = CatalogEntry(model_id="org/hostile", library="transformers", rank=1)
    return plan_entry(entry, STAGES, config_dir=folder)


def _assert_rows_with_reasons(outcome) -> None:
    assert [r.stage for r in outcome.stages] == [s.value for s in STAGES]
    first = outcome.stages[0]
    if first.status == Status.SKIP.value:
        assert first.reason and first.error_message
    else:
        assert first.status == Status.FAIL.value and first.error_type and first.error_message


@settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(config=hostile_configs())
def test_a_hostile_config_is_a_row_with_a_reason_or_a_model_within_budget(config, tmp_path_factory):
    folder = tmp_path_factory.mktemp("cfg")
    planned = _plan(config, folder)  # never raises: the sweep goes on
    assert (planned.outcome is None) != (planned.spec is None)
    if planned.outcome is not None:
        _assert_rows_with_reasons(planned.outcome)
        first = planned.outcome.stages[0]
        event(f"{first.status}: {first.reason or first.error_type}")
        return
    try:
        count = build.check_budget(planned.spec)
    except build.ParameterBudgetError as exc:  # refused on `meta`: nothing was allocated
        assert "build budget" in str(exc) or "does not reduce" in str(exc)
        event("shrunk, refused over the build budget")
        return
    event("shrunk, within the build budget" if count is not None else "shrunk, no meta count")
    assert count is None or count <= build.BUILD_BUDGET


def test_a_huge_size_the_shrinker_keeps_is_refused_before_any_allocation(tmp_path):
    config = {**base_config("llama"), "intermediate_size": 10**12}
    planned = _plan(config, tmp_path)
    assert planned.spec is not None  # the shrinker let it through (it scales it, it is huge)
    assert planned.spec.config["intermediate_size"] > 10**9
    with pytest.raises(build.ParameterBudgetError, match="build budget"):
        build.build_model(planned.spec)


def test_deep_and_huge_configs_are_malformed_skips(tmp_path):
    deep: Any = 1
    for _ in range(guards.MAX_DEPTH + 5):
        deep = {"x": deep}
    for config in (
        {**base_config("gpt2"), "extra": deep},
        {**base_config("gpt2"), "extra": list(range(guards.MAX_VALUES + 1))},
    ):
        planned = _plan(config, tmp_path)
        assert planned.outcome is not None
        assert planned.outcome.stages[0].reason == "malformed_config"
    (tmp_path / "org" / "hostile" / "config.json").write_text("[" * 200_000)
    entry = CatalogEntry(model_id="org/hostile", library="transformers", rank=1)
    planned = plan_entry(entry, STAGES, config_dir=tmp_path)
    assert planned.outcome.stages[0].reason == "malformed_config"


def test_budget_leaves_every_bundled_style_model_alone(tmp_path):
    for model_type in TYPES:
        planned = _plan(base_config(model_type), tmp_path / model_type)
        assert planned.spec is not None, planned.outcome
        count = build.check_budget(planned.spec)
        assert count is not None and count < build.BUILD_BUDGET / 10


HOSTILE_CATALOG = {
    "org/huge-intermediate": {**base_config("llama"), "intermediate_size": 10**12},
    "org/negative": {**base_config("gpt2"), "n_embd": -64},
    "org/wrong-type": {**base_config("bert"), "hidden_size": "wide"},
    "org/unknown-type": {**base_config("bert"), "model_type": "not_a_model_type"},
    "org/nan-eps": {**base_config("llama"), "rms_norm_eps": math.nan},
    "org/deep": {**base_config("gpt2"), "extra": functools.reduce(lambda a, _: [a], range(500), 0)},
    "org/graph": {
        **base_config("llava"),
        "text_config": {**base_config("clip"), "text_config": base_config("llava")},
    },
    "org/healthy": base_config("gpt2"),
}


@forked
def test_a_sweep_over_hostile_configs_gives_every_model_its_rows(tmp_path):
    """Real children with a small memory budget: a model that tried to allocate its declared
    size would be `oom`; refused on `meta`, it is a load `fail` naming the budget instead. The
    sweep runs in a fresh process: what the worker ran before cannot shape its children."""
    rows_in = [
        {"model_id": m, "library_name": "transformers", "model_type_hint": "llama"}
        for m in HOSTILE_CATALOG
    ]
    catalog = write_catalog(tmp_path / "hostile.csv", rows_in)
    for model_id, config in HOSTILE_CATALOG.items():
        folder = tmp_path / "hostile" / model_id
        folder.mkdir(parents=True)
        try:
            text = json.dumps(config)
        except (RecursionError, ValueError):
            text = "[" * 100_000
        (folder / "config.json").write_text(text)
    store = tmp_path / "store"
    summary = run_sweep(
        run_config(store, catalog, run_id="hostile", timeout_s=120, memory_limit=256 << 20)
    )
    assert not summary.abandoned
    rows = Store(store).read("results", "hostile").to_pylist()
    assert Counter((r["model_id"], r["stage"]) for r in rows) == Counter(
        {(m, s): 1 for m in HOSTILE_CATALOG for s in ("load", "forward")}
    )
    load = {r["model_id"]: r for r in rows if r["stage"] == "load"}
    for row in load.values():
        if row["status"] != "pass":
            assert row["reason"] or row["error_type"], row
    assert load["org/healthy"]["status"] == "pass", load["org/healthy"]
    huge = load["org/huge-intermediate"]
    assert (huge["status"], huge["error_type"]) == ("fail", "ParameterBudgetError")
    assert load["org/deep"]["reason"] == "malformed_config"
    assert load["org/unknown-type"]["status"] == "skip"
