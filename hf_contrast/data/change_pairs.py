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

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from hf_contrast.errors import InputError, InputTypeError

from ..tensor_checks import MAX_SEED, check_choice, check_int

if TYPE_CHECKING:
    import datasets

__all__ = ["CHANGE_NAMES", "make_change_pairs"]

CHANGE_NAMES = ("none", "erased", "shifted", "replaced")
_DEFAULT_FREQUENCIES = (0.50, 0.25, 0.15, 0.10)
#: The most pairs one call makes: they are held in memory (ten million pairs of 32-px RGB images are 61 GB).
MAX_PAIRS = 10**7


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
    if other.shape != pre.shape:  # images of a folder differ in size: the replacement takes x_pre's
        from PIL import Image

        return np.asarray(Image.fromarray(other).resize((w, h), Image.Resampling.BICUBIC))
    return other


def _rgb_images(dataset: datasets.Dataset, image_column: str, on_bad_image: str) -> tuple[list[np.ndarray], list[int]]:
    """The RGB arrays of ``dataset[image_column]`` (PIL images or undecoded ``{"path", "bytes"}`` dicts) and
    the rows they came from; a bad image raises naming the file and row, or is left out under ``"skip"``."""
    from .decode import BadImageError, convert_image_mode, decode_image

    images, rows = [], []
    for row, value in enumerate(dataset[image_column]):
        try:
            image = convert_image_mode(decode_image(value), 3)
        except BadImageError as error:
            message = f"make_change_pairs: row {row} of column {image_column!r}: {error}"
            if on_bad_image == "raise":
                raise BadImageError(f"{message}. Fix or remove the image, or pass `on_bad_image='skip'`.") from error
            warnings.warn(f"Skipped: {message}.", UserWarning, stacklevel=3)
            continue
        images.append(np.asarray(image))
        rows.append(row)
    return images, rows


def make_change_pairs(
    dataset: datasets.Dataset,
    num_pairs: int | None = None,
    frequencies: Sequence[float] = _DEFAULT_FREQUENCIES,
    image_column: str = "image",
    label_column: str = "label",
    seed: int = 0,
    on_bad_image: str = "raise",
) -> datasets.Dataset:
    """Build a paired change-classification ``datasets.Dataset`` from an image dataset.

    Any labelled image set works (the embedded digits, a class image folder): the images may differ in
    size (a ``replaced`` image is resized to its ``x_pre``) and mode (everything becomes RGB).

    Args:
        dataset: A ``datasets.Dataset`` with images in ``image_column`` (PIL images, or undecoded
            ``{"path", "bytes"}`` dicts: :func:`~hf_contrast.data.defer_image_decoding`) and integer
            labels in ``label_column`` (the labels are used only to pick a *different* class for
            ``replaced``).
        num_pairs: Number of pairs (default: ``len(dataset)``), at most :data:`MAX_PAIRS` (ten million).
        frequencies: Probability of each change kind (see the module table); must sum to 1.
        seed: Seed of every random choice (deterministic output), an integer in ``[0, 2**63 - 2]``.
        on_bad_image: An unreadable image: ``"raise"`` (a ``ValueError`` naming the row and the file) or
            ``"skip"`` (left out of the pairs, with a warning naming the file).

    Returns:
        A ``datasets.Dataset`` with ``image_pre``, ``image_post`` (PIL RGB) and ``label``
            (``ClassLabel`` with :data:`CHANGE_NAMES`).

    Raises:
        ValueError: if a column is missing, ``frequencies`` has the wrong length or does not
            sum to 1, ``num_pairs < 1``, an image is bad (``on_bad_image="raise"``) or none is readable.
    """
    import datasets
    from PIL import Image

    if not isinstance(getattr(dataset, "column_names", None), list):
        raise InputTypeError(
            f"`dataset` must be a datasets.Dataset of images (one split, e.g. data['train']), got "
            f"{type(dataset).__name__}."
        )
    for name, column in (("image_column", image_column), ("label_column", label_column)):
        if column not in dataset.column_names:
            raise InputError(f"`{name}` {column!r} is not a column of the dataset ({dataset.column_names}).")
    try:
        freqs = np.asarray(frequencies, dtype=np.float64)
    except (TypeError, ValueError):
        freqs = None
    if (
        freqs is None
        or freqs.shape != (len(CHANGE_NAMES),)
        or not np.isfinite(freqs).all()
        or (freqs < 0).any()
        or not np.isclose(freqs.sum(), 1.0)
    ):
        raise InputError(
            f"`frequencies` must be {len(CHANGE_NAMES)} non-negative numbers summing to 1 "
            f"(one per kind {CHANGE_NAMES}), got {frequencies!r}."
        )
    seed = check_int("seed", seed, 0, MAX_SEED)
    n = len(dataset) if num_pairs is None else check_int("num_pairs", num_pairs, 1, MAX_PAIRS)
    if n < 1:
        raise InputError("`dataset` is empty; make_change_pairs needs at least one image (or pass `num_pairs`).")

    check_choice("on_bad_image", on_bad_image, ("raise", "skip"))
    images, rows = _rgb_images(dataset, image_column, on_bad_image)
    if not images:
        raise InputError(f"make_change_pairs: no image of column {image_column!r} could be read.")
    if len(rows) < len(dataset):  # the count, once, after the per-file warnings
        warnings.warn(
            f"make_change_pairs: {len(dataset) - len(rows)} of {len(dataset)} images were unreadable and left out "
            f"(on_bad_image='skip'); the {n} pairs are drawn from the other {len(rows)}.",
            UserWarning,
            stacklevel=2,
        )
    rng = np.random.default_rng(seed)
    source_labels = np.asarray(dataset[label_column])[rows]
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
    source = getattr(dataset.info, "dataset_name", None)  # the pairs are named after their images (model cards)
    info = datasets.DatasetInfo(features=features, dataset_name=f"change pairs from {source}" if source else None)
    return datasets.Dataset.from_dict(
        {"image_pre": pre_images, "image_post": post_images, "label": kinds.tolist()}, features=features, info=info
    )
