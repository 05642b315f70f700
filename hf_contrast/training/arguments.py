"""``ContrastiveTrainingArguments``: ``TrainingArguments`` plus what every contrastive run shares.

Method hyperparameters are NOT here: each objective owns them in its config dataclass
(``hf_contrast.objectives.CAREConfig`` …), which ``HfArgumentParser`` also turns into flags::

    parser = HfArgumentParser((ContrastiveTrainingArguments, get_objective("care").config_class))
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import TrainingArguments

from ..errors import InputError
from ..tensor_checks import (
    MAX_IMAGE_SIDE,
    MAX_LENGTH,
    check_bool,
    check_choice,
    check_int,
    check_name,
    check_temperature,
)

__all__ = ["ContrastiveTrainingArguments", "NONFINITE_POLICIES"]

_REPRESENTATIONS = ("embeddings", "projections")
#: What a non-finite loss or gradient does: stop with an error, or skip the optimizer step.
NONFINITE_POLICIES = ("raise", "skip")


@dataclass
class ContrastiveTrainingArguments(TrainingArguments):
    """``TrainingArguments`` for contrastive training: data columns, view size and where views are made,
    distributed negatives, evaluation representation and the non-finite policy.

    Defaults that differ from ``TrainingArguments``: ``remove_unused_columns=False`` (the collators read
    columns the encoder's ``forward`` does not take; the trainers refuse ``True``) and
    ``logging_nan_inf_filter=False`` (a NaN loss is never replaced in the logs: ``nonfinite_policy`` decides
    what happens).

    Raises:
        ValueError: naming the field, when a value is out of range.

    >>> args = ContrastiveTrainingArguments(output_dir="out", image_size=32)  # doctest: +SKIP
    """

    gather_distributed: bool = field(
        default=False,
        metadata={
            "help": "Compare local anchors with the candidates gathered from all processes (InfoNCE, SupCon, OCL, "
            "uniformity, CARE's invariance term). Gives the same gradients as one process on the global batch."
        },
    )
    nonfinite_policy: str = field(
        default="raise",
        metadata={
            "help": "A non-finite loss or gradient: 'raise' (stop at the next log or save, naming the step and the "
            "term; no extra host sync per step) or 'skip' (drop that optimizer step; one host sync per step)."
        },
    )
    gradient_cache_size: int | None = field(
        default=None,
        metadata={
            "help": "Cached-gradient training (GradCache): run the encoder in mini-batches of this many rows while "
            "the objective sees the whole batch (all negatives, whole chunks). Exact for encoders without batch "
            "statistics; costs one extra encoder forward per step. None: one pass over the batch."
        },
    )
    # ---- data ----------------------------------------------------------------------------------
    image_column: str = field(default="image", metadata={"help": "Dataset column with the images."})
    text_column: str = field(default="text", metadata={"help": "Dataset column with the sentences."})
    text_pair_column: str | None = field(
        default=None,
        metadata={
            "help": "Optional column with a positive sentence for each text (e.g. a paraphrase); without it the two "
            "text views are the same sentence under dropout (SimCSE)."
        },
    )
    label_column: str = field(default="label", metadata={"help": "Dataset column with integer class labels."})
    on_bad_image: str = field(
        default="raise",
        metadata={
            "help": "An unreadable / None / truncated image: 'raise' (an error naming the row and file) or 'skip' "
            "(drop it from the batch, warn, and count it in the collator's `skipped_images`)."
        },
    )
    max_length: int | None = field(
        default=None,
        metadata={
            "help": "Text: tokenizer truncation length. None: the encoder's max_seq_length (kept from a "
            "sentence-transformers model), else the tokenizer's model_max_length, else 128."
        },
    )
    image_size: int | None = field(
        default=None,
        metadata={
            "help": "Image: side of the views. None: a size set on the encoder (set_image_size / a saved encoder), "
            "else a pretrained backbone's size, else the training images' own size when they share one, else the "
            "backbone's default with a warning (hf_contrast.training.run_setup); logged at the start of training."
        },
    )
    views_on_device: bool | None = field(
        default=None,
        metadata={
            "help": "Image: make the random views (SimCLR recipe: crop, flip, colour jitter, grayscale, blur; CARE's "
            "chunk-shared views too) per batch on the training device, from the uint8 images the DataLoader only "
            "decodes and resizes, instead of per sample in the DataLoader. Seeded by (seed, batch number), which "
            "checkpoints keep: a resumed run draws the same views. Not for text encoders or LOCAL's pairs. Default "
            "(None): True for image views when the run trains on an accelerator (GPU), False on a CPU and for text "
            "or LOCAL's pairs; the trainer decides it, logs it at the start of training and writes it in the model "
            "card.",
            # a bare `--views_on_device` means True, `--views_on_device false` False, no flag the default (None)
            "nargs": "?",
            "const": True,
        },
    )
    resume_with_changes: bool = field(
        default=False,
        metadata={
            "help": "Resume a checkpoint even though the method, its hyperparameters, the model or a setting that "
            "shapes the weights (batch, learning rate and schedule, seed, image size, precision, processes) differs "
            "from the run that wrote it; each change is logged and written in the model card. Without it such a "
            "resume is refused, naming the changes."
        },
    )
    image_cache_max_gb: float = field(
        default=4.0,
        metadata={
            "help": "Image, with views made on the device: decode and resize every training image once, at start-up, "
            "into a uint8 cache of at most this many GiB, held on the training device when it fits there (else in "
            "host memory), and gather each batch with one index operation instead of decoding it at every step. "
            "0 turns the cache off. A training set that does not fit is decoded per batch by persistent DataLoader "
            "workers instead (logged)."
        },
    )
    # ---- evaluation ----------------------------------------------------------------------------
    eval_representation: str = field(
        default="embeddings",
        metadata={
            "help": "Which output the eval metrics use: 'embeddings' (backbone features, what a probe uses) or "
            "'projections' (what the loss sees)."
        },
    )
    knn_k: int = field(default=20, metadata={"help": "Eval: neighbours of the leave-one-out kNN classifier."})
    knn_temperature: float = field(default=0.07, metadata={"help": "Eval: vote temperature of the kNN classifier."})
    # ---- TrainingArguments defaults changed for contrastive training ---------------------------
    remove_unused_columns: bool = field(
        default=False,
        metadata={
            "help": "Keep it False: the collators read columns the encoder's forward does not take, and the "
            "contrastive trainers refuse True (select columns with `dataset.select_columns`)."
        },
    )
    logging_nan_inf_filter: bool = field(
        default=False,
        metadata={"help": "Replace a NaN/inf training loss in the logs (False: `nonfinite_policy` handles it)."},
    )

    def __post_init__(self) -> None:
        check_choice("nonfinite_policy", self.nonfinite_policy, NONFINITE_POLICIES)
        check_choice("on_bad_image", self.on_bad_image, ("raise", "skip"))
        check_int("gradient_cache_size", self.gradient_cache_size, 1, allow_none=True)
        for name in ("image_column", "text_column", "label_column"):
            check_name(name, getattr(self, name))
        check_int("max_length", self.max_length, 2, MAX_LENGTH, allow_none=True)
        check_int("image_size", self.image_size, 1, MAX_IMAGE_SIDE, allow_none=True)
        if self.views_on_device is not None:
            check_bool("views_on_device", self.views_on_device)
        for name in ("gather_distributed", "resume_with_changes"):  # "no" is a true string: it would gather
            check_bool(name, getattr(self, name))
        if (
            isinstance(self.image_cache_max_gb, bool)
            or not isinstance(self.image_cache_max_gb, (int, float))
            or not math.isfinite(self.image_cache_max_gb)
            or self.image_cache_max_gb < 0
        ):
            raise InputError(
                "`image_cache_max_gb` (`--image_cache_max_gb`) must be a number of GiB >= 0 (0 turns the decoded-"
                f"image cache off), got {self.image_cache_max_gb!r}."
            )
        check_choice("eval_representation", self.eval_representation, _REPRESENTATIONS)
        check_int("knn_k", self.knn_k, 1)
        check_temperature("knn_temperature", self.knn_temperature)
        _check_bf16_device(self)
        _check_schedule(self)
        if self.accelerator_config is None and self.dataloader_pin_memory and not self.use_cpu and _has_accelerator():
            # batches reach the GPU in pinned, non-blocking copies: the host never waits for the device per step
            self.accelerator_config = {"non_blocking": True}
        super().__post_init__()
        _check_trackers_installed(self.report_to)
        if self.torch_compile_mode is not None and self.torch_compile_backend == "inductor":
            # an unknown mode stopped training at the first compile with torch's traceback; the modes are those
            # torch.compile's docstring lists (another backend takes its own); "" too is refused (torch 2.6 refuses
            # it, later releases read it as the default)
            from torch._inductor import list_mode_options

            check_choice("torch_compile_mode", self.torch_compile_mode, tuple(list_mode_options()))


#: Trackers whose availability ``transformers.integrations.get_available_reporting_integrations`` reports.
_TRACKERS = (
    "clearml", "codecarbon", "comet_ml", "dagshub", "dvclive", "kubeflow", "mlflow", "neptune", "swanlab",
    "tensorboard", "trackio", "wandb",
)  # fmt: skip


def _check_trackers_installed(report_to: Any) -> None:
    """``report_to=["wandb"]`` without wandb installed failed when the Trainer was built, with a traceback."""
    from transformers.integrations import get_available_reporting_integrations

    asked = [report_to] if isinstance(report_to, str) else list(report_to or [])
    missing = [name for name in asked if name in _TRACKERS and name not in get_available_reporting_integrations()]
    if missing:
        raise InputError(
            f"`report_to` (`--report_to`) names {missing}, not installed here: `pip install {' '.join(missing)}`, or "
            "pass `--report_to none` (or another tracker that is installed)."
        )


def _check_schedule(args: ContrastiveTrainingArguments) -> None:
    """Values transformers accepts and then does not honour (or fails on mid-run): ``max_steps=0`` trained one step
    (``max_steps=-5`` trained for the epochs; a negative weight decay or gradient norm ran as given or unclipped),
    a negative learning rate, ``gradient_accumulation_steps=0`` or a seed
    outside numpy's range failed once training began, ``save_steps=0`` /
    ``eval_steps=0`` with the ``"steps"`` strategy saved or evaluated at no step (``logging_steps=-1`` logged only at
    the last step); an ``output_dir`` that is a file
    failed at the first save with ``FileExistsError``. Said before any work, naming the argument."""
    if args.max_steps == 0 or args.max_steps < -1:
        why = "no training step would be run (transformers runs one anyway)" if args.max_steps == 0 else "no count"
        raise InputError(
            f"`max_steps` (`--max_steps`) is {args.max_steps}: {why}. Give a number of steps >= 1, or -1 (the "
            "default) to train for `num_train_epochs`."
        )
    if args.max_steps == -1 and not args.num_train_epochs > 0:
        raise InputError(
            f"`num_train_epochs` (`--num_train_epochs`) is {args.num_train_epochs} and `max_steps` is unset: no "
            "training step would be run. Give a number of epochs > 0, or `max_steps` (`--max_steps`) >= 1."
        )
    if not isinstance(args.learning_rate, (int, float)) or not args.learning_rate >= 0:  # NaN too
        raise InputError(f"`learning_rate` (`--learning_rate`) must be a number >= 0, got {args.learning_rate!r}.")
    check_int("gradient_accumulation_steps", args.gradient_accumulation_steps, 1)
    warmup = args.warmup_steps
    if (
        isinstance(warmup, bool)
        or not isinstance(warmup, (int, float))
        or not warmup >= 0
        or (warmup >= 1 and warmup != int(warmup))  # transformers would train 1.5 as 1 step, silently
    ):
        raise InputError(
            f"`warmup_steps` (`--warmup_steps`) must be a number of steps >= 0 (or a fraction < 1 of the training), "
            f"got {warmup!r}."
        )
    if not isinstance(args.weight_decay, (int, float)) or not args.weight_decay >= 0:
        raise InputError(f"`weight_decay` (`--weight_decay`) must be a number >= 0, got {args.weight_decay!r}.")
    if args.max_grad_norm is not None and not args.max_grad_norm >= 0:
        raise InputError(
            f"`max_grad_norm` (`--max_grad_norm`) must be a norm >= 0 (0 turns gradient clipping off), got "
            f"{args.max_grad_norm!r}: transformers would silently not clip."
        )
    check_int("dataloader_num_workers", args.dataloader_num_workers, 0)
    if args.save_total_limit is not None and args.save_total_limit < 1:
        raise InputError(
            f"`save_total_limit` (`--save_total_limit`) is {args.save_total_limit}: transformers would keep every "
            "checkpoint. Give a number of checkpoints >= 1, leave it unset to keep all, or set `save_strategy` to "
            "'no' to keep none."
        )
    if not isinstance(args.seed, int) or not 0 <= args.seed < 2**32:
        raise InputError(
            f"`seed` (`--seed`) must be an integer in [0, 2**32 - 1] (what numpy and torch accept), got {args.seed!r}."
        )
    done = {"save_steps": "saved", "eval_steps": "evaluated", "logging_steps": "logged at regular steps"}
    for name, strategy in (
        ("save_steps", args.save_strategy),
        ("eval_steps", args.eval_strategy),
        ("logging_steps", args.logging_strategy),
    ):
        value = getattr(args, name)
        if str(getattr(strategy, "value", strategy)) == "steps" and value is not None and value <= 0:
            raise InputError(
                f"`{name}` (`--{name}`) is {value} with the 'steps' strategy: nothing would be {done[name]}. Give "
                f"a number of steps >= 1 (or a fraction of the training in (0, 1)), or set "
                f"`{name.replace('steps', 'strategy')}` to 'no' or 'epoch'."
            )
    if isinstance(args.output_dir, str) and not args.output_dir.strip():
        raise InputError(
            "`output_dir` (`--output_dir`) is empty: name the folder for the checkpoints, the model and its card."
        )
    if args.output_dir is not None and os.path.isfile(args.output_dir):
        raise InputError(
            f"`output_dir` (`--output_dir`) {args.output_dir!r} is a file, not a folder: the run writes a folder of "
            "checkpoints, the model and its card there. Name a folder (new or existing)."
        )


def _has_accelerator() -> bool:
    """Whether torch sees an accelerator (a GPU) on this machine."""
    available = getattr(torch, "accelerator", None)
    return available.is_available() if available is not None else torch.cuda.is_available()


def _check_bf16_device(args: ContrastiveTrainingArguments) -> None:
    """``bf16=True`` on a machine without an accelerator: transformers refuses it in ``__post_init__`` ("Your setup
    doesn't support bf16/gpu"); say here which argument and what to set instead."""
    if args.bf16 and not args.use_cpu and not _has_accelerator():
        raise InputError(
            "`bf16=True` needs an accelerator (GPU) and this machine has none. For bf16 autocast on the CPU set "
            "`use_cpu=True` as well (`--use_cpu`; slower than fp32 on most CPUs, and its results differ from fp32); "
            "otherwise drop `bf16` (the run is fp32)."
        )
