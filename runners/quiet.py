"""Quiet the model libraries in a process that runs models (a model's child, a rank, the
planner): their progress bars and per-model advice would drown the rows and the progress."""

from __future__ import annotations


def quiet_libraries() -> None:
    """Model libraries print progress bars and advice per model; a sweep wants rows instead."""
    import logging
    import os
    import sys
    import warnings

    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")  # no compile pool per model
    warnings.filterwarnings("ignore")
    for name in ("transformers", "diffusers", "huggingface_hub"):
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        import transformers

        transformers.logging.set_verbosity_error()
        transformers.logging.disable_progress_bar()
    except ImportError:  # pragma: no cover
        pass
    # diffusers takes its loggers' level from this variable when it is first imported (by its
    # adapter, which also turns its progress bars off): importing it here only to quiet it cost
    # 1.9 s of CPU in every process that never builds a diffusers model.
    os.environ.setdefault("DIFFUSERS_VERBOSITY", "error")
    if "diffusers" in sys.modules:
        from diffusers.utils import logging as diffusers_logging

        diffusers_logging.set_verbosity_error()
        diffusers_logging.disable_progress_bar()
    from huggingface_hub.utils import disable_progress_bars

    disable_progress_bars()
    import torch._dynamo

    # Dynamo keeps the user stack of every side effect it replays only to log it; extracting
    # those stacks (source lines read from disk) cost 0.3 s of a first compile (measured).
    torch._dynamo.config.side_effect_replay_policy = "silent"
