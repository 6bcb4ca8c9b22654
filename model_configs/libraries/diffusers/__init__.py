"""diffusers: a model class's config or a pipeline's denoiser, shrunk by per-class rules.

- `adapter.py`: `DiffusersAdapter`;
- `shrink.py`: the shrink (generic size rules, per-class rules, consistency fixers);
- `build.py`: the tiny model, its inputs (each class's recipe) and its loss;
- `data/class_rules.json`: the size rules, per-class rules and input recipes, pipelines and
  known failures, each with a reason; `data/configs/`: published denoiser configs.
"""
