"""The job: CLI, run configuration, the Ray driver, progress. Imports no torch or Ray at import."""
