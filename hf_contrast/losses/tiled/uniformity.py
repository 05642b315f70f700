"""Tiled uniformity: per-row log-sum-exp of ``−t·max(‖a_i‖² + ‖c_j‖² − 2 a_i·c_j, 0)``, self excluded.

:func:`tiled_uniformity_logsumexp` is the general form (local rows × gathered rows);
:func:`tiled_symmetric_uniformity_logsumexp` the one-process form, each off-diagonal block once.
"""

from __future__ import annotations

import torch
from torch import Tensor

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

__all__ = ["tiled_uniformity_logsumexp", "tiled_symmetric_uniformity_logsumexp"]


def _uniformity_block(
    a: Tensor, c: Tensor, sq_a: Tensor, sq_c: Tensor, t: float, own: int | None
) -> tuple[Tensor, Tensor]:
    raw = torch.addmm(sq_a[:, None] + sq_c[None, :], a, c.T, alpha=-2.0)  # squared distances
    logits = raw.clamp_min(0.0) * -t
    if own is not None:  # the block's diagonal of the anchors' own entries (:func:`self_diagonal`)
        logits.diagonal(own).fill_(float("-inf"))
    return raw, logits


class _TiledUniformity(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, c, sq_a, sq_c, offset, t, tile):  # type: ignore[override]
        n, m = a.shape[0], c.shape[0]
        device = a.device
        with torch.autocast(device_type=device.type, enabled=False):
            lse = a.new_empty(n)
            for r0, r1 in tile_ranges(n, tile):
                run_max = a.new_full((r1 - r0,), float("-inf"))
                run_sum = a.new_zeros(r1 - r0)
                for c0, c1 in tile_ranges(m, tile):
                    _, logits = _uniformity_block(
                        a[r0:r1], c[c0:c1], sq_a[r0:r1], sq_c[c0:c1], t, self_diagonal(r0, r1, c0, c1, offset)
                    )
                    run_max = online_logsumexp_update(run_max, run_sum, logits)
                lse[r0:r1] = finish_logsumexp(run_max, run_sum)
        ctx.save_for_backward(a, c, sq_a, sq_c, lse)
        ctx.offset, ctx.t, ctx.tile = offset, t, tile
        return lse

    @staticmethod
    def backward(ctx, grad_lse):  # type: ignore[override]
        a, c, sq_a, sq_c, lse = ctx.saved_tensors
        n, m = a.shape[0], c.shape[0]
        device = a.device
        with torch.autocast(device_type=device.type, enabled=False):
            grad_a, grad_c = torch.zeros_like(a), torch.zeros_like(c)
            grad_sq_a, grad_sq_c = torch.zeros_like(sq_a), torch.zeros_like(sq_c)
            for r0, r1 in tile_ranges(n, ctx.tile):
                for c0, c1 in tile_ranges(m, ctx.tile):
                    own = self_diagonal(r0, r1, c0, c1, ctx.offset)
                    raw, logits = _uniformity_block(a[r0:r1], c[c0:c1], sq_a[r0:r1], sq_c[c0:c1], ctx.t, own)
                    # d lse_i / d raw_ij = softmax_ij · (−t) where the clamp passes (raw >= 0).
                    g = logits.sub_(lse[r0:r1, None]).exp_().mul_(grad_lse[r0:r1, None] * -ctx.t)
                    g = torch.where(raw >= 0, g, 0.0)
                    grad_sq_a[r0:r1] += g.sum(dim=1)
                    grad_sq_c[c0:c1] += g.sum(dim=0)
                    grad_a[r0:r1].addmm_(g, c[c0:c1], alpha=-2.0)
                    grad_c[c0:c1].addmm_(g.T, a[r0:r1], alpha=-2.0)
        return grad_a, grad_c, grad_sq_a, grad_sq_c, None, None, None


def tiled_uniformity_logsumexp(
    a: Tensor, c: Tensor, sq_a: Tensor, sq_c: Tensor, offset: int, t: float, tile_size: int = DEFAULT_TILE_SIZE
) -> Tensor:
    """Per-row ``log Σ_{j ≠ offset+i} exp(−t·max(sq_a_i + sq_c_j − 2 a_i·c_j, 0))``.

    The log-mean-exp of the uniformity loss is ``logsumexp`` of the result minus the log of the
    pair count. Memory ``O((N + M)·D + tile²)``.

    Args:
        a: Local embeddings. Shape: ``(N, D)``.
        c: All candidates; ``c[offset:offset + N]`` are ``a``. Shape: ``(M, D)``.
        sq_a: ``‖a_i‖²``. Shape: ``(N,)``.
        sq_c: ``‖c_j‖²``. Shape: ``(M,)``.
        offset: Row of ``c`` at which ``a`` starts.
        t: Scale ``t > 0``.
        tile_size: Block edge, ``>= 1``.

    Returns:
        Shape: ``(N,)``.
    """
    check_block_edge(tile_size)
    return _TiledUniformity.apply(a, c, sq_a, sq_c, int(offset), float(t), int(tile_size))


