"""Rank script for ``tests/losses/test_tiled.py``: tiled losses with ``gather_distributed=True``.

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

sys.path.insert(0, str(Path(__file__).parent))
from loss_problem import linear_problem, loss_and_grads  # noqa: E402
from process_end import finish_process  # noqa: E402

SIZES = (5, 9)  # unequal local batches: positives, negatives and tiles cross the process boundary
LOSSES = ("info_nce", "supcon", "ocl", "uniformity")


def build_problem() -> tuple[nn.Module, Tensor, Tensor, Tensor]:
    """The model and the global batch ``(x1, x2, labels)``, identical in every process."""
    return linear_problem(torch.tensor([0, 1, 2, 0, 1, 2, 3, 0, 1, 2, 3, 0, 4, 5]))  # 4 and 5: no positive


def main(out_dir: Path, tile_size: int) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model, x1, x2, labels = build_problem()
    start = sum(SIZES[:rank])
    rows = slice(start, start + SIZES[rank])
    results: dict[str, dict[str, object]] = {}
    for name in LOSSES:
        for form, tile in (("tiled", tile_size), ("dense", 0)):
            loss, grads = loss_and_grads(
                name, model, x1[rows], x2[rows], labels[rows], gather_distributed=True, tile_size=tile
            )
            for grad in grads:  # DDP: all-reduce, then divide by the number of processes
                dist.all_reduce(grad, op=dist.ReduceOp.SUM)
                grad /= world
            results[f"{name}/{form}"] = {"loss": loss, "grads": grads}
    torch.save(results, out_dir / f"rank{rank}.pt")
    finish_process()


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
