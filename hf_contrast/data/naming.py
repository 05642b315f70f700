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

__all__ = ["local_dataset_name", "name_dataset"]

_SPLIT_NAMES = frozenset({"train", "test", "validation", "valid", "val", "dev", "eval", "data"})


def local_dataset_name(source: str | os.PathLike[str]) -> str:
    """The public name of a local dataset folder or file (its name, or its folder's for ``train.csv``)."""
    path = Path(os.path.normpath(os.path.expanduser(os.fspath(source)))).absolute()
    if path.is_file():
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
