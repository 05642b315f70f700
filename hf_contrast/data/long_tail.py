"""Long-tailed subsets of a labelled dataset (for OCL vs SupCon under class imbalance)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from hf_contrast.errors import InputError, InputTypeError

from ..tensor_checks import MAX_SEED, check_int, check_number
from .naming import add_loader_note

if TYPE_CHECKING:
    import datasets

__all__ = ["long_tailed_counts", "make_long_tailed"]

#: The most classes :func:`long_tailed_counts` profiles (ImageNet-21k has 21,841; 10**30 built a list for ever).
MAX_CLASSES = 2**20
#: The largest ``n_max``: the profile is computed in float64, exact for integers up to 2**53 (10**30 came back as
#: 1000000000000000019884624838656).
MAX_COUNT = 2**53


def long_tailed_counts(n_max: int, num_classes: int, imbalance_ratio: float) -> list[int]:
    """Exponential long-tail profile: class ``c`` keeps ``n_max * imbalance_ratio ** (-c / (K - 1))``.

    The most frequent class keeps ``n_max`` samples and the rarest ``n_max / imbalance_ratio``
    (at least 2, so that every class can form a positive pair), as in CIFAR-10-LT.

    Raises:
        InputError: (a ``ValueError``) if ``n_max`` is not an integer in ``[1, 2**53]``, ``num_classes`` not one in
            ``[2, 2**20]``, or ``imbalance_ratio`` not a finite number >= 1.

    >>> long_tailed_counts(100, 3, 10.0)
    [100, 32, 10]
    """
    n_max = check_int("n_max", n_max, 1, MAX_COUNT)
    num_classes = check_int("num_classes", num_classes, 2, MAX_CLASSES)
    imbalance_ratio = check_number("imbalance_ratio", imbalance_ratio)
    if not imbalance_ratio >= 1.0:
        raise InputError(f"`imbalance_ratio` must be >= 1 (max count / min count), got {imbalance_ratio}.")
    return [max(2, int(round(n_max * imbalance_ratio ** (-c / (num_classes - 1))))) for c in range(num_classes)]


def make_long_tailed(
    dataset: datasets.Dataset, imbalance_ratio: float | None, label_column: str = "label", seed: int = 0
) -> datasets.Dataset:
    """Subsample ``dataset`` (a ``datasets.Dataset``) to a long-tailed class distribution.

    ``imbalance_ratio=None`` returns ``dataset`` unchanged: data that is already long-tailed (or
    that should stay as it is) is used as is. Otherwise class ``c`` (in label order) keeps
    ``long_tailed_counts(n_min_available, K, imbalance_ratio)[c]`` randomly chosen samples,
    where ``n_min_available`` is the size of the smallest class, so every class can supply its
    count; ``imbalance_ratio=1`` therefore gives a balanced subset of ``n_min_available`` per class.

    Args:
        dataset: A ``datasets.Dataset`` with an integer label column.
        imbalance_ratio: Largest / smallest class size of the result (>= 1), or ``None``.
        label_column: The label column.
        seed: Seed of the random choice of the kept samples, an integer in ``[0, 2**63 - 2]`` (as
            :func:`~hf_contrast.data.sampling.balanced_subset`'s).

    Returns:
        ``dataset`` (``imbalance_ratio=None``) or the subset, in the original row order, with a loader note the
        model card prints beside the training data (:func:`~hf_contrast.data.naming.add_loader_note`: "made
        long-tailed: 1,636 of the split's 4,000 rows, class sizes 400 down to 40 (`imbalance_ratio` 10, seed 0)").

    Raises:
        InputTypeError: if ``dataset`` is not a ``datasets.Dataset``.
        InputError: (a ``ValueError``) if ``label_column`` is missing or not integer, ``imbalance_ratio`` is not a
            finite number >= 1, ``seed`` is out of range, the dataset holds fewer than two classes or a class with
            a single row.
    """
    if imbalance_ratio is None:
        return dataset
    ratio = check_number("imbalance_ratio", imbalance_ratio)
    if not ratio >= 1.0:
        raise InputError(f"`imbalance_ratio` must be >= 1 (max count / min count) or None, got {imbalance_ratio}.")
    seed = check_int("seed", seed, 0, maximum=MAX_SEED)
    columns = getattr(dataset, "column_names", None)
    if not isinstance(columns, list) or not hasattr(dataset, "select"):
        raise InputTypeError(
            f"`dataset` must be a datasets.Dataset (one split, e.g. data['train']), got {type(dataset).__name__}."
        )
    if label_column not in columns:
        raise InputError(f"`label_column` {label_column!r} is not a column of the dataset ({columns}).")
    labels = np.asarray(dataset[label_column])
    if labels.ndim != 1 or labels.dtype.kind not in "iu":
        raise InputError(
            f"`label_column`={label_column!r} must hold integer classes, got {labels.dtype} values; encode them "
            "(`dataset.class_encode_column(label_column)`)."
        )
    classes = np.unique(labels)
    if len(classes) < 2:
        raise InputError(
            f"`dataset` holds {len(classes)} class(es) in `label_column`={label_column!r}; "
            "a long tail needs at least 2."
        )
    available = [int((labels == c).sum()) for c in classes]
    if min(available) < 2:
        rare = [int(c) for c, n in zip(classes, available) if n < 2]
        raise InputError(
            f"`dataset` has classes {rare} with a single row in `label_column`={label_column!r}; every class keeps at "
            "least 2 rows (a positive pair), so drop those classes first or pass `imbalance_ratio=None`."
        )
    counts = long_tailed_counts(min(available), len(classes), imbalance_ratio)
    rng = np.random.default_rng(seed)
    keep = np.concatenate(
        [rng.choice(np.flatnonzero(labels == c), size=n, replace=False) for c, n in zip(classes, counts)]
    )
    subset = dataset.select(np.sort(keep).tolist())
    return add_loader_note(  # said in the model card, beside the training data
        subset,
        f"made long-tailed: {len(keep):,} of the split's {len(dataset):,} rows, class sizes {max(counts):,} down to "
        f"{min(counts):,} (`imbalance_ratio` {ratio:g}, seed {seed})",
    )
