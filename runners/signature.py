"""Normalised error signatures: the same failure in two models gets the same signature.

Numbers, shapes, hex addresses, quoted names of tensors / parameters and file paths vary between
models; the signature replaces them so that failures cluster by cause.
"""

from __future__ import annotations

import re

_RULES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"0x[0-9a-fA-F]+"), "<addr>"),
    (re.compile(r"(/[\w.\-]+)+\.py(:\d+)?"), "<file>"),
    (re.compile(r"\[[\d,\s]+\]"), "[?]"),  # shapes / lists of ints
    (re.compile(r"\(\s*\d+(\s*,\s*\d+)*\s*,?\s*\)"), "(?)"),  # tuples of ints
    (re.compile(r"torch\.Size\(\[[^\]]*\]\)"), "torch.Size(?)"),
    (re.compile(r"(?<![A-Za-z_])-?\d+(\.\d+)?(e-?\d+)?"), "N"),
    (re.compile(r"\s+"), " "),
]
_ATEN_OP = re.compile(r"aten::[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)?")
_KERNEL_NOT_IMPLEMENTED = re.compile(r'"([a-z0-9_]+)" not implemented for')


def error_signature(error_type: str, message: str) -> str:
    """`ErrorType: normalised first line`, at most 200 characters."""
    first = (message or "").strip().splitlines()[0] if (message or "").strip() else ""
    text = first
    for pattern, repl in _RULES:
        text = pattern.sub(repl, text)
    return f"{error_type}: {text.strip()}"[:200]


def short_message(message: str, limit: int = 500) -> str:
    """The message as stored: at most `limit` characters, cut at a word boundary (never inside
    a word, unless one word fills most of the limit), lines kept."""
    text = (message or "").strip()
    if len(text) <= limit:
        return text
    cut = text[: limit - 3]
    space = max(cut.rfind(" "), cut.rfind("\n"))
    if space >= limit * 3 // 4:
        cut = cut[:space]
    return cut.rstrip(" ,;:(\n") + "..."


def op_in_message(message: str) -> str | None:
    """The ATen op an error names, if it names one (`aten::x.y`, or a CPU kernel name)."""
    match = _ATEN_OP.search(message or "")
    if match:
        return match.group(0)
    match = _KERNEL_NOT_IMPLEMENTED.search(message or "")
    if match:
        return f"kernel:{match.group(1)}"
    return None
