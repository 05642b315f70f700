"""Geometry metrics of an embedding space (``docs/methods.md`` §6–§7). No gradients, float64 math.

Every function accepts torch tensors or numpy arrays, works on the device of its inputs, and
returns Python floats (or a small ``NamedTuple``).
"""

from __future__ import annotations

import math
import warnings
from typing import NamedTuple

import torch
from torch import Tensor

from hf_contrast.errors import InputError

from ..losses.align_uniform import alignment_loss, uniformity_loss
from ..tensor_checks import check_bool, l2_normalize
from .inputs import as_embeddings, as_labels, as_pair

__all__ = [
    "WahbaResult",
    "wahba_error",
    "relative_rotational_equivariance",
    "alignment",
    "uniformity",
    "class_orthogonality",
    "effective_rank",
    "mean_cosine",
]


class WahbaResult(NamedTuple):
    """Solution of Wahba's problem ``min_{R ∈ SO(D)} ‖F Rᵀ − F_a‖_F``.

    Attributes:
        error: The optimal value ``W``.
        error_per_sample: ``W / √n``, comparable across sample sizes.
        rotation: The optimal rotation ``R*``. Shape: ``(D, D)``, float64, ``det(R*) = +1``.
    """

    error: float
    error_per_sample: float
    rotation: Tensor


def _squared_distances(z: Tensor) -> Tensor:
    """Pairwise squared Euclidean distances from the Gram matrix, ``(n, n)``, clamped at 0."""
    sq = (z * z).sum(dim=1)
    return (sq[:, None] + sq[None, :] - 2.0 * (z @ z.T)).clamp_min(0.0)


@torch.no_grad()
def wahba_error(f: object, f_a: object, normalize: bool = False) -> WahbaResult:
    """Optimal value of Wahba's problem: how well one rotation maps ``f(x_i)`` to ``f(a(x_i))``.

    CARE (https://arxiv.org/abs/2306.13924), Section 4 and Figure 2c: with ``M = F_aᵀ F = U Σ Vᵀ``,
    ``R* = U diag(1, …, 1, det(U) det(V)) Vᵀ ∈ SO(D)`` and ``W = ‖F R*ᵀ − F_a‖_F``. ``W = 0``
    exactly when a single rotation maps every ``f(x_i)`` to ``f(a(x_i))``. All rows must come from
    the *same* sampled augmentation ``a``.

    Args:
        f: Embeddings of the original inputs, row ``i`` is ``f(x_i)``. Shape: ``(n, D)``.
        f_a: Embeddings of the augmented inputs, row ``i`` is ``f(a(x_i))``. Shape: ``(n, D)``.
        normalize: L2-normalise the rows first (CARE's ``f`` maps to the unit sphere).

    Returns:
        A :class:`WahbaResult` ``(error, error_per_sample, rotation)``.

    Raises:
        ValueError: if the inputs are not finite float arrays of the same shape ``(n, D)``.

    Example:
        >>> f = torch.randn(8, 3)
        >>> q = torch.tensor([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
        >>> round(wahba_error(f, f @ q.T).error, 6)
        0.0
    """
    F, Fa = as_pair("f", f, "f_a", f_a)
    if check_bool("normalize", normalize):
        F, Fa = l2_normalize(F), l2_normalize(Fa)
    u, _, vh = torch.linalg.svd(Fa.T @ F)
    d = torch.sign(torch.linalg.det(u) * torch.linalg.det(vh))
    signs = torch.ones(F.shape[1], dtype=F.dtype, device=F.device)
    signs[-1] = d
    rotation = (u * signs) @ vh
    error = float(torch.linalg.matrix_norm(F @ rotation.T - Fa))
    return WahbaResult(error=error, error_per_sample=error / math.sqrt(F.shape[0]), rotation=rotation)


