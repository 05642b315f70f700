"""A kill during a checkpoint save, on 2 real processes, then ``resume_from_checkpoint=True`` on 2 processes:
the run ends with the weights of an uninterrupted 2-process run and no leftover of the interrupted save.

The same script as the soak test (``distributed_scripts/soak_run.py``) under
``accelerate launch --multi_gpu --num_processes 2`` (gloo on CPU). With ``--die_in_save_at 20`` rank 0
SIGKILLs itself while it writes ``checkpoint-20`` (its weights written, its optimizer state not), and the
launcher stops rank 1: a kill at a known moment of a save, whatever the machine's load.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from _launch import free_port, launch_env, trainer_resumes_across_processes_on_cpu
from safetensors.torch import load_file

SCRIPT = Path(__file__).parents[1] / "distributed_scripts" / "soak_run.py"
MAX_STEPS, SAVE_STEPS = 40, 10

pytestmark = pytest.mark.distributed


def _launch(output_dir: Path, log, *extra: str) -> subprocess.Popen:
    root = str(Path(__file__).resolve().parents[2])
    command = [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
        "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
        "--main_process_port", str(free_port()),
        str(SCRIPT), "--output_dir", str(output_dir), "--max_steps", str(MAX_STEPS), "--save_steps", str(SAVE_STEPS),
        *extra,
    ]  # fmt: skip
    return subprocess.Popen(
        command, stdout=log, stderr=subprocess.STDOUT, env=launch_env(root), start_new_session=True
    )


def _finish(process: subprocess.Popen, log_path: Path) -> None:
    try:
        process.wait(timeout=400)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        pytest.fail(f"the run did not finish:\n{log_path.read_text()[-4000:]}")
    assert process.returncode == 0, log_path.read_text()[-4000:]


@pytest.mark.skipif(
    not trainer_resumes_across_processes_on_cpu(),
    reason="this transformers' Trainer cannot resume several CPU processes (optimizer state mapped to cpu:0)",
)
def test_a_kill_during_a_save_on_two_processes_resumes_to_the_uninterrupted_weights(tmp_path) -> None:
    reference_log, killed_log = tmp_path / "reference.log", tmp_path / "killed.log"
    with open(reference_log, "w") as log:
        _finish(_launch(tmp_path / "reference", log), reference_log)
    reference = load_file(str(tmp_path / "reference" / "final.safetensors"))

    output_dir = tmp_path / "killed"
    with open(killed_log, "w") as log:
        process = _launch(output_dir, log, "--die_in_save_at", str(2 * SAVE_STEPS))
        assert process.wait(timeout=400) != 0, killed_log.read_text()[-4000:]
    torn = output_dir / f"checkpoint-{2 * SAVE_STEPS}"
    assert torn.is_dir() and not (torn / "trainer_state.json").exists()  # killed in the middle of this save
    assert not (output_dir / "final.safetensors").exists()
    with open(killed_log, "a") as log:
        _finish(_launch(output_dir, log), killed_log)
    resumed = load_file(str(output_dir / "final.safetensors"))
    for key in reference:
        assert torch.equal(resumed[key], reference[key]), f"{key} differs from the uninterrupted run"
    leftovers = [p.name for p in output_dir.iterdir() if p.is_dir() and not p.name.startswith("checkpoint-")]
    assert not leftovers, f"leftovers of the interrupted save: {leftovers}"
