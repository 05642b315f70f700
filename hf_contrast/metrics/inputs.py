"""Input conversion shared by the metrics (and the evaluation and plots built on them): numpy or torch in,
detached float64 tensors out."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from hf_contrast.errors import InputError

from ..tensor_checks import check_embeddings, check_labels, check_same_shape

__all__ = ["as_embeddings", "as_labels", "as_pair"]


def _to_tensor(x: object) -> object:
    if isinstance(x, np.ndarray):
        return torch.from_numpy(x)
    return x


def as_embeddings(name: str, z: object, min_rows: int = 1, ndim: int = 2, shape_doc: str = "(n, D)") -> Tensor:
    """Check ``z`` (torch tensor or numpy array) and return it detached, in float64.

    Raises:
        ValueError: if ``z`` is not a finite floating-point array of rank ``ndim`` or has fewer
            than ``min_rows`` rows.
    """
    z = check_embeddings(name, _to_tensor(z), ndim=ndim, shape_doc=shape_doc)
    if z.shape[0] < min_rows:
        raise InputError(f"`{name}` needs at least {min_rows} rows (samples), got shape {tuple(z.shape)}.")
    return z.detach().to(torch.float64)


def as_pair(name1: str, z1: object, name2: str, z2: object, min_rows: int = 1) -> tuple[Tensor, Tensor]:
    """Check two embedding matrices of identical shape ``(n, D)`` on the same device."""
    a = as_embeddings(name1, z1, min_rows=min_rows)
    b = as_embeddings(name2, z2, min_rows=min_rows)
    check_same_shape(name1, a, name2, b)
    if a.device != b.device:
        raise InputError(f"`{name1}` and `{name2}` must be on the same device, got {a.device} and {b.device}.")
    return a, b


def as_labels(name: str, labels: object, n: int, device: torch.device) -> Tensor:
    """Check integer labels of shape ``(n,)`` (torch or numpy) and move them to ``device``."""
    labels = check_labels(_to_tensor(labels), n, name=name)
    return labels.detach().to(device=device, dtype=torch.long)