@torch.no_grad()
def relative_rotational_equivariance(f: object, f_a: object, normalize: bool = False) -> float:
    """Relative rotational equivariance ``γ_f`` (lower = more non-trivially equivariant).

    CARE (https://arxiv.org/abs/2306.13924), Appendix F.2.1, eq. 2 and Figure 5: the mean over
    ordered pairs ``i ≠ j`` of

    ``(‖f(a x_j) − f(a x_i)‖² − ‖f(x_j) − f(x_i)‖²)² / (‖f(a x_j) − f(x_j)‖² + ‖f(a x_i) − f(x_i)‖²)²``.

    The numerator is zero for any isometry (rotation), the denominator measures how far ``f`` is
    from invariance. Pairs whose denominator is exactly zero (both points exactly invariant,
    which makes the numerator zero too: ``0/0``) are excluded from the mean; if every pair is
    excluded (``f`` exactly invariant on the sample) ``γ_f`` is undefined and ``nan`` is returned
    with a warning.

    Args:
        f: Embeddings of the original inputs. Shape: ``(n, D)``, ``n >= 2``.
        f_a: Embeddings of the inputs under one sampled augmentation. Shape: ``(n, D)``.
        normalize: L2-normalise the rows first.

    Returns:
        ``γ_f`` as a float (``nan`` if undefined, see above).

    Raises:
        ValueError: on shape mismatch, non-finite values or ``n < 2``.

    Example:
        >>> f = torch.randn(8, 3, dtype=torch.float64)
        >>> f_a = f @ torch.linalg.qr(torch.randn(3, 3, dtype=torch.float64)).Q.T  # an isometry
        >>> relative_rotational_equivariance(f, f_a) < 1e-20
        True
    """
    F, Fa = as_pair("f", f, "f_a", f_a, min_rows=2)
    if check_bool("normalize", normalize):
        F, Fa = l2_normalize(F), l2_normalize(Fa)
    numerator = (_squared_distances(Fa) - _squared_distances(F)).square()
    drift = (Fa - F).square().sum(dim=1)
    denominator = (drift[:, None] + drift[None, :]).square()
    n = F.shape[0]
    valid = (denominator > 0) & ~torch.eye(n, dtype=torch.bool, device=F.device)
    count = int(valid.sum())
    if count == 0:
        warnings.warn(
            "relative_rotational_equivariance: `f_a` equals `f` on every sample (exact invariance), "
            "so every pair is 0/0 and γ_f is undefined; returning nan.",
            stacklevel=3,
        )
        return float("nan")
    ratio = numerator[valid] / denominator[valid]
    return float(ratio.sum() / count)


@torch.no_grad()
def alignment(x: object, y: object, alpha: float = 2.0, normalize: bool = True) -> float:
    """Alignment ``mean_i ‖x_i − y_i‖^α`` of positive pairs (lower = better aligned).

    Wang & Isola 2020 (https://arxiv.org/abs/2005.10242), ``docs/methods.md`` §6: the value of
    :func:`hf_contrast.losses.alignment_loss` in float64, without gradient.

    Args:
        x: Embeddings of the first views. Shape: ``(n, D)``.
        y: Embeddings of the positives, row ``i`` pairs with ``x[i]``. Shape: ``(n, D)``.
        alpha: Exponent ``α > 0``.
        normalize: L2-normalise the rows first (the paper's setting).

    Returns:
        The alignment as a float; in ``[0, 4]`` for ``α = 2`` and normalised inputs.

    Raises:
        ValueError: on shape mismatch, non-finite values or ``alpha <= 0``.
    """
    a, b = as_pair("x", x, "y", y)
    value = float(alignment_loss(a, b, alpha=alpha, normalize=normalize))
    if not math.isfinite(value):
        raise InputError(
            f"the alignment of `x`, `y` with `alpha`={alpha} is beyond the float range (distances ** alpha "
            "overflow): use the paper's alpha = 2 (any alpha of order 1 works)."
        )
    return value


@torch.no_grad()
def uniformity(x: object, t: float = 2.0, normalize: bool = True) -> float:
    """Uniformity ``log mean_{i<j} exp(−t ‖x_i − x_j‖²)`` (lower = more uniform).

    Wang & Isola 2020 (https://arxiv.org/abs/2005.10242), ``docs/methods.md`` §6: the value of
    :func:`hf_contrast.losses.uniformity_loss` (local pairs) in float64, without gradient.

    Args:
        x: Embeddings. Shape: ``(n, D)``, ``n >= 2``.
        t: Kernel scale ``t > 0``.
        normalize: L2-normalise the rows first (the paper's setting).

    Returns:
        The uniformity as a float; ``>= -4t`` for normalised inputs.

    Raises:
        ValueError: on non-finite values, ``n < 2`` or ``t <= 0``.
    """
    z = as_embeddings("x", x, min_rows=2)
    return float(uniformity_loss(z, t=t, normalize=normalize))


