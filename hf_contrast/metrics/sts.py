"""STS-style evaluation (``docs/methods.md`` §7): Spearman correlation of cosine similarities."""

from __future__ import annotations

import warnings

import torch
from torch import Tensor

from hf_contrast.errors import InputError

from ..tensor_checks import l2_normalize
from .inputs import as_embeddings, as_pair

__all__ = ["ConstantInputWarning", "rankdata", "spearman_correlation", "sts_spearman"]


class ConstantInputWarning(RuntimeWarning):
    """A correlation of a constant input is undefined: the metric is ``nan`` (as ``scipy.stats.spearmanr``,
    whose ``ConstantInputWarning`` this mirrors, and so sentence-transformers' STS evaluator)."""


def rankdata(x: Tensor) -> Tensor:
    """Ranks ``1..n`` of a 1-D tensor, ties getting their average rank (``scipy.stats.rankdata``).

    Args:
        x: Values. Shape: ``(n,)``.

    Returns:
        float64 ranks. Shape: ``(n,)``.
    """
    sorted_x, order = torch.sort(x, stable=True)
    _, group, counts = torch.unique_consecutive(sorted_x, return_inverse=True, return_counts=True)
    ends = torch.cumsum(counts, dim=0).to(torch.float64)  # 1-based rank of each group's last member
    average = ends - (counts.to(torch.float64) - 1.0) / 2.0
    ranks = torch.empty_like(average[group])
    ranks[order] = average[group]
    return ranks


@torch.no_grad()
def spearman_correlation(x: object, y: object) -> float:
    """Spearman rank correlation: the Pearson correlation of the average ranks of ``x`` and ``y``.

    Args:
        x: Values. Shape: ``(n,)``, ``n >= 2``.
        y: Values. Shape: ``(n,)``.

    Returns:
        The correlation in ``[-1, 1]``; ``nan`` with a :class:`ConstantInputWarning` when ``x`` or ``y`` is
        constant (as ``scipy.stats.spearmanr``).

    Raises:
        ValueError: on shapes other than two equal ``(n,)`` with ``n >= 2`` or non-finite values.
    """
    a = as_embeddings("x", x, min_rows=2, ndim=1, shape_doc="(n,)")
    b = as_embeddings("y", y, min_rows=2, ndim=1, shape_doc="(n,)")
    if a.shape != b.shape:
        raise InputError(f"`x` and `y` must have the same shape, got {tuple(a.shape)} and {tuple(b.shape)}.")
    return _spearman(a, b.to(a.device), "`x`", "`y`")


def _spearman(a: Tensor, b: Tensor, what_a: str, what_b: str) -> float:
    """Spearman's ρ of checked ``(n,)`` tensors.

    ``nan`` with a :class:`ConstantInputWarning` naming the constant one.
    """
    ra, rb = rankdata(a), rankdata(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    constant = [what for what, r in ((what_a, ra), (what_b, rb)) if not bool(r.abs().sum() > 0)]
    if constant:
        warnings.warn(
            f"constant input ({' and '.join(constant)}): the Spearman correlation is not defined and is returned as "
            "nan (as scipy.stats.spearmanr).",
            ConstantInputWarning,
            stacklevel=4,  # _spearman, the metric, torch.no_grad's wrapper, the caller
        )
        return float("nan")
    denominator = torch.sqrt((ra * ra).sum() * (rb * rb).sum())
    return float((ra * rb).sum() / denominator)


@torch.no_grad()
def sts_spearman(a: object, b: object, scores: object) -> float:
    """STS Spearman: rank correlation between ``cos(a_i, b_i)`` and gold similarity ``scores``.

    The standard STS-B / SentEval protocol (reported ×100 in papers; this returns ``[-1, 1]``).

    Args:
        a: Embeddings of the first sentences. Shape: ``(n, D)``, ``n >= 2``.
        b: Embeddings of the second sentences. Shape: ``(n, D)``.
        scores: Gold similarity scores. Shape: ``(n,)``.

    Returns:
        Spearman's ρ; ``nan`` with a :class:`ConstantInputWarning` if all cosines are equal (e.g. ``b`` all
        zeros: a zero embedding's cosine is 0) or all scores are equal, as ``scipy.stats.spearmanr`` and
        sentence-transformers' ``EmbeddingSimilarityEvaluator`` (which
        :class:`~hf_contrast.evaluation.STSEvaluator` runs).

    Raises:
        ValueError: on shape mismatch, non-finite values or ``n < 2``.

    Example:
        >>> a = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
        >>> b = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
        >>> sts_spearman(a, b, torch.tensor([5.0, 2.5, 0.0]))
        1.0
    """
    x, y = as_pair("a", a, "b", b, min_rows=2)
    gold = as_embeddings("scores", scores, ndim=1, shape_doc=f"({x.shape[0]},)")
    if gold.shape[0] != x.shape[0]:
        raise InputError(f"`scores` must have shape ({x.shape[0]},) to match `a` and `b`, got {tuple(gold.shape)}.")
    cos = (l2_normalize(x) * l2_normalize(y)).sum(dim=1)
    return _spearman(cos, gold.to(cos.device), "the cosines of `a` and `b`", "`scores`")
