"""2 real CPU processes (gloo) with ``gather_distributed=True`` train like one process on the global batch.

Launches ``tests/distributed_scripts/trainer_distributed.py`` with ``accelerate launch --multi_gpu
--num_processes 2`` (``transformers.Trainer`` picks the process group up from the environment) and compares,
after a few SGD steps on fixed views, the parameters of CARETrainer and OCLTrainer with a single process trained on
batches of twice the size (and twice the CARE splits, so chunks keep their size), to 1e-5; and SimOTrainer with one
process on batches of twice the classes.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from _launch import free_port, launch_env, load_script

SCRIPT = Path(__file__).parents[1] / "distributed_scripts" / "trainer_distributed.py"
WORLD_SIZE = 2

pytestmark = pytest.mark.distributed


def _load_script() -> ModuleType:
    return load_script("trainer_distributed", SCRIPT)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict[str, Any]]]:
    out_dir = tmp_path_factory.mktemp("trainer_distributed")
    command = [  # what a user types: accelerate launch --multi_gpu --num_processes 2 (gloo on CPU)
        sys.executable, "-m", "accelerate.commands.launch",
        "--multi_gpu", "--num_processes", str(WORLD_SIZE), "--num_machines", "1", "--mixed_precision", "no",
        "--dynamo_backend", "no", "--main_process_port", str(free_port()),
        str(SCRIPT), str(out_dir),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=launch_env())
    if done.returncode != 0:
        pytest.fail(f"accelerate launch failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}")
    script = _load_script()
    single = {
        method: script.run(
            method, out_dir / "single", WORLD_SIZE * script.LOCAL_BATCH, WORLD_SIZE * script.LOCAL_SPLITS
        )
        for method in ("care", "ocl")
    }
    return out_dir, single


@pytest.mark.parametrize("method", ["care", "care_cached", "ocl"])
def test_two_processes_train_like_one_process_on_the_global_batch(runs, method: str) -> None:
    # care_cached: 2 processes with the encoder in mini-batches of 3 rows (GradCache, DDP all-reduce once per
    # step) give the parameters of ONE process running the direct step on the global batch.
    out_dir, single = runs
    two = torch.load(out_dir / f"{method}.pt", weights_only=False)
    one = single["care" if method == "care_cached" else method]
    initial = _load_script().vit_encoder().state_dict()
    assert any(not torch.equal(one["parameters"][k], initial[k]) for k in one["parameters"])  # it trained
    for name, value in two["parameters"].items():
        torch.testing.assert_close(value, one["parameters"][name], atol=1e-5, rtol=1e-5, msg=name)
    assert two["skipped_batches"] == 0  # OCL: positives exist only across processes, and were found
    # logged totals: the mean over processes of the local loss equals the global-batch loss
    two_losses = [h["loss"] for h in two["log_history"] if "loss" in h]
    one_losses = [h["loss"] for h in one["log_history"] if "loss" in h]
    assert two_losses == pytest.approx(one_losses, rel=1e-5, abs=1e-6)
    if method != "ocl":  # per-term logs are reduced over processes too
        for a, b in zip(
            (h for h in two["log_history"] if "loss" in h), (h for h in one["log_history"] if "loss" in h)
        ):
            assert a["loss_invariance"] == pytest.approx(b["loss_invariance"], rel=1e-5)
            assert a["loss_equivariance"] == pytest.approx(b["loss_equivariance"], rel=1e-4, abs=1e-7)


def test_simo_on_two_processes_trains_like_one_process_on_their_classes(runs) -> None:
    """SimO with `gather_distributed=True`: the 2 processes' class groups (2 classes each, distinct within a step) are
    one AFCL batch, so they train like one process on batches of 4 classes (docs/methods.md §5). Without the gather
    SimO scored each process's 2 classes alone (and ignored the flag)."""
    out_dir, _ = runs
    two = torch.load(out_dir / "simo.pt", weights_only=False)
    one = _load_script().run_simo(out_dir / "single", classes_per_batch=4)
    initial = _load_script().vit_encoder().state_dict()
    assert any(not torch.equal(one["parameters"][k], initial[k]) for k in one["parameters"])  # it trained
    for name, value in two["parameters"].items():
        torch.testing.assert_close(value, one["parameters"][name], atol=1e-5, rtol=1e-5, msg=name)
    for a, b in zip((h for h in two["log_history"] if "loss" in h), (h for h in one["log_history"] if "loss" in h)):
        for key in ("loss", "loss_same", "loss_mean", "loss_diff"):
            assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-7), key


def test_loss_owned_parameters_stay_identical_across_processes(runs) -> None:
    out_dir, _ = runs
    ranks = [torch.load(out_dir / f"binary_nce_rank{r}.pt", weights_only=True) for r in range(WORLD_SIZE)]
    assert ranks[0]["bias"].item() != pytest.approx(-10.0)  # trained
    for name in ranks[0]:
        torch.testing.assert_close(ranks[1][name], ranks[0][name], atol=0, rtol=0)
