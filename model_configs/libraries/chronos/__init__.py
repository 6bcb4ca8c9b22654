"""chronos-forecasting: Chronos (T5), Chronos-Bolt and Chronos-2 forecasters.

- `adapter.py`: the adapter (the registry's entry);
- `data/tables.json`: its tables (name mappings, stand-ins, known failures), each entry
  with a reason.
"""
