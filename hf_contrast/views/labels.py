"""Class labels read from rows: one check for the training collators, :func:`~hf_contrast.encoding.encode_dataset` and
the evaluators."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from hf_contrast.errors import InputError

__all__ = ["class_labels", "collate_labels", "is_index_dtype"]


def is_index_dtype(dtype: torch.dtype) -> bool:
    """Whether tensors of ``dtype`` hold class indices: an integer dtype (not bool, float or complex)."""
    return not (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool)


def _class_index(value: Any) -> int | None:
    """``value`` as a class index when it is one (a Python or NumPy integer, a one-element integer tensor), else
    ``None`` (a bool, a float, a string class name, ``None``)."""
    if isinstance(value, Tensor):
        return int(value) if value.numel() == 1 and is_index_dtype(value.dtype) else None
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return int(value)
    return None


def class_labels(values: Sequence[Any], label_column: str, first_row: int | None = None) -> Tensor:
    """The class labels ``values`` (one per row) as ``int64`` ``(n,)``.

    Args:
        values: One label per row: Python or NumPy integers, or one-element integer tensors.
        label_column: The column they were read from (named in the error).
        first_row: The dataset row of ``values[0]``, for the error; ``None``: rows of a batch.

    Raises:
        InputError: naming the column, the first row whose label is not an integer (a class name, a float, a bool),
            its value, and the fix (``dataset.class_encode_column``). Nothing is truncated or cast.
    """
    if all(type(value) is int for value in values):  # the common case (a ClassLabel column): no call per value
        return torch.tensor(list(values), dtype=torch.long)
    indices = [_class_index(value) for value in values]
    bad = next((i for i, index in enumerate(indices) if index is None), None)
    if bad is not None:
        value = values[bad]
        row = f"row {bad} of the batch" if first_row is None else f"row {first_row + bad}"
        raise InputError(
            f"`label_column`={label_column!r} must hold integer class labels, got {value!r:.40} "
            f"(a {type(value).__name__}) in {row}; encode class names with "
            f"`dataset = dataset.class_encode_column({label_column!r})` (a datasets.Dataset) or map each class to an "
            "integer."
        )
    return torch.tensor(indices, dtype=torch.long)


def collate_labels(features: Sequence[Mapping[str, Any]], label_column: str | None) -> Tensor | None:
    """The rows' ``label_column`` as ``int64`` ``(B,)``, or ``None`` without that column.

    Raises:
        InputError: naming the row when a label is not an integer (:func:`class_labels`).
    """
    if label_column is None or label_column not in features[0]:
        return None
    return class_labels([f[label_column] for f in features], label_column)
