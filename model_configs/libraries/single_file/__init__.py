"""diffusion-single-file: repackaged checkpoints mapped by name to a diffusers class.

- `adapter.py`: the adapter (the registry's entry);
- `data/tables.json`: its tables (name mappings, stand-ins, known failures), each entry
  with a reason.
"""
