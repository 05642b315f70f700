"""Process-group helpers and an autograd-aware all-gather.

Contrastive losses get better with more negatives. Under data parallelism each process only
sees its local batch, so the losses that accept ``gather_distributed=True`` compare their local
anchors with the candidates gathered from *every* process. The gather below keeps the autograd
graph: its backward sums, over all processes, the gradient that reaches each process's own
slice (``all_reduce`` then slice, no extra ``1/world_size``). Together with the usual
gradient averaging of DDP/Accelerate this makes the parameter gradients equal those of one
process on the concatenated global batch (docs/methods.md §8).

All helpers work when ``torch.distributed`` is unavailable or not initialised: they then
behave as a world of one process.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor

__all__ = ["is_distributed", "rank", "world_size", "gather", "gather_equal", "gather_with_offset"]


def is_distributed() -> bool:
    """Whether a ``torch.distributed`` process group is initialised."""
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    """This process's rank, 0 when not distributed."""
    return dist.get_rank() if is_distributed() else 0


def world_size() -> int:
    """The number of processes, 1 when not distributed."""
    return dist.get_world_size() if is_distributed() else 1


class _GatherWithGrad(torch.autograd.Function):
    """All-gather rows of possibly different counts; backward sums gradients to their owner."""

    @staticmethod
    def forward(ctx, x: Tensor, sizes: list[int]) -> Tensor:  # type: ignore[override]
        ctx.sizes = sizes
        ctx.rank = dist.get_rank()
        max_size = max(sizes)
        if x.shape[0] < max_size:  # all_gather needs equal shapes: pad, then strip
            pad = x.new_zeros((max_size - x.shape[0], *x.shape[1:]))
            x_padded = torch.cat([x, pad], dim=0)
        else:
            x_padded = x
        buffers = [torch.empty_like(x_padded) for _ in sizes]
        dist.all_gather(buffers, x_padded.contiguous())
        return torch.cat([b[:n] for b, n in zip(buffers, sizes)], dim=0)

    @staticmethod
    def backward(ctx, grad_output: Tensor) -> tuple[Tensor, None]:  # type: ignore[override]
        grad = grad_output.contiguous()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM)
        start = sum(ctx.sizes[: ctx.rank])
        return grad[start : start + ctx.sizes[ctx.rank]], None


def _all_sizes(n: int, device: torch.device) -> list[int]:
    local = torch.tensor([n], device=device, dtype=torch.long)
    sizes = [torch.zeros_like(local) for _ in range(world_size())]
    dist.all_gather(sizes, local)
    return [int(s.item()) for s in sizes]


def gather_with_offset(x: Tensor) -> tuple[Tensor, int]:
    """Concatenate ``x`` from all processes along dim 0, keeping gradients.

    Args:
        x: Local tensor. Shape: ``(B_local, ...)``; ``B_local`` may differ between processes.

    Returns:
        ``(gathered, offset)``: ``gathered`` has shape ``(sum of B_local, ...)`` in rank order,
        and ``offset`` is the row at which this process's own ``x`` starts in it. Without an
        initialised process group: ``(x, 0)``.

    >>> z, offset = gather_with_offset(torch.ones(4, 2))  # not distributed
    >>> z.shape, offset
    (torch.Size([4, 2]), 0)
    """
    if world_size() == 1:
        return x, 0
    sizes = _all_sizes(x.shape[0], x.device)
    return _GatherWithGrad.apply(x, sizes), sum(sizes[: rank()])


def gather(x: Tensor) -> Tensor:
    """Concatenate ``x`` from all processes along dim 0, keeping gradients.

    Shape: ``(B_local, ...)`` -> ``(sum of B_local, ...)``. Identity when not distributed.
    """
    return gather_with_offset(x)[0]


def gather_equal(x: Tensor) -> Tensor:
    """:func:`gather` for a tensor of the same shape on every process (e.g. a per-process sum, SimO's ``C`` class
    groups): no exchange of sizes first. Shape: ``(n, ...)`` -> ``(world_size · n, ...)``; identity when not
    distributed. The caller promises equal shapes (``all_gather`` fails or hangs otherwise)."""
    if world_size() == 1:
        return x
    return _GatherWithGrad.apply(x, [x.shape[0]] * world_size())
