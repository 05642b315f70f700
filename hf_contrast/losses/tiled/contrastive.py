"""Tiled InfoNCE / SupCon / OCL: per-row log-sum-exp over the candidates except the anchor itself.

:func:`tiled_row_logsumexp` is the general form (``N`` anchors × ``M`` candidates, what
``gather_distributed=True`` runs); :func:`tiled_symmetric_logsumexp` is the one-process form, where the
candidates are the anchors and each off-diagonal block serves its row block and its column block at once.
"""

from __future__ import annotations

import torch
from torch import Tensor

from hf_contrast.errors import InputError

from .blocks import (
    check_block_edge,
    finish_logsumexp,
    fold_columns,
    online_logsumexp_update,
    self_diagonal,
    tile_ranges,
    upper_tile_ranges,
)
from .tile_size import DEFAULT_TILE_SIZE

__all__ = ["tiled_row_logsumexp", "tiled_symmetric_logsumexp"]


def _contrastive_block(
    a: Tensor,
    c: Tensor,
    ya: Tensor | None,
    yc: Tensor | None,
    abs_negatives: bool,
    own: int | None,
    pos_sum: Tensor | None = None,
    want_sign: bool = False,
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """Denominator logits ``s'`` of one block (self at -inf), its positive mask, ``ds'/ds``.

    Adds the block's positive logits to ``pos_sum`` (row-wise) when given. ``ds'/ds`` is ``1``
    on positives and ``sign(s)`` on the negatives under ``abs_negatives`` (``None`` otherwise or
    unless ``want_sign``). Works in place on the fresh matmul output: one block-sized tensor.
    """
    s = a @ c.T
    same = None
    if ya is not None and yc is not None:
        same = ya[:, None] == yc[None, :]
        if own is not None:  # the block's diagonal of the anchors' own entries (:func:`self_diagonal`)
            same.diagonal(own).fill_(False)
        if pos_sum is not None:
            pos_sum += torch.where(same, s, 0.0).sum(dim=1)
    sign = None
    if abs_negatives and same is not None:
        if want_sign:
            sign = torch.where(same, 1.0, torch.sign(s))
        s = torch.where(same, s, s.abs())
    if own is not None:
        s.diagonal(own).fill_(float("-inf"))
    return s, same, sign


class _TiledRowLogSumExp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, anchors, candidates, anchor_labels, candidate_labels, offset, abs_negatives, tile):  # type: ignore[override]
        n, m = anchors.shape[0], candidates.shape[0]
        device = anchors.device
        with torch.autocast(device_type=device.type, enabled=False):
            lse = anchors.new_empty(n)
            pos_sum = anchors.new_zeros(n)
            labelled = anchor_labels is not None
            for r0, r1 in tile_ranges(n, tile):
                a = anchors[r0:r1]
                ya = anchor_labels[r0:r1] if labelled else None
                run_max = anchors.new_full((r1 - r0,), float("-inf"))
                run_sum = anchors.new_zeros(r1 - r0)
                for c0, c1 in tile_ranges(m, tile):
                    yc = candidate_labels[c0:c1] if labelled else None
                    own = self_diagonal(r0, r1, c0, c1, offset)
                    s_den, _, _ = _contrastive_block(
                        a, candidates[c0:c1], ya, yc, abs_negatives, own, pos_sum=pos_sum[r0:r1]
                    )
                    run_max = online_logsumexp_update(run_max, run_sum, s_den)
                lse[r0:r1] = finish_logsumexp(run_max, run_sum)
        ctx.save_for_backward(anchors, candidates, anchor_labels, candidate_labels, lse)
        ctx.offset, ctx.abs_negatives, ctx.tile, ctx.labelled = offset, abs_negatives, tile, labelled
        if not labelled:
            ctx.mark_non_differentiable(pos_sum)
        return lse, pos_sum

    @staticmethod
    def backward(ctx, grad_lse, grad_pos):  # type: ignore[override]
        anchors, candidates, anchor_labels, candidate_labels, lse = ctx.saved_tensors
        n, m = anchors.shape[0], candidates.shape[0]
        device = anchors.device
        tile, labelled = ctx.tile, ctx.labelled
        with torch.autocast(device_type=device.type, enabled=False):
            grad_a = torch.zeros_like(anchors)
            grad_c = torch.zeros_like(candidates)
            g_lse = grad_lse if grad_lse is not None else anchors.new_zeros(n)
            g_pos = grad_pos if (labelled and grad_pos is not None) else None
            for r0, r1 in tile_ranges(n, tile):
                a = anchors[r0:r1]
                ya = anchor_labels[r0:r1] if labelled else None
                for c0, c1 in tile_ranges(m, tile):
                    c = candidates[c0:c1]
                    yc = candidate_labels[c0:c1] if labelled else None
                    g, same, sign = _contrastive_block(
                        a,
                        c,
                        ya,
                        yc,
                        ctx.abs_negatives,
                        self_diagonal(r0, r1, c0, c1, ctx.offset),
                        want_sign=True,
                    )
                    # d lse_i / d s'_ij = softmax_ij (0 on the anchor itself), in place.
                    g.sub_(lse[r0:r1, None]).exp_().mul_(g_lse[r0:r1, None])
                    if sign is not None:  # d|s|/ds = sign(s) on the negatives
                        g.mul_(sign)
                    if g_pos is not None:
                        g.add_(torch.where(same, g_pos[r0:r1, None], 0.0))
                    grad_a[r0:r1].addmm_(g, c)
                    grad_c[c0:c1].addmm_(g.T, a)
        return grad_a, grad_c, None, None, None, None, None


