"""Input builders for speech, audio codecs and text-to-speech models (see the package docstring)."""

from __future__ import annotations
