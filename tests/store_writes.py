"""Hand-built stores: a batch of finished models written the way the sweep's writer writes
it (`sweep.writer.RowWriter`: one part per table under one name, the results part last)."""

from __future__ import annotations

from typing import Any

from reports.store import Store


def write_model_rows(
    store: Store,
    run_id: str,
    results: list[dict[str, Any]],
    fallbacks: list[dict[str, Any]],
    configs: list[dict[str, Any]] | None = None,
) -> None:
    """One batch of finished models: fallbacks and configs parts, then the results part of
    the same name that makes them count."""
    store.write_parts(
        run_id, {"fallbacks": fallbacks, "configs": configs or [], "results": results}
    )


def completed_models(store: Store, run_id: str) -> set[str]:
    """The models with rows in the run's results (a model's stages are written together)."""
    table = store.read("results", run_id, columns=["model_id"])
    return set(table.column("model_id").to_pylist())
