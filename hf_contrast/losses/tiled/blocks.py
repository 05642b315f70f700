"""The tiling machinery shared by the tiled losses: block ranges, the anchors' own entries, online log-sum-exp.

A ``tile × tile`` block of an ``(N, M)`` similarity matrix is ``[r0:r1] × [c0:c1]``; each block is reduced
at once into per-row running statistics (max and sum of ``exp(logit - max)``), so nothing of size ``N × M``
is kept.
"""

from __future__ import annotations

import torch
from torch import Tensor

from hf_contrast.errors import InputError

__all__ = [
    "check_block_edge",
    "finish_logsumexp",
    "fold_columns",
    "online_logsumexp_update",
    "self_diagonal",
    "tile_ranges",
    "upper_tile_ranges",
]


def check_block_edge(tile_size: int) -> None:
    """Refuse a tile edge below 1 on the tiled path (``0`` means dense and is resolved before)."""
    if tile_size < 1:
        raise InputError(f"`tile_size` must be >= 1 for the tiled path, got {tile_size}.")


def self_diagonal(r0: int, r1: int, c0: int, c1: int, offset: int) -> int | None:
    """The diagonal of block ``[r0:r1] × [c0:c1]`` (``k`` of ``block.diagonal(k)``) that holds the anchors' own
    entries (column ``offset + i`` for row ``i``), or ``None`` when the block holds none.

    Filled in place with ``block.diagonal(k).fill_(value)``: no index tensor, and no scalar copied from the host
    (``block[rows, cols] = value`` copies the value to the device and waits for it on CUDA).
    """
    if max(r0, c0 - offset) >= min(r1, c1 - offset):
        return None
    return r0 + offset - c0


def tile_ranges(n: int, tile: int) -> list[tuple[int, int]]:
    """``(start, stop)`` of the consecutive tiles of ``range(n)``; the last one may be shorter."""
    return [(start, min(start + tile, n)) for start in range(0, n, tile)]


def online_logsumexp_update(run_max: Tensor, run_sum: Tensor, logits: Tensor) -> Tensor:
    """Fold one block into the running row max / sum (``run_sum`` in place); returns the new max.

    Destroys ``logits``. Rows that are still all ``-inf`` keep a zero shift (no ``inf - inf``).
    """
    new_max = torch.maximum(run_max, logits.amax(dim=1))
    shift = torch.where(torch.isfinite(new_max), new_max, 0.0)
    run_sum.mul_(torch.exp(run_max - shift)).add_(logits.sub_(shift[:, None]).exp_().sum(dim=1))
    return new_max


def finish_logsumexp(run_max: Tensor, run_sum: Tensor) -> Tensor:
    """The log-sum-exp of each row from its running max and sum (``0 + log 0 = -inf`` for empty rows)."""
    return torch.where(torch.isfinite(run_max), run_max, 0.0) + torch.log(run_sum)


def fold_columns(run_max: Tensor, run_sum: Tensor, logits: Tensor) -> Tensor:
    """:func:`online_logsumexp_update` along ``dim=0`` (the block's columns); keeps ``logits``."""
    new_max = torch.maximum(run_max, logits.amax(dim=0))
    shift = torch.where(torch.isfinite(new_max), new_max, 0.0)
    run_sum.mul_(torch.exp(run_max - shift)).add_((logits - shift[None, :]).exp_().sum(dim=0))
    return new_max


def upper_tile_ranges(n: int, tile: int) -> list[tuple[int, int, int, int]]:
    """``(r0, r1, c0, c1)`` of the diagonal and upper-triangle blocks of an ``n × n`` matrix."""
    blocks = tile_ranges(n, tile)
    return [(r0, r1, c0, c1) for i, (r0, r1) in enumerate(blocks) for (c0, c1) in blocks[i:]]
