"""The name a loaded dataset goes by in model cards: never a local path.

``datasets`` names data read from local files after the packaged builder (``imagefolder``, ``csv``),
which says nothing. :func:`name_dataset` sets ``info.dataset_name`` (what the model card reads, see
:func:`hf_contrast.hub.dataset_metadata`) to the user's ``dataset_name`` or, for a local
source, to the folder's name (a file named after a split, ``corpus/train.csv``, is named by its
folder: ``corpus``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hf_contrast.errors import InputError

from .sentences import SENTENCE_PAIRS_NAME, SENTENCE_PAIRS_PATH

__all__ = ["add_loader_note", "loader_notes", "local_dataset_name", "name_dataset"]

#: Marks the lines of ``info.description`` that the loaders wrote (a Hub dataset's own description is kept).
NOTE_PREFIX = "hf_contrast note: "

_SPLIT_NAMES = frozenset({"train", "test", "validation", "valid", "val", "dev", "eval", "data"})


def local_dataset_name(source: str | os.PathLike[str]) -> str:
    """The public name of a local dataset folder or file (its name, or its folder's for ``train.csv``; the
    shipped sentence pairs' file: ``hf_contrast-sentence-pairs``, as :func:`~hf_contrast.data.load_sentence_pairs`
    names them)."""
    path = Path(os.path.normpath(os.path.expanduser(os.fspath(source)))).absolute()
    if path.is_file():
        if path.resolve() == SENTENCE_PAIRS_PATH.resolve():
            return SENTENCE_PAIRS_NAME
        return path.parent.name if path.stem.lower() in _SPLIT_NAMES and path.parent.name else path.stem
    return path.name


def name_dataset(dataset: Any, source: str | os.PathLike[str], dataset_name: str | None) -> Any:
    """Set ``info.dataset_name`` of ``dataset`` (each split of a ``DatasetDict``) and return it.

    Args:
        dataset: A ``datasets.Dataset`` or ``DatasetDict``.
        source: What it was loaded from (a local file or folder, or a Hub id).
        dataset_name: The user's name for it; ``None``: a local source's folder name, a Hub
            dataset keeps the name ``datasets`` gave it.

    Raises:
        ValueError: If ``dataset_name`` is not a non-empty string.
    """
    if dataset_name is not None and (not isinstance(dataset_name, str) or not dataset_name.strip()):
        raise InputError(
            f"`dataset_name` must be a non-empty string (the dataset's name in model cards), got {dataset_name!r}."
        )
    name = dataset_name or (local_dataset_name(source) if Path(os.fspath(source)).expanduser().exists() else None)
    if name:
        for part in dataset.values() if hasattr(dataset, "values") and not hasattr(dataset, "info") else [dataset]:
            part.info.dataset_name = name
    return dataset


def add_loader_note(dataset: Any, note: str) -> Any:
    """Keep ``note`` (a quirk of the data the loader found and warned about: a class folder without images, class
    names equal but for case, one-image classes) in ``info.description`` of ``dataset`` (each split of a
    ``DatasetDict``), where the model card reads it (:func:`loader_notes`); said once per split."""
    for part in dataset.values() if hasattr(dataset, "values") and not hasattr(dataset, "info") else [dataset]:
        line = NOTE_PREFIX + note
        description = part.info.description or ""
        if line not in description.splitlines():
            part.info.description = f"{description}\n{line}".strip("\n")
    return dataset


def loader_notes(dataset: Any) -> list[str]:
    """The notes :func:`add_loader_note` kept on ``dataset`` (none for a dataset without ``info``)."""
    description = getattr(getattr(dataset, "info", None), "description", None) or ""
    return [line[len(NOTE_PREFIX) :] for line in description.splitlines() if line.startswith(NOTE_PREFIX)]
