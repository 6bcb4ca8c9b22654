"""Finding the model a person meant: `hfsweep lookup`, the dashboard's model page and its JSON.

In order: the id as given; the one stored id that differs only in case; else the nearest ids of
the store and of the catalog, as "did you mean" (the same repo name under another owner, an id
that extends or shortens the one asked, `-Instruct` variants, then ids that are spelt alike). A
model the catalog has and the store does not is no error: the answer says so, with its rank and
the exact `hfsweep run --models` command that adds its rows to the store
(`reports.models.find_stored_model`).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

MAX_SUGGESTIONS = 5
SIMILAR = 0.75  # difflib's ratio of two lower-cased ids, at least


@dataclass(frozen=True)
class CatalogModel:
    """A catalog entry as the reading side sees it (the catalog itself is `model_configs`')."""

    model_id: str
    rank: int | None = None
    downloads: int | None = None


@dataclass(frozen=True)
class Suggestion:
    model_id: str
    where: str  # "store" (it has results) or "catalog" (it could be checked)
    rank: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"model_id": self.model_id, "where": self.where, "rank": self.rank}


@dataclass
class Found:
    """What a search for `asked` found: the stored id to show (`model_id`, None when the store
    has no results for it), how it matched, the catalog's entry for it, and suggestions."""

    asked: str
    model_id: str | None = None
    how: str | None = None  # "exact" | "case"
    in_catalog: CatalogModel | None = None
    suggestions: list[Suggestion] = field(default_factory=list)

    def did_you_mean(self) -> str:
        """`did you mean: a (in the store), b (catalog rank 12)`, or empty."""
        if not self.suggestions:
            return ""
        return "did you mean: " + ", ".join(
            f"{s.model_id} ("
            + ("has results" if s.where == "store" else f"catalog rank {s.rank or '-'}")
            + ")"
            for s in self.suggestions
        )


def find_model(asked: str, stored: Iterable[str], catalog: Sequence[CatalogModel] = ()) -> Found:
    """Search `stored` (the store's model ids) and `catalog` for the model `asked` names."""
    stored = list(dict.fromkeys(stored))
    known = set(stored)
    if asked in known:
        return Found(asked, asked, "exact")
    folded = [m for m in stored if m.casefold() == asked.casefold()]
    if len(folded) == 1:
        return Found(asked, folded[0], "case")
    by_id = {c.model_id: c for c in catalog}
    entry = by_id.get(asked) or next(
        (c for c in catalog if c.model_id.casefold() == asked.casefold()), None
    )
    found = Found(asked, in_catalog=entry)
    skip = {asked.casefold()} | ({entry.model_id.casefold()} if entry else set())
    ranked: list[tuple[tuple[int, float], Suggestion]] = []
    for model_id, where, rank in [
        *((m, "store", by_id[m].rank if m in by_id else None) for m in stored),
        *((c.model_id, "catalog", c.rank) for c in catalog if c.model_id not in known),
    ]:
        if model_id.casefold() in skip:
            continue
        score = closeness(asked, model_id)
        if score is not None:
            ranked.append((score, Suggestion(model_id, where, rank)))
            skip.add(model_id.casefold())
    # store ids first at equal closeness (they have an answer), then the catalog's by rank
    ranked.sort(key=lambda x: (x[0][0], -x[0][1], x[1].where != "store", x[1].rank or 10**9))
    found.suggestions = [s for _, s in ranked[:MAX_SUGGESTIONS]]
    return found


def closeness(asked: str, candidate: str) -> tuple[int, float] | None:
    """How near `candidate` is to `asked` (smaller first element: nearer kind of match; the
    second: difflib's ratio), or None when it is not near at all."""
    a, c = asked.casefold(), candidate.casefold()
    a_name, c_name = a.rsplit("/", 1)[-1], c.rsplit("/", 1)[-1]
    ratio = difflib.SequenceMatcher(None, a, c).ratio()
    if a_name == c_name:
        return (0, ratio)  # the same repo name under another owner
    extends = c_name.startswith(a_name) or a_name.startswith(c_name)
    if extends and min(len(a_name), len(c_name)) >= 3:
        return (1, ratio)  # a variant: -Instruct, -base, a size suffix
    if ratio >= SIMILAR:
        return (2, ratio)
    return None
