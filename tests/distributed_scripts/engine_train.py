"""SimCLR, CARE, SupCon (image) and SimCSE (text) with ``gather_distributed=True``, under DDP and FSDP in the same
processes, and SimCLR through ``Trainer.train`` under the engine a launcher configured.

Launched by ``tests/distributed/test_fsdp_distributed.py`` and
``tests/distributed/test_launch_configs_distributed.py`` as::

    torchrun --nproc_per_node 2 engine_train.py OUT_DIR TAG [METHOD ...]
    accelerate launch --config_file examples/accelerate_configs/<config>.yaml engine_train.py OUT_DIR TAG --trainer

Engine runs (:func:`run`): each method trains :data:`STEPS` SGD steps on fixed views through the trainer's own
objective, collator and views, process ``r`` taking rows ``[r·b, (r+1)·b)`` of each global batch of ``2b``; the
encoder wrapped in DDP, then a fresh one sharded by each FSDP engine this torch runs on CPU processes
(:func:`fsdp_engines`: torch's FSDP2 ``fully_shard`` where it can, torch 2.14 but not 2.6, and FSDP1
``FullyShardedDataParallel`` in both, the only one at torch 2.6; Accelerate has no FSDP for CPU processes).
Rank 0 writes ``OUT_DIR/TAG/<engine>_<method>.pt`` (the engine, the gathered parameters, the losses, every
rank's count of parameter elements it holds) and the gathered state dict in the save layout to
``OUT_DIR/TAG/<engine>/<method>``. The tests run :func:`run` in their own process for the single-process
reference on the global batch (``2b`` rows, twice the CARE splits so chunks keep their size).

Trainer runs (:func:`trainer_run`): rank 0 writes ``OUT_DIR/TAG/trainer.pt`` and the model to ``OUT_DIR/TAG/model``.

Resume runs (:func:`resume_run`, ``engine_train.py OUT_DIR TAG --resume PHASE [ENGINE]``): SimCLR on the ViT
sharded by ``ENGINE`` (``fsdp2`` or ``fsdp1``; default the first of :func:`fsdp_engines`) with AdamW for
:data:`RESUME_STEPS` steps. ``PHASE`` ``first`` runs them uninterrupted (``OUT_DIR/TAG/full.pt``), then a fresh
run of :data:`RESUME_AT` steps that writes a sharded ``torch.distributed.checkpoint`` of model and optimizer (each
process its own shard) to ``OUT_DIR/TAG/checkpoint``, trains one more step and kills every process (``SIGKILL``:
the launch fails); ``resumed``, in a new launch, builds a differently initialised model, loads the checkpoint and
runs the remaining steps (``OUT_DIR/TAG/resumed.pt``), then again loading the model only, with a fresh optimizer
(``OUT_DIR/TAG/model_only.pt``): what a resume that drops the optimizer state gives.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import datasets
import torch

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(1, str(Path(__file__).parent.parent))
from _tiny import tiny_text_encoder, tiny_tokenizer
from process_end import finish_process
from trainer_utils import (
    fixed_equivariance_views,
    fixed_views_collator,
    image_dataset,
    training_args,
    vit_encoder,
)

from hf_contrast import distributed
from hf_contrast.objectives import CAREObjective, SimCLRObjective, SupConObjective
from hf_contrast.training import (
    CARETrainer,
    ContrastiveTrainer,
    SimCLRTrainer,
    SupConTrainer,
)

METHODS = ("simclr", "care", "supcon", "text")
STEPS = 2
LOCAL_BATCH = 4
LOCAL_SPLITS = 2
N_SAMPLES = 16
SENTENCES = [
    f"the {a} {b} sat on the mat {i}"
    for i, (a, b) in enumerate([("red", "cat"), ("a", "dog"), ("the", "man"), ("red", "car")] * 4)
]


def _text_encoder(out_dir: Path) -> Any:
    torch.manual_seed(0)
    model = tiny_text_encoder(tiny_tokenizer(out_dir / "tokenizer"), projection_norm=None)  # no batch statistics
    for module in model.modules():  # no dropout: both views are the same sentence, the runs are comparable
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    return model


def build(method: str, out_dir: Path, batch_size: int, n_splits: int, **overrides: Any) -> ContrastiveTrainer:
    """The trainer of ``method`` on a per-process batch of ``batch_size`` rows (not trained yet)."""
    args = training_args(
        out_dir / f"run_{method}", max_steps=STEPS, per_device_train_batch_size=batch_size, optim="sgd",
        learning_rate=0.1, lr_scheduler_type="constant", max_grad_norm=0.0, train_sampling_strategy="sequential",
        gather_distributed=True,
        **overrides,
    )  # fmt: skip
    if method == "text":
        model = _text_encoder(out_dir)
        return ContrastiveTrainer(
            model=model, args=args, train_dataset=datasets.Dataset.from_dict({"text": SENTENCES}), objective="simclr"
        )
    data = image_dataset(n=N_SAMPLES, size=16, n_classes=4)
    common = {"model": vit_encoder(), "args": args, "train_dataset": data, "data_collator": fixed_views_collator}
    if method == "simclr":
        return SimCLRTrainer(**common, objective=SimCLRObjective())
    if method == "care":
        objective = CAREObjective(
            care_weight=0.5, n_splits=n_splits, equivariance_augmentation=fixed_equivariance_views
        )
        return CARETrainer(**common, objective=objective)
    if method == "supcon":  # one view per sample: 4 classes in 4 local rows, positives only across processes
        return SupConTrainer(**common, objective=SupConObjective(n_views=1))
    raise ValueError(method)


FSDP_ENGINES = ("fsdp2", "fsdp1")


def fsdp2_on_cpu() -> str | None:
    """Why this torch cannot run FSDP2 (``fully_shard``) on CPU processes, or ``None``."""
    try:
        from torch.distributed.device_mesh import init_device_mesh  # noqa: F401
        from torch.distributed.fsdp import fully_shard  # noqa: F401
    except ImportError as error:
        return f"this torch has no public FSDP2 (torch.distributed.fsdp.fully_shard): {error}"
    if not hasattr(torch.cpu.Stream, "record_event"):  # fully_shard records an event on its all-gather stream
        return (
            f"torch {torch.__version__}'s fully_shard cannot run on CPU processes: its all-gather calls "
            "Stream.record_event, which torch.cpu.Stream lacks here (AttributeError; torch 2.6 fails, 2.14 runs)"
        )
    return None


def fsdp_engines() -> tuple[str, ...]:
    """The FSDP engines this torch runs on CPU processes: ``fsdp2`` where ``fully_shard`` can, and always
    ``fsdp1`` (``FullyShardedDataParallel``, the fallback at the torch floor, 2.6)."""
    return tuple(engine for engine in FSDP_ENGINES if engine != "fsdp2" or fsdp2_on_cpu() is None)


def local_numel(model: torch.nn.Module) -> int:
    """Parameter elements held by this process: a DTensor (FSDP2) counts its local shard; under FSDP1
    (``use_orig_params=True``) each original parameter is a view of this process's part of its unit's flat
    shard (empty where the shard holds none of it)."""
    return sum((p.to_local() if hasattr(p, "to_local") else p).numel() for p in model.parameters())


def _is_block(module: torch.nn.Module) -> bool:
    return type(module).__name__ in ("Block", "BertLayer")  # timm ViT block, BERT layer


def _shard(model: torch.nn.Module, engine: str = "fsdp2") -> torch.nn.Module:
    """Full shard with ``engine``: each transformer block (timm ``Block``, ``BertLayer``) its own unit, then
    the root. ``fsdp2``: torch's ``fully_shard``; ``fsdp1``: ``FullyShardedDataParallel`` on the CPU
    (``FULL_SHARD``, a ``ModuleWrapPolicy`` of the block classes, ``use_orig_params=True``) over a CPU device
    mesh, so that its sharded state dict holds DTensors: without the mesh it holds ShardedTensors, which
    torch 2.6's ``get_state_dict`` cannot read where a process holds none of a parameter
    (``NotImplementedError: Only single local shard is supported``)."""
    if engine == "fsdp1":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        blocks = {type(module) for module in model.modules() if _is_block(module)}
        return FullyShardedDataParallel(
            model,
            sharding_strategy=ShardingStrategy.FULL_SHARD,
            auto_wrap_policy=ModuleWrapPolicy(blocks),
            device_id=torch.device("cpu"),
            use_orig_params=True,
            device_mesh=init_device_mesh("cpu", (distributed.world_size(),)),
        )
    if engine != "fsdp2":
        raise ValueError(f"engine must be one of {FSDP_ENGINES}, got {engine!r}")
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (distributed.world_size(),))
    for module in list(model.modules()):
        if _is_block(module):
            fully_shard(module, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def _full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The whole state dict on every process (a collective under FSDP), as the Trainer's save gathers it."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
    )

    options = StateDictOptions(full_state_dict=True, cpu_offload=False)
    return {k: v.detach().cpu().clone() for k, v in get_model_state_dict(model, options=options).items()}


def rows(method: str, batch_size: int, rank: int, step: int) -> list[dict[str, Any]]:
    """This process's rows of global batch ``step`` (sequential order, ``batch_size`` rows per process)."""
    data = (
        datasets.Dataset.from_dict({"text": SENTENCES})
        if method == "text"
        else image_dataset(n=N_SAMPLES, size=16, n_classes=4)
    )
    start = (
        (step * distributed.world_size() + rank) * batch_size if distributed.world_size() > 1 else step * batch_size
    )
    return [data[i % len(data)] for i in range(start, start + batch_size)]


