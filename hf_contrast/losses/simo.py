"""SimO (similarity–orthogonality) loss and anchor-free contrastive learning (docs/methods.md §5).

Paper: Bouhsine, El Aaroussi, Faysal, Huaxia, "SimO Loss: Anchor-Free Contrastive Loss for
Fine-Grained Supervised Contrastive Learning", 2024, https://arxiv.org/abs/2410.05233.

For one group ``E`` of ``m`` raw embeddings and a soft label ``y`` (1 = similar, 0 = dissimilar),
over the ``P = m(m-1)/2`` unordered pairs::

    Dsum = sum_{i<j} ||e_i - e_j||²,   Osum = sum_{i<j} (e_i · e_j)²
    simo(E, y) = [ y * Dsum / (eps + Osum) + (1 - y) * Osum / (eps + Dsum) ] / P

Both pair sums come from O(m·D) norms and one ``m × m`` Gram matrix, never from a list of pairs:

- ``Dsum = m * sum_i ||e_i - ē||²`` (= ``m Σ||e_i||² - ||Σ e_i||²``, written with centred rows
  so that a tight group does not lose its small distances to cancellation);
- ``Osum = ½ * sum_{i != j} G_ij²`` with ``G = E Eᵀ`` (= ``(||G||_F² - Σ G_ii²) / 2``, with the
  diagonal masked rather than subtracted, so nearly orthogonal groups keep their precision).

AFCL batches are ``C`` classes × ``k`` samples, class-major::

    L_same = Σ_c simo(E[c], 1)          # the k samples of each class: similar
    L_mean = simo(mean_k E, olean)      # the C class means: dissimilar
    L_diff = Σ_j simo(E[:, j], olean)   # the j-th sample of every class: dissimilar

Under data parallelism every process scores its own ``C × k`` batch, and DDP averages the gradients; with
``gather_distributed=True`` the processes' class groups form one batch of ``R·C`` groups (``R`` processes: the
batches of one step must then hold distinct classes, as :class:`~hf_contrast.views.AFCLBatchSampler` draws them
with ``distinct_across=R``), which every process scores whole. Its gather's backward sums each process's
gradient to its owner, so the DDP-averaged gradients equal one process's on the concatenated batch
(docs/methods.md §5, §8).
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass
from functools import partial

import torch
from torch import Tensor

import hf_contrast.distributed as distributed
from hf_contrast.errors import InputError

from ..tensor_checks import (
    check_bool,
    check_embeddings,
    check_finite_result,
    check_int,
    check_positive,
    check_unit_interval,
    compute_dtype,
    float32_math,
    power_of_two_scale,
)
from .hyperparameters import HyperparameterModule, Hyperparameters, hyperparameter

__all__ = ["simo_loss", "afcl_loss", "SimOLoss", "AFCLLoss"]

_CITATION = """@article{bouhsine2024simo,
  title   = {{SimO} Loss: Anchor-Free Contrastive Loss for Fine-Grained Supervised Contrastive Learning},
  author  = {Bouhsine, Taha and El Aaroussi, Imad and Faysal, Atik and Huaxia, Wang},
  journal = {arXiv preprint arXiv:2410.05233},
  year    = {2024},
  url     = {https://arxiv.org/abs/2410.05233}
}"""


def _simo(e: Tensor, y: float | Tensor, eps: float) -> Tensor:
    """Unchecked SimO on groups ``e`` of shape ``(G, m, D)`` (already float32/64) -> ``(G,)``.

    Each group is divided by ``s``, a power of two near its largest absolute entry (a constant for
    autograd), and the scale is put back analytically: with ``Dsum = s² D'`` and ``Osum = s⁴ O'``,
    ``Dsum / (eps + Osum) = D' / (eps/s² + s² O')`` and ``Osum / (eps + Dsum) = s² O' / (eps/s² + D')``.
    Equal to the unscaled formula, but raw embeddings of norm ~1e10 (``Osum`` ~1e40) give the
    correct float32 value instead of inf/NaN; only a result beyond the float range is ``inf``.
    """
    m = e.shape[-2]
    scale = power_of_two_scale(e, dim=(-2, -1))  # (G, 1, 1)
    e = e / scale
    scale = scale.reshape(-1)  # (G,)
    centred = e - e.mean(dim=-2, keepdim=True)
    d_sum = centred.pow(2).sum(dim=(-2, -1)) * m
    gram = e @ e.transpose(-2, -1)
    diagonal = torch.eye(m, dtype=torch.bool, device=e.device)
    o_sum = gram.masked_fill(diagonal, 0.0).pow(2).sum(dim=(-2, -1)) * 0.5
    n_pairs = m * (m - 1) / 2
    # s² is applied as two factors of s, the last after the division: no subnormal s², no overflow
    # of an intermediate when the result is representable, and 0 · s stays 0.
    eps_scaled = eps / scale / scale
    similar = y * d_sum / (eps_scaled + o_sum * scale * scale)
    dissimilar = (1 - y) * o_sum * scale / (eps_scaled + d_sum) * scale
    return (similar + dissimilar) / n_pairs


def _check_label(y: object, n_groups: int | None) -> float | Tensor:
    """A number in [0, 1], or a tensor of shape () or (G,) (values checked on CPU only)."""
    if not isinstance(y, Tensor):
        return check_unit_interval("y", y)
    if y.dtype == torch.bool or y.dtype.is_complex:
        raise InputError(f"`y` must be a real-valued tensor with values in [0, 1], got dtype {y.dtype}.")
    allowed = [()] if n_groups is None else [(), (n_groups,)]
    if tuple(y.shape) not in allowed:
        expected = "a scalar" if n_groups is None else f"a scalar or shape ({n_groups},), one label per group"
        raise InputError(f"`y` must be {expected}, got shape {tuple(y.shape)}.")
    if y.device.type == "cpu" and not bool(((y >= 0) & (y <= 1)).all()):
        raise InputError(f"`y` must have values in [0, 1], got {y.tolist()}.")
    return y


def simo_loss(e: Tensor, y: float | Tensor, eps: float = 1e-6) -> Tensor:
    """SimO loss of one group, or of each group of a batch (docs/methods.md §5, paper eq. 1 / Alg. 1).

    Raw embeddings, *not* normalised (the paper's choice: the distance and squared-dot terms
    use the norms). Computed in float32 (float64 stays float64) even under autocast, with
    ``O(G·m²)`` memory and no pair indices.

    Paper: https://arxiv.org/abs/2410.05233

    Args:
        e: One group, or ``G`` groups of ``m`` embeddings. Shape: ``(m, D)`` or ``(G, m, D)``.
        y: Soft label in ``[0, 1]``: 1 pulls the group together (small distances, large squared
            dots), 0 pushes it apart and towards orthogonality. A number, or for ``(G, m, D)``
            input a tensor of shape ``(G,)`` with one label per group. Tensor values are checked
            only on CPU (no device sync).
        eps: ε > 0 added to both denominators.

    Returns:
        A scalar for ``(m, D)`` input; shape ``(G,)``, one value per group, for ``(G, m, D)``.

    Raises:
        ValueError: if ``e`` is not a finite floating tensor of rank 2 or 3, a group has fewer
            than 2 samples, ``y`` is outside ``[0, 1]`` or of the wrong shape, or ``eps <= 0``; or
            if the loss of finite inputs is beyond the float range (checked on CPU outside
            training; inputs are rescaled, so raw norms ~1e10 are fine).

    >>> simo_loss(torch.tensor([[1.0, 0.0], [0.0, 1.0]]), y=0.0)  # orthogonal: Osum = 0
    tensor(0.)
    """
    check_embeddings("e", e, ndim=(2, 3), shape_doc="(m, D) or (G, m, D)")
    if e.shape[-2] < 2:
        raise InputError(
            f"`e` must have at least 2 samples per group (SimO sums over pairs), got shape {tuple(e.shape)}."
        )
    grouped = e.ndim == 3
    y = _check_label(y, e.shape[0] if grouped else None)
    eps = check_positive("eps", eps)
    with float32_math(e.device.type):
        dtype = compute_dtype(e)
        if isinstance(y, Tensor):
            y = y.to(device=e.device, dtype=dtype)
        out = _simo(e.to(dtype) if grouped else e.to(dtype).unsqueeze(0), y, eps)
    check_finite_result(out, "the SimO loss", "`e`")
    return out if grouped else out.squeeze(0)


def _afcl_terms(
    e: Tensor, n_classes: int, olean: float, eps: float, gather_distributed: bool = False
) -> tuple[Tensor, Tensor, Tensor]:
    """Checked AFCL terms ``(L_same, L_mean, L_diff)`` shared by :func:`afcl_loss` and :class:`AFCLLoss`."""
    check_embeddings("e", e, ndim=(2, 3), shape_doc="(C*k, D) class-major or (C, k, D)")
    checked = AFCLHyperparameters(n_classes, olean, eps, gather_distributed)
    n_classes, olean, eps = checked.n_classes, checked.olean, checked.eps
    if e.ndim == 2:
        if e.shape[0] % n_classes != 0:
            raise InputError(
                f"`e` of shape {tuple(e.shape)} must hold n_classes × k rows, class-major, but "
                f"{e.shape[0]} rows are not divisible by `n_classes`={n_classes}."
            )
        e = e.reshape(n_classes, e.shape[0] // n_classes, e.shape[1])
    elif e.shape[0] != n_classes:
        raise InputError(f"`e` of shape {tuple(e.shape)} must have `n_classes`={n_classes} rows on axis 0.")
    if e.shape[1] < 2:
        raise InputError(
            f"`e` must have k >= 2 samples per class (L_same sums over pairs), got k={e.shape[1]} "
            f"for `n_classes`={n_classes} ({n_classes * e.shape[1]} rows): give at least {2 * n_classes} rows, or "
            "fewer classes."
        )
    if checked.gather_distributed and distributed.world_size() > 1:  # (R·C, k, D): every process's groups
        e = distributed.gather_equal(e)  # C groups on every process (the sampler's)
    with float32_math(e.device.type):
        e = e.to(compute_dtype(e))
        same = _simo(e, 1.0, eps).sum()
        mean = _simo(e.mean(dim=1).unsqueeze(0), olean, eps).squeeze(0)
        diff = _simo(e.transpose(0, 1), olean, eps).sum()
    for term in (same, mean, diff):
        check_finite_result(term, "the AFCL loss", "`e`")
    return same, mean, diff


def afcl_loss(
    e: Tensor, n_classes: int, olean: float = 0.01, eps: float = 1e-6, gather_distributed: bool = False
) -> Tensor:
    """Anchor-free contrastive learning objective ``L_same + L_mean + L_diff`` (docs/methods.md §5).

    Paper: https://arxiv.org/abs/2410.05233 (Algorithm 2).

    Args:
        e: Raw embeddings of ``C`` classes × ``k`` samples. Shape: ``(C*k, D)`` class-major
            (rows ``c*k ... c*k + k - 1`` belong to class ``c``) or ``(C, k, D)``.
        n_classes: ``C >= 2``, the number of classes in the batch.
        olean: Orthogonality leaning in ``[0, 1]``, the soft label of the two dissimilarity terms.
        eps: ε > 0 of :func:`simo_loss`.
        gather_distributed: Score the class groups of every process as one batch of ``R·C`` classes (the
            processes' classes must be distinct), with gradients that reach each process's own rows; the loss is
            then the same on every process. Ignored when not distributed.

    Returns:
        The scalar total.

    Raises:
        ValueError: if ``e`` has the wrong rank, its rows are not ``n_classes × k`` with ``k >= 2``,
            ``n_classes < 2``, ``olean`` is outside ``[0, 1]``, or ``eps <= 0``; or if a term is
            beyond the float range (as :func:`simo_loss`).

    >>> afcl_loss(torch.randn(3 * 4, 8), n_classes=3).shape
    torch.Size([])
    """
    same, mean, diff = _afcl_terms(e, n_classes, olean, eps, gather_distributed)
    return same + mean + diff


@dataclass
class SimOHyperparameters(Hyperparameters):
    """:class:`SimOLoss`'s hyperparameters, declared once (see :mod:`.hyperparameters`)."""

    y: float = hyperparameter(MISSING, check_unit_interval)
    eps: float = hyperparameter(1e-6, check_positive)


class SimOLoss(HyperparameterModule):
    """Thin module around :func:`simo_loss` for a group label fixed at construction.

    Paper: https://arxiv.org/abs/2410.05233

    Args:
        y: Soft label in ``[0, 1]`` of every group this module sees (1 similar, 0 dissimilar).
        eps: ε > 0 of :func:`simo_loss`.

    ``forward(e)`` returns a scalar: ``simo_loss(e, y)`` for one group ``(m, D)``, and the *sum*
    over groups for ``(G, m, D)`` (the AFCL convention). Use :func:`simo_loss` directly for
    per-group values or per-group labels.

    >>> SimOLoss(y=1.0)(torch.randn(2, 5, 8)).shape
    torch.Size([])
    """

    citation = _CITATION
    hyperparameters_class = SimOHyperparameters

    def forward(self, e: Tensor) -> Tensor:
        return simo_loss(e, self.y, eps=self.eps).sum()


@dataclass
class AFCLHyperparameters(Hyperparameters):
    """AFCL's hyperparameters (:func:`afcl_loss`, :class:`AFCLLoss`), declared once."""

    n_classes: int = hyperparameter(MISSING, partial(check_int, minimum=2, fix="L_mean and L_diff need 2 classes."))
    olean: float = hyperparameter(0.01, check_unit_interval, help="SimO/AFCL: orthogonality leaning in [0, 1].")
    eps: float = hyperparameter(1e-6, check_positive)
    gather_distributed: bool = hyperparameter(False, check_bool)


class AFCLLoss(HyperparameterModule):
    """Anchor-free contrastive learning with SimO: ``{"same", "mean", "diff", "loss"}``.

    Paper: https://arxiv.org/abs/2410.05233 (Algorithm 2); see :func:`afcl_loss`.

    Args:
        n_classes: ``C >= 2`` classes per batch (the batch is ``C × k``, class-major).
        olean: Orthogonality leaning in ``[0, 1]`` (paper: small, default 0.01).
        eps: ε > 0 of :func:`simo_loss`.
        gather_distributed: One batch of the class groups of every process (see :func:`afcl_loss`).

    Shape:
        ``e``: ``(C*k, D)`` class-major or ``(C, k, D)``, raw (not normalised) embeddings.

    >>> out = AFCLLoss(n_classes=3)(torch.randn(12, 8))
    >>> sorted(out)
    ['diff', 'loss', 'mean', 'same']
    """

    citation = _CITATION
    hyperparameters_class = AFCLHyperparameters

    def forward(self, e: Tensor) -> dict[str, Tensor]:
        same, mean, diff = _afcl_terms(e, self.n_classes, self.olean, self.eps, self.gather_distributed)
        return {"same": same, "mean": mean, "diff": diff, "loss": same + mean + diff}
