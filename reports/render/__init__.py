"""Renderers of a run report: text, markdown, json, and a self-contained static html site."""

from __future__ import annotations

FORMATS = ("text", "markdown", "json", "html")
