"""Supervised contrastive loss, SupCon (docs/methods.md §2), and the core it shares with OCL (§3).

Paper: Khosla et al., "Supervised Contrastive Learning", NeurIPS 2020,
https://arxiv.org/abs/2004.11362.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor

from hf_contrast.errors import InputError

from ..distributed import gather, gather_with_offset, world_size
from ..tensor_checks import (
    check_bool,
    check_embeddings,
    check_labels,
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

__all__ = ["supcon_loss", "SupConLoss", "flatten_views"]

_SUPCON_BIBTEX = """@inproceedings{khosla2020supcon,
  title     = {Supervised Contrastive Learning},
  author    = {Khosla, Prannay and Teterwak, Piotr and Wang, Chen and Sarna, Aaron and Tian, Yonglong
               and Isola, Phillip and Maschinot, Aaron and Liu, Ce and Krishnan, Dilip},
  booktitle = {Advances in Neural Information Processing Systems},
  volume    = {33},
  pages     = {18661--18673},
  year      = {2020},
  url       = {https://arxiv.org/abs/2004.11362}
}"""


def flatten_views(z_views: Tensor | Sequence[Tensor], labels: Tensor) -> tuple[Tensor, Tensor]:
    """Flatten multi-view embeddings view-major for :func:`supcon_loss` / :func:`ocl_loss`.

    Args:
        z_views: ``V`` views of the same ``B`` samples, a tensor or a sequence of ``V`` tensors.
            Shape: ``(V, B, D)`` or ``V × (B, D)``.
        labels: Integer class of each sample. Shape: ``(B,)``.

    Returns:
        ``(z, labels)`` with ``z[v·B + i] = z_views[v][i]``. Shape: ``(V·B, D)`` and ``(V·B,)``.

    Raises:
        ValueError: If the views do not share one ``(B, D)`` shape or ``labels`` is not an
            integer tensor of shape ``(B,)``.

    >>> z, y = flatten_views(torch.randn(2, 4, 8), torch.tensor([0, 0, 1, 1]))
    >>> z.shape, y.tolist()
    (torch.Size([8, 8]), [0, 0, 1, 1, 0, 0, 1, 1])
    """
    if isinstance(z_views, Tensor):
        z = check_embeddings("z_views", z_views, ndim=3, shape_doc="(V, B, D)")
    else:
        if isinstance(z_views, (str, bytes)) or not isinstance(z_views, Sequence) or len(z_views) == 0:
            raise InputError(
                "`z_views` must be a (V, B, D) tensor or a non-empty sequence of (B, D) tensors, got "
                f"{type(z_views).__name__}."
            )
        for v, view in enumerate(z_views):
            check_embeddings(f"z_views[{v}]", view)
            if view.shape != z_views[0].shape:
                raise InputError(
                    f"`z_views` must all have the same (B, D) shape, got {tuple(z_views[0].shape)} for view 0 "
                    f"and {tuple(view.shape)} for view {v}."
                )
        z = torch.stack(list(z_views), dim=0)
    n_views, batch, dim = z.shape
    labels = check_labels(labels, batch)
    return z.reshape(n_views * batch, dim), labels.repeat(n_views)


def _supervised_contrastive_loss(
    z: Tensor,
    labels: Tensor,
    temperature: float,
    normalize: bool,
    gather_distributed: bool,
    abs_negatives: bool,
    tile_size: int | None = None,
    check_batch: bool = True,
) -> Tensor:
    """Core of SupCon (``abs_negatives=False``) and OCL (``abs_negatives=True``).

    ``check_batch=False`` skips the one host read of the batch's structure (an anchor without a positive is an
    error, a batch of one class a warning): for callers whose batches have a positive for every anchor by
    construction (two or more views of each sample) and that watch for one-class batches themselves.

    ``lp_ib = s'_ib − log Σ_{b'≠i} exp(s'_ib')`` where ``s' = s`` for same-class candidates and
    ``s' = |s|`` for other-class candidates when ``abs_negatives`` (the absolute value is taken
    before the log-sum-exp's max-subtraction); ``ℓ_i = −mean_{p∈P(i)} lp_ip``; the loss is the mean
    over anchors with at least one positive. See :func:`supcon_loss` for arguments and errors.
    With tiles (``tile_size``, :mod:`hf_contrast.losses.tiled`) no ``(N, N_global)`` tensor is
    built: ``|P(i)|`` comes from sorted labels and the log-sum-exp and positive sums from blocks.
    """
    z = check_embeddings("z", z, shape_doc="(N, D)")
    labels = check_labels(labels, z.shape[0]).to(z.device)
    temperature = check_temperature("temperature", temperature)
    tile_size = check_tile_size(tile_size)

    with float32_math(z.device.type):
        z = z.to(compute_dtype(z))
        if normalize:
            z = l2_normalize(z)
        distributed = gather_distributed and world_size() > 1
        if distributed:
            candidates, offset = gather_with_offset(z)  # (N_global, D), keeps gradients
            candidate_labels = gather(labels)  # integer tensor: no gradient
        else:
            candidates, offset, candidate_labels = z, 0, labels

        n_local = z.shape[0]
        tile = resolve_tile_size(tile_size, n_local, candidates.shape[0], z.device.type)
        if tile:
            # |P(i)| = (#candidates with label y_i) − 1 (the anchor itself), by binary search: O(N log N).
            sorted_labels = candidate_labels.sort().values
            n_positives = (
                torch.searchsorted(sorted_labels, labels, right=True) - torch.searchsorted(sorted_labels, labels) - 1
            )
        else:
            same_class = labels[:, None] == candidate_labels[None, :]  # (N, N_global)
            positive_mask = same_class.clone()
            positive_mask.diagonal(offset).fill_(False)  # anchor i's own column is offset + i
            n_positives = positive_mask.sum(dim=1)
        has_positive = n_positives > 0
        n_valid = has_positive.sum()
        if distributed:  # anchors with a positive over all processes, so every rank agrees
            n_valid = n_valid.clone()
            dist.all_reduce(n_valid, op=dist.ReduceOp.SUM)
        # Anchors with a negative (another class among the candidates): none in a one-class batch.
        n_with_negative = (n_positives < candidates.shape[0] - 1).sum()
        # The single device sync of this loss: without a positive pair the loss is undefined.
        n_valid_host, n_with_negative_host = (
            torch.stack([n_valid, n_with_negative.to(n_valid.dtype)]).tolist() if check_batch else (1, 1)
        )
        if n_with_negative_host == 0 and n_valid_host > 0:
            warnings.warn(
                f"`labels`: all {candidate_labels.shape[0]} samples of the batch are of one class, so there are no "
                "negatives: the loss only pulls the batch together and cannot separate classes. Batches need 2 or "
                "more classes (shuffle the data, use larger batches or a class-balanced sampler). Computed anyway.",
                RuntimeWarning,
                stacklevel=3,
            )
        if not n_valid_host > 0:
            n_classes = int(torch.unique(candidate_labels).numel())
            raise InputError(
                f"`labels`: no anchor has a positive: got {candidate_labels.shape[0]} samples of {n_classes} distinct "
                "classes. A supervised contrastive loss needs at least one class with 2 or more samples in the batch "
                "(use several views per sample, see `flatten_views`, or a class-balanced sampler)."
            )

        if tile:
            if distributed:  # local rows × gathered columns: the general form
                log_denominator, sum_pos_logits = tiled_row_logsumexp(
                    z / temperature, candidates, labels, candidate_labels, offset, abs_negatives, tile
                )
            else:  # one process: s = z·zᵀ/τ is symmetric, each off-diagonal block is computed once
                log_denominator, sum_pos_logits = tiled_symmetric_logsumexp(
                    z / math.sqrt(temperature), labels, abs_negatives, tile
                )
        else:
            logits = (z / temperature) @ candidates.T  # (N, N_global); scale the (N, D) side
            if abs_negatives:
                logits = torch.where(same_class, logits, logits.abs())
            # In place (the backward of the op producing `logits` does not need its output): self
            # is excluded from the denominator without a mask or a copy of the (N, N_global) logits.
            logits.diagonal(offset).fill_(float("-inf"))
            log_denominator = torch.logsumexp(logits, dim=1)  # max-subtracted
            sum_pos_logits = torch.where(positive_mask, logits, 0.0).sum(dim=1)
        # Σ_p lp_ip = Σ_p s_ip − |P(i)|·log_denominator_i: no log-prob matrix is materialised.
        sum_log_prob_pos = sum_pos_logits - n_positives * log_denominator
        per_anchor = -sum_log_prob_pos / n_positives.clamp(min=1)
        total = torch.where(has_positive, per_anchor, torch.zeros_like(per_anchor)).sum()
        if distributed:  # this process's share: the mean over processes is the global-batch mean
            return total * (world_size() / n_valid)
        return total / n_valid


def supcon_loss(
    z: Tensor,
    labels: Tensor,
    temperature: float = 0.1,
    normalize: bool = True,
    gather_distributed: bool = False,
    tile_size: int | None = None,
) -> Tensor:
    """Supervised contrastive loss (SupCon, the "L_out" form, no ``base_temperature``).

    With ``s_ib = n(z_i)·n(z_b) / τ`` and positives ``P(i) = {p ≠ i : y_p = y_i}``:
    ``ℓ_i = −(1/|P(i)|) Σ_{p∈P(i)} [s_ip − log Σ_{b≠i} exp(s_ib)]``. The loss is the mean over
    the anchors that have a positive (anchors without one are excluded, not counted as zero).
    Paper: https://arxiv.org/abs/2004.11362. Equals
    ``pytorch_metric_learning.losses.SupConLoss(temperature=τ)``.

    Multi-view input: flatten it view-major first (:func:`flatten_views`). Logits are computed in
    float32 (float64 stays float64) even under fp16/bf16 autocast, with a max-subtracted
    log-sum-exp. The dense form's memory is ``O(N²)``; the tiled form (Inf-CL,
    :mod:`hf_contrast.losses.tiled`) uses ``O(N·D + tile²)`` with the same value and gradients.

    Note:
        Checking that the batch has a positive pair reads one value from the device (one sync per
        call); the loss is undefined otherwise, so it raises instead of returning NaN. A batch of
        one class (positives, no negatives) is scored with a ``RuntimeWarning``: a class-sorted
        evaluation batch or an unlucky small training batch is legitimate, a one-class *dataset*
        is not (the SupCon/OCL trainers reject it before training).

    Args:
        z: Embeddings. Shape: ``(N, D)``.
        labels: Integer class of each row of ``z``. Shape: ``(N,)``.
        temperature: Softmax temperature ``τ > 0``.
        normalize: L2-normalise the rows first (cosine similarities).
        gather_distributed: Compare the local anchors with the embeddings and labels of *all*
            processes (autograd-aware all-gather). Each process returns its share
            ``Σ_local ℓ_i · W / (#anchors with a positive, over all processes)``, so the mean over
            the ``W`` processes (what DDP/Accelerate average) is exactly the loss of one process on
            the concatenated batch, whatever the local sizes. Identity when not distributed.
            Gradient accumulation does not add negatives.
        tile_size: ``None`` (default): tiled (1024-row blocks on CPU, 4096 on accelerators)
            when ``N · N_global > 8192²`` (``N > 8192`` on one process), dense below; ``0``: always
            dense; ``k > 0``: always tiled with ``k × k`` blocks.

    Returns:
        Scalar loss tensor (float32, or float64 for float64 inputs).

    Raises:
        ValueError: If ``z`` is not a floating-point ``(N, D)`` tensor, has NaN/inf (checked on
            CPU only), ``labels`` is not an integer ``(N,)`` tensor, ``temperature <= 0``, no
            anchor in the batch has a positive, or ``tile_size`` is not ``None`` or an int ``>= 0``.

    >>> z = torch.randn(8, 16)
    >>> loss = supcon_loss(z, torch.tensor([0, 0, 1, 1, 2, 2, 3, 3]))
    """
    return _supervised_contrastive_loss(z, labels, temperature, normalize, gather_distributed, False, tile_size)


@dataclass
class SupConHyperparameters(Hyperparameters):
    """:class:`SupConLoss`'s (and :class:`~hf_contrast.losses.OCLoss`'s) hyperparameters, declared once."""

    temperature: float = hyperparameter(0.1, check_temperature, help="SupCon/OCL: temperature τ > 0.")
    normalize: bool = hyperparameter(True, check_bool)
    gather_distributed: bool = hyperparameter(False, check_bool)
    tile_size: int | None = hyperparameter(None, checked_tile_size)


class SupConLoss(HyperparameterModule):
    """Module form of :func:`supcon_loss`, same defaults.

    Args:
        temperature: Softmax temperature ``τ > 0``.
        normalize: L2-normalise the embeddings first.
        gather_distributed: Use the candidates of all processes (see :func:`supcon_loss`).
        tile_size: ``None`` (automatic), ``0`` (dense) or the tile edge of the memory-linear
            form (see :func:`supcon_loss`).

    Raises:
        ValueError: If ``temperature <= 0`` or ``tile_size`` is not ``None`` or an integer ``>= 0``.

    >>> loss = SupConLoss()(torch.randn(6, 16), torch.tensor([0, 0, 1, 1, 2, 2]))
    """

    citation: str = _SUPCON_BIBTEX
    hyperparameters_class = SupConHyperparameters
    #: Read the batch's structure on the host at every call (no positive: error; one class: warning). A trainer
    #: whose batches hold two or more views of each sample turns it off: no host sync per step.
    check_batch: bool = True
    abs_negatives = False

    def forward(self, z: Tensor, labels: Tensor) -> Tensor:
        """Loss of labelled embeddings. Shape: ``z``: ``(N, D)``, ``labels``: ``(N,)``; returns a scalar."""
        return _supervised_contrastive_loss(
            z, labels, self.temperature, self.normalize, self.gather_distributed, self.abs_negatives,
            self.tile_size, self.check_batch,
        )  # fmt: skip
