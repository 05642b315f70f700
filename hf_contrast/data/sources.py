"""Where a loader's ``path_or_id`` points: an existing local path, a missing one, or a Hub dataset id.

``datasets.load_dataset`` treats every string that is not an existing path as a Hub id, so a mistyped
local folder is reported as a Hub connection error (or as a malformed repository id). The loaders ask
:func:`resolve_source` first:

- an existing file or folder is local;
- a string that *looks* local (absolute, ``./``, ``../``, ``~``, a ``\\`` or ``os.sep`` separator whose
  first part exists here, a file extension such as ``.csv``, or any ``os.PathLike``) and does not exist
  raises :class:`~hf_contrast.errors.MissingPathError` naming the argument, the path and the working
  directory;
- a string that is not a valid Hub repository id either raises :class:`~hf_contrast.errors.InputError`;
- only a plausible Hub id (``name`` or ``user/name``) goes to the Hub; :func:`load_from_hub` turns an
  unreachable Hub into a ``ConnectionError`` that says so and suggests a local path.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hf_contrast.errors import InputError, InputTypeError, MissingPathError
from hf_contrast.hub_ids import is_hub_repo_id

__all__ = ["load_from_hub", "resolve_source"]

#: File endings that mark a string as a local file name rather than a Hub id.
_FILE_SUFFIXES = (".csv", ".tsv", ".tab", ".txt", ".json", ".jsonl", ".parquet", ".arrow", ".zip", ".tar", ".gz")


def _looks_local(text: str, value: object) -> bool:
    if not isinstance(value, str):  # a pathlib.Path (or any os.PathLike) is a path, never a Hub id
        return True
    if text.startswith(("/", "./", "../", "~", ".\\", "..\\")) or text in (".", "..") or "\\" in text:
        return True
    if os.sep in text or "/" in text:
        first = text.replace("\\", "/").split("/", 1)[0]
        if first and os.path.exists(first):
            return True
        if text.count("/") > 1:  # Hub ids are "name" or "user/name"
            return True
    return text.lower().endswith(_FILE_SUFFIXES)


def resolve_source(argument: str, value: object, what: str) -> tuple[bool, str]:
    """Classify a loader's ``path_or_id`` before any work starts.

    Args:
        argument: The argument's name in the messages (``"path_or_id"``, ``"dataset"``, …).
        value: What the user passed.
        what: What a local path should be, for the messages (``"image folder"``, ``"text file"``).

    Returns:
        ``(True, expanded_path)`` for an existing local path, ``(False, hub_id)`` for a Hub id.

    Raises:
        InputTypeError: if ``value`` is not a string or ``os.PathLike``.
        MissingPathError: if ``value`` looks like a local path that does not exist.
        InputError: if ``value`` is empty, or neither an existing path nor a valid Hub id.
    """
    if not isinstance(value, (str, os.PathLike)):
        raise InputTypeError(
            f"`{argument}` must be a path to a local {what} or a Hub dataset id (a string), got "
            f"{type(value).__name__} {value!r}."
        )
    text = os.fspath(value)
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"`{argument}` is empty ({text!r}); pass a local {what} or a Hub dataset id.")
    local = Path(text).expanduser()
    if local.exists():
        return True, str(local)
    if _looks_local(text, value):
        raise MissingPathError(
            f"`{argument}`={text!r} does not exist (resolved to {str(local.absolute())!r}; the working directory is "
            f"{os.getcwd()!r}). Check the path (relative paths start from the working directory), or pass an "
            f"existing {what}."
        )
    if not is_hub_repo_id(text):
        raise InputError(
            f"`{argument}`={text!r} is neither an existing local path (the working directory is {os.getcwd()!r}) "
            f"nor a Hub dataset id like 'user/name'; pass an existing {what} or a Hub id."
        )
    return False, text


def load_from_hub(argument: str, hub_id: str, what: str, **load_kwargs: Any) -> Any:
    """``datasets.load_dataset(hub_id, **load_kwargs)``; an unreachable Hub raises a ``ConnectionError``
    that names ``hub_id``, says it was read as a Hub id (no local path of that name exists) and suggests
    a local ``what``."""
    import datasets

    try:
        return datasets.load_dataset(hub_id, **load_kwargs)
    except ConnectionError as error:
        raise ConnectionError(
            f"`{argument}`={hub_id!r} is not a local path (none exists in the working directory {os.getcwd()!r}), "
            f"so it was read as a Hub dataset id, and the Hub could not be reached ({error}). Offline, pass a "
            f"local {what} instead (or set HF_HUB_OFFLINE=1 with the dataset in the local cache)."
        ) from error
