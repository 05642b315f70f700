"""OCL, the orthonormal contrastive loss of the LOCAL paper (docs/methods.md §3, the paper's eq. 2).

Paper: "LOCAL: Latent Orthonormal Contrastive Learning for Paired Images" (anonymous, under
double-blind review). OCL is SupCon with every *negative* entering the denominator through its
absolute similarity, so that other classes are pushed to be orthogonal rather than opposite.
"""

from __future__ import annotations

from torch import Tensor

from .supcon import SupConLoss, _supervised_contrastive_loss

__all__ = ["ocl_loss", "OCLoss"]

_LOCAL_BIBTEX = """@misc{local_orthonormal_contrastive,
  title  = {{LOCAL}: Latent Orthonormal Contrastive Learning for Paired Images},
  author = {Anonymous},
  note   = {Paper under double-blind review}
}"""


def ocl_loss(
    z: Tensor,
    labels: Tensor,
    temperature: float = 0.1,
    normalize: bool = True,
    gather_distributed: bool = False,
    tile_size: int | None = None,
) -> Tensor:
    """Orthonormal contrastive loss (OCL) of labelled embeddings.

    As :func:`~hf_contrast.losses.supcon_loss`, with ``s_ib = n(z_i)·n(z_b) / τ``, but
    ``denominator_i = Σ_{b≠i, y_b=y_i} exp(s_ib) + Σ_{b: y_b≠y_i} exp(|s_ib|)``; the absolute
    value is taken before the log-sum-exp's max-subtraction and positives stay signed:
    ``ℓ_i = −(1/|P(i)|) Σ_{p∈P(i)} [s_ip − log denominator_i]``, mean over the anchors that have
    a positive. Its minimum: each class collapses to one unit vector and the class vectors are
    pairwise orthogonal (Theorem 3.2), whatever the class balance; SupCon prefers a regular
    simplex instead. Needs ``D ≥ number of classes`` for that minimum to exist.

    Note:
        Checking that the batch has a positive pair reads one value from the device (one sync per
        call); the loss is undefined otherwise, so it raises instead of returning NaN. A one-class
        batch is scored with a ``RuntimeWarning`` (see :func:`~hf_contrast.losses.supcon_loss`).

    Args:
        z: Embeddings. Shape: ``(N, D)`` (multi-view input flattened view-major, see
            :func:`~hf_contrast.losses.supcon.flatten_views`).
        labels: Integer class of each row of ``z``. Shape: ``(N,)``.
        temperature: Softmax temperature ``τ > 0``.
        normalize: L2-normalise the rows first (cosine similarities).
        gather_distributed: Compare the local anchors with the embeddings and labels of *all*
            processes; the mean over processes equals the global-batch loss (see
            :func:`~hf_contrast.losses.supcon_loss`). Gradient accumulation does not add negatives.
        tile_size: ``None`` (automatic: tiled when ``N · N_global > 8192²``), ``0`` (dense) or the
            tile edge of the memory-linear form (:mod:`hf_contrast.losses.tiled`); same value and
            gradients either way.

    Returns:
        Scalar loss tensor (float32, or float64 for float64 inputs).

    Raises:
        ValueError: If ``z`` is not a floating-point ``(N, D)`` tensor, has NaN/inf (checked on
            CPU only), ``labels`` is not an integer ``(N,)`` tensor, ``temperature <= 0``, or no
            anchor in the batch has a positive, or ``tile_size`` is not ``None`` or an int ``>= 0``.

    >>> import torch
    >>> z = torch.randn(8, 16)
    >>> loss = ocl_loss(z, torch.tensor([0, 0, 1, 1, 2, 2, 3, 3]))
    """
    return _supervised_contrastive_loss(z, labels, temperature, normalize, gather_distributed, True, tile_size)


class OCLoss(SupConLoss):
    """Module form of :func:`ocl_loss` (LOCAL's orthonormal contrastive loss), same defaults.

    Args:
        temperature: Softmax temperature ``τ > 0``.
        normalize: L2-normalise the embeddings first.
        gather_distributed: Use the candidates of all processes (see :func:`ocl_loss`).
        tile_size: ``None`` (automatic), ``0`` (dense) or the tile edge (see :func:`ocl_loss`).

    Raises:
        ValueError: If ``temperature <= 0``.

    >>> import torch
    >>> loss = OCLoss()(torch.randn(6, 16), torch.tensor([0, 0, 1, 1, 2, 2]))
    """

    citation: str = _LOCAL_BIBTEX
    abs_negatives = True  # SupConLoss.forward with |cos| for the other classes
