"""Input builders for vision-language models (L..Z) (see the package docstring)."""

from __future__ import annotations
