"""InfoNCE / NT-Xent, the SimCLR contrastive loss (docs/methods.md §1).

Paper: Chen et al., "A Simple Framework for Contrastive Learning of Visual Representations",
ICML 2020, https://arxiv.org/abs/2002.05709.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from hf_contrast.errors import InputError

from ..distributed import gather_with_offset, world_size
from ..tensor_checks import (
    check_bool,
    check_embeddings,
    check_same_shape,
    check_temperature,
    compute_dtype,
    float32_math,
    l2_normalize,
)
from .hyperparameters import HyperparameterModule, Hyperparameters, hyperparameter
from .tiled import (
    check_tile_size,
    checked_tile_size,
    resolve_tile_size,
    tiled_row_logsumexp,
    tiled_symmetric_logsumexp,
)

__all__ = ["info_nce_loss", "InfoNCELoss"]

_SIMCLR_BIBTEX = """@inproceedings{chen2020simclr,
  title     = {A Simple Framework for Contrastive Learning of Visual Representations},
  author    = {Chen, Ting and Kornblith, Simon and Norouzi, Mohammad and Hinton, Geoffrey},
  booktitle = {Proceedings of the 37th International Conference on Machine Learning},
  series    = {Proceedings of Machine Learning Research},
  volume    = {119},
  pages     = {1597--1607},
  year      = {2020},
  url       = {https://arxiv.org/abs/2002.05709}
}"""


def info_nce_loss(
    z1: Tensor,
    z2: Tensor,
    temperature: float = 0.5,
    normalize: bool = True,
    gather_distributed: bool = False,
    tile_size: int | None = None,
) -> Tensor:
    """InfoNCE / NT-Xent loss of two views of the same samples (SimCLR).

    With ``Z = [n(z1); n(z2)]`` and ``s_ab = Z_a·Z_b / τ``, every anchor ``a`` of the ``2B``
    has its other view ``p(a) = a ± B`` as positive and every other row as negative:
    ``ℓ_a = −s_{a,p(a)} + log Σ_{b≠a} exp(s_ab)``; the loss is the mean over anchors.
    Paper: https://arxiv.org/abs/2002.05709. Equals ``lightly.loss.NTXentLoss(temperature=τ)``.

    Logits are computed in float32 (float64 inputs stay float64) even under fp16/bf16 autocast,
    and the log-sum-exp is max-subtracted. The dense form's memory is ``O(B²)``; the tiled form
    (Inf-CL, :mod:`hf_contrast.losses.tiled`) walks over ``tile × tile`` blocks of the similarity
    matrix with an online log-sum-exp and recomputes them in the backward: memory
    ``O(B·D + tile²)``, same value and gradients.

    Args:
        z1: Embeddings of the first view. Shape: ``(B, D)``.
        z2: Embeddings of the second view, row ``i`` pairs with row ``i`` of ``z1``.
            Shape: ``(B, D)``.
        temperature: Softmax temperature ``τ > 0``.
        normalize: L2-normalise the rows first (cosine similarities). Without it the raw dot
            products are used.
        gather_distributed: Compare the local anchors with the candidates of *all* processes
            (autograd-aware all-gather, :mod:`hf_contrast.distributed`). Each process returns
            its share ``Σ_local ℓ_a · W / (2·B_global)`` so that the mean over the ``W``
            processes (what DDP/Accelerate average) is exactly the loss of one process on the
            concatenated batch, also with unequal local batch sizes. Identity when
            ``torch.distributed`` is not initialised. Gradient accumulation does not add
            negatives: each micro-batch only sees its own (gathered) batch.
        tile_size: ``None`` (default): tiled above ``AUTO_TILE_MIN_LOGITS`` similarities
            (``(2B)·(2N) > 8192²``, i.e. ``B > 4096`` on one process) with 1024-row tiles on
            CPU and 4096-row tiles on accelerators, dense below; ``0``: always dense;
            ``k > 0``: always tiled with ``k × k`` blocks.

    Returns:
        Scalar loss tensor (float32, or float64 for float64 inputs).

    Raises:
        ValueError: If ``z1``/``z2`` are not floating-point rank-2 tensors of the same shape,
            contain NaN/inf (checked on CPU only, where it needs no device sync), hold fewer
            than 2 samples (over all processes when gathering: no negatives), or if
            ``temperature <= 0``, or if ``tile_size`` is not ``None`` or an integer ``>= 0``.

    >>> z = torch.ones(4, 8)  # all similarities equal: loss = log(2·4 − 1)
    >>> info_nce_loss(z, z)
    tensor(1.9459)
    """
    return _info_nce_loss(z1, z2, temperature, normalize, gather_distributed, tile_size, names=("z1", "z2"))


def _info_nce_loss(
    z1: Tensor,
    z2: Tensor,
    temperature: float = 0.5,
    normalize: bool = True,
    gather_distributed: bool = False,
    tile_size: int | None = None,
    *,
    names: tuple[str, str],
) -> Tensor:
    """:func:`info_nce_loss` whose errors name ``z1``, ``z2`` as ``names`` (a module's own arguments,
    e.g. ``("z1_inv", "z2_inv")`` for :class:`~hf_contrast.losses.CARELoss`)."""
    name1, name2 = names
    check_embeddings(name1, z1)
    check_embeddings(name2, z2)
    check_same_shape(name1, z1, name2, z2)
    temperature = check_temperature("temperature", temperature)
    tile_size = check_tile_size(tile_size)

    with float32_math(z1.device.type):
        dtype = compute_dtype(z1, z2)
        z1, z2 = z1.to(dtype), z2.to(dtype)
        if normalize:
            z1, z2 = l2_normalize(z1), l2_normalize(z2)
        anchors = torch.cat([z1, z2], dim=0)  # (2B, D): rows i and B + i are the two views
        if gather_distributed and world_size() > 1:
            # One gather of the whole [z1; z2] block: candidates are the processes' blocks in rank
            # order, and this process's block starts at `offset`.
            candidates, offset = gather_with_offset(anchors)  # (2N, D)
        else:
            candidates, offset = anchors, 0
        n_global = candidates.shape[0] // 2
        if n_global < 2:
            raise InputError(
                f"`{name1}` and `{name2}` need a batch of at least 2 samples, got shape {tuple(z1.shape)}: with one "
                "sample the only candidate of each view is its positive, so the loss is 0 with a zero gradient. Use a "
                "batch size >= 2 (SimCLR trains best with hundreds)."
            )
        tile = resolve_tile_size(tile_size, anchors.shape[0], candidates.shape[0], anchors.device.type)
        if tile:
            scaled = anchors / temperature
            # The positive of each anchor is its other view, on this process: O(B·D), no tiles.
            positive_logit = (scaled * torch.cat([z2, z1], dim=0)).sum(dim=1)
            if candidates is anchors:
                # One process: s = Z·Zᵀ/τ is symmetric, each off-diagonal block is computed once.
                log_denominator, _ = tiled_symmetric_logsumexp(anchors / math.sqrt(temperature), tile_size=tile)
            else:  # local rows × gathered columns: the general form
                log_denominator, _ = tiled_row_logsumexp(scaled, candidates, offset=offset, tile_size=tile)
            per_anchor = log_denominator - positive_logit
        else:
            per_anchor = _dense_per_anchor(anchors, candidates, offset, temperature)
        if candidates is anchors:
            return per_anchor.mean()
        # This process's share: the mean over processes is the global-batch mean.
        return per_anchor.sum() * (world_size() / (2 * n_global))


def _dense_per_anchor(anchors: Tensor, candidates: Tensor, offset: int, temperature: float) -> Tensor:
    """``ℓ_a`` of every local anchor from the full ``(2B, 2N)`` logits. Shape: ``(2B,)``."""
    n_local = anchors.shape[0] // 2
    # Scale the (2B, D) side, not the (2B, 2N) logits.
    logits = (anchors / temperature) @ candidates.T  # (2B, 2N)
    local = torch.arange(n_local, device=logits.device)
    # Column of each anchor's positive (the other view) among the candidates; anchor a's own column is offset + a.
    positive_col = offset + torch.cat([n_local + local, local])
    # In place on the fresh matmul output (its backward needs only the inputs): no (2B, 2N) mask, no second copy
    # of the logits, and no scalar copied from the host (`logits[rows, cols] = value` waits for one on CUDA).
    logits.diagonal(offset).fill_(float("-inf"))
    # cross_entropy = −s_{a,p(a)} + logsumexp_{b≠a} s_ab, max-subtracted internally.
    return F.cross_entropy(logits, positive_col, reduction="none")


@dataclass
class InfoNCEHyperparameters(Hyperparameters):
    """:class:`InfoNCELoss`'s hyperparameters, declared once (see :mod:`.hyperparameters`)."""

    temperature: float = hyperparameter(
        0.5, check_temperature, help="InfoNCE temperature τ > 0 (SimCLR 0.5, SimCSE 0.05)."
    )
    normalize: bool = hyperparameter(True, check_bool)
    gather_distributed: bool = hyperparameter(False, check_bool)
    tile_size: int | None = hyperparameter(None, checked_tile_size)


class InfoNCELoss(HyperparameterModule):
    """Module form of :func:`info_nce_loss` (SimCLR's NT-Xent), same defaults.

    Args:
        temperature: Softmax temperature ``τ > 0``.
        normalize: L2-normalise the embeddings first.
        gather_distributed: Use the negatives of all processes (see :func:`info_nce_loss`).
        tile_size: ``None`` (automatic), ``0`` (dense) or the tile edge of the memory-linear
            form (see :func:`info_nce_loss`).

    Raises:
        ValueError: If ``temperature <= 0`` or ``tile_size`` is not ``None`` or an integer ``>= 0``.

    >>> loss_fn = InfoNCELoss(temperature=0.2)
    >>> loss = loss_fn(torch.randn(8, 16), torch.randn(8, 16))
    """

    citation: str = _SIMCLR_BIBTEX
    hyperparameters_class = InfoNCEHyperparameters

    def forward(self, z1: Tensor, z2: Tensor) -> Tensor:
        """Loss of two views. Shape: ``z1``, ``z2``: ``(B, D)``; returns a scalar."""
        return info_nce_loss(z1, z2, self.temperature, self.normalize, self.gather_distributed, self.tile_size)
