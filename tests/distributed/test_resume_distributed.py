"""2 real CPU processes (gloo): a kill during a checkpoint save, then ``resume_from_checkpoint=True``, ends
with the parameters of the uninterrupted run (``tests/distributed_scripts/checkpoint_resume.py``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from _launch import free_port, launch_env, trainer_resumes_across_processes_on_cpu

SCRIPT = Path(__file__).parents[1] / "distributed_scripts" / "checkpoint_resume.py"

pytestmark = [pytest.mark.distributed, pytest.mark.slow]  # three 2-process launches: about 100 s on 2 CPU cores


def _launch(out_dir: Path, phase: str) -> subprocess.CompletedProcess:
    command = [  # what a user types: accelerate launch --multi_gpu --num_processes 2 (gloo on CPU)
        sys.executable, "-m", "accelerate.commands.launch",
        "--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
        "--dynamo_backend", "no", "--main_process_port", str(free_port()),
        str(SCRIPT), str(out_dir), phase,
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=launch_env())


@pytest.mark.skipif(
    not trainer_resumes_across_processes_on_cpu(),
    reason="this transformers release maps optimizer state to cpu:0 when resuming several CPU processes",
)
def test_two_processes_killed_during_a_save_resume_exactly(tmp_path) -> None:
    for phase in ("full", "killed", "resumed"):
        done = _launch(tmp_path, phase)
        if (done.returncode != 0) != (phase == "killed"):
            pytest.fail(
                f"{phase}: accelerate launch returned {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
            )
        if phase == "killed":
            run = tmp_path / "run"
            assert sorted(p.name for p in run.iterdir() if p.name.startswith("checkpoint-")) == [
                "checkpoint-2",
                "checkpoint-4",
            ]
            assert not (run / "checkpoint-4" / "trainer_state.json").exists()  # killed before the end of its save
    full = torch.load(tmp_path / "full.pt", weights_only=True)
    resumed = torch.load(tmp_path / "resumed.pt", weights_only=True)
    assert sorted(resumed["losses"]) == [1, 2, 3, 4, 5, 6]  # 1-2 from checkpoint-2's log history
    assert [resumed["losses"][s] for s in (3, 4, 5, 6)] == pytest.approx(
        [full["losses"][s] for s in (3, 4, 5, 6)], rel=1e-5
    )
    for name, value in resumed["parameters"].items():
        torch.testing.assert_close(value, full["parameters"][name], atol=1e-6, rtol=1e-5, msg=name)
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["checkpoint-6"]  # leftovers removed, rotated