def run(method: str, out_dir: Path, batch_size: int, n_splits: int, engine: str = "none") -> dict[str, Any]:
    """:data:`STEPS` SGD steps of ``method`` (``engine``: ``none``, ``ddp``, ``fsdp2`` or ``fsdp1``) through the
    trainer's own objective, collator and views; the gathered parameters, losses and each process's parameter
    elements."""
    trainer = build(method, out_dir / engine, batch_size, n_splits)
    model = trainer.model
    if engine == "ddp":
        model = torch.nn.parallel.DistributedDataParallel(
            model, find_unused_parameters=True
        )  # as the Trainer wraps it
    elif engine in FSDP_ENGINES:
        model = _shard(model, engine)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for step in range(STEPS):
        batch = trainer.data_collator(rows(method, batch_size, distributed.rank(), step))
        loss = trainer.objective(model, batch, trainer.views)["loss"]
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        total = loss.detach().clone()
        if distributed.world_size() > 1:  # the logged loss: the mean over processes
            torch.distributed.all_reduce(total)
            total /= distributed.world_size()
        losses.append(total.item())
    state = (
        _full_state_dict(model) if engine != "none" else {k: v.detach().clone() for k, v in model.state_dict().items()}
    )
    held = [local_numel(model)]
    if distributed.world_size() > 1:
        held = [0] * distributed.world_size()
        torch.distributed.all_gather_object(held, local_numel(model))
    if distributed.rank() == 0:  # the Trainer's FULL_STATE_DICT save: the wrapped model writes the gathered state
        target = model.module if engine in ("ddp", "fsdp1") else model  # FSDP2 shards in place, no wrapper
        target.save_pretrained(str(out_dir / engine / method), state_dict=dict(state))  # a copy: it is consumed
    return {
        "engine": engine,
        "parameters": state,
        "losses": losses,
        "held_numel": held,
        "total_numel": sum(v.numel() for v in state.values()),
    }


