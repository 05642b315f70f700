"""Pieces of the trainer's data loaders: the Trainer's ``DataLoader`` options for a loader built here, and
``dataloader_drop_last`` forced for the length of a ``Trainer.get_train_dataloader`` call."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

from torch.utils.data import DataLoader
from transformers.trainer_utils import seed_worker

__all__ = [
    "CachePlan",
    "dataloader_options",
    "drop_last",
    "plan_image_cache",
    "resolve_views_on_device",
    "serving_options",
]


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


# ---- views on the device and the decoded-image cache ----------------------------------------------------------


def resolve_views_on_device(args: Any, model: Any, objective: Any) -> str:
    """Decide ``args.views_on_device`` when it is ``None`` (in place) and say how it was decided.

    The default is True for image views on an accelerator (the views are a few batched ops there, against a
    per-sample pipeline on the host that bounds the step) and False on a CPU and for views that cannot be made on
    the device (text, LOCAL's pairs).

    Returns:
        ``"argument"`` when the user set it, else ``"default for <modality> views on <device type>"``.
    """
    from ..views.for_model import input_modality_of

    if args.views_on_device is not None:
        return "argument"
    modality = input_modality_of(model)
    paired = bool(getattr(objective, "paired_inputs", False))
    args.views_on_device = args.device.type != "cpu" and modality == "image" and not paired
    what = "LOCAL's paired" if paired else modality
    return f"default for {what} views on {args.device.type}"


@dataclass(frozen=True)
class CachePlan:
    """Where the decoded-image cache goes (``device``, ``pin_memory``), or why there is none (``refusal``; ``log``:
    whether the refusal is worth a line in the log: the user asked for device views)."""

    refusal: str | None = None
    log: bool = False
    device: Any = None
    pin_memory: bool = False
    too_large: bool = False


def plan_image_cache(args: Any, collator: Any, dataset: Any, image_shape: Callable[[], Any]) -> CachePlan:
    """Whether the training set is served from a :class:`~hf_contrast.views.image_cache.DecodedImageCache`, and
    where it lives (``image_shape()``: ``(C, H, W)`` of the decoded images): the training device when its free
    memory holds the cache twice over (the rest is the model's), else the host (pinned when batches go to an
    accelerator)."""
    import torch

    from ..views.image_cache import cache_bytes, cache_refusal

    refusal = cache_refusal(collator, dataset, bool(args.views_on_device))
    if refusal is not None:
        return CachePlan(refusal=refusal, log=bool(args.views_on_device))
    if not args.image_cache_max_gb:
        return CachePlan(refusal="`image_cache_max_gb=0` turns the decoded-image cache off", log=True)
    size = cache_bytes(len(dataset), image_shape())
    limit = args.image_cache_max_gb * 2**30
    if size > limit:
        return CachePlan(
            refusal=(
                f"the decoded training images would take {size / 2**30:.1f} GiB, above `image_cache_max_gb`="
                f"{args.image_cache_max_gb:g}; raise it to cache them"
            ),
            log=True,
            too_large=True,
        )
    device = args.device
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        if 2 * size > free:
            return CachePlan(device=torch.device("cpu"), pin_memory=bool(args.dataloader_pin_memory))
    return CachePlan(device=device)


def serving_options(args: Any, cache: Any, plan: CachePlan | None) -> dict[str, Any]:
    """``args`` fields to override while the training loader is built: for a cache, no workers (a batch is one
    gather) and pinned memory only for a host cache feeding an accelerator; for images too large for the cache,
    with views on the device and no workers asked for, persistent workers prefetching 4 batches each."""
    import os

    if cache is not None:
        pin = cache.device.type == "cpu" and args.device.type != "cpu" and bool(args.dataloader_pin_memory)
        return {"dataloader_num_workers": 0, "dataloader_pin_memory": pin, "dataloader_persistent_workers": False,
                "dataloader_prefetch_factor": None}  # fmt: skip
    if plan is not None and plan.too_large and args.dataloader_num_workers == 0:
        workers = min(4, os.cpu_count() or 1)
        return {"dataloader_num_workers": workers, "dataloader_persistent_workers": True,
                "dataloader_prefetch_factor": 4}  # fmt: skip
    return {}
