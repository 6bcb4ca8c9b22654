"""The sizes of the dummy inputs every tiny model is fed, whatever its library: one place, so
that every adapter's batch is the same batch and a change of size is one change.

An adapter with a reason to differ keeps its own size and says why (sentence-transformers feeds
four texts: two anchors, two positives, for its in-batch contrastive loss).
"""

from __future__ import annotations

import math

BATCH = 2  # samples per batch: the smallest batch whose reductions over it are not trivial
SEQ = 16  # tokens per text sample
AUDIO_SAMPLES = 16_000  # samples per waveform: one second at 16 kHz
GRID = 4  # patches per image side, for a model that embeds patches
# Rows a mixture of experts routes per batch (tokens x experts per token): a real training
# batch is padded to a multiple of 128 tokens, so its routed rows are one too. A device may
# hold the grouped matmul's row count to that (TorchNeuron's `_grouped_mm` requires it), a
# property of the workload's size only: the tiny input meets it as a real one does. How the
# router spreads rows over experts is data, and stays the model's.
ROUTED_ROWS_MULTIPLE = 128


def routed_seq(seq: int, experts_per_token: int, batch: int = BATCH) -> int:
    """The smallest multiple of the routing step, at least `seq`, whose routed rows
    (batch x seq x experts per token) are a multiple of ROUTED_ROWS_MULTIPLE."""
    per_token = max(1, batch * experts_per_token)
    step = ROUTED_ROWS_MULTIPLE // math.gcd(ROUTED_ROWS_MULTIPLE, per_token)
    return max(step, math.ceil(seq / step) * step)
