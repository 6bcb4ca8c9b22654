"""Per-family rules for transformers configs, as data.

One JSON file per group of families in `data/families/` (its README explains the
keys). Each file has a `shrink` table (applied by the shrinker after its generic rules), an
`inputs` table (hints for `make_inputs`) and a `known_failures` table (model types that do not
pass yet, each with the reason: what `bench/shrink_coverage.py` prints beside the failure), all
keyed by model_type. A model_type defined by two
files, or a rule without a reason, is an error: rules must be findable and explained.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

RULES_DIR = Path(__file__).resolve().parent / "data" / "families"
TABLES = ("shrink", "inputs", "known_failures")


@cache
def _tables() -> dict[str, dict[str, dict[str, Any]]]:
    merged: dict[str, dict[str, dict[str, Any]]] = {t: {} for t in TABLES}
    owner: dict[tuple[str, str], str] = {}
    for path in sorted(RULES_DIR.glob("*.json")):
        data = json.loads(path.read_text())
        for table in TABLES:
            for model_type, rule in data.get(table, {}).items():
                if (table, model_type) in owner:
                    raise ValueError(
                        f"{table} rule for {model_type!r} is in both "
                        f"{owner[table, model_type]} and {path.name}"
                    )
                if not rule.get("reason"):
                    raise ValueError(f"{path.name}: {table} rule for {model_type!r} has no reason")
                owner[table, model_type] = path.name
                merged[table][model_type] = rule
    return merged


def shrink_rules() -> dict[str, dict[str, Any]]:
    """Shrink rules keyed by model_type (of the root config or of any sub-config)."""
    return _tables()["shrink"]


@cache
def timm_rules() -> dict[str, Any]:
    """timm stand-ins: `tiny` (name prefix -> timm's tiny test variant) and
    `fallback_backbone` (the ResNet used when timm is not installed), in timm_backed.json."""
    return dict(json.loads((RULES_DIR / "timm_backed.json").read_text())["timm"])


def input_rules() -> dict[str, dict[str, Any]]:
    """Input hints for make_inputs, keyed by model_type."""
    return _tables()["inputs"]


def known_failures() -> dict[str, dict[str, Any]]:
    """Model types known not to pass, keyed by model_type, each with its reason and a `kind`:
    `dependency` (needs a package not installed), `upstream` (a transformers bug or a default
    config that cannot build) or `shrinker` (our shrink or inputs do not handle it yet)."""
    return _tables()["known_failures"]
