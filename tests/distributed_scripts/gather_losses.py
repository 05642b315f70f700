"""Rank script for ``tests/test_distributed.py``: contrastive losses with ``gather_distributed=True``.

Launch (2 CPU processes, gloo):
    python -m torch.distributed.run --nproc_per_node 2 --master_port PORT gather_losses.py OUT_DIR

Every rank builds the same tiny model (``nn.Linear``, no batch statistics) and the same global
batch, takes its slice, computes each loss with ``gather_distributed=True``, back-propagates and
all-reduce-averages the parameter gradients (what DDP does). It saves the loss values and the
averaged gradients to ``OUT_DIR/rank{r}.pt``. The test imports :func:`build_problem` and
:func:`loss_and_grads` to compute the single-process reference on the concatenated batch.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import Tensor, nn

from hf_contrast.losses import info_nce_loss, ocl_loss, supcon_loss

GLOBAL_BATCH = 12
# Local batch sizes of rank 0 and rank 1: the equal split is the spec's invariant; the unequal one
# checks that each process's share is scaled so that the plain mean over processes still matches.
SPLITS = {"equal": (6, 6), "unequal": (4, 8)}
LOSSES = ("info_nce", "supcon", "ocl")


def build_problem() -> tuple[nn.Module, Tensor, Tensor, Tensor]:
    """The model and the global batch ``(x1, x2, labels)``, identical in every process."""
    torch.manual_seed(0)
    model = nn.Linear(8, 4).double()
    g = torch.Generator().manual_seed(1)
    x1 = torch.randn(GLOBAL_BATCH, 8, generator=g, dtype=torch.float64)
    x2 = x1 + 0.3 * torch.randn(GLOBAL_BATCH, 8, generator=g, dtype=torch.float64)
    # Every class appears on both ranks for the equal split, and class 3 only on rank 1, so
    # positives and negatives cross the process boundary.
    labels = torch.tensor([0, 1, 2, 0, 1, 2, 3, 0, 1, 2, 3, 0])
    return model, x1, x2, labels


def loss_and_grads(
    name: str, model: nn.Module, x1: Tensor, x2: Tensor, labels: Tensor, gather_distributed: bool
) -> tuple[Tensor, list[Tensor]]:
    """One loss on the given rows, its backward, and the parameter gradients (not yet averaged)."""
    model.zero_grad(set_to_none=True)
    if name == "info_nce":
        loss = info_nce_loss(model(x1), model(x2), temperature=0.5, gather_distributed=gather_distributed)
    elif name == "supcon":
        loss = supcon_loss(model(x1), labels, temperature=0.1, gather_distributed=gather_distributed)
    else:
        loss = ocl_loss(model(x1), labels, temperature=0.1, gather_distributed=gather_distributed)
    loss.backward()
    return loss.detach(), [p.grad.detach().clone() for p in model.parameters()]


def main(out_dir: Path) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model, x1, x2, labels = build_problem()
    results: dict[str, dict[str, object]] = {}
    for split_name, sizes in SPLITS.items():
        start = sum(sizes[:rank])
        rows = slice(start, start + sizes[rank])
        for name in LOSSES:
            loss, grads = loss_and_grads(name, model, x1[rows], x2[rows], labels[rows], gather_distributed=True)
            for grad in grads:  # DDP: all-reduce, then divide by the number of processes
                dist.all_reduce(grad, op=dist.ReduceOp.SUM)
                grad /= world
            local_only, _ = loss_and_grads(name, model, x1[rows], x2[rows], labels[rows], gather_distributed=False)
            results[f"{split_name}/{name}"] = {"loss": loss, "grads": grads, "local_only_loss": local_only}
    torch.save(results, out_dir / f"rank{rank}.pt")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
