"""FSDP (full shard) on 2 real CPU processes (gloo) trains like DDP and like one process on the global batch.

Accelerate (1.3 to 1.15) has no FSDP for CPU processes (its FSDP is for GPU-like devices only; see
docs/scaling-out.md), so the launched script (``tests/distributed_scripts/engine_train.py``, under ``torchrun``)
shards the encoder with torch's own FSDP engines, each transformer block a unit, then the root (what the FSDP
configs ``examples/accelerate_configs/fsdp.yaml`` / ``fsdp1.yaml`` do on GPUs), and trains it through the
trainer's own objective, collator and views with ``gather_distributed=True``, next to a DDP-wrapped copy. Every
test runs once per engine (the ``engine`` parameter):

- ``fsdp2``: ``fully_shard``. It runs on CPU processes where ``torch.cpu.Stream`` has ``record_event``, which
  its all-gather calls (torch 2.14 does); torch 2.6 (the floor) has not, so these cases skip there.
- ``fsdp1``: ``FullyShardedDataParallel`` (``FULL_SHARD``, ``ModuleWrapPolicy`` of the block classes,
  ``device_id=cpu``, ``use_orig_params=True``, a CPU device mesh so that its sharded state dict is DTensors),
  which runs on CPU processes in both environments: what keeps FSDP tested at torch 2.6.

Checked for SimCLR, CARE and SupCon on a tiny ViT and SimCSE on a tiny BERT: each process holds about half of
the parameters, the logged losses and the updated parameters equal the DDP run and one process on the global
batch (twice the CARE splits, so chunks keep their size), and the gathered full state dict written by
``save_pretrained`` (what the Trainer's ``FULL_STATE_DICT`` save does) loads in
``ContrastiveEncoder.from_pretrained``, timm, transformers' ``AutoModel`` and sentence-transformers, equal to the
DDP save. A sharded ``torch.distributed.checkpoint`` of model and AdamW state, loaded in a new launch, resumes
exactly like the uninterrupted run (one more pair of launches per engine, ``engine_train.py --resume``).
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

SCRIPT = Path(__file__).parents[1] / "distributed_scripts" / "engine_train.py"
WORLD_SIZE = 2
FSDP_ENGINES = ("fsdp2", "fsdp1")  # torch's fully_shard; FullyShardedDataParallel, the fallback at torch 2.6

pytestmark = pytest.mark.distributed


def _script() -> ModuleType:
    return load_script("engine_train", SCRIPT)


def _needs(engine: str) -> None:
    """Skip where this torch cannot run ``engine`` on CPU processes (FSDP2 below torch 2.7); FSDP1 always runs."""
    if engine == "fsdp2":
        reason = _script().fsdp2_on_cpu()
        if reason:
            pytest.skip(f"{reason}; FSDP1 (FullyShardedDataParallel) runs the same checks here")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict[str, Any]]]:
    out_dir = tmp_path_factory.mktemp("engines")  # the launch runs DDP and every FSDP engine this torch can
    command = [
        sys.executable, "-m", "torch.distributed.run",
        "--nproc_per_node", str(WORLD_SIZE), "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
        str(SCRIPT), str(out_dir), "two",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=400, env=launch_env())
    if done.returncode != 0:
        pytest.fail(f"torchrun failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}")
    script = _script()
    single = {
        m: script.run(m, out_dir / "one", WORLD_SIZE * script.LOCAL_BATCH, WORLD_SIZE * script.LOCAL_SPLITS)
        for m in script.METHODS
    }
    return out_dir, single


def _load(out_dir: Path, engine: str, method: str) -> dict[str, Any]:
    return torch.load(out_dir / "two" / f"{engine}_{method}.pt", weights_only=False)


@pytest.mark.parametrize("method", ["simclr", "care", "supcon", "text"])
@pytest.mark.parametrize("engine", FSDP_ENGINES)
def test_fsdp_shards_the_model(runs, engine: str, method: str) -> None:
    _needs(engine)
    out_dir, _ = runs
    fsdp, ddp = _load(out_dir, engine, method), _load(out_dir, "ddp", method)
    assert (fsdp["engine"], ddp["engine"]) == (engine, "ddp")
    total = fsdp["total_numel"]
    assert total == ddp["total_numel"] > 0
    assert ddp["held_numel"] == [total] * WORLD_SIZE  # DDP: every process holds the whole model
    assert sum(fsdp["held_numel"]) == total  # FSDP: the shards add up to the model, none holds much more than half
    assert all(held <= 0.6 * total for held in fsdp["held_numel"]), fsdp["held_numel"]


@pytest.mark.parametrize("method", ["simclr", "care", "supcon", "text"])
@pytest.mark.parametrize("engine", FSDP_ENGINES)
def test_fsdp_and_ddp_train_like_one_process_on_the_global_batch(runs, engine: str, method: str) -> None:
    _needs(engine)
    out_dir, single = runs
    one = single[method]
    initial = _script().build(method, out_dir / "initial", 4, 2).model.state_dict()
    assert any(not torch.equal(one["parameters"][k], initial[k]) for k in initial)  # it trained
    for wrapper in ("ddp", engine):
        two = _load(out_dir, wrapper, method)
        # losses: the global negatives (and SupCon's positives across processes, CARE's chunks) were seen
        assert two["losses"] == pytest.approx(one["losses"], rel=1e-5), wrapper
        assert sorted(two["parameters"]) == sorted(one["parameters"])
        for name, value in two["parameters"].items():
            torch.testing.assert_close(value, one["parameters"][name], atol=1e-5, rtol=1e-5, msg=f"{wrapper}: {name}")


def _same_modules(a: torch.nn.Module, b: torch.nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sorted(sa) == sorted(sb)
    for name in sa:
        torch.testing.assert_close(sa[name], sb[name], atol=1e-5, rtol=1e-5, msg=name)


@pytest.mark.parametrize("engine", FSDP_ENGINES)
def test_fsdp_save_of_an_image_encoder_loads_in_timm_and_from_pretrained(runs, engine: str) -> None:
    _needs(engine)
    timm = pytest.importorskip("timm")
    from hf_contrast.models import ContrastiveEncoder

    out_dir, single = runs
    fsdp_dir, ddp_dir = out_dir / "two" / engine / "simclr", out_dir / "two" / "ddp" / "simclr"
    fsdp, ddp = ContrastiveEncoder.from_pretrained(fsdp_dir), ContrastiveEncoder.from_pretrained(ddp_dir)
    _same_modules(fsdp, ddp)
    for name, value in fsdp.state_dict().items():  # the gathered state, not the initial or a shard
        torch.testing.assert_close(value, single["simclr"]["parameters"].get(name, value), atol=1e-5, rtol=1e-5)
    backbone = timm.create_model(f"local-dir:{fsdp_dir}", pretrained=True, img_size=16)
    _same_modules(backbone, fsdp.backbone)


@pytest.mark.parametrize("engine", FSDP_ENGINES)
def test_fsdp_save_of_a_text_encoder_loads_in_transformers_and_sentence_transformers(runs, engine: str) -> None:
    _needs(engine)
    sentence_transformers = pytest.importorskip("sentence_transformers")
    from transformers import AutoModel

    from hf_contrast.models import ContrastiveEncoder

    out_dir, _ = runs
    fsdp_dir, ddp_dir = out_dir / "two" / engine / "text", out_dir / "two" / "ddp" / "text"
    fsdp, ddp = ContrastiveEncoder.from_pretrained(fsdp_dir), ContrastiveEncoder.from_pretrained(ddp_dir)
    _same_modules(fsdp, ddp)
    _same_modules(AutoModel.from_pretrained(fsdp_dir), fsdp.backbone)
    sentences = ["the red cat sat on the mat", "a dog"]
    embeddings = [
        sentence_transformers.SentenceTransformer(str(folder), device="cpu").encode(sentences, convert_to_tensor=True)
        for folder in (fsdp_dir, ddp_dir)
    ]
    torch.testing.assert_close(embeddings[0], embeddings[1], atol=1e-5, rtol=1e-5)


def _dcp_on_cpu() -> str | None:
    """Why this torch cannot save and load a sharded ``torch.distributed.checkpoint``, or ``None``."""
    try:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import (  # noqa: F401
            get_state_dict,
            set_model_state_dict,
            set_state_dict,
        )
    except ImportError as error:
        return f"this torch has no public distributed checkpoint state-dict API: {error}"
    if not (hasattr(dcp, "save") and hasattr(dcp, "load")):
        return "this torch has no torch.distributed.checkpoint.save/load"
    return None


def _launch(out_dir: Path, *args: str, killed: bool = False) -> None:
    command = [
        sys.executable, "-m", "torch.distributed.run",
        "--nproc_per_node", str(WORLD_SIZE), "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
        str(SCRIPT), str(out_dir), "resume", *args,
    ]  # fmt: skip
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=300, env=launch_env())
    if killed:  # the script kills its processes with SIGKILL after the checkpoint and one more step
        assert done.returncode != 0 and "SIGKILL" in done.stderr, (done.returncode, done.stderr[-3000:])
    elif done.returncode != 0:
        pytest.fail(f"torchrun {args} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}")


@pytest.mark.parametrize("engine", FSDP_ENGINES)
def test_fsdp_sharded_checkpoint_resumes_in_new_processes_like_the_uninterrupted_run(
    tmp_path: Path, engine: str
) -> None:
    """FSDP2 or FSDP1 + AdamW: a sharded ``torch.distributed.checkpoint`` of model and optimizer after step 2, one
    more step, the processes killed (SIGKILL), a new launch from a differently initialised model loads it and
    trains steps 3-4: the same losses and parameters as 4 uninterrupted steps. Loading the model without the
    optimizer state does not.
    """
    _needs(engine)
    reason = _dcp_on_cpu()
    if reason:
        pytest.skip(reason)
    script = _script()
    _launch(tmp_path, "--resume", "first", engine, killed=True)
    shards = sorted(p.name for p in (tmp_path / "resume" / "checkpoint").iterdir() if p.suffix == ".distcp")
    assert len(shards) == WORLD_SIZE, shards  # one file per process: a sharded save, not a gathered one
    _launch(tmp_path, "--resume", "resumed", engine)
    load = {
        name: torch.load(tmp_path / "resume" / f"{name}.pt", weights_only=False)
        for name in ("full", "first", "resumed", "model_only")
    }
    full, first, resumed, model_only = (load[n] for n in ("full", "first", "resumed", "model_only"))
    assert {run["engine"] for run in load.values()} == {engine}
    total = sum(v.numel() for v in full["parameters"].values())
    assert full["held_numel"] <= 0.6 * total  # it was sharded
    assert first["losses"] == full["losses"][: script.RESUME_AT]
    assert resumed["losses"] == pytest.approx(full["losses"][script.RESUME_AT :], rel=1e-6, abs=1e-7)
    assert sorted(resumed["parameters"]) == sorted(full["parameters"])
    moved = 0.0
    for name, value in full["parameters"].items():
        torch.testing.assert_close(resumed["parameters"][name], value, atol=1e-6, rtol=0, msg=name)
        moved = max(moved, (value - first["parameters"][name]).abs().max().item())
    assert moved > 1e-3  # the resumed steps trained
    # without the optimizer state (Adam's moments and step count) the resume is a different run
    gap = max((model_only["parameters"][n] - v).abs().max().item() for n, v in full["parameters"].items())
    assert gap > 1e-3, gap
