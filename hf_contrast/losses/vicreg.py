"""VICReg: variance-invariance-covariance regularisation (Bardes et al. 2022), docs/methods.md §9.

The lecture derives it as the penalty method for PCA: maximise the agreement of the two views
while pushing the embeddings' covariance towards a multiple of the identity. VICReg splits the
penalty into a hinge on each dimension's standard deviation (variance) and the squared
off-diagonal covariances (covariance); no negatives are needed, and the cost is ``O(B D^2)``.

``L = lambda * mean_i ||z1_i - z2_i||^2 / D + mu * (v(z1) + v(z2)) / 2 + nu * (c(z1) + c(z2))``,
``v(z) = mean_d max(0, gamma - sqrt(Var(z[:, d]) + eps))``, ``c(z) = (1/D) sum_{d != e} Cov(z)_de^2``
with the unbiased (``B - 1``) variance and covariance over the batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from hf_contrast.errors import InputError

from ..tensor_checks import (
    check_embeddings,
    check_finite_result,
    check_finite_weighted,
    check_non_negative,
    check_positive,
    check_same_shape,
    compute_dtype,
    float32_math,
    power_of_two_scale,
)
from .hyperparameters import HyperparameterModule, Hyperparameters, hyperparameter

__all__ = ["vicreg_loss", "VICRegLoss"]

_CITATION = """@inproceedings{bardes2022vicreg,
  title     = {{VICReg}: Variance-Invariance-Covariance Regularization for Self-Supervised Learning},
  author    = {Bardes, Adrien and Ponce, Jean and LeCun, Yann},
  booktitle = {International Conference on Learning Representations},
  year      = {2022},
  url       = {https://arxiv.org/abs/2105.04906}
}"""


@dataclass
class VICRegHyperparameters(Hyperparameters):
    """VICReg's hyperparameters (:func:`vicreg_loss`, :class:`VICRegLoss`), declared once."""

    invariance_weight: float = hyperparameter(
        25.0, check_non_negative, help="VICReg: weight λ of the invariance term."
    )
    variance_weight: float = hyperparameter(25.0, check_non_negative, help="VICReg: weight μ of the variance term.")
    covariance_weight: float = hyperparameter(1.0, check_non_negative, help="VICReg: weight ν of the covariance term.")
    gamma: float = hyperparameter(1.0, check_positive)
    eps: float = hyperparameter(1e-4, check_positive)


def _variance_term(z: Tensor, gamma: float, eps: float) -> Tensor:
    """``mean_d relu(gamma - sqrt(Var(z[:, d]) + eps))`` with the unbiased variance."""
    return F.relu(gamma - torch.sqrt(z.var(dim=0) + eps)).mean()


def _covariance_term(z: Tensor) -> Tensor:
    """``(1/D) sum_{d != e} Cov(z)_de^2`` with the unbiased covariance.

    Computed on ``z / s`` (``s`` a power of two, :func:`~hf_contrast.tensor_checks.power_of_two_scale`)
    and multiplied by ``s⁴`` one factor at a time: raw embeddings of norm ~1e10 have covariances
    ~1e20 whose squares overflow float32 although the term may be representable.
    """
    b, d = z.shape
    scale = power_of_two_scale(z)
    centred = (z - z.mean(dim=0)) / scale
    cov = (centred.T @ centred) / (b - 1)
    off_diagonal = cov - torch.diag_embed(cov.diagonal())  # the diagonal becomes exactly 0
    return off_diagonal.square().sum() / d * scale * scale * scale * scale


def _vicreg_terms(
    z1: Tensor,
    z2: Tensor,
    invariance_weight: float,
    variance_weight: float,
    covariance_weight: float,
    gamma: float,
    eps: float,
) -> dict[str, Tensor]:
    """Check the inputs and return the three *weighted* VICReg terms and their sum ``"loss"`` (float32 or float64)."""
    check_embeddings("z1", z1)
    check_embeddings("z2", z2)
    check_same_shape("z1", z1, "z2", z2)
    if z1.shape[0] < 2:
        raise InputError(
            f"`z1` and `z2` need a batch of at least 2 samples (VICReg uses the batch variance and "
            f"covariance), got shape {tuple(z1.shape)}."
        )
    hp = VICRegHyperparameters(invariance_weight, variance_weight, covariance_weight, gamma, eps)  # floats
    dtype = compute_dtype(z1, z2)
    with float32_math(z1.device.type):
        z1, z2 = z1.to(dtype), z2.to(dtype)
        invariance = (z1 - z2).square().mean()  # = mean_i ||z1_i - z2_i||^2 / D
        variance = 0.5 * (_variance_term(z1, hp.gamma, hp.eps) + _variance_term(z2, hp.gamma, hp.eps))
        covariance = _covariance_term(z1) + _covariance_term(z2)
    check_finite_result(invariance, "the VICReg invariance term", "`z1`, `z2`")
    # relu(gamma - std) <= gamma: only a gamma beyond the float range makes it overflow
    check_finite_weighted(variance, "the VICReg variance term", f"`gamma`={hp.gamma:g}", "use gamma = 1 (the paper's)")
    check_finite_result(covariance, "the VICReg covariance term", "`z1`, `z2`")
    terms = {
        "invariance": hp.invariance_weight * invariance,
        "variance": hp.variance_weight * variance,
        "covariance": hp.covariance_weight * covariance,
    }
    gamma = f"`gamma`={hp.gamma:g}"  # the variance term is at most gamma: with its weight, it may overflow
    for name, term in terms.items():
        weight = f"`{name}_weight`={getattr(hp, f'{name}_weight'):g}" + (f" and {gamma}" if name == "variance" else "")
        check_finite_weighted(
            term, f"the VICReg {name} term", weight, "use the paper's weights (25, 25, 1) and gamma = 1"
        )
    weights = ", ".join(f"`{name}_weight`={getattr(hp, f'{name}_weight'):g}" for name in terms) + f", {gamma}"
    total = terms["invariance"] + terms["variance"] + terms["covariance"]
    terms["loss"] = check_finite_weighted(
        total, "the VICReg loss", weights, "use the paper's weights (25, 25, 1) and gamma = 1"
    )
    return terms


def vicreg_loss(
    z1: Tensor,
    z2: Tensor,
    invariance_weight: float = 25.0,
    variance_weight: float = 25.0,
    covariance_weight: float = 1.0,
    gamma: float = 1.0,
    eps: float = 1e-4,
) -> Tensor:
    """VICReg loss of two views.

    Paper: https://arxiv.org/abs/2105.04906 (eq. 1-6; the ``/2`` on the variance term follows the
    authors' code). Equals ``lightly.loss.VICRegLoss`` (which fixes ``gamma = 1``) on the same
    inputs. Computed in float32 (float64 for float64 inputs), also under fp16/bf16 autocast.

    Args:
        z1: First view (raw, not normalised). Shape: ``(B, D)``, ``B >= 2``.
        z2: Second view, row ``i`` the positive of ``z1[i]``. Shape: ``(B, D)``.
        invariance_weight: ``lambda``, weight of the mean squared distance between the views.
        variance_weight: ``mu``, weight of the standard-deviation hinge (mean of both views).
        covariance_weight: ``nu``, weight of the off-diagonal covariance penalty (sum of both views).
        gamma: Target standard deviation of every dimension, ``> 0``.
        eps: Added to the variance before the square root, ``> 0``.

    Returns:
        The total loss, a scalar tensor. :class:`VICRegLoss` also returns the three terms.

    Raises:
        ValueError: if ``z1``/``z2`` are not floating-point ``(B, D)`` tensors of the same shape,
            contain NaN/inf (checked on CPU), ``B < 2``, a weight is negative, or ``gamma`` or
            ``eps`` is not positive; or if a term of finite inputs is beyond the float range
            (checked on CPU outside training; large raw norms such as ~1e10 are computed rescaled
            and are fine while the loss itself fits).

    >>> z = torch.randn(16, 8)
    >>> loss = vicreg_loss(z, z + 0.1 * torch.randn(16, 8))
    """
    terms = _vicreg_terms(z1, z2, invariance_weight, variance_weight, covariance_weight, gamma, eps)
    return terms["loss"]


class VICRegLoss(HyperparameterModule):
    """Module form of :func:`vicreg_loss`, returning the weighted terms and their sum.

    Args:
        invariance_weight: See :func:`vicreg_loss` (same default: 25).
        variance_weight: See :func:`vicreg_loss` (same default: 25).
        covariance_weight: See :func:`vicreg_loss` (same default: 1).
        gamma: See :func:`vicreg_loss` (same default: 1).
        eps: See :func:`vicreg_loss` (same default: 1e-4).

    Shape:
        ``z1``, ``z2``: ``(B, D)``, ``B >= 2``. Output: ``dict`` of scalars with keys
        ``"invariance"``, ``"variance"``, ``"covariance"`` (each already weighted) and ``"loss"``
        (their sum).

    Raises:
        ValueError: on a negative weight or a non-positive ``gamma``/``eps``.

    >>> out = VICRegLoss()(torch.randn(16, 8), torch.randn(16, 8))
    >>> sorted(out)
    ['covariance', 'invariance', 'loss', 'variance']
    """

    citation: str = _CITATION
    hyperparameters_class = VICRegHyperparameters

    def forward(self, z1: Tensor, z2: Tensor) -> dict[str, Tensor]:
        """Return ``{"invariance", "variance", "covariance", "loss"}`` for the views ``z1``, ``z2``."""
        return _vicreg_terms(
            z1, z2, self.invariance_weight, self.variance_weight, self.covariance_weight, self.gamma, self.eps
        )
