"""ultralytics: YOLO models from their YAML, mapped by the adapter's table.

- `adapter.py`: the adapter (the registry's entry);
- `data/tables.json`: its tables (name mappings, stand-ins, known failures), each entry
  with a reason.
"""
