"""The web dashboard: a FastAPI app over `reports/` only."""
