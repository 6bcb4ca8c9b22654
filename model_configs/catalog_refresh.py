"""A fresh catalog from the Hub: the `top` most downloaded models, ranked, with each model's
config files (`config.json`; a diffusers pipeline's `model_index.json` and its components'
configs; never weights or code) cached beside the catalog file through `model_configs.hub`
(`hfsweep catalog refresh --top N`, and each night's refresh). Kept apart from
`model_configs/catalog.py`, which the adapters read: fetching needs the Hub client and the
adapters' library choice, and reading a catalog needs neither.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from model_configs.catalog import Catalog, load_catalog, write_catalog
from model_configs.spec import CatalogEntry


def _license(tags: tuple[str, ...]) -> str:
    for tag in tags:
        if tag.startswith("license:"):
            return tag.split(":", 1)[1]
    return ""


def refresh_catalog(
    top: int,
    out: Path,
    *,
    client: Any = None,
    fetch_configs: bool = True,
    token: str | None = None,
    progress: Any = None,
) -> Catalog:
    """Build a catalog of the `top` most downloaded models from the Hub and cache their configs.

    Lists models with `HubClient.list_models`, then saves each model's config files (a
    transformers `config.json`; a diffusers pipeline's `model_index.json` and every component's
    config) beside the catalog, never weights or code, each with a record of the fetch. A model
    whose configs cannot be read (gated, deleted since the listing) stays in the catalog with
    that record, and the sweep gives it rows with the reason. A refresh that stops (the Hub kept
    failing: HubError) keeps what it fetched; rerunning it with the same `out` goes on from there.
    """
    from model_configs.hub import HubClient, model_folder, read_record
    from model_configs.resolve import library_for

    client = client or HubClient(token=token)
    config_dir = out.with_suffix("")
    meta_path = out.with_suffix(".json")
    resume = _refresh_interrupted(meta_path)
    started = dt.datetime.now(dt.UTC).isoformat()
    infos = client.list_models(top)
    meta: dict[str, Any] = {
        "source": "huggingface_hub list_models(sort='downloads')",
        "status": "running",
        "started_at": started,
        "top": top,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    meta_path.write_text(json.dumps(meta, indent=2) + "\n")
    entries: list[CatalogEntry] = []
    fetched: dict[str, int] = {}
    for rank, info in enumerate(infos, start=1):
        entry = _entry_from_info(info, rank)
        entries.append(entry)
        library = library_for(entry)
        if fetch_configs and library is not None:
            folder = model_folder(config_dir, entry.model_id)
            record = read_record(folder) if (resume and folder is not None) else None
            if record is None:
                record = client.save_configs(entry.model_id, config_dir, library=library)
            fetched[record.status] = fetched.get(record.status, 0) + 1
        if progress is not None:
            progress(rank)
    write_catalog(entries, out, license_of=lambda e: _license(e.tags))
    meta.update(
        status="finished",
        fetched_at=dt.datetime.now(dt.UTC).isoformat(),
        models=len(entries),
        configs=dict(sorted(fetched.items())),
    )
    meta_path.write_text(json.dumps(meta, indent=2) + "\n")
    return load_catalog(str(out))


def _refresh_interrupted(meta_path: Path) -> bool:
    try:
        return json.loads(meta_path.read_text()).get("status") == "running"
    except (OSError, ValueError, AttributeError):
        return False


def _entry_from_info(info: Any, rank: int) -> CatalogEntry:
    tags = tuple(t for t in (info.tags or ()) if isinstance(t, str))
    cfg = info.config if isinstance(info.config, dict) else {}
    archs = cfg.get("architectures") or ()
    model_type = cfg.get("model_type")
    return CatalogEntry(
        model_id=info.id,
        rank=rank,
        downloads=info.downloads if isinstance(info.downloads, int) else None,
        likes=info.likes if isinstance(info.likes, int) else None,
        pipeline_tag=info.pipeline_tag if isinstance(info.pipeline_tag, str) else None,
        library=info.library_name if isinstance(info.library_name, str) else None,
        model_type_hint=model_type if isinstance(model_type, str) else None,
        architectures_hint=tuple(a for a in archs if isinstance(a, str))
        if isinstance(archs, list)
        else (),
        custom_code="custom_code" in tags,
        gated=bool(info.gated),
        tags=tags,
    )
