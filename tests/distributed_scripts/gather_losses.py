"""Rank script for ``tests/distributed/test_distributed.py``: contrastive losses with ``gather_distributed=True``.

Launch (2 CPU processes, gloo):
    python -m torch.distributed.run --nproc_per_node 2 --master_port PORT gather_losses.py OUT_DIR

Every rank builds the same tiny model (``nn.Linear``, no batch statistics) and the same global
batch, takes its slice, computes each loss with ``gather_distributed=True``, back-propagates and
all-reduce-averages the parameter gradients (what DDP does). SimO's AFCL scores every process's class groups as
one batch: each rank's loss is the global one. It saves the loss values and the
averaged gradients to ``OUT_DIR/rank{r}.pt``. The test imports :func:`build_problem` and
:func:`loss_and_grads` to compute the single-process reference on the concatenated batch.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).parent))
from loss_problem import linear_problem, loss_and_grads  # noqa: E402
from process_end import finish_process  # noqa: E402

# Local batch sizes of rank 0 and rank 1: the equal split is the spec's invariant; the unequal one
# checks that each process's share is scaled so that the plain mean over processes still matches.
SPLITS = {"equal": (6, 6), "unequal": (4, 8)}
LOSSES = (
    "info_nce",
    "supcon",
    "ocl",
    "uniformity",
    "spectral",
    "afcl",
)  # afcl: 2 classes x 3 rows per rank, equal split only


def build_problem() -> tuple[nn.Module, Tensor, Tensor, Tensor]:
    """The model and the global batch ``(x1, x2, labels)``, identical in every process."""
    # Every class appears on both ranks for the equal split, and class 3 only on rank 1, so
    # positives and negatives cross the process boundary.
    return linear_problem(torch.tensor([0, 1, 2, 0, 1, 2, 3, 0, 1, 2, 3, 0]))


def main(out_dir: Path) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model, x1, x2, labels = build_problem()
    results: dict[str, dict[str, object]] = {}
    for split_name, sizes in SPLITS.items():
        start = sum(sizes[:rank])
        rows = slice(start, start + sizes[rank])
        for name in LOSSES:
            if name == "afcl" and split_name != "equal":  # AFCL batches are C x k on every process
                continue
            loss, grads = loss_and_grads(name, model, x1[rows], x2[rows], labels[rows], gather_distributed=True)
            for grad in grads:  # DDP: all-reduce, then divide by the number of processes
                dist.all_reduce(grad, op=dist.ReduceOp.SUM)
                grad /= world
            local_only, _ = loss_and_grads(name, model, x1[rows], x2[rows], labels[rows], gather_distributed=False)
            results[f"{split_name}/{name}"] = {"loss": loss, "grads": grads, "local_only_loss": local_only}
    torch.save(results, out_dir / f"rank{rank}.pt")
    finish_process()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
