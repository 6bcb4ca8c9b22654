"""The Parquet store: one folder (or object-store URI) with one Parquet dataset per table.

Layout::

    STORE/results/run_id=<id>/part-<time>-<uuid>.parquet
    STORE/fallbacks/run_id=<id>/part-...
    STORE/runs/run_id=<id>/part-...

Part files are complete or absent: each is written under a hidden temporary name and then renamed
(object stores publish a whole object at once). Readers only ever see `*.parquet` files in
`run_id=<id>` folders, so anything else (temporaries, hidden folders) is invisible to them.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from reports.errors import StoreError
from reports.schema import TABLES, to_table

_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def check_run_id(run_id: str) -> str:
    """Run ids become folder names: letters, digits, `.`, `_`, `-` only."""
    if not _RUN_ID.match(run_id):
        raise StoreError(
            f"invalid run id {run_id!r}: use letters, digits, '.', '_' or '-' (at most 128)",
            run_id=run_id,
        )
    return run_id


def new_run_id(now: dt.datetime | None = None) -> str:
    now = now or dt.datetime.now(dt.timezone.utc)
    return now.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


class Store:
    """Reads and writes the three tables. `root` is a local folder or a URI (s3://, gs://, ...)."""

    def __init__(self, root: str | os.PathLike[str]):
        root_str = str(root)
        if "://" in root_str:
            self.fs, self.root = pafs.FileSystem.from_uri(root_str)
            self.local = False
        else:
            self.fs = pafs.LocalFileSystem()
            self.root = str(Path(root_str).expanduser().resolve())
            self.local = True
        self.uri = root_str

    def __repr__(self) -> str:
        return f"Store({self.uri!r})"

    # ---- writing -------------------------------------------------------------------------

    def _partition_dir(self, table: str, run_id: str) -> str:
        return f"{self.root}/{table}/run_id={check_run_id(run_id)}"

    def write(
        self, table: str, run_id: str, rows: list[dict[str, Any]], *, name: str | None = None
    ) -> str | None:
        """Write `rows` of one run as one new part file; returns its path (None if no rows)."""
        if not rows:
            return None
        for row in rows:
            if row.get("run_id", run_id) != run_id:
                raise StoreError("rows of several runs in one part file", run_id=run_id)
            row["run_id"] = run_id
        data = to_table(table, rows)
        folder = self._partition_dir(table, run_id)
        self.fs.create_dir(folder, recursive=True)
        name = name or _part_name()
        final = f"{folder}/{name}"
        if self.local:
            tmp = f"{folder}/.{name}.tmp"
            pq.write_table(data, tmp, filesystem=self.fs)
            os.replace(tmp, final)  # atomic on POSIX: the part is complete or absent
        else:
            pq.write_table(data, final, filesystem=self.fs)  # object PUT is atomic
        return final

    def write_model_rows(
        self, run_id: str, results: list[dict[str, Any]], fallbacks: list[dict[str, Any]]
    ) -> None:
        """Write one batch of finished models as a results part and a fallbacks part of the same
        name. Fallbacks go first and count only once their results part exists: a kill between
        the two leaves the models to be run again, and the orphan fallback part stays invisible."""
        name = _part_name()
        self.write("fallbacks", run_id, fallbacks, name=name)
        self.write("results", run_id, results, name=name)

    # ---- reading -------------------------------------------------------------------------

    def part_files(self, table: str, run_id: str | None = None) -> list[str]:
        base = f"{self.root}/{table}"
        selector = pafs.FileSelector(base, recursive=True, allow_not_found=True)
        files = []
        for info in self.fs.get_file_info(selector):
            if info.type != pafs.FileType.File or not info.base_name.endswith(".parquet"):
                continue
            if info.base_name.startswith((".", "_")):
                continue
            parent = info.path.rsplit("/", 2)[-2]
            if not parent.startswith("run_id="):
                continue
            if run_id is not None and parent != f"run_id={run_id}":
                continue
            files.append(info.path)
        if table == "fallbacks" and files:
            committed = {
                p.rsplit("/", 2)[-2] + "/" + p.rsplit("/", 1)[-1]
                for p in self.part_files("results", run_id)
            }
            files = [
                p for p in files if p.rsplit("/", 2)[-2] + "/" + p.rsplit("/", 1)[-1] in committed
            ]
        return sorted(files)

    def read(
        self, table: str, run_id: str | None = None, columns: list[str] | None = None
    ) -> pa.Table:
        """All rows of `table` (optionally one run) as a pyarrow table with the store schema."""
        schema = TABLES[table]
        files = self.part_files(table, run_id)
        if not files:
            return schema.empty_table() if columns is None else schema.empty_table().select(columns)
        dataset = ds.dataset(files, schema=schema, filesystem=self.fs, format="parquet")
        return dataset.to_table(columns=columns)

    def runs(self) -> list[dict[str, Any]]:
        """One dict per run (the latest state of each), newest first."""
        rows = self.read("runs").to_pylist()
        latest: dict[str, dict[str, Any]] = {}
        for row in rows:
            seen = latest.get(row["run_id"])
            if seen is None or row["updated_at"] >= seen["updated_at"]:
                latest[row["run_id"]] = row
        return sorted(
            latest.values(), key=lambda r: r["started_at"] or r["updated_at"], reverse=True
        )

    def run(self, run_id: str) -> dict[str, Any] | None:
        for row in self.runs():
            if row["run_id"] == run_id:
                return row
        return None

    def latest_run_id(self) -> str | None:
        runs = self.runs()
        if runs:
            return str(runs[0]["run_id"])
        ids = {p.rsplit("/", 2)[-2].removeprefix("run_id=") for p in self.part_files("results")}
        return max(ids) if ids else None

    def completed_models(self, run_id: str) -> set[str]:
        """Models that already have their rows in this run (the driver writes all stages of a
        model in the same part file, so presence of any row means the model is complete)."""
        table = self.read("results", run_id, columns=["model_id"])
        return set(table.column("model_id").to_pylist())

    def write_run(self, run: dict[str, Any]) -> None:
        run = dict(run)
        run["updated_at"] = utcnow()
        self.write("runs", run["run_id"], [run])


def _part_name() -> str:
    return f"part-{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.parquet"
