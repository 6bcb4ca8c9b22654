"""A tiny transformers config in its canonical form: each field that changes no op set to one
value, so that models whose tiny configs differ only there are one task (one key, one run).

`CANONICAL` names each normalised field and why it changes no op. Everything else stays as the
shrink left it, above all what changes the ops: the quantization block, the backbone and tower
classes, the KV-head count (MHA / GQA / MQA), `rope_type`, the activations, whether a sliding
window is set, `problem_type`, `tie_word_embeddings` and the audio task settings.
"""

from __future__ import annotations

import copy
import functools
import json
from dataclasses import replace
from typing import Any

from model_configs.libraries.transformers.shrink import _flatten, _is_token_key
from model_configs.libraries.transformers.shrink_rules import SKIP_SUBDICTS
from model_configs.spec import TinySpec

CANONICAL: dict[str, str] = {
    "id2label, label2id": (
        "label names never reach a tensor, and the label count sizes the head without changing "
        "its ops. The count is kept in its bucket: one label (a regression head: MSE loss unless "
        "`problem_type` says otherwise) or several (classification), written LABEL_0 or "
        "transformers' default map (LABEL_0, LABEL_1); `problem_type` is kept. One exception: "
        "transformers saves no label map equal to its default, so a config class whose own "
        "default count is not two (BART's three) reloads its own count for it; for such a class "
        "the default map stays itself, and any other map of several labels is written label_0, "
        "label_1 (which saving keeps)"
    ),
    "dtype, torch_dtype": (
        "the dtype the checkpoint was saved in: every build is fp32 on the CPU, then cast to the "
        "run's dtype (`Adapter.to_dtype`), whatever the config stores"
    ),
    "special token id values": (
        "an id picks a row of an embedding or marks positions in the inputs; which row changes no "
        "op. Presence is kept (an id that is set stays set, None stays None), and so is which ids "
        "are equal: the distinct ids are renumbered 0, 1, 2, ... in the order the config's sorted "
        "keys name them, each inside the vocabulary the shrink kept it in. A config that also "
        "maps token strings to ids (Chameleon's `vocabulary_map`, which the model reads beside "
        "`image_token_id`) keeps its ids, so that both still agree"
    ),
}
DTYPE_KEYS = ("dtype", "torch_dtype")
DEFAULT_LABELS = {0: "LABEL_0", 1: "LABEL_1"}  # PretrainedConfig's: saving leaves it out
SAVED_LABELS = {0: "label_0", 1: "label_1"}  # two labels saving keeps


def canonical(spec: TinySpec) -> TinySpec:
    """`spec` with its config in canonical form (`CANONICAL`); what that changed is added to
    `changes` (from the full-size value to the canonical one)."""
    config = canonical_config(spec.config)
    if config == spec.config:
        return spec
    before, after = _flatten(_jsonable(spec.config)), _flatten(_jsonable(config))
    changes = dict(spec.changes)
    for key in sorted(set(before) | set(after)):
        if key.rsplit(".", 1)[-1] in DTYPE_KEYS or before.get(key) == after.get(key):
            continue
        original = changes[key][0] if key in changes else before.get(key)
        changes[key] = [original, after.get(key)]
    return replace(spec, config=config, changes=changes)


def canonical_config(config: dict[str, Any]) -> dict[str, Any]:
    """A copy of a tiny config (`TinySpec.config`) in canonical form."""
    out = copy.deepcopy(config)
    _labels_and_dtypes(out)
    _renumber_token_ids(out)
    return out


def _labels_and_dtypes(d: dict[str, Any]) -> None:
    for key in DTYPE_KEYS:
        d.pop(key, None)
    labels = d.get("id2label")
    if isinstance(labels, dict) and labels:
        d["id2label"] = canonical_labels(labels, d.get("model_type"))
        if d.get("label2id") is not None:
            d["label2id"] = {name: i for i, name in d["id2label"].items()}
    for key, sub in d.items():
        if isinstance(sub, dict) and key not in SKIP_SUBDICTS:
            _labels_and_dtypes(sub)