class _TiledSymmetricUniformity(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, sq, t, tile):  # type: ignore[override]
        n = a.shape[0]
        with torch.autocast(device_type=a.device.type, enabled=False):
            run_max = a.new_full((n,), float("-inf"))
            run_sum = a.new_zeros(n)
            for r0, r1, c0, c1 in upper_tile_ranges(n, tile):
                diagonal = r0 == c0
                _, logits = _uniformity_block(
                    a[r0:r1], a[c0:c1], sq[r0:r1], sq[c0:c1], t, self_diagonal(r0, r1, c0, c1, 0)
                )
                if not diagonal:  # the block's columns are rows c0:c1 of the (symmetric) matrix
                    run_max[c0:c1] = fold_columns(run_max[c0:c1], run_sum[c0:c1], logits)
                run_max[r0:r1] = online_logsumexp_update(run_max[r0:r1], run_sum[r0:r1], logits)
            lse = finish_logsumexp(run_max, run_sum)
        ctx.save_for_backward(a, sq, lse)
        ctx.t, ctx.tile = t, tile
        return lse

    @staticmethod
    def backward(ctx, grad_lse):  # type: ignore[override]
        a, sq, lse = ctx.saved_tensors
        n = a.shape[0]
        with torch.autocast(device_type=a.device.type, enabled=False):
            grad_a, grad_sq = torch.zeros_like(a), torch.zeros_like(sq)
            for r0, r1, c0, c1 in upper_tile_ranges(n, ctx.tile):
                diagonal = r0 == c0
                raw, logits = _uniformity_block(
                    a[r0:r1], a[c0:c1], sq[r0:r1], sq[c0:c1], ctx.t, self_diagonal(r0, r1, c0, c1, 0)
                )
                # d/d raw of the row terms and, off the diagonal, of the column terms (rows c0:c1
                # see the same distances transposed), times −t where the clamp passes.
                if diagonal:
                    g = logits.sub_(lse[r0:r1, None]).exp_().mul_(grad_lse[r0:r1, None])
                else:
                    g = (logits - lse[None, c0:c1]).exp_().mul_(grad_lse[None, c0:c1])
                    g.add_(logits.sub_(lse[r0:r1, None]).exp_().mul_(grad_lse[r0:r1, None]))
                g = torch.where(raw >= 0, g, 0.0).mul_(-ctx.t)
                if diagonal:  # raw = sq_r + sq_rᵀ − 2 a_r·a_rᵀ: both sides are the same rows
                    g = g + g.T
                    grad_sq[r0:r1] += g.sum(dim=1)
                    grad_a[r0:r1].addmm_(g, a[r0:r1], alpha=-2.0)
                else:
                    grad_sq[r0:r1] += g.sum(dim=1)
                    grad_sq[c0:c1] += g.sum(dim=0)
                    grad_a[r0:r1].addmm_(g, a[c0:c1], alpha=-2.0)
                    grad_a[c0:c1].addmm_(g.T, a[r0:r1], alpha=-2.0)
        return grad_a, grad_sq, None, None


def tiled_symmetric_uniformity_logsumexp(
    a: Tensor, sq: Tensor, t: float, tile_size: int = DEFAULT_TILE_SIZE
) -> Tensor:
    """:func:`tiled_uniformity_logsumexp` of ``a`` against itself, each off-diagonal block once.

    The distance matrix of one process's rows is symmetric: block ``(I, J)`` of the upper
    triangle is computed once for the log-sum-exp of rows ``I`` and of rows ``J``, and
    recomputed once in the backward for both gradient contributions (as
    :func:`tiled_symmetric_logsumexp`).

    Args:
        a: Embeddings. Shape: ``(N, D)``.
        sq: ``‖a_i‖²``. Shape: ``(N,)``.
        t: Scale ``t > 0``.
        tile_size: Block edge, ``>= 1``.

    Returns:
        ``log Σ_{j≠i} exp(−t·max(sq_i + sq_j − 2 a_i·a_j, 0))``. Shape: ``(N,)``.
    """
    check_block_edge(tile_size)
    return _TiledSymmetricUniformity.apply(a, sq, float(t), int(tile_size))
