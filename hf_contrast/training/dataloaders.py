"""Pieces of the trainer's data loaders: the Trainer's ``DataLoader`` options for a loader built here, and
``dataloader_drop_last`` forced for the length of a ``Trainer.get_train_dataloader`` call."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from functools import partial
from typing import Any

from torch.utils.data import DataLoader
from transformers.trainer_utils import seed_worker

__all__ = ["dataloader_options", "drop_last"]


@contextlib.contextmanager
def drop_last(args: Any) -> Iterator[None]:
    """``args.dataloader_drop_last = True`` inside the block (an epoch's ragged last batch dropped), restored on
    exit."""
    previous = args.dataloader_drop_last
    args.dataloader_drop_last = True
    try:
        yield
    finally:
        args.dataloader_drop_last = previous


def dataloader_options(args: Any) -> dict[str, Any]:
    """The options the Trainer gives its training ``DataLoader``, derived the way it derives them:
    each ``DataLoader`` argument ``x`` that ``TrainingArguments`` has as ``dataloader_x``
    (``num_workers``, ``pin_memory``, ``persistent_workers``, ``prefetch_factor``, and
    ``multiprocessing_context`` / ``in_order`` where the installed versions have them), and
    ``worker_init_fn`` seeding each worker with transformers' ``seed_worker``. Batching
    (``batch_size``, ``drop_last``, samplers) is not included."""
    accepted = inspect.signature(DataLoader).parameters
    options = {name: getattr(args, f"dataloader_{name}") for name in accepted if hasattr(args, f"dataloader_{name}")}
    options.pop("drop_last", None)
    options["worker_init_fn"] = partial(seed_worker, num_workers=args.dataloader_num_workers, rank=args.process_index)
    return options
