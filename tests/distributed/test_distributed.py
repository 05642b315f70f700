"""``gather_distributed=True`` with 2 real CPU processes equals one process on the whole batch (§8).

Launches ``tests/distributed_scripts/gather_losses.py`` with ``torch.distributed.run`` (gloo) and
compares the mean over ranks of the loss values, and the DDP-averaged parameter gradients, with a
single process on the concatenated global batch, to 1e-5.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
from _launch import free_port, launch_env, load_script

SCRIPT = Path(__file__).parents[1] / "distributed_scripts" / "gather_losses.py"
WORLD_SIZE = 2

pytestmark = pytest.mark.distributed


def _load_script() -> ModuleType:
    return load_script("gather_losses", SCRIPT)


@pytest.fixture(scope="module")
def rank_results(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, dict[str, object]]]:
    out_dir = tmp_path_factory.mktemp("gather_losses")
    command = [
        sys.executable, "-m", "torch.distributed.run",
        "--nproc_per_node", str(WORLD_SIZE), "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
        str(SCRIPT), str(out_dir),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=launch_env())
    if done.returncode != 0:
        pytest.fail(f"torchrun failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return [torch.load(out_dir / f"rank{r}.pt") for r in range(WORLD_SIZE)]


@pytest.mark.parametrize(
    ("loss_name", "split"),
    [
        (name, split)
        for name in ("info_nce", "supcon", "ocl", "uniformity", "spectral")
        for split in ("equal", "unequal")
    ]
    + [("afcl", "equal")],
)
def test_two_processes_equal_one_process_on_the_global_batch(
    rank_results: list[dict[str, dict[str, object]]], loss_name: str, split: str
) -> None:
    script = _load_script()
    model, x1, x2, labels = script.build_problem()
    single_loss, single_grads = script.loss_and_grads(loss_name, model, x1, x2, labels, gather_distributed=False)

    per_rank = [results[f"{split}/{loss_name}"] for results in rank_results]
    mean_loss = torch.stack([r["loss"] for r in per_rank]).mean()
    torch.testing.assert_close(mean_loss, single_loss, rtol=0, atol=1e-5)
    for rank, result in enumerate(per_rank):
        for got, expected in zip(result["grads"], single_grads, strict=True):
            torch.testing.assert_close(got, expected, rtol=0, atol=1e-5, msg=f"rank {rank} gradient")
    assert any(g.abs().max() > 1e-3 for g in single_grads)  # the comparison is not trivially 0 == 0

    # Without the gather each process sees fewer negatives: the comparison above can fail.
    local_only = torch.stack([r["local_only_loss"] for r in per_rank]).mean()
    assert (local_only - single_loss).abs() > 1e-3
