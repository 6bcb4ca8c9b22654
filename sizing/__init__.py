"""Sizing: each model at full size, and the cores it needs on the hardware behind a device.

One package for the writing side of the `sizing` table (docs/sizing.md):
- `measure`: the model at full size, built on PyTorch's `meta` device from its own config
  (`size_model` -> `ModelSize`), asking the library's adapter what only the library knows
  (its attention and KV-cache fields, its LoRA targets);
- `hardware`: the hardware types a device stands for, read by path from each device's own
  folder (`runners/devices/<name>/data/hardware.json`, no import of the device);
- `cores`: the formula that turns a size into memory and the smallest tensor-parallel degree
  that holds it on one hardware type;
- `rows`: the sizing table's rows of one full-size config on a run's device.
Its contract with the reading side (the table's schema, its status vocabulary, what a model's
summary row holds of it) is in `ground` (`schema.py`, `sizing_columns.py`); `reports/sizing.py`
reads the table back. Between `model_configs` (which it builds with) and `sweep` (which plans
the sizes and writes the rows).
"""
