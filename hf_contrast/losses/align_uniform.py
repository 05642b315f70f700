"""Alignment and uniformity on the hypersphere (Wang & Isola, 2020; docs/methods.md §6).

Paper: Wang, Isola, "Understanding Contrastive Representation Learning through Alignment and
Uniformity on the Hypersphere", ICML 2020, https://arxiv.org/abs/2005.10242.

``L_align(x, y) = mean_i ||x_i - y_i||^alpha`` pulls positive pairs together;
``L_unif(x) = log mean_{i<j} exp(-t ||x_i - x_j||²)`` spreads the embeddings over the sphere.
The training form is ``align_weight * L_align(z1, z2) + uniform_weight * (L_unif(z1) + L_unif(z2)) / 2``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from hf_contrast.errors import InputError

from ..distributed import gather_equal, gather_with_offset
from ..tensor_checks import (
    check_bool,
    check_embeddings,
    check_finite_weighted,
    check_non_negative,
    check_positive,
    check_same_shape,
    compute_dtype,
    float32_math,
    l2_normalize,
    value_checks_enabled,
)
from .hyperparameters import HyperparameterModule, Hyperparameters, hyperparameter
from .tiled import (
    check_tile_size,
    checked_tile_size,
    resolve_tile_size,
    tiled_symmetric_uniformity_logsumexp,
    tiled_uniformity_logsumexp,
)

__all__ = ["alignment_loss", "uniformity_loss", "AlignUniformLoss"]


def alignment_loss(x: Tensor, y: Tensor, alpha: float = 2, normalize: bool = True) -> Tensor:
    """Alignment loss ``mean_i ||x_i - y_i||^alpha`` of positive pairs (docs/methods.md §6).

    Computed as ``(||x_i - y_i||²)^(alpha/2)``; an identical pair (``x_i = y_i``) has gradient 0
    for every ``alpha`` (its minimum: the derivative for ``alpha > 1``, a subgradient for
    ``alpha <= 1``), never NaN. float32 (float64 stays float64) under autocast.

    Paper: https://arxiv.org/abs/2005.10242

    Args:
        x: Embeddings of the first view. Shape: ``(B, D)``.
        y: Embeddings of the second view, row ``i`` the positive of ``x[i]``. Shape: ``(B, D)``.
        alpha: Exponent α > 0 (paper default 2).
        normalize: L2-normalise the rows first (the paper's setting: embeddings on the sphere).

    Returns:
        The scalar loss.

    Raises:
        ValueError: if ``x``/``y`` are not finite floating ``(B, D)`` tensors of equal shape, or
            ``alpha <= 0``.

    >>> alignment_loss(torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0]]))
    tensor(2.)
    """
    return _alignment_loss(x, y, alpha, normalize, names=("x", "y"))


def _alignment_loss(x: Tensor, y: Tensor, alpha: float, normalize: bool, *, names: tuple[str, str]) -> Tensor:
    """:func:`alignment_loss` whose errors name ``x``, ``y`` as ``names`` (the module's ``z1``, ``z2``)."""
    name1, name2 = names
    check_embeddings(name1, x)
    check_embeddings(name2, y)
    check_same_shape(name1, x, name2, y)
    alpha = check_positive("alpha", alpha)
    normalize = check_bool("normalize", normalize)
    loss = _alignment(x, y, alpha, normalize)
    if value_checks_enabled(loss) and not bool(torch.isfinite(loss)):
        raise InputError(
            f"the alignment loss of finite `{name1}`, `{name2}` with `alpha`={alpha:g} is beyond the range of "
            f"{loss.dtype} (distances ** alpha overflow): use the paper's alpha = 2 (any alpha of order 1 works)"
            + ("." if normalize else ", or normalised (or smaller) embeddings.")
        )
    return loss


def _alignment(x: Tensor, y: Tensor, alpha: float, normalize: bool) -> Tensor:
    with float32_math(x.device.type):
        dtype = compute_dtype(x, y)
        a, b = x.to(dtype), y.to(dtype)
        if normalize:
            a, b = l2_normalize(a), l2_normalize(b)
        sq_dist = (a - b).pow(2).sum(dim=1)
        if alpha == 2:
            return sq_dist.mean()
        # d/dd ||d||^α = α ||d||^(α-2) d is 0/0 at d = 0 for α < 2: the gradient there is 0 (a minimum of
        # the term; the derivative for 1 < α < 2, a subgradient for α <= 1). `where` on both sides keeps
        # the NaN of pow's backward at 0 out of the graph.
        positive = sq_dist > 0
        safe = torch.where(positive, sq_dist, torch.ones_like(sq_dist))
        return torch.where(positive, safe.pow(alpha / 2), torch.zeros_like(sq_dist)).mean()


def uniformity_loss(
    x: Tensor, t: float = 2, normalize: bool = True, gather_distributed: bool = False, tile_size: int | None = None
) -> Tensor:
    """Uniformity loss ``log mean_{i<j} exp(-t ||x_i - x_j||²)`` (docs/methods.md §6).

    Squared distances come from the Gram matrix, ``||x_i||² + ||x_j||² - 2 x_i·x_j`` clamped at
    0 (no ``(B, B, D)`` difference tensor), and the log-mean-exp is a stabilised ``logsumexp``, all
    in float32 (float64 stays float64) under autocast. Memory: ``O(B²)`` dense, ``O(B·D + tile²)``
    tiled (per-row online log-sum-exp over blocks, recomputed in the backward:
    :mod:`hf_contrast.losses.tiled`), same value and gradients. Equals
    ``torch.pdist(x).pow(2).mul(-t).exp().mean().log()`` (the authors' code) on normalised ``x``.

    With ``gather_distributed=True`` the local rows are compared with the rows gathered from
    every process, (local sample, any other global sample), and the processes' sums over those
    pairs are gathered too: every process gets the log-mean over all ``B_global × (B_global - 1)``
    ordered pairs, the single-process value on the global batch, and the DDP-averaged gradients
    equal that process's (docs/methods.md §8).

    Paper: https://arxiv.org/abs/2005.10242

    Args:
        x: Embeddings. Shape: ``(B, D)``; ``B >= 2`` (or ``>= 2`` globally when gathering).
        t: Temperature-like scale t > 0 (paper default 2).
        normalize: L2-normalise the rows first (the paper's setting).
        gather_distributed: Compare local rows with the rows of all processes (see above).
        tile_size: ``None`` (default): tiled (1024-row blocks on CPU, 4096 on accelerators)
            when ``B · B_global > 8192²``, dense below; ``0``: always dense; ``k > 0``: always tiled
            with ``k × k`` blocks.

    Returns:
        The scalar loss, ``<= 0`` (``0`` for a collapsed batch; lower is more uniform).

    Raises:
        ValueError: if ``x`` is not a finite floating ``(B, D)`` tensor, there are fewer than 2
            rows (no pair), ``t <= 0``, or ``tile_size`` is not ``None`` or an integer ``>= 0``.

    >>> uniformity_loss(torch.tensor([[1.0, 0.0], [-1.0, 0.0]]))  # antipodal: log exp(-2·4)
    tensor(-8.)
    """
    return _uniformity_loss(x, t, normalize, gather_distributed, tile_size, name="x")


def _uniformity_loss(
    x: Tensor, t: float, normalize: bool, gather_distributed: bool, tile_size: int | None, *, name: str
) -> Tensor:
    """:func:`uniformity_loss` whose errors name ``x`` as ``name`` (the module's ``z1`` or ``z2``)."""
    check_embeddings(name, x)
    t = check_positive("t", t)
    tile_size = check_tile_size(tile_size)
    normalize = check_bool("normalize", normalize)
    gather_distributed = check_bool("gather_distributed", gather_distributed)
    if not gather_distributed and x.shape[0] < 2:
        raise InputError(
            f"`{name}` must have at least 2 rows (uniformity averages over pairs), got shape {tuple(x.shape)}."
        )
    loss = _uniformity(x, t, normalize, gather_distributed, tile_size, name)
    if value_checks_enabled(loss) and not bool(torch.isfinite(loss)):
        raise InputError(
            f"the uniformity loss of finite `{name}` with `t`={t:g} is beyond the range of {loss.dtype} (t times the "
            "squared distances overflows): use the paper's t = 2 (any t of order 1 works)"
            + ("." if normalize else ", or normalised (or smaller) embeddings.")
        )
    return loss


def _uniformity(
    x: Tensor, t: float, normalize: bool, gather_distributed: bool, tile_size: int | None, name: str
) -> Tensor:
    with float32_math(x.device.type):
        a = x.to(compute_dtype(x))
        if normalize:
            a = l2_normalize(a)
        candidates, offset = gather_with_offset(a) if gather_distributed else (a, 0)
        n_local, n_all = a.shape[0], candidates.shape[0]
        if n_all < 2:
            raise InputError(f"`{name}` must have at least 2 rows over all processes, got {n_all}.")
        sq_local = a.pow(2).sum(dim=1)
        sq_all = candidates.pow(2).sum(dim=1)
        tile = resolve_tile_size(tile_size, n_local, n_all, a.device.type)
        if tile:
            if candidates is a:  # one process: symmetric distances, each off-diagonal block once
                row_lse = tiled_symmetric_uniformity_logsumexp(a, sq_local, t, tile)
            else:  # local rows × gathered columns: the general form
                row_lse = tiled_uniformity_logsumexp(a, candidates, sq_local, sq_all, offset, t, tile)
            lse = torch.logsumexp(row_lse, dim=0)
        else:
            sq_norms = sq_local[:, None] + sq_all[None, :]
            sq_dist = torch.addmm(sq_norms, a, candidates.T, alpha=-2.0).clamp_min(0.0)
            rows = torch.arange(n_local, device=a.device)
            is_self = torch.zeros(n_local, n_all, dtype=torch.bool, device=a.device)
            is_self[rows, rows + offset] = True
            logits = (-t * sq_dist).masked_fill(is_self, -math.inf)
            lse = torch.logsumexp(logits.flatten(), dim=0)
        if candidates is a:
            return lse - math.log(n_local * (n_all - 1))
        # every process's (local row, other global row) sums: the global batch's log-mean, the same on every process
        return torch.logsumexp(gather_equal(lse.reshape(1)), dim=0) - math.log(n_all * (n_all - 1))


@dataclass
class AlignUniformHyperparameters(Hyperparameters):
    """:class:`AlignUniformLoss`'s hyperparameters, declared once (see :mod:`.hyperparameters`)."""

    align_weight: float = hyperparameter(
        1.0, check_non_negative, help="Align/uniform: weight >= 0 of the alignment term."
    )
    uniform_weight: float = hyperparameter(
        1.0, check_non_negative, help="Align/uniform: weight >= 0 of the uniformity term."
    )
    alpha: float = hyperparameter(2.0, check_positive)
    t: float = hyperparameter(2.0, check_positive)
    normalize: bool = hyperparameter(True, check_bool)
    gather_distributed: bool = hyperparameter(False, check_bool)
    tile_size: int | None = hyperparameter(None, checked_tile_size)


class AlignUniformLoss(HyperparameterModule):
    """Weighted alignment + uniformity: ``{"align", "uniform", "loss"}`` (docs/methods.md §6).

    ``align = align_weight * L_align(z1, z2)``,
    ``uniform = uniform_weight * (L_unif(z1) + L_unif(z2)) / 2``, ``loss = align + uniform``.

    Paper: https://arxiv.org/abs/2005.10242

    Args:
        align_weight: Weight ``w_a >= 0`` of the alignment term.
        uniform_weight: Weight ``w_u >= 0`` of the uniformity term.
        alpha: Alignment exponent α > 0.
        t: Uniformity scale t > 0.
        normalize: L2-normalise the embeddings in both terms.
        gather_distributed: Uniformity against the rows of all processes
            (see :func:`uniformity_loss`); alignment is per pair and always local.
        tile_size: Uniformity's ``None`` (automatic), ``0`` (dense) or tile edge
            (see :func:`uniformity_loss`).

    Shape:
        ``z1, z2``: ``(B, D)``, row ``i`` of both the two views of sample ``i``.

    >>> out = AlignUniformLoss()(torch.randn(8, 4), torch.randn(8, 4))
    >>> sorted(out)
    ['align', 'loss', 'uniform']
    """

    citation = """@inproceedings{wang2020understanding,
  title     = {Understanding Contrastive Representation Learning through Alignment and Uniformity on the Hypersphere},
  author    = {Wang, Tongzhou and Isola, Phillip},
  booktitle = {International Conference on Machine Learning (ICML)},
  series    = {Proceedings of Machine Learning Research},
  volume    = {119},
  pages     = {9929--9939},
  year      = {2020},
  url       = {https://arxiv.org/abs/2005.10242}
}"""
    hyperparameters_class = AlignUniformHyperparameters

    def forward(self, z1: Tensor, z2: Tensor) -> dict[str, Tensor]:
        align = self.align_weight * _alignment_loss(z1, z2, self.alpha, self.normalize, names=("z1", "z2"))
        args = (self.t, self.normalize, self.gather_distributed, self.tile_size)
        u1 = _uniformity_loss(z1, *args, name="z1")
        u2 = _uniformity_loss(z2, *args, name="z2")
        uniform = self.uniform_weight * (u1 + u2) / 2
        check_finite_weighted(
            align,
            "the alignment term",
            f"`align_weight`={self.align_weight:g}",
            "use weights of order 1 (the paper's: 1)",
        )
        check_finite_weighted(
            uniform,
            "the uniformity term",
            f"`uniform_weight`={self.uniform_weight:g}",
            "use weights of order 1 (the paper's: 1)",
        )
        return {"align": align, "uniform": uniform, "loss": align + uniform}
