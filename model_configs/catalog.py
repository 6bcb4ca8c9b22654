"""The catalog: which models exist, ranked by downloads.

Two sources with the same columns: the bundled offline snapshot (`bundled`), and a fresh one
built from the Hub (`hfsweep catalog refresh --top N`: `model_configs/catalog_refresh.py`). This
module reads and writes catalog files only, and imports neither the Hub client nor the
libraries' adapters, which read the bundled catalog themselves (their architectures).
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ground.errors import UsageError
from model_configs.spec import CatalogEntry

BUNDLED_NAME = "hub-top1000-2026-02-09.csv"
COLUMNS = (
    "rank",
    "model_id",
    "downloads_30d",
    "likes",
    "pipeline_tag",
    "library_name",
    "model_type_hint",
    "architectures_hint",
    "custom_code",
    "gated",
    "license",
    "tags",
)


@dataclass(frozen=True)
class Catalog:
    """Entries ranked by downloads, plus where they came from and where cached configs live."""

    name: str  # "bundled:<file>" or a path
    entries: tuple[CatalogEntry, ...]
    config_dir: Path | None = None  # <dir>/<org>/<name>/config.json, written by refresh

    def top(self, n: int | None) -> list[CatalogEntry]:
        return list(self.entries if n is None else self.entries[:n])

    def get(self, model_id: str) -> CatalogEntry | None:
        for entry in self.entries:
            if entry.model_id == model_id:
                return entry
        return None


def _bundled_path() -> Path:
    return Path(str(resources.files("model_configs") / "data" / "catalogs" / BUNDLED_NAME))


def _int(value: str | None) -> int | None:
    if value is None or value.strip() == "":
        return None
    return int(float(value))


def _bool(value: str | None) -> bool:
    return (value or "").strip().lower() in {"true", "1", "yes"}


def _split(value: str | None) -> tuple[str, ...]:
    return tuple(v for v in (value or "").split("|") if v)


def entry_from_row(row: dict[str, str]) -> CatalogEntry:
    model_id = (row.get("model_id") or "").strip()
    if not model_id:
        raise ValueError("row without model_id")
    tags = _split(row.get("tags"))
    return CatalogEntry(
        model_id=model_id,
        rank=_int(row.get("rank")),
        downloads=_int(row.get("downloads_30d") or row.get("downloads")),
        likes=_int(row.get("likes")),
        pipeline_tag=(row.get("pipeline_tag") or None),
        library=(row.get("library_name") or row.get("library") or None),
        model_type_hint=(row.get("model_type_hint") or None),
        architectures_hint=_split(row.get("architectures_hint")),
        # either says so: data can only add the refusal of remote code, never lift it
        custom_code=_bool(row.get("custom_code")) or "custom_code" in tags,
        gated=_bool(row.get("gated")),
        tags=tags,
    )


def _catalog_path(source: str) -> tuple[Path, str]:
    if source == "bundled":
        path, name = _bundled_path(), f"bundled:{BUNDLED_NAME}"
    else:
        path, name = Path(source).expanduser(), str(source)
    if not path.is_file():
        raise UsageError(
            f"catalog file not found: {path}",
            hint="use --catalog bundled, or a CSV written by 'hfsweep catalog refresh'",
        )
    return path, name


def _rows(path: Path) -> Iterator[CatalogEntry]:
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            if not reader.fieldnames or "model_id" not in reader.fieldnames:
                raise UsageError(f"catalog {path} has no 'model_id' column")
            for row in reader:
                yield entry_from_row(row)
    except (UnicodeDecodeError, csv.Error, ValueError) as exc:
        raise UsageError(f"catalog {path} is not a readable CSV: {exc}") from exc


def load_catalog(source: str = "bundled") -> Catalog:
    """Read a catalog: "bundled" or a path to a CSV with (at least) a `model_id` column.

    Rows are ordered by rank (then file order); rows without a rank get one by position.
    """
    path, name = _catalog_path(source)
    entries = _ranked(list(_rows(path)))
    config_dir = path.with_suffix("")  # refresh writes configs to <catalog>/ beside <catalog>.csv
    return Catalog(name=name, entries=tuple(entries), config_dir=config_dir)


@dataclass(frozen=True)
class CatalogStream:
    """A catalog read as a stream, for sweeps of any length: `entries()` yields the ranked
    entries without holding them (a file in rank order, as `refresh` writes and the bundled
    snapshot is, streams; any other order is sorted in memory first)."""

    name: str
    path: Path
    config_dir: Path
    size: int
    in_rank_order: bool

    def entries(self) -> Iterator[CatalogEntry]:
        if not self.in_rank_order:
            yield from _ranked(list(_rows(self.path)))
            return
        from dataclasses import replace

        for position, entry in enumerate(_rows(self.path), start=1):
            yield entry if entry.rank is not None else replace(entry, rank=position)


def open_catalog(source: str = "bundled") -> CatalogStream:
    """One pass over the file to count it and check its order; no entry is kept."""
    path, name = _catalog_path(source)
    size, in_order, last, unranked = 0, True, 0, False
    for entry in _rows(path):
        size += 1
        if entry.rank is None:
            unranked = True  # rows without a rank rank after every ranked one, by position
        elif unranked or entry.rank < last:
            in_order = False
        else:
            last = entry.rank
    return CatalogStream(name, path, path.with_suffix(""), size, in_order)


def _ranked(entries: list[CatalogEntry]) -> list[CatalogEntry]:
    from dataclasses import replace

    ordered = sorted(enumerate(entries), key=lambda p: (p[1].rank is None, p[1].rank or 0, p[0]))
    out = []
    for position, (_, entry) in enumerate(ordered, start=1):
        out.append(entry if entry.rank is not None else replace(entry, rank=position))
    return out


def write_catalog(entries: Iterable[CatalogEntry], path: Path, *, license_of=None) -> None:
    """Write entries as a catalog CSV (the bundled snapshot's columns)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        writer.writeheader()
        for e in entries:
            writer.writerow(
                {
                    "rank": e.rank,
                    "model_id": e.model_id,
                    "downloads_30d": e.downloads,
                    "likes": e.likes,
                    "pipeline_tag": e.pipeline_tag or "",
                    "library_name": e.library or "",
                    "model_type_hint": e.model_type_hint or "",
                    "architectures_hint": "|".join(e.architectures_hint),
                    "custom_code": e.custom_code,
                    "gated": e.gated,
                    "license": (license_of(e) if license_of else "") or "",
                    "tags": "|".join(e.tags),
                }
            )
    tmp.replace(path)
