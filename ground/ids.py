"""Model ids as data: which ones may name a folder or a URL path.

Model ids come from catalogs, the Hub's listing and users' URLs. They become folder names (the
catalog's cached configs) and path segments (the dashboard's model pages), so anything that could
climb out of a folder or smuggle a control character is refused here, once, for every package.
"""

from __future__ import annotations

import re

MAX_MODEL_ID = 300

# The Hub's repo ids: an optional owner and a name, letters, digits, '-', '_', '.'.
_HUB_SEGMENT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,95}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def unsafe_model_id(model_id: str) -> str | None:
    """Why `model_id` must not be used as a path or URL segment, or None when it may.

    Refused: empty ids, ids over 300 characters, control characters, backslashes, a leading `/`,
    and `.` / `..` / empty segments (path traversal). Other characters (`<`, quotes, spaces) are
    allowed: local configs are named by their path and rendering escapes them.
    """
    if not model_id:
        return "empty model id"
    if len(model_id) > MAX_MODEL_ID:
        return f"model id longer than {MAX_MODEL_ID} characters"
    if _CONTROL.search(model_id):
        return "model id with a control character"
    if "\\" in model_id:
        return "model id with a backslash"
    if model_id.startswith("/"):
        return "model id starting with '/'"
    if any(part in ("", ".", "..") for part in model_id.split("/")):
        return "model id with an empty, '.' or '..' segment"
    return None


def is_hub_repo_id(model_id: str) -> bool:
    """True for ids the Hub itself could serve: `name` or `owner/name`, no `..` or `--`."""
    parts = model_id.split("/")
    if not 1 <= len(parts) <= 2 or unsafe_model_id(model_id):
        return False
    return all(_HUB_SEGMENT.match(p) and ".." not in p and "--" not in p for p in parts)
