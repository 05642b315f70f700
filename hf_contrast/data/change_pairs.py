"""Paired "before/after" images whose class is the kind of change: LOCAL's embedded default data.

LOCAL classifies pairs ``(x_pre, x_post)`` such as pre/post-disaster satellite tiles, with
skewed class frequencies. With no network, the examples build an analogue from real images
(e.g. the embedded digits): each pair starts from one image ``x_pre`` and ``x_post`` is a changed
copy; the label is the kind of change:

====  =============  ==================================================  =====================
 id    name           ``x_post``                                          default frequency
====  =============  ==================================================  =====================
 0     ``none``       ``x_pre`` with mild pixel noise                      0.50
 1     ``erased``     a random square patch of ``x_pre`` blacked out       0.25
 2     ``shifted``    ``x_pre`` translated by a few pixels                 0.15
 3     ``replaced``   a different image of a different class               0.10
====  =============  ==================================================  =====================
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import datasets

__all__ = ["CHANGE_NAMES", "make_change_pairs"]

CHANGE_NAMES = ("none", "erased", "shifted", "replaced")
_DEFAULT_FREQUENCIES = (0.50, 0.25, 0.15, 0.10)


def _change(kind: int, pre: np.ndarray, other: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    h, w = pre.shape[:2]
    if kind == 0:
        noisy = pre.astype(np.float32) + rng.normal(0.0, 6.0, size=pre.shape)
        return np.clip(noisy, 0, 255).astype(np.uint8)
    if kind == 1:
        side = max(2, h // 3)
        top, left = rng.integers(0, h - side + 1), rng.integers(0, w - side + 1)
        post = pre.copy()
        post[top : top + side, left : left + side] = 0
        return post
    if kind == 2:
        shift = max(1, h // 8)
        dy, dx = rng.choice([-shift, shift]), rng.choice([-shift, shift])
        return np.roll(pre, (int(dy), int(dx)), axis=(0, 1))
    return other


def make_change_pairs(
    dataset: datasets.Dataset,
    num_pairs: int | None = None,
    frequencies: Sequence[float] = _DEFAULT_FREQUENCIES,
    image_column: str = "image",
    label_column: str = "label",
    seed: int = 0,
) -> datasets.Dataset:
    """Build a paired change-classification ``datasets.Dataset`` from an image dataset.

    Args:
        dataset: A ``datasets.Dataset`` with PIL images in ``image_column`` and integer labels in
            ``label_column`` (the labels are used only to pick a *different* class for
            ``replaced``).
        num_pairs: Number of pairs (default: ``len(dataset)``).
        frequencies: Probability of each change kind (see the module table); must sum to 1.
        seed: Seed of every random choice (deterministic output).

    Returns:
        A ``datasets.Dataset`` with ``image_pre``, ``image_post`` (PIL RGB) and ``label``
            (``ClassLabel`` with :data:`CHANGE_NAMES`).

    Raises:
        ValueError: if a column is missing, ``frequencies`` has the wrong length or does not
            sum to 1, or ``num_pairs < 1``.
    """
    import datasets
    from PIL import Image

    for name, column in (("image_column", image_column), ("label_column", label_column)):
        if column not in dataset.column_names:
            raise ValueError(f"`{name}` {column!r} is not a column of the dataset ({dataset.column_names}).")
    freqs = np.asarray(frequencies, dtype=np.float64)
    if freqs.shape != (len(CHANGE_NAMES),) or (freqs < 0).any() or not np.isclose(freqs.sum(), 1.0):
        raise ValueError(
            f"`frequencies` must be {len(CHANGE_NAMES)} non-negative numbers summing to 1 "
            f"(one per kind {CHANGE_NAMES}), got {list(frequencies)}."
        )
    n = len(dataset) if num_pairs is None else num_pairs
    if n < 1:
        raise ValueError(f"`num_pairs` must be >= 1, got {num_pairs}.")

    rng = np.random.default_rng(seed)
    images = [np.asarray(img.convert("RGB")) for img in dataset[image_column]]
    source_labels = np.asarray(dataset[label_column])
    kinds = rng.choice(len(CHANGE_NAMES), size=n, p=freqs)
    pre_idx = rng.integers(0, len(images), size=n)
    pre_images, post_images = [], []
    for kind, i in zip(kinds.tolist(), pre_idx.tolist()):
        others = np.flatnonzero(source_labels != source_labels[i])
        other = images[int(rng.choice(others))] if len(others) else images[i]
        pre_images.append(Image.fromarray(images[i]))
        post_images.append(Image.fromarray(_change(kind, images[i], other, rng)))
    features = datasets.Features(
        {
            "image_pre": datasets.Image(),
            "image_post": datasets.Image(),
            "label": datasets.ClassLabel(names=list(CHANGE_NAMES)),
        }
    )
    return datasets.Dataset.from_dict(
        {"image_pre": pre_images, "image_post": post_images, "label": kinds.tolist()}, features=features
    )
