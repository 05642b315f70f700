"""What is left of a structured batch after bad rows were left out (``on_bad_image="skip"``).

Some methods cut a batch into parts that must be whole: CARE's ``n_splits`` chunks (each shares one
augmentation pair), SimO's ``C`` class groups of equal size (class-major AFCL batches). When the
collator leaves out unreadable rows, the batch it returns must still have that structure, or the loss
cannot cut it. A rule here picks the rows to keep — the largest whole structure of the rows that were
read — and the collator counts the rest in ``dropped_rows`` (reported by the trainers as
``train_dropped_rows`` / ``eval_dropped_rows``); the number of chunks or classes never changes.

A rule applies only to a batch that lost rows: an intact batch (a ragged last batch included) is kept
as it is.
"""

from __future__ import annotations

from collections.abc import Sequence

from hf_contrast.errors import InputError

from ..tensor_checks import check_int

__all__ = ["WholeChunks", "WholeClassGroups", "WholeRows"]


class WholeRows:
    """A rule: which of the ``n`` rows read from a batch that lost rows to keep (row indices, in order)."""

    what: str = "rows"

    def keep(self, n: int, labels: Sequence[int] | None) -> list[int]:
        """The indices (into the ``n`` rows read, in order) to keep.

        Raises:
            ValueError: when no whole structure is left (too many bad images in one batch).
        """
        raise NotImplementedError

    def loss_breaks(self, batch_size: int) -> str | None:
        """Why a batch of ``batch_size`` rows that loses one row keeps no whole structure (``None``: it does)."""
        return None


class WholeChunks(WholeRows):
    """Keep the first ``⌊n / n_splits⌋ · n_splits`` rows: ``n_splits`` whole chunks of ``⌊n / n_splits⌋`` rows.

    Args:
        n_splits: The number of chunks (never changed).
        min_chunk: The fewest rows a chunk may hold (CARE's loss: 2, a pair at least).

    >>> WholeChunks(4).keep(11, None)
    [0, 1, 2, 3, 4, 5, 6, 7]
    """

    what = "whole chunks"

    def __init__(self, n_splits: int, min_chunk: int = 2) -> None:
        self.n_splits = check_int("n_splits", n_splits, 1)
        self.min_chunk = check_int("min_chunk", min_chunk, 1)

    def keep(self, n: int, labels: Sequence[int] | None) -> list[int]:
        size = n // self.n_splits
        if size < self.min_chunk:
            raise InputError(
                f"After leaving out its bad images this batch has {n} readable row(s), fewer than `n_splits`="
                f"{self.n_splits} chunks of {self.min_chunk}+ rows need; too many bad images in one batch. Remove "
                "them (the start-up scan lists them) or use a larger batch."
            )
        return list(range(size * self.n_splits))

    def loss_breaks(self, batch_size: int) -> str | None:
        if (batch_size - 1) // self.n_splits >= self.min_chunk:
            return None
        larger = self.n_splits * (self.min_chunk + 1)  # the smallest batch of whole chunks that can lose a row
        return (
            f"a batch of {batch_size} that loses one keeps {batch_size - 1} rows, fewer than `n_splits`="
            f"{self.n_splits} chunks of {self.min_chunk}+ rows need (a batch of {larger}, {self.min_chunk + 1} rows "
            "per chunk, can lose one)"
        )

    def __repr__(self) -> str:
        return f"WholeChunks(n_splits={self.n_splits}, min_chunk={self.min_chunk})"


class WholeClassGroups(WholeRows):
    """Class-major batches of ``n_classes`` groups: keep ``k' = `` the smallest group's size rows of every group.

    The groups are the runs of equal labels in batch order (the AFCL sampler's class-major layout); the
    first ``k'`` rows of each are kept, so the batch stays ``n_classes × k'``, class-major.

    Args:
        n_classes: The number of class groups (never changed).

    >>> WholeClassGroups(2).keep(5, [3, 3, 3, 1, 1])
    [0, 1, 3, 4]
    """

    what = "equal class groups"

    def __init__(self, n_classes: int) -> None:
        self.n_classes = check_int("n_classes", n_classes, 1)

    def keep(self, n: int, labels: Sequence[int] | None) -> list[int]:
        if labels is None or len(labels) != n:
            raise InputError("Class groups need the batch's labels (`label_column`); the batch has none.")
        groups: list[list[int]] = []
        for index, label in enumerate(labels):
            if groups and labels[groups[-1][0]] == label:
                groups[-1].append(index)
            else:
                groups.append([index])
        if len(groups) != self.n_classes:
            raise InputError(
                f"After leaving out its bad images this batch holds {len(groups)} class group(s), not the "
                f"{self.n_classes} its method needs (every image of a class in the batch was bad). Remove the bad "
                "images (the start-up scan lists them) or use more `samples_per_class`."
            )
        size = min(len(group) for group in groups)
        return [index for group in groups for index in group[:size]]

    def loss_breaks(self, batch_size: int) -> str | None:
        per_class = batch_size // self.n_classes
        if per_class >= 2:
            return None
        return f"a batch of {self.n_classes} class group(s) of {per_class} row(s) that loses one loses a whole class"

    def __repr__(self) -> str:
        return f"WholeClassGroups(n_classes={self.n_classes})"
