"""Rank script for ``tests/test_tiled.py``: tiled losses with ``gather_distributed=True``.

Launch (2 CPU processes, gloo):
    python -m torch.distributed.run --nproc_per_node 2 --master_port PORT tiled_losses.py OUT_DIR TILE

Every rank builds the same tiny model (``nn.Linear``, float64) and global batch, takes its slice
of an unequal split (5 and 9 rows), computes InfoNCE, SupCon, OCL and uniformity with
``gather_distributed=True`` once tiled (``tile_size=TILE``) and once dense (``tile_size=0``),
back-propagates and all-reduce-averages the parameter gradients (what DDP does). It saves both
to ``OUT_DIR/rank{r}.pt``. The test imports :func:`build_problem` and :func:`loss_and_grads` for
the single-process reference on the concatenated batch.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import Tensor, nn

from hf_contrast.losses import info_nce_loss, ocl_loss, supcon_loss, uniformity_loss

GLOBAL_BATCH = 14
SIZES = (5, 9)  # unequal local batches: positives, negatives and tiles cross the process boundary
LOSSES = ("info_nce", "supcon", "ocl", "uniformity")


def build_problem() -> tuple[nn.Module, Tensor, Tensor, Tensor]:
    """The model and the global batch ``(x1, x2, labels)``, identical in every process."""
    torch.manual_seed(0)
    model = nn.Linear(8, 4).double()
    g = torch.Generator().manual_seed(1)
    x1 = torch.randn(GLOBAL_BATCH, 8, generator=g, dtype=torch.float64)
    x2 = x1 + 0.3 * torch.randn(GLOBAL_BATCH, 8, generator=g, dtype=torch.float64)
    labels = torch.tensor([0, 1, 2, 0, 1, 2, 3, 0, 1, 2, 3, 0, 4, 5])  # 4 and 5: no positive
    return model, x1, x2, labels


def loss_and_grads(
    name: str, model: nn.Module, x1: Tensor, x2: Tensor, labels: Tensor, gather_distributed: bool, tile_size: int
) -> tuple[Tensor, list[Tensor]]:
    """One loss on the given rows, its backward, and the parameter gradients (not yet averaged)."""
    model.zero_grad(set_to_none=True)
    kwargs = {"gather_distributed": gather_distributed, "tile_size": tile_size}
    if name == "info_nce":
        loss = info_nce_loss(model(x1), model(x2), temperature=0.5, **kwargs)
    elif name == "supcon":
        loss = supcon_loss(model(x1), labels, temperature=0.1, **kwargs)
    elif name == "ocl":
        loss = ocl_loss(model(x1), labels, temperature=0.1, **kwargs)
    else:
        loss = uniformity_loss(model(x1), t=2, **kwargs)
    loss.backward()
    return loss.detach(), [p.grad.detach().clone() for p in model.parameters()]


def main(out_dir: Path, tile_size: int) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model, x1, x2, labels = build_problem()
    start = sum(SIZES[:rank])
    rows = slice(start, start + SIZES[rank])
    results: dict[str, dict[str, object]] = {}
    for name in LOSSES:
        for form, tile in (("tiled", tile_size), ("dense", 0)):
            loss, grads = loss_and_grads(name, model, x1[rows], x2[rows], labels[rows], True, tile)
            for grad in grads:  # DDP: all-reduce, then divide by the number of processes
                dist.all_reduce(grad, op=dist.ReduceOp.SUM)
                grad /= world
            results[f"{name}/{form}"] = {"loss": loss, "grads": grads}
    torch.save(results, out_dir / f"rank{rank}.pt")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