@torch.no_grad()
def class_orthogonality(z: object, labels: object, normalize: bool = False) -> float:
    """Mean ``|cos|`` between the means of distinct classes (0 = orthogonal, 1 = collinear).

    The class-structure target of SimO (https://arxiv.org/abs/2410.05233) and OCL/LOCAL.
    A class mean of norm zero has cosine 0 with every other mean (safe normalisation).

    Args:
        z: Embeddings. Shape: ``(n, D)``.
        labels: Integer class of each row. Shape: ``(n,)``; at least two distinct classes.
        normalize: L2-normalise the rows before averaging them per class.

    Returns:
        The mean over the ``C(C−1)`` ordered pairs of distinct classes of ``|cos(μ_c, μ_c')|``.

    Raises:
        ValueError: on bad shapes/dtypes or fewer than two distinct classes.
    """
    z = as_embeddings("z", z)
    y = as_labels("labels", labels, z.shape[0], z.device)
    if check_bool("normalize", normalize):
        z = l2_normalize(z)
    classes, inverse = torch.unique(y, return_inverse=True)
    c = classes.numel()
    if c < 2:
        raise InputError(f"`labels` must contain at least two distinct classes, got {classes.tolist()}.")
    sums = torch.zeros(c, z.shape[1], dtype=z.dtype, device=z.device).index_add_(0, inverse, z)
    counts = torch.bincount(inverse, minlength=c).to(z.dtype)
    means = l2_normalize(sums / counts[:, None])
    cos = (means @ means.T).abs()
    off_diagonal = ~torch.eye(c, dtype=torch.bool, device=z.device)
    return float(cos[off_diagonal].mean())


@torch.no_grad()
def effective_rank(z: object) -> float:
    """Effective rank ``exp(H(p))`` with ``p_k = σ_k / Σ σ`` the normalised singular values.

    Roy & Vetterli 2007; RankMe (https://arxiv.org/abs/2210.02885). Equals ``r`` when ``z`` has
    ``r`` equal non-zero singular values (``D`` for an isotropic matrix, 1 for rank one). The rows
    are not centred. An all-zero matrix has effective rank 0.

    Args:
        z: Embeddings. Shape: ``(n, D)``.

    Returns:
        The effective rank, a float in ``[0, min(n, D)]``.

    Raises:
        ValueError: if ``z`` is not a finite float array of shape ``(n, D)``.
    """
    s = torch.linalg.svdvals(as_embeddings("z", z))
    total = s.sum()
    if float(total) == 0.0:
        return 0.0
    p = s / total
    return float(torch.exp(-torch.special.xlogy(p, p).sum()))


@torch.no_grad()
def mean_cosine(z: object) -> float:
    """Mean pairwise cosine similarity ``mean_{i≠j} cos(z_i, z_j)`` (1 = every row points the same way).

    Computed in ``O(nD)`` as ``(‖Σ u_i‖² − Σ ‖u_i‖²) / (n(n − 1))`` with ``u_i = z_i / ‖z_i‖`` (an
    all-zero row has ``u_i = 0``, cosine 0 with every row). A value near 1 means the representation
    has collapsed to one direction (see :class:`hf_contrast.evaluation.EmbeddingMetrics`).

    Args:
        z: Embeddings. Shape: ``(n, D)``, ``n >= 2``.

    Returns:
        The mean cosine over the ``n(n − 1)`` ordered pairs of distinct rows, in ``[-1/(n−1), 1]``.

    Raises:
        ValueError: if ``z`` is not a finite float array of shape ``(n, D)`` with ``n >= 2``.

    Example:
        >>> mean_cosine(torch.tensor([[1.0, 0.0], [2.0, 0.0], [0.0, 3.0]]))
        0.3333333333333333
    """
    u = l2_normalize(as_embeddings("z", z, min_rows=2))
    n = u.shape[0]
    total = u.sum(dim=0)
    return float(((total * total).sum() - (u * u).sum()) / (n * (n - 1)))
