"""Seeded, class-balanced row selection: what the metrics, probes and plots sample from a test split.

Taking "the first rows" of a split sorted by class (an image folder) gives one class; these
helpers take every class in turn instead.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch
from torch import Tensor

from hf_contrast.errors import InputError

from ..tensor_checks import MAX_SEED, check_int, check_positive, check_unit_interval

__all__ = ["balanced_subset", "balanced_split", "hold_out", "sample_rows", "take_subset"]

logger = logging.getLogger(__name__)


def _labels(labels: object) -> Tensor:
    if isinstance(labels, np.ndarray):
        labels = torch.from_numpy(labels)
    elif isinstance(labels, (list, tuple)):
        try:
            labels = torch.tensor(labels)
        except (TypeError, ValueError, RuntimeError, OverflowError):  # None, strings, ragged or huge values
            raise InputError(
                f"`labels` must be integer classes, one per row, got a {type(labels).__name__} holding "
                f"{sorted({type(v).__name__ for v in labels})}; map class names to integers first."
            ) from None
    if (
        not isinstance(labels, Tensor)
        or labels.ndim != 1
        or labels.dtype.is_floating_point
        or labels.dtype == torch.bool
    ):
        raise InputError(
            f"`labels` must be a 1-D integer tensor/array of shape (N,), got "
            f"{getattr(labels, 'dtype', type(labels).__name__)} of shape {tuple(getattr(labels, 'shape', ()))}."
        )
    if labels.numel() == 0:
        raise InputError("`labels` is empty: there is nothing to sample from.")
    return labels.detach().cpu().long()


def _class_ranks(labels: Tensor, seed: int) -> tuple[Tensor, Tensor, Tensor]:
    """A seeded shuffle of the rows, each row's rank inside its class, and its class index.

    Returns ``(order, rank, klass)``, all ``(N,)``: row ``order[i]`` is the ``rank[i]``-th row of
    class ``klass[i]`` in the shuffled order.
    """
    generator = torch.Generator().manual_seed(int(seed))
    order = torch.randperm(labels.numel(), generator=generator)
    _, klass = torch.unique(labels[order], return_inverse=True)
    by_class = torch.sort(klass, stable=True)
    counts = torch.bincount(klass)
    starts = torch.cumsum(counts, 0) - counts
    rank = torch.empty_like(klass)
    rank[by_class.indices] = torch.arange(klass.numel()) - starts[by_class.values]
    return order, rank, klass


def balanced_subset(labels: object, n: int, seed: int = 0) -> Tensor:
    """Indices of ``n`` rows drawn class by class (round robin), seeded.

    Every class gives ``⌊n / C⌋`` or ``⌈n / C⌉`` rows (which classes give the extra one is drawn
    with the seed); a class with fewer rows gives all it has and the others make up the rest.

    Args:
        labels: Integer class of each row. Shape: ``(N,)``.
        n: Rows to keep, ``1 <= n <= N``.
        seed: Seed of the draw (the same seed gives the same rows).

    Returns:
        Sorted row indices, int64. Shape: ``(n,)``.

    Raises:
        ValueError: on bad labels or ``n`` outside ``[1, N]``.

    Example:
        >>> labels = torch.tensor([0, 0, 0, 0, 0, 0, 1, 1, 1, 1])  # sorted by class
        >>> labels[balanced_subset(labels, 4)].tolist()
        [0, 0, 1, 1]
    """
    y = _labels(labels)
    check_int("n", n, 1, maximum=y.numel(), fix="the number of rows.")
    seed = check_int("seed", seed, 0, maximum=MAX_SEED)
    order, rank, klass = _class_ranks(y, seed)
    generator = torch.Generator().manual_seed(int(seed) + 1)
    priority = torch.randperm(int(klass.max()) + 1, generator=generator)  # who gets the extra rows
    key = rank * (int(klass.max()) + 1) + priority[klass]
    chosen = order[torch.argsort(key)[:n]]
    return torch.sort(chosen).values


def sample_rows(n_rows: int, n: int, seed: int = 0, labels: object | None = None) -> Tensor:
    """Sorted indices of ``n`` of ``n_rows`` rows, seeded: :func:`balanced_subset` of ``labels`` when
    given (shape ``(n_rows,)``), else a uniform draw without replacement. Shape: ``(n,)``, int64."""
    if labels is not None:
        return balanced_subset(labels, n, seed)
    generator = torch.Generator().manual_seed(check_int("seed", seed, 0, maximum=MAX_SEED))
    return torch.sort(torch.randperm(n_rows, generator=generator)[:n]).values


def balanced_split(labels: object, test_fraction: float = 0.25, seed: int = 0) -> tuple[Tensor, Tensor]:
    """A seeded stratified train/test split: ``round(test_fraction · n_c)`` test rows per class ``c``.

    Each class with at least two rows keeps at least one row on each side; a class with a single
    row goes to training.

    Args:
        labels: Integer class of each row. Shape: ``(N,)``.
        test_fraction: Fraction of each class held out, in ``(0, 1)``.
        seed: Seed of the split.

    Returns:
        ``(train_indices, test_indices)``, sorted int64, disjoint, covering every row.

    Raises:
        ValueError: on bad labels or ``test_fraction`` outside ``(0, 1)``.
    """
    y = _labels(labels)
    if isinstance(test_fraction, bool) or not isinstance(test_fraction, (int, float)) or not 0 < test_fraction < 1:
        raise InputError(f"`test_fraction` must be a number in (0, 1), got {test_fraction!r}.")
    order, rank, klass = _class_ranks(y, check_int("seed", seed, 0, maximum=MAX_SEED))
    counts = torch.bincount(klass)
    n_test = torch.round(counts.double() * test_fraction).long()
    n_test = torch.where(counts >= 2, n_test.clamp(1, None).minimum(counts - 1), torch.zeros_like(counts))
    is_test = rank < n_test[klass]
    return torch.sort(order[~is_test]).values, torch.sort(order[is_test]).values


def take_subset(
    dataset: Any, limit: int | None, *, argument: str, seed: int = 0, label_column: str | None = None
) -> Any:
    """At most ``limit`` rows of a ``datasets.Dataset``, said in its model card.

    ``dataset`` itself when ``limit`` is ``None`` or not below its length; else a seeded class-balanced subset
    (with ``label_column``: :func:`balanced_subset` of that column) or a seeded random one
    (``dataset.shuffle(seed).select(range(limit))``), with a loader note the model card prints beside the data
    (:func:`~hf_contrast.data.naming.add_loader_note`): "a class-balanced subset of 2,000 of the split's 10,000 rows
    (`max_train_samples`, seed 0)".

    Args:
        dataset: The split.
        limit: Rows to keep (``None``: all).
        argument: The option that asked for the subset, named in the note and in errors (``max_train_samples``).
        seed: Seed of the draw.
        label_column: Column of the integer classes for a class-balanced subset (``None``: a random one).

    Raises:
        ValueError: ``limit`` is not a positive integer, or bad labels (:func:`balanced_subset`).
    """
    from .naming import add_loader_note

    check_int(argument, limit, 1, allow_none=True)
    if limit is None or limit >= len(dataset):
        return dataset
    rows = len(dataset)
    if label_column is not None:
        subset = dataset.select(balanced_subset(list(dataset[label_column]), limit, seed).tolist())
    else:
        subset = dataset.shuffle(seed=seed).select(range(limit))
    kind = "class-balanced" if label_column is not None else "random"
    return add_loader_note(
        subset, f"a {kind} subset of {limit:,} of the split's {rows:,} rows (`{argument}`, seed {seed})"
    )


def hold_out(
    dataset: Any,
    fraction: float,
    *,
    argument: str,
    seed: int = 0,
    label_column: str | None = None,
    name: str | None = None,
) -> tuple[Any, Any]:
    """``(train, held_out)``: a seeded split of a ``datasets.Dataset`` that has no evaluation split, said at start-up
    and in the model card (a default that shapes every number the run reports).

    Stratified by ``label_column`` (:func:`balanced_split`: ``round(fraction · n_c)`` rows of each class ``c``), else
    a seeded ``fraction`` of the rows. Logged once on this module's logger ("./pets has no test split: 20% of each
    class is held out for evaluation (`test_fraction`, seed 0): 144 training / 36 evaluation rows.") and kept as a
    loader note on each part (:func:`~hf_contrast.data.naming.add_loader_note`), which the card prints beside it.

    Args:
        dataset: The split to divide.
        fraction: The share held out, in ``(0, 1)``.
        argument: The option that set ``fraction``, named in the log and the notes (``test_fraction``).
        seed: Seed of the draw.
        label_column: Column of the integer classes to stratify by (``None``: the rows alike).
        name: The data's name in the log (a folder, a Hub id).

    Raises:
        InputError: ``fraction`` is not in ``(0, 1)`` (named as ``argument``); ``label_column`` is not a column of
            ``dataset``; bad labels or ``seed`` (:func:`balanced_split`).
    """
    from .naming import add_loader_note

    fraction = check_unit_interval(argument, check_positive(argument, fraction), include_one=False)
    if label_column is not None and label_column not in dataset.column_names:
        raise InputError(
            f"`label_column`={label_column!r} is not a column of the dataset (its columns: {dataset.column_names}); "
            "pass one of them, or None to hold out rows without regard to class."
        )
    labels = list(dataset[label_column]) if label_column is not None else [0] * len(dataset)
    train_rows, test_rows = balanced_split(labels, fraction, seed)
    share = f"{fraction:.0%} of {'each class' if label_column is not None else 'the rows'}"
    how = f"`{argument}`, seed {seed}"
    logger.info(
        f"{name or 'The data'} has no test split: {share} is held out for evaluation ({how}): "
        f"{len(train_rows):,} training / {len(test_rows):,} evaluation rows."
    )
    train = add_loader_note(
        dataset.select(train_rows.tolist()), f"{share} held out for evaluation (no test split; {how})"
    )
    held_out = add_loader_note(
        dataset.select(test_rows.tolist()), f"the {share} held out of the training split (no test split; {how})"
    )
    return train, held_out
