"""Values the card data keeps: JSON-ready copies, numbers that are finite, no local path.

Shared by the card data (:mod:`hf_contrast.hub.card_data`), its datasets and the renderer.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from typing import Any

from hf_contrast.provenance import public_name

__all__ = ["finite_number", "json_ready", "scrub_paths"]

_WINDOWS_PATH = re.compile(r"^[A-Za-z]:[\\/]")


def json_ready(value: Any) -> Any:
    """A JSON-safe copy: tensors and NumPy scalars as numbers or lists, tuples as lists, the rest as ``str``."""
    if isinstance(value, Mapping):
        return {str(key): json_ready(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [json_ready(item) for item in value]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if hasattr(value, "tolist"):
        return json_ready(value.tolist())
    return str(value)


def scrub_paths(value: Any) -> Any:
    """``value`` with every absolute or home-relative path string replaced by its last folder name."""
    if isinstance(value, Mapping):
        return {key: scrub_paths(item) for key, item in value.items()}
    if isinstance(value, list):
        return [scrub_paths(item) for item in value]
    if (
        isinstance(value, str)
        and "\n" not in value
        and (os.path.isabs(value) or value.startswith(("~", "local-dir:")) or _WINDOWS_PATH.match(value))
    ):
        return public_name(value)
    return value


def finite_number(value: Any) -> float | int | None:
    if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return value
