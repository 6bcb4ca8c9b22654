"""Input builders for vision-language models (A..K) (see the package docstring)."""

from __future__ import annotations
