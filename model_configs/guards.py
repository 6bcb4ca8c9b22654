"""Guards against hostile configs: what a config must be before a library sees it.

A config file of at most `MAX_FILE_BYTES`, at most `MAX_DEPTH` levels of nesting, `MAX_VALUES`
values and `MAX_STRING` characters in a string. Deeper nesting overflows the libraries'
recursive code; a config of millions of values is memory before it is a model. Beyond them: a
`malformed_config` skip, checked without recursion before any library parses the config
(`check_shape`). What a tiny model may cost before it is built with real memory is the build
budget, in `model_configs.build` (it builds through the adapters, which read files through
this module: a leaf, so that neither imports the other back).
"""

from __future__ import annotations

from typing import Any

from ground.errors import ConfigError
from ground.schema import SkipReason

MAX_FILE_BYTES = 16 << 20  # a config file (the largest on the Hub are a few hundred kB)
MAX_DEPTH = 64
MAX_VALUES = 200_000
MAX_STRING = 1 << 20


def check_shape(config: Any, *, model_id: str | None = None) -> None:
    """Raise a `malformed_config` ConfigError for a config beyond the shape limits."""
    stack: list[tuple[Any, int]] = [(config, 1)]
    values = 0
    while stack:
        value, depth = stack.pop()
        values += 1
        if values > MAX_VALUES:
            raise malformed(f"the config has more than {MAX_VALUES:,} values", model_id)
        if isinstance(value, dict):
            if depth > MAX_DEPTH:
                raise malformed(f"the config nests deeper than {MAX_DEPTH} levels", model_id)
            stack.extend((v, depth + 1) for v in value.values())
            stack.extend((k, depth + 1) for k in value)
        elif isinstance(value, list | tuple):
            if depth > MAX_DEPTH:
                raise malformed(f"the config nests deeper than {MAX_DEPTH} levels", model_id)
            stack.extend((v, depth + 1) for v in value)
        elif isinstance(value, str) and len(value) > MAX_STRING:
            raise malformed(f"a string of the config is longer than {MAX_STRING:,}", model_id)


def malformed(message: str, model_id: str | None) -> ConfigError:
    """A `malformed_config` skip with this message."""
    return ConfigError(message, reason=SkipReason.MALFORMED_CONFIG.value, model_id=model_id)
