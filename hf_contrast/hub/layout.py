"""The layout of a saved encoder folder that the Hub code relies on."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

__all__ = ["HUB_SUBFOLDER", "find_saved_file"]

#: Subfolder of every saved model folder (and Hub repository) holding the full encoder (head included) and its
#: card data; the root holds the backbone in its own library's format.
HUB_SUBFOLDER = "hf_contrast"


def find_saved_file(
    path: str | os.PathLike[str], filename: str, subfolder: str = "", hub_kwargs: Mapping[str, Any] | None = None
) -> str | None:
    """The local path of ``subfolder/filename`` in a saved folder or Hub repository (downloaded into the cache), or
    ``None`` when it is absent, the Hub is unreachable or the lookup fails: the caller's loading reports those with
    its own error. ``hub_kwargs``: ``cached_file``'s (``revision``, ``token``, ``cache_dir``…)."""
    from transformers.utils import cached_file

    options = dict(
        hub_kwargs or {}, _raise_exceptions_for_missing_entries=False, _raise_exceptions_for_connection_errors=False
    )
    try:
        return cached_file(path, filename, subfolder=subfolder, **options)
    except Exception:  # an unreachable Hub, a malformed id: absent, for the caller to report
        return None
