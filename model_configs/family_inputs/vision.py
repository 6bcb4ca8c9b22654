"""Input builders for detection, segmentation, OCR, depth, video and keypoint models (see the package docstring)."""

from __future__ import annotations
