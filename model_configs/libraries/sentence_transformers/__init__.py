"""sentence-transformers: the module stack users run, over a transformers backbone.

- `adapter.py`: the adapter (the registry's entry);
- `data/tables.json`: its tables (name mappings, stand-ins, known failures), each entry
  with a reason.
"""
