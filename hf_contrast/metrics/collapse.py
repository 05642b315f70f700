"""Detect a collapsed representation and say what usually causes it."""

from __future__ import annotations

import warnings

from transformers.utils import logging

import hf_contrast.distributed as distributed

__all__ = ["RepresentationCollapseWarning", "collapse_message", "warn_if_collapsed"]

logger = logging.get_logger(__name__)  # follows the Trainer's log level (hf_contrast.progress)

#: Mean pairwise cosine above which the embeddings are reported as collapsed to one direction.
MAX_MEAN_COSINE = 0.95
#: Effective rank below which the embeddings are reported as collapsed to (almost) a line.
MIN_EFFECTIVE_RANK = 2.0

_CAUSES = (
    "Likely causes: a learning rate too high (or too low to leave the initial collapse), a "
    "temperature too high, too few or too weak views/augmentations (the loss is solved without "
    "separating samples), or BatchNorm layers with tiny per-device batches."
)


class RepresentationCollapseWarning(UserWarning):
    """The evaluated embeddings have collapsed (all alike, or spanning almost a single direction)."""


def collapse_message(mean_cosine: float, effective_rank: float, dim: int) -> str | None:
    """The warning text if ``mean_cosine > 0.95`` or ``effective_rank < 2`` (``dim >= 2``), else ``None``.

    Args:
        mean_cosine: Mean pairwise cosine of the embeddings (:func:`hf_contrast.metrics.mean_cosine`).
        effective_rank: Their effective rank (:func:`hf_contrast.metrics.effective_rank`).
        dim: The embedding size ``D`` (the rank criterion needs ``D >= 2``).
    """
    reasons = []
    if mean_cosine > MAX_MEAN_COSINE:
        reasons.append(f"mean pairwise cosine {mean_cosine:.3f} > {MAX_MEAN_COSINE}")
    if dim >= 2 and effective_rank < MIN_EFFECTIVE_RANK:
        reasons.append(f"effective rank {effective_rank:.2f} < {MIN_EFFECTIVE_RANK:g} (of at most {dim})")
    if not reasons:
        return None
    return f"The representation has collapsed: {' and '.join(reasons)}. {_CAUSES}"


def warn_if_collapsed(mean_cosine: float, effective_rank: float, dim: int) -> bool:
    """Log a warning and raise a :class:`RepresentationCollapseWarning` when collapsed; return whether it was.

    In a distributed run only the main process says it: every process scores the same gathered predictions (the
    Trainer's ``compute_metrics``), and each saying it made the same warning appear once per process.
    """
    message = collapse_message(mean_cosine, effective_rank, dim)
    if message is None:
        return False
    if distributed.rank() != 0:
        return True
    logger.warning(message)
    warnings.warn(message, RepresentationCollapseWarning, stacklevel=3)
    return True
