"""The Parquet store: one folder (or object-store URI) with one Parquet dataset per table.

Layout (the tables of `ground.schema.TABLES`; docs/store.md says how to read them)::

    STORE/results/run_id=<id>/part-<time>-<uuid>.parquet
    STORE/fallbacks/run_id=<id>/part-...
    STORE/alternatives/run_id=<id>/part-...
    STORE/configs/run_id=<id>/part-...
    STORE/plans/run_id=<id>/part-...
    STORE/sizing/run_id=<id>/part-...
    STORE/runs/run_id=<id>/part-...
    STORE/ops/..., STORE/op_summary/..., STORE/op_runs/...   (the op sweep's)

Every table exists in every store a run wrote: a run starts by writing, for each table it has
no part of yet, a part of no rows with the table's schema (`empty-<time>-<uuid>.parquet`), so
`STORE/<table>` is always a Parquet dataset, with rows or none.

Every read and every write goes through one pyarrow filesystem (`Store.fs`): a local folder, or an
object store named by URI (`s3://bucket/prefix`, `gs://...`), whose endpoint and credentials come
from the standard variables its SDK reads (`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`,
`AWS_SECRET_ACCESS_KEY`, `AWS_DEFAULT_REGION`, ...). Queries read part files as pyarrow datasets
(`Store.dataset`, `Store.scan`), never by local path, so DuckDB queries a store on S3 exactly as
one on disk.

Part files are complete or absent: each is written under a hidden temporary name and then renamed
(object stores publish a whole object at once). Readers only ever see `*.parquet` files in
`run_id=<id>` folders, so anything else (temporaries, hidden folders) is invisible to them.
Fallbacks, alternatives, configs, plans and sizing parts share their results part's name and count
only once it exists.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ground.errors import StoreError, first_line
from ground.schema import TABLES, statistics_columns, to_table

_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
# Tables whose parts are tied to the results part of the same name (written first, visible after).
COMMITTED_BY_RESULTS = ("fallbacks", "alternatives", "configs", "plans", "sizing")
# What each sweep's writer fills from its tasks' rows, the committing table last.
MODEL_ROW_TABLES = (*COMMITTED_BY_RESULTS, "results")
OP_ROW_TABLES = ("ops",)
# What each sweep writes into a run (what a resume checks for damaged parts).
MODEL_SWEEP_TABLES = ("results", *COMMITTED_BY_RESULTS, "runs")
OP_SWEEP_TABLES = (*OP_ROW_TABLES, "op_summary", "op_runs")
# A table's part of no rows that a run starts with (`Store.create_tables`): no data, so left
# out of `part_infos`; outside readers see a Parquet file of the table's schema.
EMPTY_PREFIX = "empty-"


def check_run_id(run_id: str) -> str:
    """Run ids become folder names: letters, digits, `.`, `_`, `-` only."""
    if not _RUN_ID.match(run_id):
        raise StoreError(
            f"invalid run id {run_id!r}: use letters, digits, '.', '_' or '-' (at most 128)",
            run_id=run_id,
        )
    return run_id


def new_run_id(now: dt.datetime | None = None) -> str:
    now = now or dt.datetime.now(dt.UTC)
    return now.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def is_uri(root: str) -> bool:
    return "://" in root


def open_filesystem(root: str) -> tuple[pafs.FileSystem, str, bool]:
    """The pyarrow filesystem and base path for a store root: (fs, path, is_local)."""
    if not is_uri(root) or root.startswith("file://"):
        path = root.removeprefix("file://")
        return pafs.LocalFileSystem(), str(Path(path).expanduser().resolve()), True
    try:
        fs, path = pafs.FileSystem.from_uri(root)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as exc:
        raise StoreError(
            f"cannot open the store {root!r}: {first_line(exc)}",
            hint="use a folder, or a URI such as s3://bucket/prefix (endpoint and credentials "
            "from AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)",
        ) from exc
    return fs, path.rstrip("/"), False


class Store:
    """Reads and writes the store's tables. `root` is a local folder or a URI (s3://, gs://, ...)."""

    def __init__(self, root: str | os.PathLike[str]):
        self.uri = str(root)
        self.fs, self.root, self.local = open_filesystem(self.uri)

    def __repr__(self) -> str:
        return f"Store({self.uri!r})"

    def __reduce__(self) -> tuple[Any, ...]:  # crosses processes by URI (filesystems re-open)
        return (Store, (self.uri,))

    @contextmanager
    def _io(self, doing: str) -> Iterator[None]:
        """Filesystem errors (an unreachable endpoint, a missing bucket, denied access) become
        one StoreError naming the store."""
        try:
            yield
        except StoreError:
            raise
        except OSError as exc:
            raise StoreError(
                f"cannot {doing} the store {self.uri!r}: {first_line(exc)}",
                hint="check the path, or for an object store the bucket and the AWS_* variables",
            ) from exc

    # ---- writing -------------------------------------------------------------------------

    def _partition_dir(self, table: str, run_id: str) -> str:
        return f"{self.root}/{table}/run_id={check_run_id(run_id)}"

    def write(
        self,
        table: str,
        run_id: str,
        rows: list[dict[str, Any]],
        *,
        name: str | None = None,
        empty: bool = False,
    ) -> str | None:
        """Write `rows` of one run as one new part file; returns its path (None if no rows,
        unless `empty`: then a part of no rows that carries the table's schema)."""
        if not rows and not empty:
            return None
        for row in rows:
            if row.get("run_id", run_id) != run_id:
                raise StoreError("rows of several runs in one part file", run_id=run_id)
            row["run_id"] = run_id
        data = to_table(table, rows)
        folder = self._partition_dir(table, run_id)
        name = name or _part_name()
        final = f"{folder}/{name}"
        with self._io("write to"):
            self.fs.create_dir(folder, recursive=True)
            stats = statistics_columns(table)
            if self.local:
                tmp = f"{folder}/.{name}.tmp"
                with open(tmp, "wb") as fh:
                    pq.write_table(data, fh, write_statistics=stats)
                    fh.flush()
                    os.fsync(fh.fileno())  # on disk before it gets its name (power loss)
                os.replace(tmp, final)  # a rename: the part is complete or absent
                _fsync_dir(folder)
            else:  # an object PUT is atomic
                pq.write_table(data, final, filesystem=self.fs, write_statistics=stats)
        return final

    def write_parts(self, run_id: str, parts: dict[str, list[dict[str, Any]]]) -> None:
        """Write one batch of rows as one part per table, all under one name, in the order
        given: the last table's part commits the others (`COMMITTED_BY_RESULTS` count only
        once their results part exists), so a kill between the writes leaves the batch's
        tasks to run again and its other parts invisible."""
        name = _part_name()
        for table, rows in parts.items():
            self.write(table, run_id, rows, name=name)

    def create_tables(self, run_id: str, tables: tuple[str, ...] | None = None) -> list[str]:
        """Give every table (of `tables`; default all) that has no part file in this run's
        folder a part of no rows that carries its schema (`empty-*.parquet`), so that each is
        a Parquet dataset from the run's start and a reader of `STORE/<table>` never meets a
        missing folder. These parts hold no data: `part_infos` leaves them out. Returns the
        tables it created."""
        missing = [t for t in (tables or tuple(TABLES)) if not self._has_part(t, run_id)]
        name = EMPTY_PREFIX + _part_name().removeprefix("part-")
        for table in missing:
            self.write(table, run_id, [], name=name, empty=True)
        return missing

    def _has_part(self, table: str, run_id: str) -> bool:
        """Whether the run's folder of `table` holds a part file (with rows or empty)."""
        selector = pafs.FileSelector(self._partition_dir(table, run_id), allow_not_found=True)
        with self._io("list"):
            infos = self.fs.get_file_info(selector)
        return any(
            i.type == pafs.FileType.File
            and i.base_name.endswith(".parquet")
            and not i.base_name.startswith((".", "_"))
            for i in infos
        )

    # ---- reading -------------------------------------------------------------------------

    def part_files(self, table: str, run_id: str | None = None) -> list[str]:
        return [p for p, _, _ in self.part_infos(table, run_id)]

    def part_infos(self, table: str, run_id: str | None = None) -> list[tuple[str, int, int]]:
        """(path, modification time in ns, size) of each visible part, sorted by path, from
        one listing (on an object store, one LIST per 1,000 parts and no request per part)."""
        base = f"{self.root}/{table}"
        if run_id is not None:
            base = f"{base}/run_id={check_run_id(run_id)}"
        selector = pafs.FileSelector(base, recursive=True, allow_not_found=True)
        found = []
        with self._io("list"):
            infos = self.fs.get_file_info(selector)
        for info in infos:
            if info.type != pafs.FileType.File or not info.base_name.endswith(".parquet"):
                continue
            if info.base_name.startswith((".", "_", EMPTY_PREFIX)):
                continue
            parent = info.path.rsplit("/", 2)[-2]
            if not parent.startswith("run_id="):
                continue
            if run_id is not None and parent != f"run_id={run_id}":
                continue
            found.append((info.path, int(info.mtime_ns or 0), int(info.size or 0)))
        if table in COMMITTED_BY_RESULTS and found:
            committed = {_part_key(p) for p in self.part_files("results", run_id)}
            found = [f for f in found if _part_key(f[0]) in committed]
        return sorted(found)

    def dataset(self, table: str, files: list[str] | tuple[str, ...]) -> ds.Dataset:
        """The part files of `table` as one pyarrow dataset with the store schema: columns that
        an older part lacks read as nulls, columns the schema no longer has are ignored."""
        with self._io("read"):
            return ds.dataset(
                list(files), schema=TABLES[table], filesystem=self.fs, format="parquet"
            )

    def scan(
        self,
        table: str,
        files: list[str] | tuple[str, ...],
        columns: list[str] | None = None,
        *,
        filename: bool = False,
    ) -> ds.Dataset | pa.RecordBatchReader:
        """What DuckDB queries: the dataset itself (DuckDB pushes projections and filters into
        the Parquet reads), or with `filename` a stream of batches of `columns` plus each row's
        part path in a `filename` column."""
        dataset = self.dataset(table, files)
        if not filename:
            return dataset
        names = list(columns or TABLES[table].names)
        with self._io("read"):
            reader = dataset.scanner(columns=[*names, "__filename"]).to_reader()
        schema = pa.schema(
            [*(TABLES[table].field(c) for c in names), pa.field("filename", pa.string())]
        )
        return pa.RecordBatchReader.from_batches(
            schema, (pa.record_batch(b.columns, schema=schema) for b in reader)
        )

    def register(
        self,
        cursor: Any,
        name: str,
        table: str,
        files: list[str] | tuple[str, ...],
        columns: list[str] | None = None,
        *,
        filename: bool = False,
    ) -> None:
        """Make `files` of `table` a table called `name` of one DuckDB cursor (its own
        connection: no other cursor sees it). A local folder is read by DuckDB's own Parquet
        reader (measured: a third of the time of a pyarrow dataset for a model page); any other
        filesystem through `scan`. Either way every column of the store schema is there (null
        where a part predates it) and `filename` adds each row's part path."""
        if self.local:
            rel = cursor.read_parquet(list(files), filename=filename, union_by_name=True)
            missing = [f for f in TABLES[table] if f.name not in rel.columns]
            if missing:  # no part has these columns yet (written before they existed)
                nulls = ", ".join(
                    f"CAST(NULL AS {_DUCKDB_TYPES.get(str(f.type), 'VARCHAR')}) AS {f.name}"
                    for f in missing
                )
                rel = rel.project(f"*, {nulls}")
            cursor.register(name, rel)
        else:
            cursor.register(name, self.scan(table, files, columns, filename=filename))

    def read(
        self, table: str, run_id: str | None = None, columns: list[str] | None = None
    ) -> pa.Table:
        """All rows of `table` (optionally one run) as a pyarrow table with the store schema."""
        schema = TABLES[table]
        files = self.part_files(table, run_id)
        if not files:
            return schema.empty_table() if columns is None else schema.empty_table().select(columns)
        with self._io("read"):
            return self.dataset(table, files).to_table(columns=columns)

    # ---- damaged parts ---------------------------------------------------------------------

    def check_part(self, table: str, path: str) -> str | None:
        """Why the part file at `path` cannot be read as `table` rows (None: it reads whole)."""
        try:
            with self._io("read"):
                self.dataset(table, [path]).to_table()
        except (pa.ArrowException, StoreError, ValueError, OSError) as exc:
            return first_line(exc)
        return None

    def damaged_parts(
        self, run_id: str, tables: tuple[str, ...] = MODEL_SWEEP_TABLES
    ) -> list[tuple[str, str, str]]:
        """(table, path, why) of every part of `run_id` in `tables` (a sweep's), and of every
        part of no rows the run wrote in any table, that does not read whole: truncated,
        corrupted, or not this table's rows. A damaged fallbacks or configs part takes its
        results part with it (their models' rows would be incomplete). A damaged part of no
        rows held nothing to run again: put aside, the run's start writes it anew
        (`create_tables`)."""
        bad: list[tuple[str, str, str]] = []
        for table in tables:
            for path in self.part_files(table, run_id):
                why = self.check_part(table, path)
                if why is not None:
                    bad.append((table, path, why))
        for table, path in self.empty_parts(run_id):
            why = self.check_part(table, path)
            if why is not None:
                bad.append((table, path, why))
        results = {_part_key(p): p for p in self.part_files("results", run_id)}
        named = {p for _, p, _ in bad}
        for table, path, _ in list(bad):
            twin = results.get(_part_key(path))
            if table in COMMITTED_BY_RESULTS and twin and twin not in named:
                bad.append(("results", twin, f"its {table} part is damaged"))
                named.add(twin)
        return bad

    def empty_parts(self, run_id: str) -> list[tuple[str, str]]:
        """(table, path) of the run's parts of no rows (`create_tables`), in every table: a
        run writes them into tables beyond its sweep's own, and a damaged one breaks every
        outside reader of its table (pyarrow, DuckDB), though hfsweep's own reader skips it."""
        found = []
        for table in TABLES:
            selector = pafs.FileSelector(self._partition_dir(table, run_id), allow_not_found=True)
            with self._io("list"):
                infos = self.fs.get_file_info(selector)
            found += [
                (table, i.path)
                for i in infos
                if i.type == pafs.FileType.File
                and i.base_name.startswith(EMPTY_PREFIX)
                and i.base_name.endswith(".parquet")
            ]
        return sorted(found)

    def quarantine(self, path: str) -> str:
        """Rename a damaged part to a hidden name (kept for inspection, invisible to readers)."""
        folder, name = path.rsplit("/", 1)
        target = f"{folder}/.damaged-{name}"
        with self._io("write to"):
            self.fs.move(path, target)
        return target

    def runs(self, table: str = "runs") -> list[dict[str, Any]]:
        """One dict per run (the latest state of each) of a runs table (`runs`, `op_runs`),
        newest first. A damaged part is left out (the driver that resumes its run puts it aside
        and writes a new one)."""
        try:
            rows = self.read(table).to_pylist()
        except (pa.ArrowException, StoreError, ValueError):
            rows = []
            for path in self.part_files(table):
                if self.check_part(table, path) is None:
                    rows += self.dataset(table, [path]).to_table().to_pylist()
        latest: dict[str, dict[str, Any]] = {}
        for row in rows:
            seen = latest.get(row["run_id"])
            if seen is None or row["updated_at"] >= seen["updated_at"]:
                latest[row["run_id"]] = row
        return sorted(
            latest.values(), key=lambda r: r["started_at"] or r["updated_at"], reverse=True
        )

    def run(self, run_id: str, table: str = "runs") -> dict[str, Any] | None:
        for row in self.runs(table):
            if row["run_id"] == run_id:
                return row
        return None

    def latest_run_id(self) -> str | None:
        runs = self.runs()
        if runs:
            return str(runs[0]["run_id"])
        ids = {p.rsplit("/", 2)[-2].removeprefix("run_id=") for p in self.part_files("results")}
        return max(ids) if ids else None

    def write_run(self, run: dict[str, Any], table: str = "runs") -> None:
        run = dict(run)
        run["updated_at"] = utcnow()
        self.write(table, run["run_id"], [run])


def _fsync_dir(folder: str) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


_DUCKDB_TYPES = {
    "string": "VARCHAR",
    "int16": "SMALLINT",
    "int32": "INTEGER",
    "int64": "BIGINT",
    "double": "DOUBLE",
    "bool": "BOOLEAN",
    "timestamp[us, tz=UTC]": "TIMESTAMPTZ",
}


def _part_key(path: str) -> str:
    """`run_id=<id>/<part name>`: what ties a fallbacks or configs part to its results part."""
    parts = path.rsplit("/", 2)
    return f"{parts[-2]}/{parts[-1]}"


def _part_name() -> str:
    return f"part-{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.parquet"