def trainer_run(out_dir: Path) -> None:
    """SimCLR through ``Trainer.train`` and ``save_model`` under the engine the launcher configured; rank 0 writes
    ``OUT_DIR/TAG/trainer.pt`` (parameters, losses, Accelerate's distributed type, FSDP on or not)."""
    trainer = build("simclr", out_dir, LOCAL_BATCH, LOCAL_SPLITS)
    trainer.train()
    trainer.save_model(str(out_dir / "model"))
    state = trainer.accelerator.get_state_dict(trainer.model)
    if trainer.args.should_save:
        torch.save(
            {
                "parameters": {k: v.detach().cpu().clone() for k, v in state.items()},
                "losses": [h["loss"] for h in trainer.state.log_history if "loss" in h],
                "distributed_type": str(trainer.accelerator.distributed_type),
                "num_processes": trainer.accelerator.num_processes,
                "fsdp": trainer.is_fsdp_enabled,
            },
            out_dir / "trainer.pt",
        )
    trainer.accelerator.wait_for_everyone()
    trainer.accelerator.end_training()


RESUME_STEPS = 4
RESUME_AT = 2


def _resume_train(
    out_dir: Path, seed: int, steps: range, checkpoint: Path | None, load_optimizer: bool, engine: str
) -> dict[str, Any]:
    """SimCLR sharded with ``engine`` (``fsdp2`` or ``fsdp1``) and AdamW over ``steps`` (global step indices,
    for the rows); ``checkpoint``: load model (and the optimizer when ``load_optimizer``) from this sharded
    checkpoint first."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_state_dict,
        set_model_state_dict,
        set_state_dict,
    )

    trainer = build("simclr", out_dir, LOCAL_BATCH, LOCAL_SPLITS)
    torch.manual_seed(seed)
    for parameter in trainer.model.parameters():  # a start that differs from the checkpoint's run unless loaded
        parameter.data.add_(0.01 * seed * torch.randn_like(parameter))
    model = _shard(trainer.model, engine)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.01)
    if checkpoint is not None:
        model_state, optimizer_state = get_state_dict(model, optimizer)  # this process's shards
        state = {"model": model_state, "optimizer": optimizer_state} if load_optimizer else {"model": model_state}
        dcp.load(state, checkpoint_id=str(checkpoint))  # in place, each process reads its own shards
        if load_optimizer:
            set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
        else:
            set_model_state_dict(model, state["model"])
    run = {"trainer": trainer, "model": model, "optimizer": optimizer, "losses": []}
    _train_steps(run, steps)
    return run


def _train_steps(run: dict[str, Any], steps: range) -> None:
    """AdamW steps of ``run`` (from :func:`_resume_train`) on the rows of global steps ``steps``.

    Appends the losses.
    """
    trainer, model, optimizer = run["trainer"], run["model"], run["optimizer"]
    for step in steps:
        batch = trainer.data_collator(rows("simclr", LOCAL_BATCH, distributed.rank(), step))
        loss = trainer.objective(model, batch, trainer.views)["loss"]
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        total = loss.detach().clone()
        torch.distributed.all_reduce(total)
        run["losses"].append(total.item() / distributed.world_size())


def resume_run(out_dir: Path, phase: str, engine: str) -> None:
    """See the module docstring (``--resume first|resumed ENGINE``)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    out_dir.mkdir(parents=True, exist_ok=True)
    checkpoint = out_dir / "checkpoint"
    runs: dict[str, dict[str, Any]] = {}
    if phase == "first":
        runs["full"] = _resume_train(out_dir, 0, range(RESUME_STEPS), None, True, engine)
        first = _resume_train(out_dir, 0, range(RESUME_AT), None, True, engine)
        model_state, optimizer_state = get_state_dict(first["model"], first["optimizer"])
        dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=str(checkpoint))
        runs["first"] = first
    else:  # a new launch: nothing of the first one is left but the checkpoint
        later = range(RESUME_AT, RESUME_STEPS)
        runs["resumed"] = _resume_train(out_dir, 1, later, checkpoint, True, engine)
        runs["model_only"] = _resume_train(out_dir, 1, later, checkpoint, False, engine)
    for name, result in runs.items():
        state = _full_state_dict(result["model"])
        if distributed.rank() == 0:
            torch.save(
                {
                    "engine": engine,
                    "parameters": state,
                    "losses": result["losses"],
                    "held_numel": local_numel(result["model"]),
                },
                out_dir / f"{name}.pt",
            )
    if phase == "first":  # one more step past the checkpoint, never saved, then every process is killed (SIGKILL)
        _train_steps(runs["first"], range(RESUME_AT, RESUME_AT + 1))
        torch.distributed.barrier()
        os.kill(os.getpid(), signal.SIGKILL)


def main() -> None:
    out_dir = Path(sys.argv[1]) / sys.argv[2]
    if sys.argv[3:4] == ["--trainer"]:
        trainer_run(out_dir)
    elif sys.argv[3:4] == ["--resume"]:
        resume_run(out_dir, sys.argv[4], sys.argv[5] if len(sys.argv) > 5 else fsdp_engines()[0])
    else:
        for engine in ("ddp", *fsdp_engines()):
            for method in sys.argv[3:] or METHODS:
                result = run(method, out_dir, LOCAL_BATCH, LOCAL_SPLITS, engine)
                if distributed.rank() == 0:
                    torch.save(result, out_dir / f"{engine}_{method}.pt")
    finish_process()


if __name__ == "__main__":
    main()
