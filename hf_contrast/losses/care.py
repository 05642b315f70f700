"""CARE: Contrastive Augmentation-induced Rotational Equivariance (docs/methods.md §4).

Paper: Gupta, Robinson, Lim, Villar, Jegelka, "Structuring Representation Geometry with
Rotationally Equivariant Contrastive Learning", ICLR 2024, https://arxiv.org/abs/2306.13924.

``L_CARE = InfoNCE(z1_inv, z2_inv) + care_weight * L_equi(z1_eq, z2_eq)``. The equivariance
views come in ``n_splits`` consecutive chunks of ``m`` samples; every sample of a chunk went
through the *same* augmentation pair (a fresh pair per chunk). ``L_equi`` asks each
augmentation to act on the chunk's embeddings as an orthogonal map, i.e. to preserve all
inner products within the chunk.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch
from torch import Tensor

from hf_contrast.errors import InputError

from ..tensor_checks import (
    check_bool,
    check_embeddings,
    check_finite_weighted,
    check_int,
    check_non_negative,
    check_same_shape,
    check_temperature,
    compute_dtype,
    float32_math,
    l2_normalize,
)
from .hyperparameters import HyperparameterModule, Hyperparameters, hyperparameter
from .info_nce import _info_nce_loss

__all__ = ["care_equivariance_loss", "CARELoss"]


def _check_chunks(n_splits: object, batch_size: int) -> int:
    """``n_splits`` (an integer >= 1) cuts a batch of ``batch_size`` into whole chunks of 2+ samples."""
    n_splits = check_int("n_splits", n_splits, 1)
    if batch_size % n_splits != 0:
        raise InputError(
            f"`n_splits` must divide the batch size: got n_splits={n_splits} for a batch of "
            f"{batch_size}. Use a batch size that is a multiple of n_splits."
        )
    if batch_size // n_splits < 2:
        raise InputError(
            f"`n_splits`={n_splits} gives chunks of {batch_size // n_splits} sample for a batch "
            f"of {batch_size}; every chunk needs at least 2 samples (a pair)."
        )
    return n_splits


def care_equivariance_loss(z1: Tensor, z2: Tensor, n_splits: int, normalize: bool = True) -> Tensor:
    """CARE's orthogonal equivariance loss ``L_equi`` (docs/methods.md §4).

    Rows are cut into ``n_splits`` chunks of ``m = B / n_splits`` consecutive samples. With the
    chunk Gram matrices ``G1 = Z1_c Z1_cᵀ`` and ``G2 = Z2_c Z2_cᵀ``::

        L_c = (2 / m) * sum_i sum_{j != i} (G1_ij - G2_ij)²,   L_equi = mean_c L_c

    This is the scaling of the authors' code (``2 (m - 1)`` times the mean over ordered pairs),
    so the paper's weights (λ = 0.01 on CIFAR-10 / STL-10, 0.001 on CIFAR-100) carry over. All
    chunks are one batched matrix product over a ``(n_splits, m, D)`` view, in float32 (float64
    inputs stay float64) even under autocast. Memory: ``B * m`` floats.

    Paper: https://arxiv.org/abs/2306.13924

    Args:
        z1: Embeddings of the first equivariance view, chunk-major. Shape: ``(B, D)``.
        z2: Embeddings of the second view, row ``i`` the same sample as ``z1[i]``.
            Shape: ``(B, D)``.
        n_splits: Number of chunks ``S``; must divide ``B`` and leave ``m >= 2`` rows per chunk.
        normalize: L2-normalise the rows first (the paper's spherical embeddings).

    Returns:
        The scalar loss (0 exactly when every chunk's ``z2`` is its ``z1`` times one orthogonal
        matrix).

    Raises:
        ValueError: if ``z1``/``z2`` are not finite floating ``(B, D)`` tensors of equal shape, or
            ``n_splits`` is not a positive int dividing ``B`` into chunks of at least 2.

    >>> z1 = torch.randn(8, 4)
    >>> q = torch.linalg.qr(torch.randn(4, 4))[0]
    >>> float(care_equivariance_loss(z1, z1 @ q.T, n_splits=2)) < 1e-10
    True
    """
    return _care_equivariance_loss(z1, z2, n_splits, normalize, names=("z1", "z2"))


def _care_equivariance_loss(
    z1: Tensor, z2: Tensor, n_splits: int, normalize: bool = True, *, names: tuple[str, str]
) -> Tensor:
    """:func:`care_equivariance_loss` whose errors name ``z1``, ``z2`` as ``names`` (a module's own
    arguments, e.g. ``("z1_eq", "z2_eq")``)."""
    name1, name2 = names
    check_embeddings(name1, z1)
    check_embeddings(name2, z2)
    check_same_shape(name1, z1, name2, z2)
    batch_size, dim = z1.shape
    n_splits = _check_chunks(n_splits, batch_size)
    m = batch_size // n_splits
    with float32_math(z1.device.type):
        dtype = compute_dtype(z1, z2)
        a, b = z1.to(dtype), z2.to(dtype)
        if normalize:
            a, b = l2_normalize(a), l2_normalize(b)
        a = a.reshape(n_splits, m, dim)
        b = b.reshape(n_splits, m, dim)
        diff = torch.bmm(a, a.transpose(1, 2)) - torch.bmm(b, b.transpose(1, 2))  # (S, m, m)
        diagonal = torch.eye(m, dtype=torch.bool, device=diff.device)
        per_chunk = diff.masked_fill(diagonal, 0.0).pow(2).sum(dim=(1, 2)) * (2.0 / m)
        return per_chunk.mean()


@dataclass
class CAREHyperparameters(Hyperparameters):
    """:class:`CARELoss`'s hyperparameters, declared once (see :mod:`.hyperparameters`)."""

    temperature: float = hyperparameter(0.5, check_temperature, help="CARE: InfoNCE temperature τ > 0.")
    care_weight: float = hyperparameter(0.01, check_non_negative, help="CARE: weight λ >= 0 of the equivariance term.")
    n_splits: int = hyperparameter(
        8,
        partial(check_int, minimum=1),
        help="CARE: chunks S sharing one augmentation pair; must divide the per-device batch size.",
    )
    normalize: bool = hyperparameter(True, check_bool)
    gather_distributed: bool = hyperparameter(False, check_bool)


class CARELoss(HyperparameterModule):
    """CARE loss: InfoNCE on the invariance views + ``care_weight`` · ``L_equi`` on the chunks.

    Paper: https://arxiv.org/abs/2306.13924 (docs/methods.md §4).

    Args:
        temperature: InfoNCE temperature τ > 0 (the paper's SimCLR runs: 0.5).
        care_weight: λ >= 0, weight of :func:`care_equivariance_loss`. Paper values: 0.01
            (CIFAR-10, S=16; STL-10, S=8), 0.001 (CIFAR-100, S=4), with B = 256.
        n_splits: Number of equivariance chunks ``S``; must divide the equivariance batch.
        normalize: L2-normalise embeddings in both terms.
        gather_distributed: InfoNCE compares local anchors with the candidates of all
            processes. ``L_equi`` is always local: a chunk never spans processes.

    ``forward(z1_inv, z2_inv, z1_eq=None, z2_eq=None)`` returns ``{"invariance": InfoNCE,
    "equivariance": care_weight * L_equi, "loss": their sum}``. Without ``z1_eq``/``z2_eq`` the
    equivariance term is computed on the invariance views (the ``share_views=True`` trade-off:
    two forward passes fewer; it is only meaningful if those views were augmented chunk-wise).

    Shape:
        ``z1_inv, z2_inv``: ``(B, D)``; ``z1_eq, z2_eq``: ``(B_eq, D)`` with ``n_splits`` dividing
        ``B_eq`` (``B_eq`` may differ from ``B``).

    >>> loss = CARELoss(n_splits=2)
    >>> out = loss(torch.randn(8, 4), torch.randn(8, 4), torch.randn(4, 4), torch.randn(4, 4))
    >>> sorted(out)
    ['equivariance', 'invariance', 'loss']
    """

    citation = """@inproceedings{gupta2024structuring,
  title     = {Structuring Representation Geometry with Rotationally Equivariant Contrastive Learning},
  author    = {Gupta, Sharut and Robinson, Joshua and Lim, Derek and Villar, Soledad and Jegelka, Stefanie},
  booktitle = {International Conference on Learning Representations (ICLR)},
  year      = {2024},
  url       = {https://arxiv.org/abs/2306.13924}
}"""
    hyperparameters_class = CAREHyperparameters

    def forward(
        self,
        z1_inv: Tensor,
        z2_inv: Tensor,
        z1_eq: Tensor | None = None,
        z2_eq: Tensor | None = None,
    ) -> dict[str, Tensor]:
        if (z1_eq is None) != (z2_eq is None):
            raise InputError(
                "`z1_eq` and `z2_eq` must be given together (or both omitted to reuse the "
                f"invariance views), got z1_eq={'None' if z1_eq is None else 'a tensor'} and "
                f"z2_eq={'None' if z2_eq is None else 'a tensor'}."
            )
        eq_names = ("z1_eq", "z2_eq")
        if z1_eq is None or z2_eq is None:
            z1_eq, z2_eq, eq_names = z1_inv, z2_inv, ("z1_inv", "z2_inv")
        invariance = _info_nce_loss(
            z1_inv,
            z2_inv,
            temperature=self.temperature,
            normalize=self.normalize,
            gather_distributed=self.gather_distributed,
            names=("z1_inv", "z2_inv"),
        )
        equivariance = self.care_weight * _care_equivariance_loss(
            z1_eq, z2_eq, n_splits=self.n_splits, normalize=self.normalize, names=eq_names
        )
        check_finite_weighted(
            equivariance,
            "the CARE equivariance term",
            f"`care_weight`={self.care_weight:g}",
            "use the paper's 0.01 to 0.001",
        )
        return {"invariance": invariance, "equivariance": equivariance, "loss": invariance + equivariance}
