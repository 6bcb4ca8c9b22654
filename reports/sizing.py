"""At full size: the sizing table read back (docs/sizing.md).

- each model's summary row (`model_runs`) gets its full-size config's parameters and, on the
  run device's primary hardware type, the cores it needs to serve, fine-tune and train LoRA
  (`ground.sizing_columns`, joined by `config_hash` when a run is summarised);
- `model_sizing`: a model's sizing rows, every hardware type (the model page, `lookup`);
- `cores_needed`: the report's "Cores needed, by downloads": models and downloads per count of
  cores, for serving, a full fine-tune and LoRA, and per hardware type the shares that serve on
  one core, fine-tune on one chip and fit one instance.
Counts are over the run's models that were sized from a config of their own (`status` ok); the
others are listed by status, `no_own_config` (a library's default config: offline, every model)
among them, and every share is of all the run's downloads (`ground.sizing_columns`).
"""

from __future__ import annotations

from typing import Any

from ground.schema import SizingStatus
from ground.sizing_columns import NO_OWN_CONFIG
from reports.query import IN_DTYPE, Scan, StoreQuery

WORKLOADS = ("serve", "finetune", "lora")
LABELS = {"serve": "serve (bf16)", "finetune": "full fine-tune (AdamW)", "lora": "LoRA"}
BUCKETS = (1, 2, 4, 8, 16, 32, 64)  # then "more", "none fits"

# `fit` filter of the models table: the condition on a summary row
FITS: dict[str, str] = {
    "serve_one_core": "serve_cores = 1",
    "serve_one_chip": "serve_cores <= cores_per_chip",
    "finetune_one_chip": "finetune_cores <= cores_per_chip",
    "finetune_one_instance": "finetune_cores <= cores_per_instance",
    "lora_one_chip": "lora_cores <= cores_per_chip",
    "serve_none_fits": "sizing_status = 'ok' AND sizing_hardware IS NOT NULL "
    "AND serve_cores IS NULL",
    "not_sized": "coalesce(sizing_status, '') <> 'ok'",
}
# `params` filter: the full-size parameter count's range
PARAMS: dict[str, str] = {
    "under_1b": "parameters < 1e9",
    "1b_10b": "parameters >= 1e9 AND parameters < 1e10",
    "10b_100b": "parameters >= 1e10 AND parameters < 1e11",
    "over_100b": "parameters >= 1e11",
}


def run_sizing(q: StoreQuery, run_id: str) -> dict[str, list[dict[str, Any]]]:
    """Every config's sizing rows in a run, the primary hardware type first (a resumed run
    may hold a config's rows twice: once each)."""

    def build() -> dict[str, list[dict[str, Any]]]:
        files = q.store.part_files("sizing", run_id)
        if not files:
            return {}
        out: dict[str, list[dict[str, Any]]] = {}
        seen: set[tuple[str, str | None]] = set()
        for r in q.fetch(
            "SELECT * EXCLUDE (run_id) FROM sizing_parts "
            "ORDER BY config_hash, primary_hardware DESC NULLS LAST, hardware",
            {},
            {"sizing_parts": Scan("sizing", files)},
        ):
            if (r["config_hash"], r["hardware"]) not in seen:
                seen.add((r["config_hash"], r["hardware"]))
                out.setdefault(r["config_hash"], []).append(r)
        return out

    return q.memo("run_sizing", run_id, build)


def model_sizing(q: StoreQuery, run_id: str, config_hash: str | None) -> list[dict[str, Any]]:
    """A config's sizing rows in a run, the primary hardware type first ([]: not sized)."""
    return list(run_sizing(q, run_id).get(config_hash or "", []))


def bucket(cores: int | None) -> str:
    if cores is None:
        return "none fits"
    return str(cores) if cores <= BUCKETS[-1] else f"more than {BUCKETS[-1]}"


def cores_needed(q: StoreQuery, run_id: str, dtype: str | None = None) -> dict[str, Any]:
    """The report's "Cores needed, by downloads" (`ran` False: the run has no sizing)."""

    def build() -> dict[str, Any]:
        q.ensure_summaries([run_id])
        files = q.store.part_files("sizing", run_id)
        if not files:
            return {"ran": False}
        # one row per model: a run of several dtypes has the same config at each
        models = q.fetch(
            f"""
            SELECT model_id, any_value(downloads) AS downloads,
              any_value(config_hash) AS config_hash, any_value(sizing_status) AS status
            FROM model_runs WHERE run_id = $run AND {IN_DTYPE} GROUP BY model_id
            """,
            {"run": run_id, "dtype": dtype},
        )
        sizing = q.fetch(
            "SELECT DISTINCT ON (config_hash, hardware) config_hash, hardware, "
            "primary_hardware, serve_cores, finetune_cores, lora_cores, cores_per_chip, "
            "cores_per_instance, core_memory_bytes, serve_context, serve_batch "
            "FROM sizing_parts WHERE status = 'ok' AND hardware IS NOT NULL",
            {},
            {"sizing_parts": Scan("sizing", files)},
        )
        return _figures(models, sizing)

    return q.memo("cores_needed", run_id, build, dtype)


