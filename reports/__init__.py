"""The reading side: the Parquet store and its lock, queries, aggregations, renderers."""
