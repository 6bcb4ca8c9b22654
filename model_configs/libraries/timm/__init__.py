"""timm: the architecture from the repo id (or its `config.json`), shrunk by its constructor.

- `adapter.py`: `TimmAdapter`; `shrink.py`: the shrink (width factors, per-family hooks);
- `data/tables.json`: `shrink_rules` keyed by model class and `known_failures`, each with a
  reason.
"""
