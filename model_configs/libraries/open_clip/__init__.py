"""open_clip: both towers of open_clip's bundled model configs, shrunk.

- `adapter.py`: the adapter (the registry's entry);
- `data/tables.json`: its tables (name mappings, stand-ins, known failures), each entry
  with a reason.
"""
