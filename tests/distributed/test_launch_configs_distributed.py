"""The accelerate config files in ``examples/accelerate_configs/`` on real CPU processes (gloo), as a user launches
them.

- ``fsdp.yaml`` (``fsdp1.yaml`` where accelerate has no FSDP2): Accelerate has no FSDP for CPU processes; the
  trainer says so once at start-up and the 2 processes run DDP, equal to one process on the global batch, with
  no deprecation warning.
- ``multi_node.yaml``: two "machines" on localhost (``--num_machines 2 --machine_rank 0|1``, one process each)
  train, only machine 0 saves, and the parameters equal one process on the global batch (hence the
  single-machine 2-process run, which equals it too).

SimCLR with ``gather_distributed=True`` through ``Trainer.train`` (``tests/distributed_scripts/engine_train.py``);
the reference is one process through the same ``Trainer.train`` on the global batch, in the trainer's row order.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from _launch import free_port, launch_env, load_script

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "examples" / "accelerate_configs"
SCRIPT = Path(__file__).parents[1] / "distributed_scripts" / "engine_train.py"
ENV = launch_env()

pytestmark = pytest.mark.distributed


def _fsdp_config() -> Path:
    """``fsdp.yaml`` (FSDP2) where accelerate offers FSDP2 (``fsdp_version``, accelerate >= 1.6).

    Else ``fsdp1.yaml``.
    """
    from accelerate.utils import FullyShardedDataParallelPlugin

    has_fsdp2 = "fsdp_version" in {f.name for f in dataclasses.fields(FullyShardedDataParallelPlugin)}
    return CONFIGS / ("fsdp.yaml" if has_fsdp2 else "fsdp1.yaml")


def _launch(config: Path, out_dir: Path, *options: str) -> list[str]:
    return [
        sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config), *options,
        str(SCRIPT), str(out_dir), "run", "--trainer",
    ]  # fmt: skip


def _single(tmp_path: Path) -> dict[str, Any]:
    """One process on the global batch through the same ``Trainer.train``, so it takes the rows in the trainer's own
    order: sequential from transformers 5.2 (``train_sampling_strategy``); before it the trainer's seeded random
    permutation, which accelerate shards the same way over N processes. (``engine_train.run`` takes the rows in
    sequential order whatever the transformers: under transformers < 5.2 it is not the launched runs' order.)"""
    script = load_script("engine_train", SCRIPT)
    trainer = script.build("simclr", tmp_path / "one", 2 * script.LOCAL_BATCH, 2 * script.LOCAL_SPLITS)
    trainer.train()
    return {
        "parameters": {k: v.detach().cpu().clone() for k, v in trainer.model.state_dict().items()},
        "losses": [h["loss"] for h in trainer.state.log_history if "loss" in h],
    }


def _assert_equal_parameters(got: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    assert sorted(got) == sorted(expected)
    for name, value in got.items():
        torch.testing.assert_close(value, expected[name], atol=1e-5, rtol=1e-5, msg=name)


def test_fsdp_config_on_cpu_processes_runs_ddp_says_so_and_equals_one_process(tmp_path) -> None:
    command = _launch(_fsdp_config(), tmp_path, "--main_process_port", str(free_port()))
    done = subprocess.run(command, capture_output=True, text=True, timeout=400, env=ENV)
    if done.returncode != 0 and "There are currently no available devices found" in done.stderr:
        pytest.skip(  # accelerate 1.3's FullyShardedDataParallelPlugin; 1.15 falls back to DDP on CPU processes
            "this accelerate refuses an FSDP config on a machine without an accelerator "
            "(FullyShardedDataParallelPlugin: 'There are currently no available devices found'), so there is no CPU "
            "fallback to test"
        )
    if done.returncode != 0:
        pytest.fail(f"accelerate launch failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}")
    log = done.stdout + done.stderr
    assert log.count("FSDP was requested, but Accelerate runs") == 1  # said once, by the main process, before training
    assert "as a string" not in log and "FSDP1" not in log  # no deprecated FSDP form was used
    result = torch.load(tmp_path / "run" / "trainer.pt", weights_only=False)
    assert result["num_processes"] == 2 and result["fsdp"] is False
    _assert_equal_parameters(result["parameters"], _single(tmp_path)["parameters"])
    assert (tmp_path / "run" / "model" / "hf_contrast").is_dir()


def test_two_machines_on_localhost_train_save_once_and_equal_one_process(tmp_path) -> None:
    port = str(free_port())
    machines = [
        subprocess.Popen(
            _launch(
                CONFIGS / "multi_node.yaml",
                tmp_path / f"machine{rank}",
                "--machine_rank",
                str(rank),
                "--main_process_port",
                port,
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=ENV,
        )
        for rank in (0, 1)
    ]
    outputs = []
    for machine in machines:
        try:
            outputs.append(machine.communicate(timeout=400)[0])
        except subprocess.TimeoutExpired:
            for m in machines:
                m.kill()
            pytest.fail("the two-machine launch did not finish in 400 s")
    for rank, (machine, output) in enumerate(zip(machines, outputs)):
        if machine.returncode != 0:
            pytest.fail(f"machine {rank} failed ({machine.returncode}):\n{output[-5000:]}")
    result = torch.load(tmp_path / "machine0" / "run" / "trainer.pt", weights_only=False)
    assert result["num_processes"] == 2
    assert (tmp_path / "machine0" / "run" / "model" / "hf_contrast").is_dir()  # saved once, by global rank 0
    assert not (tmp_path / "machine1" / "run" / "model").exists()
    assert not (tmp_path / "machine1" / "run" / "trainer.pt").exists()
    single = _single(tmp_path)
    _assert_equal_parameters(result["parameters"], single["parameters"])
    assert result["losses"] == pytest.approx(single["losses"], rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("name", ["ddp", "fsdp", "fsdp1", "multi_node", "deepspeed_zero2", "deepspeed_zero3"])
def test_config_files_load_in_accelerate(name: str) -> None:
    from accelerate.commands.config.config_args import load_config_from_file

    config = load_config_from_file(str(CONFIGS / f"{name}.yaml"))
    assert config.num_processes == 2 and config.num_machines == (2 if name == "multi_node" else 1)
    expected = {"ddp": "MULTI_GPU", "multi_node": "MULTI_GPU", "fsdp": "FSDP", "fsdp1": "FSDP"}.get(name, "DEEPSPEED")
    assert str(config.distributed_type).endswith(expected)
    if name.startswith("fsdp"):  # the save gathers the whole state dict: the one save layout
        assert config.fsdp_config["fsdp_state_dict_type"] == "FULL_STATE_DICT"
    if name == "deepspeed_zero3":  # without it ZeRO-3's save_model writes no usable weights
        assert config.deepspeed_config["zero_stage"] == 3 and config.deepspeed_config["zero3_save_16bit_model"] is True


@pytest.mark.parametrize("stage", [2, 3])
def test_deepspeed_zero_trains_and_saves_the_one_layout(tmp_path, stage: int) -> None:
    # Accelerate runs DeepSpeed only on GPU-like devices
    # (AcceleratorState: `ACCELERATE_USE_DEEPSPEED ... and not cpu`):
    # on CPU processes there is nothing to test. On a machine with 2 GPUs and deepspeed installed this runs.
    if torch.cuda.device_count() < 2:
        pytest.skip("Accelerate runs DeepSpeed on GPU-like devices only, never on CPU processes; needs 2 GPUs")
    pytest.importorskip("deepspeed")
    from hf_contrast.models import ContrastiveEncoder

    command = _launch(CONFIGS / f"deepspeed_zero{stage}.yaml", tmp_path, "--main_process_port", str(free_port()))
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=ENV)
    if done.returncode != 0:
        pytest.fail(f"accelerate launch failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}")
    result = torch.load(tmp_path / "run" / "trainer.pt", weights_only=False)
    saved = ContrastiveEncoder.from_pretrained(tmp_path / "run" / "model")  # the gathered (16-bit under ZeRO-3) save
    assert sum(p.numel() for p in saved.parameters()) == sum(v.numel() for v in result["parameters"].values()) > 0
