"""Tiled binary NCE (``negatives="all"``): ``Σ_ij log σ(−(a_i·c_j + b))`` block by block."""

from __future__ import annotations

import torch
from torch import Tensor

from .blocks import check_block_edge, tile_ranges
from .tile_size import DEFAULT_TILE_SIZE

__all__ = ["tiled_binary_nce_sum"]


class _TiledBinaryNCE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, c, bias, tile):  # type: ignore[override]
        device = a.device
        with torch.autocast(device_type=device.type, enabled=False):
            total = a.new_zeros(())
            for r0, r1 in tile_ranges(a.shape[0], tile):
                for c0, c1 in tile_ranges(c.shape[0], tile):
                    total += torch.nn.functional.logsigmoid(-(a[r0:r1] @ c[c0:c1].T + bias)).sum()
        ctx.save_for_backward(a, c, bias)
        ctx.tile = tile
        return total

    @staticmethod
    def backward(ctx, grad_total):  # type: ignore[override]
        a, c, bias = ctx.saved_tensors
        device = a.device
        with torch.autocast(device_type=device.type, enabled=False):
            grad_a, grad_c = torch.zeros_like(a), torch.zeros_like(c)
            grad_bias = torch.zeros_like(bias)
            for r0, r1 in tile_ranges(a.shape[0], ctx.tile):
                for c0, c1 in tile_ranges(c.shape[0], ctx.tile):
                    # d log σ(−l) / dl = −σ(l)
                    g = torch.sigmoid(a[r0:r1] @ c[c0:c1].T + bias) * -grad_total
                    grad_bias += g.sum()
                    grad_a[r0:r1].addmm_(g, c[c0:c1])
                    grad_c[c0:c1].addmm_(g.T, a[r0:r1])
        return grad_a, grad_c, grad_bias if ctx.needs_input_grad[2] else None, None


def tiled_binary_nce_sum(a: Tensor, c: Tensor, bias: Tensor, tile_size: int = DEFAULT_TILE_SIZE) -> Tensor:
    """``Σ_ij log σ(−(a_i·c_j + bias))`` over all pairs, block by block.

    Args:
        a: Scaled first view (``n(z1) / τ``). Shape: ``(B, D)``.
        c: Second view. Shape: ``(B', D)``.
        bias: The logit bias, a 0-dim tensor (may require grad).
        tile_size: Block edge, ``>= 1``.

    Returns:
        Scalar tensor.
    """
    check_block_edge(tile_size)
    return _TiledBinaryNCE.apply(a, c, bias, int(tile_size))
