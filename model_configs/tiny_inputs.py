"""The sizes of the dummy inputs every tiny model is fed, whatever its library: one place, so
that every adapter's batch is the same batch and a change of size is one change.

An adapter with a reason to differ keeps its own size and says why (sentence-transformers feeds
four texts: two anchors, two positives, for its in-batch contrastive loss).
"""

from __future__ import annotations

BATCH = 2  # samples per batch: the smallest batch whose reductions over it are not trivial
SEQ = 16  # tokens per text sample
AUDIO_SAMPLES = 16_000  # samples per waveform: one second at 16 kHz
GRID = 4  # patches per image side, for a model that embeds patches
