"""Spectral contrastive loss (HaoChen et al. 2021), docs/methods.md §9.

The lecture's "eigen-decomposition" view of contrastive learning: drop the exponential of the
energy-based model and fit ``p(x, x') / (p(x) p(x'))`` by ``phi(x)^T phi(x')`` in L2. Sampling
both expectations from one batch gives, on *raw* (not normalised) embeddings,

``L = -(2/B) sum_i z1_i . z2_i + (1/(B(B-1))) sum_{i != j} (z1_i . z2_j)^2``.

Its minimisers span the top eigenspace of the augmentation graph's normalised adjacency matrix.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from hf_contrast.errors import InputError

from ..distributed import gather_with_offset, world_size
from ..tensor_checks import (
    check_bool,
    check_embeddings,
    check_finite_result,
    check_same_shape,
    compute_dtype,
    float32_math,
    power_of_two_scale,
)
from .hyperparameters import HyperparameterModule, Hyperparameters, hyperparameter

__all__ = ["spectral_contrastive_loss", "SpectralContrastiveLoss"]

_CITATION = """@inproceedings{haochen2021provable,
  title     = {Provable Guarantees for Self-Supervised Deep Learning with Spectral Contrastive Loss},
  author    = {HaoChen, Jeff Z. and Wei, Colin and Gaidon, Adrien and Ma, Tengyu},
  booktitle = {Advances in Neural Information Processing Systems},
  volume    = {34},
  pages     = {5000--5011},
  year      = {2021},
  url       = {https://arxiv.org/abs/2106.04156}
}"""


def spectral_contrastive_loss(z1: Tensor, z2: Tensor, gather_distributed: bool = False) -> Tensor:
    """Spectral contrastive loss of two views, on raw embeddings.

    Paper: https://arxiv.org/abs/2106.04156 (eq. 5, the empirical loss of docs/methods.md §9).

    ``L = -(2/B) sum_i z1_i . z2_i + (1/(B(B-1))) sum_{i != j} (z1_i . z2_j)^2``.

    The embeddings are *not* normalised: the quadratic term bounds their scale. The negative
    term is computed from the two ``(D, D)`` Gram matrices, ``sum_{i,j} (z1_i . z2_j)^2 =
    <z1^T z1, z2^T z2>_F``, when ``D <= B`` (``O(B D^2)``), and from the ``(B, B)`` similarity
    matrix otherwise (``O(B^2 D)``); never ``O(B^2 D)`` memory. All arithmetic is float32 (or
    float64 for float64 inputs), also under fp16/bf16 autocast, on embeddings divided by a power
    of two and rescaled after the sums, so that large raw norms (~1e10) give the float32 value of
    the loss rather than inf/NaN (a loss beyond the float range is ``inf``).

    Args:
        z1: First view. Shape: ``(B, D)``, ``B >= 2``.
        z2: Second view, row ``i`` the positive of ``z1[i]``. Shape: ``(B, D)``.
        gather_distributed: Compare the local ``z1`` with ``z2`` gathered from every process
            (autograd-aware; the positive of local row ``i`` is gathered row ``offset + i``). Each
            process returns its share ``W * (-(2/N) sum_local z1_i . z2_i + (1/(N(N-1))) sum_local
            sum_{j != i} (z1_i . z2_j)^2)`` over the ``N`` gathered rows, so the mean over the ``W``
            processes (what DDP/Accelerate average), and its gradients, equal the loss of one
            process on the concatenated batch, also for unequal local batch sizes. No effect when
            not distributed.

    Returns:
        The loss, a scalar tensor (float32, or float64 for float64 inputs).

    Raises:
        ValueError: if ``z1``/``z2`` are not floating-point ``(B, D)`` tensors of the same shape,
            contain NaN/inf (checked on CPU), or ``B < 2``; or if the loss of finite inputs is beyond
            the float range (checked on CPU outside training; pass float64 or smaller embeddings).

    >>> z = torch.eye(4)
    >>> spectral_contrastive_loss(z, z)  # -(2/4)*4 + 0
    tensor(-2.)
    """
    check_embeddings("z1", z1)
    check_embeddings("z2", z2)
    check_same_shape("z1", z1, "z2", z2)
    if z1.shape[0] < 2:
        raise InputError(
            f"`z1` and `z2` need a batch of at least 2 samples (the loss uses the other samples as "
            f"negatives), got shape {tuple(z1.shape)}."
        )
    dtype = compute_dtype(z1, z2)
    with float32_math(z1.device.type):
        z1, z2 = z1.to(dtype), z2.to(dtype)
        gathered = gather_distributed and world_size() > 1
        candidates = gather_with_offset(z2)[0] if gathered else z2
        # Raw embeddings: dot products are O(|z|²) and their squares O(|z|⁴), which overflow float32 for
        # norms ~1e10 although the loss may be representable. Divide by powers of two s1, s2 and put
        # them back after the sums: L = -(2/B) s1 s2 Σ p' + s1² s2² Σ n' / (B(N-1)).
        s1, s2 = power_of_two_scale(z1), power_of_two_scale(candidates)
        z1, z2 = z1 / s1, z2 / s2
        candidates = candidates / s2 if gathered else z2
        b, d = z1.shape
        n = candidates.shape[0]
        positive = (z1 * z2).sum(dim=1)  # (B,): z1_i . z2_i, the positive is the local row
        if d <= n:
            # sum over all (i, j) of (z1_i . z2_j)^2 = <z1^T z1, z2^T z2>_F, O(B D^2)
            all_pairs = ((z1.T @ z1) * (candidates.T @ candidates)).sum()
        else:
            all_pairs = (z1 @ candidates.T).square().sum()
        negative = all_pairs - positive.square().sum()
        if gathered:  # this process's share, the mean over processes is the global loss
            loss = world_size() * (-2.0 * positive.sum() / n * s1 * s2 + negative * s1 * s2 / (n * (n - 1)) * s1 * s2)
        else:
            loss = -2.0 * positive.mean() * s1 * s2 + negative * s1 * s2 / (b * (n - 1)) * s1 * s2
    return check_finite_result(loss, "the spectral contrastive loss", "`z1`, `z2`")


@dataclass
class SpectralHyperparameters(Hyperparameters):
    """:class:`SpectralContrastiveLoss`'s hyperparameters, declared once (see :mod:`.hyperparameters`)."""

    gather_distributed: bool = hyperparameter(False, check_bool)


class SpectralContrastiveLoss(HyperparameterModule):
    """Module form of :func:`spectral_contrastive_loss` (HaoChen et al. 2021).

    Args:
        gather_distributed: See :func:`spectral_contrastive_loss`.

    Shape:
        ``z1``, ``z2``: ``(B, D)`` raw embeddings, ``B >= 2``. Output: scalar.

    >>> loss_fn = SpectralContrastiveLoss()
    >>> loss = loss_fn(torch.randn(8, 4), torch.randn(8, 4))
    """

    citation: str = _CITATION
    hyperparameters_class = SpectralHyperparameters

    def forward(self, z1: Tensor, z2: Tensor) -> Tensor:
        """Return the loss of the views ``z1``, ``z2`` (each ``(B, D)``)."""
        return spectral_contrastive_loss(z1, z2, gather_distributed=self.gather_distributed)