def tiled_row_logsumexp(
    anchors: Tensor,
    candidates: Tensor,
    anchor_labels: Tensor | None = None,
    candidate_labels: Tensor | None = None,
    offset: int = 0,
    abs_negatives: bool = False,
    tile_size: int = DEFAULT_TILE_SIZE,
) -> tuple[Tensor, Tensor]:
    """Per-anchor log-sum-exp over all candidates but itself, and the sum of positive logits.

    With ``s_ij = anchors_i · candidates_j`` (pass ``n(z) / τ`` as ``anchors``), the anchor's own
    column ``j = offset + i`` excluded, and "positive" meaning ``j ≠ offset + i`` with
    ``anchor_labels_i == candidate_labels_j``:

    - ``lse_i = log Σ_{j ≠ offset+i} exp(s'_ij)`` with ``s'_ij = s_ij`` for positives and, for
      the other candidates, ``|s_ij|`` if ``abs_negatives`` (OCL, the absolute value taken before
      the max-subtraction) else ``s_ij``;
    - ``pos_i = Σ_{positives j} s_ij`` (zeros, without gradient, when no labels are given).

    Memory ``O((N + M)·D + tile²)``; the backward recomputes each block.

    Args:
        anchors: Scaled anchor embeddings. Shape: ``(N, D)``.
        candidates: Candidate embeddings; ``candidates[offset:offset + N]`` are the anchors
            themselves (unscaled). Shape: ``(M, D)``.
        anchor_labels: Integer labels of the anchors, or ``None``. Shape: ``(N,)``.
        candidate_labels: Integer labels of the candidates, or ``None``. Shape: ``(M,)``.
        offset: Row of ``candidates`` at which the anchors start.
        abs_negatives: Use ``|s|`` for the non-positive candidates in the log-sum-exp (OCL).
        tile_size: Block edge, ``>= 1``.

    Returns:
        ``(lse, pos)``, each of shape ``(N,)``.
    """
    if (anchor_labels is None) != (candidate_labels is None):
        raise InputError("`anchor_labels` and `candidate_labels` must both be given or both be None.")
    check_block_edge(tile_size)
    return _TiledRowLogSumExp.apply(
        anchors, candidates, anchor_labels, candidate_labels, int(offset), bool(abs_negatives), int(tile_size)
    )


# --------------------------------------------------------------------------------------------
# Symmetric case (one process: the candidates are the anchors): each block pair once
# --------------------------------------------------------------------------------------------
def _symmetric_block(
    xr: Tensor, xc: Tensor, yr: Tensor | None, yc: Tensor | None, abs_negatives: bool, diagonal: bool, want_sign: bool
) -> tuple[Tensor, Tensor | None, Tensor | None, Tensor | None]:
    """Block ``s = xr·xcᵀ`` as denominator logits (self at -inf on a diagonal block).

    Returns ``(s', same, sign, positive_logits)``: the positive mask (labels given), ``ds'/ds``
    (``abs_negatives`` and ``want_sign``) and ``where(same, s, 0)`` (labels given, forward).
    """
    s = xr @ xc.T
    same = sign = pos = None
    if yr is not None and yc is not None:
        same = yr[:, None] == yc[None, :]
        if diagonal:
            same.diagonal().fill_(False)
        if not want_sign:
            pos = torch.where(same, s, 0.0)
        if abs_negatives:
            if want_sign:
                sign = torch.where(same, 1.0, torch.sign(s))
            s = torch.where(same, s, s.abs())
    if diagonal:  # in place on the block's diagonal: no index tensor, no scalar copied from the host
        s.diagonal().fill_(float("-inf"))
    return s, same, sign, pos


