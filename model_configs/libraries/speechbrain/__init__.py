"""speechbrain: SpeechBrain models from the adapter's table (hyperparams.yaml is never read).

- `adapter.py`: the adapter (the registry's entry);
- `data/tables.json`: its tables (name mappings, stand-ins, known failures), each entry
  with a reason.
"""
