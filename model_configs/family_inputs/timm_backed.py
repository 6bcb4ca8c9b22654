"""Input builders for models whose towers are timm models (they need the `timm` extra)."""

from __future__ import annotations
