"""Class labels of a batch of rows, shared by the image and text collators."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from hf_contrast.errors import InputError

__all__ = ["collate_labels"]


def collate_labels(features: Sequence[Mapping[str, Any]], label_column: str | None) -> Tensor | None:
    """The rows' ``label_column`` as ``int64`` ``(B,)``, or ``None`` without that column.

    Raises:
        ValueError: naming the row when a label is not an int.
    """
    if label_column is None or label_column not in features[0]:
        return None
    labels = [f[label_column] for f in features]
    if any(isinstance(y, bool) or not isinstance(y, (int, np.integer)) for y in labels):
        row, got = next(
            (i, type(y).__name__)
            for i, y in enumerate(labels)
            if isinstance(y, bool) or not isinstance(y, (int, np.integer))
        )
        raise InputError(
            f"`{label_column}` (the label column) must hold integer class labels, got a {got} in row {row} of "
            "the batch; encode string labels with `dataset.class_encode_column(...)`."
        )
    return torch.tensor(labels, dtype=torch.long)
