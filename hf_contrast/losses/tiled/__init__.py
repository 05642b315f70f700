"""Tiled similarity reductions: the in-batch-negative losses in memory linear in the batch.

The dense losses materialise the ``(N, M)`` similarity matrix of ``N`` anchors against ``M``
candidates. Following Inf-CL (Cheng et al. 2024, "Breaking the Memory Barrier: Near Infinite
Batch Size Scaling for Contrastive Loss", https://arxiv.org/abs/2410.17243), the functions below
walk over square ``tile × tile`` blocks of that matrix (:mod:`.blocks`), reduce each block at once
(an online, max-subtracted log-sum-exp, or a plain sum) and keep only per-row statistics. Their
backward is a custom :class:`torch.autograd.Function` that *recomputes* each block from the inputs
and the saved per-row log-sum-exp, so nothing of size ``N × M`` is ever stored:

- peak memory ``O((N + M)·D + tile²)`` (inputs, their gradients, a few blocks);
- compute: one extra block matmul (the recomputation) on top of the dense form's three;
  on one process the similarity matrix of the anchors with themselves is symmetric, and
  :func:`tiled_symmetric_logsumexp` / :func:`tiled_symmetric_uniformity_logsumexp` compute each
  off-diagonal block once for both its row block and its column block (forward), recompute it
  once for both gradient contributions (backward): two ``N²·D`` matmuls in all, fewer than the
  dense form's three. Under ``gather_distributed=True`` (local rows × gathered columns, not
  symmetric) the losses use the general :func:`tiled_row_logsumexp` /
  :func:`tiled_uniformity_logsumexp`;
- no host synchronisation (the loops run over Python integers known from the shapes), so the
  same code runs on CPU and accelerators.

Every function takes the *already scaled* anchors (``z / τ``) so that gradients with respect to
a learnable temperature flow through ordinary autograd outside the tiles. They compute in the
dtype of their inputs (the callers cast to float32, or keep float64) with autocast disabled, in
the forward and in the backward.

Which path runs: :func:`resolve_tile_size` (:mod:`.tile_size`). Memory and time, dense against
tiled: docs/large-batches.md and docs/benchmarks/tiled.md.
"""

from __future__ import annotations

from .binary_nce import tiled_binary_nce_sum
from .contrastive import tiled_row_logsumexp, tiled_symmetric_logsumexp
from .tile_size import (
    ACCELERATOR_TILE_SIZE,
    AUTO_TILE_MIN_LOGITS,
    DEFAULT_TILE_SIZE,
    check_tile_size,
    checked_tile_size,
    resolve_tile_size,
)
from .uniformity import tiled_symmetric_uniformity_logsumexp, tiled_uniformity_logsumexp

__all__ = [
    "DEFAULT_TILE_SIZE",
    "ACCELERATOR_TILE_SIZE",
    "AUTO_TILE_MIN_LOGITS",
    "check_tile_size",
    "checked_tile_size",
    "resolve_tile_size",
    "tiled_row_logsumexp",
    "tiled_symmetric_logsumexp",
    "tiled_uniformity_logsumexp",
    "tiled_symmetric_uniformity_logsumexp",
    "tiled_binary_nce_sum",
]
