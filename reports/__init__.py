"""The contract and the reading side: row schema, Parquet store, aggregations."""