class _TiledSymmetricLogSumExp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, labels, abs_negatives, tile):  # type: ignore[override]
        n = x.shape[0]
        labelled = labels is not None
        with torch.autocast(device_type=x.device.type, enabled=False):
            run_max = x.new_full((n,), float("-inf"))
            run_sum = x.new_zeros(n)
            pos_sum = x.new_zeros(n)
            for r0, r1, c0, c1 in upper_tile_ranges(n, tile):
                diagonal = r0 == c0
                yr, yc = (labels[r0:r1], labels[c0:c1]) if labelled else (None, None)
                s, _, _, pos = _symmetric_block(x[r0:r1], x[c0:c1], yr, yc, abs_negatives, diagonal, want_sign=False)
                if pos is not None:
                    pos_sum[r0:r1] += pos.sum(dim=1)
                    if not diagonal:
                        pos_sum[c0:c1] += pos.sum(dim=0)
                if not diagonal:  # the block's columns are rows c0:c1 of the (symmetric) matrix
                    run_max[c0:c1] = fold_columns(run_max[c0:c1], run_sum[c0:c1], s)
                run_max[r0:r1] = online_logsumexp_update(run_max[r0:r1], run_sum[r0:r1], s)
            lse = finish_logsumexp(run_max, run_sum)
        ctx.save_for_backward(x, labels, lse)
        ctx.abs_negatives, ctx.tile, ctx.labelled = abs_negatives, tile, labelled
        if not labelled:
            ctx.mark_non_differentiable(pos_sum)
        return lse, pos_sum

    @staticmethod
    def backward(ctx, grad_lse, grad_pos):  # type: ignore[override]
        x, labels, lse = ctx.saved_tensors
        n = x.shape[0]
        labelled = ctx.labelled
        with torch.autocast(device_type=x.device.type, enabled=False):
            grad_x = torch.zeros_like(x)
            g_lse = grad_lse if grad_lse is not None else x.new_zeros(n)
            g_pos = grad_pos if (labelled and grad_pos is not None) else None
            for r0, r1, c0, c1 in upper_tile_ranges(n, ctx.tile):
                diagonal = r0 == c0
                yr, yc = (labels[r0:r1], labels[c0:c1]) if labelled else (None, None)
                s, same, sign, _ = _symmetric_block(
                    x[r0:r1], x[c0:c1], yr, yc, ctx.abs_negatives, diagonal, want_sign=True
                )
                # d/ds' of the row terms (softmax of rows r0:r1) and, off the diagonal, of the
                # column terms (rows c0:c1 see the same entries transposed); one combined block.
                if diagonal:
                    h = s.sub_(lse[r0:r1, None]).exp_().mul_(g_lse[r0:r1, None])
                else:
                    h = (s - lse[None, c0:c1]).exp_().mul_(g_lse[None, c0:c1])
                    h.add_(s.sub_(lse[r0:r1, None]).exp_().mul_(g_lse[r0:r1, None]))
                if sign is not None:  # d|s|/ds = sign(s) on the negatives
                    h.mul_(sign)
                if g_pos is not None:
                    g_col = 0.0 if diagonal else g_pos[None, c0:c1]
                    h.add_(torch.where(same, g_pos[r0:r1, None] + g_col, 0.0))
                if diagonal:  # s = x_r·x_rᵀ: both factors are the same rows
                    grad_x[r0:r1].addmm_(h + h.T, x[r0:r1])
                else:
                    grad_x[r0:r1].addmm_(h, x[c0:c1])
                    grad_x[c0:c1].addmm_(h.T, x[r0:r1])
        return grad_x, None, None, None


def tiled_symmetric_logsumexp(
    x: Tensor, labels: Tensor | None = None, abs_negatives: bool = False, tile_size: int = DEFAULT_TILE_SIZE
) -> tuple[Tensor, Tensor]:
    """:func:`tiled_row_logsumexp` of ``x`` against itself, each off-diagonal block computed once.

    With ``s = x·xᵀ`` symmetric (one process: the candidates are the anchors; pass
    ``n(z) / √τ`` so that ``s = n(z)·n(z)ᵀ / τ``), block ``(I, J)`` of the upper triangle is
    computed once and folded into the online log-sum-exp of rows ``I`` (along its rows) and of
    rows ``J`` (along its columns); the backward recomputes it once and gets both gradient
    contributions from it: ``dL/dx = (G + Gᵀ)·x``. Half the block matmuls of the general form
    in the forward, half the recomputations and half the gradient matmuls in the backward; same
    values: ``lse_i = log Σ_{j≠i} exp(s'_ij)`` and ``pos_i = Σ_{j≠i, y_j = y_i} s_ij``.

    Args:
        x: Rows whose pairwise dot products are the logits. Shape: ``(N, D)``.
        labels: Integer labels (positives: same label, not self), or ``None``. Shape: ``(N,)``.
        abs_negatives: Use ``|s|`` for the non-positive pairs (OCL).
        tile_size: Block edge, ``>= 1``.

    Returns:
        ``(lse, pos)``, each of shape ``(N,)`` (``pos`` is zeros without labels).
    """
    check_block_edge(tile_size)
    return _TiledSymmetricLogSumExp.apply(x, labels, bool(abs_negatives), int(tile_size))
