"""Every table of a store as readers outside the project open it: a pyarrow dataset over
`STORE/<table>` (any filesystem pyarrow opens by URI), DuckDB (its own `read_parquet` over a
folder; over the pyarrow dataset elsewhere, DuckDB's S3 extension being a download) and, for
a folder, pandas. None of them is told which tables to expect: each table must be there."""

from __future__ import annotations

import duckdb
import pandas as pd
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from ground.schema import TABLES


def rows_per_table(root: str) -> dict[str, int]:
    """{table: rows} for every table of the store, each read by every outside reader, which
    must agree on the count and see every column of the table's schema."""
    local = "://" not in root
    if local:
        fs, base = pafs.LocalFileSystem(), root
    else:
        fs, base = pafs.FileSystem.from_uri(root)
    counts = {}
    for table, schema in TABLES.items():
        dataset = ds.dataset(f"{base}/{table}", filesystem=fs, format="parquet")
        assert set(schema.names) <= set(dataset.schema.names), table
        rows = dataset.count_rows()
        con = duckdb.connect()
        if local:
            glob = f"{base}/{table}/*/*.parquet"
            (found,) = con.execute(
                "SELECT count(*) FROM read_parquet($glob)", {"glob": glob}
            ).fetchone()
            frame = pd.read_parquet(f"{base}/{table}", partitioning=None)
            assert len(frame) == rows and set(schema.names) <= set(frame.columns), table
        else:
            con.register("t", dataset)
            (found,) = con.execute("SELECT count(*) FROM t").fetchone()
        con.close()
        assert found == rows, (table, found, rows)
        counts[table] = rows
    return counts