def canonical_labels(labels: dict[Any, str], model_type: Any) -> dict[int, str]:
    """One label, or two: transformers' default map where saving and loading a config gives
    back as many labels as the original map does (see `CANONICAL`)."""
    if len(labels) == 1:
        return {0: "LABEL_0"}
    default = {int(k): v for k, v in labels.items()} == DEFAULT_LABELS
    if default or _default_label_count(str(model_type or "")) == 2:
        return dict(DEFAULT_LABELS)
    return dict(SAVED_LABELS)


@functools.cache
def _default_label_count(model_type: str) -> int | None:
    """How many labels the config class of `model_type` has by default (None: unknown)."""
    from transformers import CONFIG_MAPPING

    try:
        count = CONFIG_MAPPING[model_type]().num_labels
    except Exception:  # an unknown type, a class that needs arguments: not assumed two
        return None
    return int(count) if count is not None else None


def _token_ids(root: dict[str, Any]) -> list[tuple[str, int, int | None]]:
    """(key path, id, the vocabulary it must stay inside) of every non-negative special token
    id, key paths in sorted order (list items in theirs); the vocabulary is the one the shrink
    keeps the id inside (`shrink._fix_token_ids`: the level's text vocabulary, else its own)."""
    found: list[tuple[str, int, int | None]] = []

    def vocab_of(d: dict[str, Any], inherited: int | None) -> int | None:
        v = d.get("vocab_size")
        return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else inherited

    def walk(d: dict[str, Any], path: str, vocab: int | None, text_vocab: int | None) -> None:
        vocab = vocab_of(d, vocab)
        text = d.get("text_config")
        if isinstance(text, dict):
            text_vocab = vocab_of(text, text_vocab)
        limit = text_vocab or vocab
        for key in sorted(d, key=str):
            value = d[key]
            if isinstance(value, dict):
                if key not in SKIP_SUBDICTS:
                    walk(value, f"{path}{key}.", vocab, text_vocab)
            elif _is_token_key(key):
                items = value if isinstance(value, list) else [value]
                for i, v in enumerate(items):
                    if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
                        found.append((f"{path}{key}[{i}]", v, limit))

    walk(root, "", None, None)
    return found


def _renumber_token_ids(root: dict[str, Any]) -> None:
    """Each distinct non-negative id -> 0, 1, 2, ... in the order the sorted key paths first
    name it (so the same layout of ids gets the same numbers, whatever the values); the same id
    gets the same number everywhere, negative ids (-1, -100: none) are kept. Where a number
    would not fit a vocabulary the id must stay inside, the ids are numbered in ascending order
    instead (never above the id they replace)."""
    found = _token_ids(root)
    if {v for _, v, _ in found} & _mapped_ids(root):
        return  # a string -> id map names them too: renumbering would set the two apart
    numbers: dict[int, int] = {}
    for _, value, _ in found:
        numbers.setdefault(value, len(numbers))
    if any(limit is not None and numbers[v] >= limit for _, v, limit in found):
        numbers = {v: i for i, v in enumerate(sorted(numbers))}

    def renumber(value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            return numbers.get(value, value)
        if isinstance(value, list) and all(isinstance(v, int) for v in value):
            return [renumber(v) for v in value]
        return value

    def walk(d: dict[str, Any]) -> None:
        for key, value in d.items():
            if isinstance(value, dict):
                if key not in SKIP_SUBDICTS:
                    walk(value)
            elif _is_token_key(key):
                d[key] = renumber(value)

    walk(root)


def _mapped_ids(d: dict[str, Any]) -> set[int]:
    """The ids of every map of token strings to ids in a config (not `label2id`)."""
    found: set[int] = set()
    for key, value in d.items():
        if not isinstance(value, dict) or not value or key in ("id2label", "label2id"):
            continue
        ints = [v for v in value.values() if isinstance(v, int) and not isinstance(v, bool)]
        if len(ints) == len(value) and all(isinstance(k, str) for k in value):
            found.update(ints)
        else:
            found |= _mapped_ids(value)
    return found


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))