def _figures(models: list[dict[str, Any]], sizing: list[dict[str, Any]]) -> dict[str, Any]:
    total = len(models)
    total_dl = sum(m["downloads"] or 0 for m in models)
    by_config: dict[str, list[dict[str, Any]]] = {}
    for r in sizing:
        by_config.setdefault(r["config_hash"], []).append(r)
    hardware = sorted({(not r["primary_hardware"], r["hardware"]) for r in sizing}, key=lambda x: x)
    names = [h for _, h in hardware]
    sized = [m for m in models if m["status"] == SizingStatus.OK.value]
    statuses: dict[str, dict[str, Any]] = {}
    for m in models:
        if m["status"] != SizingStatus.OK.value:
            s = statuses.setdefault(m["status"] or "not planned", {"models": 0, "downloads": 0})
            s["models"] += 1
            s["downloads"] += m["downloads"] or 0
    for s in statuses.values():
        s["downloads_share"] = s["downloads"] / total_dl if total_dl else None
    order = [*(str(b) for b in BUCKETS), f"more than {BUCKETS[-1]}", "none fits"]
    primary = names[0] if names else None
    buckets = {b: {w: [0, 0] for w in WORKLOADS} for b in order}
    per_hardware = []
    for name in names:
        counts = {k: [0, 0] for k in ("serve_one_core", "finetune_one_chip", "fits_instance")}
        for m in sized:
            row = next(
                (r for r in by_config.get(m["config_hash"], []) if r["hardware"] == name), None
            )
            if row is None:
                continue
            dl = m["downloads"] or 0
            checks = {
                "serve_one_core": row["serve_cores"] == 1,
                "finetune_one_chip": _within(row["finetune_cores"], row["cores_per_chip"]),
                "fits_instance": all(
                    _within(row[f"{w}_cores"], row["cores_per_instance"]) for w in WORKLOADS
                ),
            }
            for key, ok in checks.items():
                if ok:
                    counts[key][0] += 1
                    counts[key][1] += dl
            if name == primary:
                for w in WORKLOADS:
                    cell = buckets[bucket(row[f"{w}_cores"])][w]
                    cell[0] += 1
                    cell[1] += dl
        example = next((r for r in sizing if r["hardware"] == name), {})
        per_hardware.append(
            {
                "hardware": name,
                "primary": name == primary,
                "core_memory_bytes": example.get("core_memory_bytes"),
                "cores_per_chip": example.get("cores_per_chip"),
                "cores_per_instance": example.get("cores_per_instance"),
                **{f"{k}_models": v[0] for k, v in counts.items()},
                **{
                    f"{k}_downloads_share": (v[1] / total_dl if total_dl else None)
                    for k, v in counts.items()
                },
            }
        )
    first = sizing[0] if sizing else {}
    default = statuses.get(NO_OWN_CONFIG, {"models": 0, "downloads": 0})
    sized_dl = sum(m["downloads"] or 0 for m in sized)
    return {
        "no_own_config": default["models"],
        "no_own_config_downloads_share": default["downloads"] / total_dl if total_dl else None,
        "ran": True,
        "models": total,
        "downloads": total_dl,
        "sized": len(sized),
        "sized_downloads": sized_dl,
        "sized_downloads_share": sized_dl / total_dl if total_dl else None,
        "not_sized": [{"status": k, **v} for k, v in sorted(statuses.items())],
        "hardware": primary,
        "serve_context": first.get("serve_context"),
        "serve_batch": first.get("serve_batch"),
        "buckets": [
            {
                "cores": b,
                **{f"{w}_models": buckets[b][w][0] for w in WORKLOADS},
                **{
                    f"{w}_downloads_share": buckets[b][w][1] / total_dl if total_dl else None
                    for w in WORKLOADS
                },
            }
            for b in order
            if any(buckets[b][w][0] for w in WORKLOADS)
        ],
        "per_hardware": per_hardware,
    }


def _within(cores: int | None, limit: int | None) -> bool:
    return cores is not None and limit is not None and cores <= limit
