"""Start-up checks of the distributed engine that Accelerate actually started against the one the launch asked for.

Accelerate (1.3 to at least 1.15) shards with FSDP or DeepSpeed only on GPU-like devices. On CPU processes it
does not say so:

- with ``use_cpu=True`` (the examples' default on a machine without an accelerator) it runs DDP over gloo, and
  every process holds the whole model, although the launch asked for FSDP or DeepSpeed;
- with ``use_cpu=False`` on a machine without an accelerator it starts no process group at all: each launched
  process trains alone on the whole data set and writes to the same folder.

:func:`check_distributed_engine` logs the first (the run is correct, only not sharded) and refuses the second
before any step.
"""

from __future__ import annotations

import os
from typing import Any

from transformers.utils import logging

from hf_contrast.errors import InputError

__all__ = ["check_distributed_engine", "requested_engine"]

logger = logging.get_logger(__name__)


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "false").strip().lower() in ("1", "true", "yes")


def requested_engine(args: Any) -> str | None:
    """``"FSDP"`` / ``"DeepSpeed"`` when the launch (accelerate config, ``fsdp`` or ``deepspeed`` argument) asks for
    one, else ``None``."""
    if _env_flag("ACCELERATE_USE_FSDP") or getattr(args, "fsdp", None):
        return "FSDP"
    if _env_flag("ACCELERATE_USE_DEEPSPEED") or getattr(args, "deepspeed", None):
        return "DeepSpeed"
    return None


def check_distributed_engine(args: Any, accelerator: Any, is_fsdp_enabled: bool, is_deepspeed_enabled: bool) -> None:
    """Refuse a multi-process launch that started no process group; log a requested engine that was not started.

    Args:
        args: The ``TrainingArguments``.
        accelerator: The Trainer's ``accelerate.Accelerator``.
        is_fsdp_enabled: ``Trainer.is_fsdp_enabled``.
        is_deepspeed_enabled: ``Trainer.is_deepspeed_enabled``.

    Raises:
        InputError: If the launcher started several processes (``WORLD_SIZE`` > 1) and Accelerate runs each alone.
    """
    launched = int(os.environ.get("WORLD_SIZE", "1") or 1)
    if launched > 1 and accelerator.num_processes == 1:
        raise InputError(
            f"The launcher started {launched} processes (WORLD_SIZE={launched}) but Accelerate started no process "
            f"group with `use_cpu={args.use_cpu}` on device {args.device}: each process would train alone on the "
            "whole data and write to the same output_dir. On a machine without GPUs pass `use_cpu=True` "
            "(`--use_cpu`); the processes then run DDP over gloo (Accelerate has no FSDP or DeepSpeed for CPU "
            "processes)."
        )
    engine = requested_engine(args)
    started = (engine == "FSDP" and is_fsdp_enabled) or (engine == "DeepSpeed" and is_deepspeed_enabled)
    # said once, by the main process (every process would log the same line)
    if engine is not None and not started and accelerator.num_processes > 1 and accelerator.is_main_process:
        logger.warning(
            "%s was requested, but Accelerate runs %s on %s processes: it has no %s for CPU processes, so every "
            "process holds the whole model (DDP over gloo). The results equal the sharded run's; only the memory does "
            "not shrink.",
            engine,
            accelerator.distributed_type,
            args.device.type,
            engine,
        )
