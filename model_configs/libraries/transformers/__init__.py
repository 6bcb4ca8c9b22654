"""transformers: configs by `model_type`, shrunk by rules and per-family data, built from the
auto classes, fed by per-family input builders.

- `adapter.py`: `TransformersAdapter` (the registry's entry);
- `shrink.py`: the shrink of a config tree; `shrink_rules.py`: its generic rules and key tables
  (which keys are widths, heads, layers, vocabularies...), one named rule each with its reason;
- `families.py`: the per-family data in `data/families/*.json` (shrink rules, input hints,
  known failures, each with a reason);
- `classes.py`: which model class a config builds (task heads, tower-alone classes);
- `build.py`: the tiny model, its inputs and its loss; `inputs/`: the input builders, by
  signature and by model type, one module per input layout;
- `quantized.py`: quantized checkpoints (fit, write in the method's format, load back).
"""
