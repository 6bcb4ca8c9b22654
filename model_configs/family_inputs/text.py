"""Input builders for text decoders, MoE/MLA/hybrid models, time series and other families (see the package docstring)."""

from __future__ import annotations
