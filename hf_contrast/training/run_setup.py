"""The defaults that shape a run's result, said once: checked at the trainer's ``__init__``, logged at the start of
``train()`` (main process) and written in the model card's training section.

:func:`describe_run` gives ``{label: value}`` for: the image size and the rule that chose it
(:mod:`~hf_contrast.training.image_size`), the precision actually used, processes × CPU threads and the
devices, the global batch, how a chunked objective cuts it (CARE's ``n_splits`` → chunk size ``m``), where the
views are made, and what the evaluation scores (the metrics' and evaluators' sample caps).
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import torch
from transformers.utils import logging

from .scripts import cpu_threads_source, launched_by_accelerate

__all__ = ["check_launch", "check_precision", "describe_run", "launched_fewer_processes", "log_run_setup", "precision"]

logger = logging.get_logger(__name__)


def check_precision(args: Any) -> None:
    """Say before training that ``fp16=True`` does nothing on a CPU (accelerate runs no fp16 autocast there).

    A warning, not an error: transformers and accelerate accept the flag on a CPU, and the same script and
    arguments are commonly run on a GPU machine and on a laptop; the run is plain fp32 and valid. (``bf16=True``
    on a machine without an accelerator is refused earlier, by ``ContrastiveTrainingArguments``.)
    """
    if getattr(args, "fp16", False) and args.device.type == "cpu":
        warnings.warn(
            "`fp16=True` has no effect on a CPU: accelerate runs no fp16 autocast there, so this run trains in fp32 "
            "(losses identical to fp16=False). Drop `fp16`, or use `bf16=True` with `use_cpu=True` for bf16 autocast "
            "on the CPU (its results differ from fp32).",
            stacklevel=3,
        )


def launched_fewer_processes(args: Any) -> str | None:
    """Why this single process is not the several processes ``accelerate launch`` was asked for, or ``None``.

    ``accelerate launch --num_processes 2 script.py`` (or a config file with ``num_processes: 2`` and
    ``distributed_type: NO``) starts ONE process: only ``--multi_gpu`` (``MULTI_GPU`` / ``MULTI_CPU`` in the
    config) starts several. Its single-process launcher then still sets ``MASTER_ADDR`` / ``MASTER_PORT``, but no
    ``WORLD_SIZE``: that signature, in a process :func:`~hf_contrast.training.scripts.launched_by_accelerate`,
    is read here."""
    env = os.environ
    if args.world_size > 1 or "WORLD_SIZE" in env or "MASTER_ADDR" not in env or not launched_by_accelerate():
        return None
    return (
        "`accelerate launch` was asked for several processes (`--num_processes` > 1, or `num_processes` in its "
        "config) but started one: it starts several only with `--multi_gpu` (`distributed_type: MULTI_GPU`, or "
        "`MULTI_CPU` for CPU processes, in the config). This run trains in 1 process."
    )


def check_launch(args: Any) -> None:
    """Warn, before training, when :func:`launched_fewer_processes` finds one process where several were asked."""
    why = launched_fewer_processes(args)
    if why is not None:
        warnings.warn(why, UserWarning, stacklevel=3)


def precision(trainer: Any) -> str:
    """The arithmetic the run uses, in words: fp32, fp16 autocast with gradient scaling, or bf16 autocast."""
    args = trainer.args
    mixed = getattr(getattr(trainer, "accelerator", None), "mixed_precision", "no")
    device = args.device.type
    if args.fp16 and device == "cpu":
        return "fp32 (`fp16=True` has no effect on a CPU)"
    if mixed == "fp16":
        return f"fp16 autocast on {device} with gradient scaling (weights fp32)"
    if mixed == "bf16":
        return f"bf16 autocast on {device} (weights fp32)"
    tf32 = device == "cuda" and torch.backends.cuda.matmul.allow_tf32
    return "fp32" + (" (TF32 matmuls)" if tf32 else "")


def _caps(member: Any) -> str:
    name = type(member).__name__
    caps = []
    for attr, label in (
        ("max_samples", "at most {} rows"),
        ("n", "{} images"),
        ("num_augmentations", "{} augmentations"),
    ):
        value = getattr(member, attr, None)
        if isinstance(value, int) and not isinstance(value, bool):
            caps.append(label.format(value))
        elif attr == "max_samples" and hasattr(member, attr) and value is None:
            caps.append("every row")
    return f"{name} ({', '.join(caps)})" if caps else name


def _evaluation(trainer: Any) -> str | None:
    parts = []
    if trainer.compute_metrics is not None:
        parts.append(_caps(trainer.compute_metrics))
    evaluator = getattr(trainer, "evaluator", None)
    if evaluator is not None:
        parts += [_caps(m) for m in (getattr(evaluator, "evaluators", None) or [evaluator])]
    return "; ".join(parts) or None


def describe_run(trainer: Any) -> dict[str, str]:
    """``{label: value}`` of the defaults that shape this run's result (see the module's docstring)."""
    args, objective = trainer.args, trainer.objective
    setup: dict[str, str] = {}
    choice = getattr(trainer, "image_size_choice", None)
    if choice is not None:
        setup["image size"] = choice.describe()
    setup["precision"] = precision(trainer)
    device = args.device
    setup["processes"] = (
        f"{args.world_size} process(es) × {torch.get_num_threads()} CPU thread(s) per process ({cpu_threads_source()})"
    )
    if launched_fewer_processes(args) is not None:
        setup["processes"] += " — `accelerate launch` was asked for several and started one (no `--multi_gpu`)"
    distributed = getattr(getattr(trainer, "accelerator", None), "distributed_type", None)
    kind = str(getattr(distributed, "value", distributed or "NO"))
    setup["devices"] = device.type + ("" if kind == "NO" else f" ({kind}, accelerate's distributed type)")
    per_device, accumulation = args.per_device_train_batch_size, args.gradient_accumulation_steps
    setup["global batch"] = (
        f"{per_device * accumulation * args.world_size} = {per_device} per device × {accumulation} accumulation "
        f"step(s) × {args.world_size} process(es)"
    )
    chunks = objective.batch_multiple
    if chunks > 1:
        setup["chunks"] = (
            f"each per-device batch of {per_device} is cut into {chunks} chunks of m = {per_device // chunks} "
            f"({type(objective).__name__})"
        )
    if args.gradient_cache_size is not None:
        setup["gradient cache"] = f"the encoder runs in mini-batches of {args.gradient_cache_size} rows"
    if choice is not None:
        views = "made on the device, per batch" if args.views_on_device else "made per sample in the DataLoader"
        source = getattr(trainer, "views_on_device_source", "argument")
        setup["views"] = views if source == "argument" else f"{views} (`views_on_device`'s {source})"
        cache = getattr(trainer, "image_cache", None)
        refusal = getattr(trainer, "image_cache_refusal", None)
        if cache is not None:
            setup["training images"] = cache.describe()
        elif args.views_on_device and refusal:
            setup["training images"] = f"decoded per batch ({refusal})"
    evaluation = _evaluation(trainer)
    if evaluation and (args.eval_strategy != "no" or trainer.eval_dataset is not None):
        setup["evaluation"] = evaluation
    return setup


def log_run_setup(trainer: Any) -> dict[str, str]:
    """Log :func:`describe_run` once (the main process) and return it."""
    setup = describe_run(trainer)
    if trainer.is_world_process_zero():
        width = max(len(label) for label in setup)
        lines = "\n".join(f"  {label:<{width}} : {value}" for label, value in setup.items())
        logger.info(f"Run set-up (defaults that shape the result):\n{lines}")
    return setup
