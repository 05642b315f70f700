"""Check a dataset before training: not missing, not empty, large enough, with the needed columns."""

from __future__ import annotations

from hf_contrast.errors import InputError

from collections.abc import Mapping, Sequence
from typing import Any

from ..tensor_checks import check_int

__all__ = ["check_dataset", "dataset_columns", "dataset_classes"]


def dataset_columns(dataset: Any) -> list[str] | None:
    """The column names of a dataset, or ``None`` when they cannot be known without reading it.

    ``datasets.Dataset`` / ``IterableDataset``: ``column_names`` (or the keys of ``features``);
    an ``IterableDataset`` built without features returns ``None``. A map-style dataset of
    mappings (e.g. a list of dicts): the keys of its first row.
    """
    names = getattr(dataset, "column_names", None)
    if names is not None:
        return list(names)
    features = getattr(dataset, "features", None)
    if isinstance(features, Mapping):
        return list(features)
    if hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__") and not hasattr(dataset, "features"):
        try:
            first = dataset[0] if len(dataset) > 0 else None
        except (IndexError, KeyError, TypeError):
            return None
        if isinstance(first, Mapping):
            return list(first)
    return None


def dataset_classes(dataset: Any, column: str) -> list[Any] | None:
    """The distinct values of a label column, or ``None`` when they cannot be read cheaply.

    ``datasets.Dataset``: ``dataset.unique(column)`` (Arrow, no image is decoded); a list or
    tuple of mappings: the values of its rows. ``IterableDataset`` s, other torch datasets and a
    missing column give ``None`` (reading them would mean decoding every row).

    >>> dataset_classes([{"label": 1}, {"label": 0}, {"label": 1}], "label")
    [0, 1]
    """
    names = getattr(dataset, "column_names", None)
    if names is not None and hasattr(dataset, "unique"):
        return sorted(dataset.unique(column), key=repr) if column in names else None
    if isinstance(dataset, (list, tuple)) and dataset and all(isinstance(row, Mapping) for row in dataset):
        if not all(column in row for row in dataset):
            return None
        return sorted({row[column] for row in dataset}, key=repr)
    return None


def _num_rows(dataset: Any) -> int | None:
    try:
        return len(dataset)
    except TypeError:  # IterableDataset: no length without reading it
        return None


def check_dataset(
    dataset: Any,
    *,
    name: str = "train_dataset",
    min_rows: int = 1,
    columns: Sequence[str | Sequence[str]] = (),
    why: str | None = None,
) -> int | None:
    """Fail early, with the fix, on a dataset that training would crash on deep inside torch.

    Map-style datasets (with ``len``) must hold at least ``min_rows`` rows; iterable datasets
    (``datasets.IterableDataset``, streaming) skip the size check. The columns are checked when
    they are known without reading the data (``column_names`` / ``features``; the first row of a
    list of dicts).

    Args:
        dataset: A ``datasets.Dataset``, ``datasets.IterableDataset``, torch dataset or list of rows.
        name: The argument the dataset was passed as (named in the error), e.g. ``"eval_dataset"``.
        min_rows: Minimum number of rows: 1, or one batch for methods that need a full batch.
        columns: Required columns; an entry that is a tuple of names is satisfied by any one of
            them (e.g. ``("image", "pixel_values")``).
        why: Why ``min_rows`` rows are needed, added to the error (e.g. "CARE cuts every batch
            into 8 chunks").

    Returns:
        The number of rows, or ``None`` for an iterable dataset.

    Raises:
        ValueError: if ``dataset`` is ``None``, empty, smaller than ``min_rows`` or lacks a column.

    >>> check_dataset([{"text": "a"}, {"text": "b"}], min_rows=2, columns=["text"])
    2
    """
    check_int("min_rows", min_rows, 0)
    if dataset is None:
        raise InputError(f"`{name}` is None; pass a dataset as `{name}=` (e.g. a `datasets.Dataset`).")
    rows = _num_rows(dataset)
    if rows is not None:
        if rows == 0:
            raise InputError(
                f"`{name}` is empty (0 rows); pass a dataset with at least {max(min_rows, 1)} rows (check the split "
                "name and any filtering or subsampling done before training)."
            )
        if rows < min_rows:
            reason = f" ({why})" if why else ""
            raise InputError(
                f"`{name}` has {rows} rows, fewer than the {min_rows} needed{reason}; add data or lower the batch "
                "size (`per_device_train_batch_size` / `per_device_eval_batch_size`)."
            )
    known = dataset_columns(dataset)
    if known is not None:
        for entry in columns:
            options = (entry,) if isinstance(entry, str) else tuple(entry)
            if not any(option in known for option in options):
                wanted = repr(options[0]) if len(options) == 1 else "one of " + ", ".join(map(repr, options))
                raise InputError(
                    f"`{name}` has no column {wanted} (its columns: {known}); rename the column "
                    "(`dataset.rename_column(old, new)`) or set the matching column argument (e.g. "
                    "`image_column`, `text_column`, `label_column`)."
                )
    return rows
