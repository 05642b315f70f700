"""Soak test (slow): 2,000 steps with a checkpoint every 50, killed with SIGKILL 5 times (each after 1-6 of its
leg's checkpoints, at a random moment of the next interval: a kill timed in seconds stopped landing once the run got
faster than the delays) and resumed with ``resume_from_checkpoint=True`` after each kill; the final weights must
equal an uninterrupted run's, no leftover of an interrupted save may remain, and the resident memory must stay flat.

Run with ``pytest -m slow tests/distributed/test_soak.py -s`` (it prints the kill moments and the memory growth).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from _launch import launch_env
from safetensors.torch import load_file

SCRIPT = Path(__file__).parents[1] / "distributed_scripts" / "soak_run.py"
MAX_STEPS, SAVE_STEPS = 2000, 50
KILLS = 5  # then the last leg runs to the end

pytestmark = pytest.mark.slow


def _start(output_dir: Path, log) -> subprocess.Popen:
    command = [sys.executable, str(SCRIPT), "--output_dir", str(output_dir), "--max_steps", str(MAX_STEPS),
               "--save_steps", str(SAVE_STEPS)]  # fmt: skip
    return subprocess.Popen(
        command,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=launch_env(Path(__file__).resolve().parents[2]),
        start_new_session=True,
    )


def _kill(process: subprocess.Popen) -> None:
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _rss(log_path: Path) -> list[tuple[int, int]]:
    return [
        (int(p[1]), int(p[2]))
        for p in (line.split() for line in log_path.read_text().splitlines())
        if p[:1] == ["RSS"]
    ]


def test_soak_kills_and_resumes_to_the_uninterrupted_weights(tmp_path) -> None:
    reference_dir, soaked_dir = tmp_path / "reference", tmp_path / "soaked"
    with open(tmp_path / "reference.log", "w") as log:
        assert _start(reference_dir, log).wait() == 0, (tmp_path / "reference.log").read_text()[-3000:]
    reference = load_file(str(reference_dir / "final.safetensors"))

    rng = random.Random(0)
    kills, legs = 0, 0
    log_path = tmp_path / "soaked.log"
    with open(log_path, "w") as log:
        while True:
            legs += 1
            assert legs < 40, "the soak run makes no progress"
            saved_before = len(_rss(log_path))
            process = _start(soaked_dir, log)
            if kills == KILLS:
                assert process.wait(timeout=900) == 0, log_path.read_text()[-3000:]
                break
            # kill after this leg's first few checkpoints (progress whatever the machine's speed), at a random moment
            # of the next interval: inside a step or inside a save
            checkpoints = rng.randint(1, 6)
            deadline = time.monotonic() + 300
            while len(_rss(log_path)) < saved_before + checkpoints and process.poll() is None:
                assert time.monotonic() < deadline, "the soak run makes no progress"
                time.sleep(0.05)
            time.sleep(rng.uniform(0.0, 1.5))
            if process.poll() is not None:  # it finished before the kill
                assert process.returncode == 0, log_path.read_text()[-3000:]
                break
            _kill(process)
            kills += 1
            print(f"leg {legs}: killed after {len(_rss(log_path)) - saved_before} checkpoints", flush=True)
    assert kills >= 3, f"only {kills} kills: the run was too fast for the soak to mean anything"
    soaked = load_file(str(soaked_dir / "final.safetensors"))
    assert soaked.keys() == reference.keys()
    worst = max(float((soaked[k].double() - reference[k].double()).abs().max()) for k in reference)
    print(f"{kills} kills, {legs} legs; largest weight difference to the uninterrupted run: {worst:.3g}")
    for key in reference:
        assert torch.equal(soaked[key], reference[key]), f"{key} differs after {kills} kills"
    leftovers = [p.name for p in soaked_dir.iterdir() if p.is_dir() and not p.name.startswith("checkpoint-")]
    assert not leftovers, f"leftovers of interrupted saves: {leftovers}"
    # memory: the uninterrupted run's resident set at each of its 40 checkpoints, after a warm-up of 5
    rss = [b for _, b in _rss(tmp_path / "reference.log")][5:]
    growth = (rss[-1] - rss[0]) / 2**20
    print(
        f"resident memory over {len(rss)} checkpoints: {rss[0] / 2**20:.0f} -> {rss[-1] / 2**20:.0f} MiB "
        f"({growth:+.1f} MiB)"
    )
    assert growth < 50, f"resident memory grew by {growth:.0f} MiB over {len(rss)} checkpoints"
