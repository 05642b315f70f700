"""The defaults that shape a run's result, decided and said once: the image size rule and the run set-up.

Formerly also the modules ``image_size`` of ``hf_contrast.training`` (their import paths still work, with a
``FutureWarning``). Their parts follow.

The defaults that shape a run's result, said once: checked at the trainer's ``__init__``, logged at the start of
``train()`` (main process) and written in the model card's training section.

:func:`describe_run` gives ``{label: value}`` for: the image size and the rule that chose it
(:mod:`~hf_contrast.training.run_setup`), or a text run's token limit and where it came from, the precision
actually used, processes × CPU threads and the devices, the global batch, where a multi-process run's negatives
come from (``gather_distributed``), how a chunked objective cuts it (CARE's ``n_splits`` → chunk size ``m``), where
the views are made, and what the evaluation scores (the metrics' and evaluators' sample caps).

The one rule for the image size a run trains at, used by the trainer and the example scripts.

In order, the first that applies:

1. ``image_size`` given (``ContrastiveTrainingArguments.image_size``, ``--image_size``): that size;
2. the encoder's size was set before training (``encoder.set_image_size(n)``, or an encoder saved at
   a size and loaded again): that size;
3. a pretrained backbone (``from_backbone(..., pretrained=True)``): the size it was pretrained at;
4. a backbone whose input size is fixed (ViT-style): that size;
5. the training images share one size: the images' own size (read from the headers of at most
   :data:`MAX_ROWS_READ` rows spread over the dataset, nothing decoded);
6. otherwise (sizes differ, or they cannot be read): the backbone's default, with a warning.

The choice is logged once by the trainer at the start of training (with why), written in the model
card's training section, and a warning says when the views resize the images by more than
:data:`MAX_RESIZE_FACTOR` either way (a 32-px image up-sampled to 224 px costs ~50× the compute and
adds no detail).
"""

from __future__ import annotations

import io
import os
import warnings
from dataclasses import dataclass
from typing import Any

import torch
from transformers.utils import logging

from hf_contrast.errors import InputError
from hf_contrast.models.backbones import timm_data_config
from hf_contrast.tensor_checks import MAX_IMAGE_SIDE, check_int, check_name

__all__ = [
    "apply_image_size",
    "check_image_size_fits",
    "check_launch",
    "check_precision",
    "choose_image_size",
    "data_image_sizes",
    "describe_run",
    "ImageSizeChoice",
    "launched_fewer_processes",
    "log_run_setup",
    "MAX_RESIZE_FACTOR",
    "measure_token_lengths",
    "MAX_ROWS_READ",
    "precision",
    "resolve_image_size",
    "with_evaluation_lengths",
]


# ==================== run setup =======================================================================


def launched_by_accelerate() -> bool:
    """Whether this process was started by ``accelerate launch`` (which sets ``ACCELERATE_MIXED_PRECISION``, and
    ``OMP_NUM_THREADS`` to its ``--num_cpu_threads_per_process``: the user's ``OMP_NUM_THREADS``, else 1)."""
    return "ACCELERATE_MIXED_PRECISION" in os.environ


def cpu_threads_source() -> str:
    """Where this process's CPU thread count comes from, in words (for the start-up log and the model card)."""
    omp = os.environ.get("OMP_NUM_THREADS")
    if omp is not None and launched_by_accelerate():
        return (
            f"OMP_NUM_THREADS={omp}, as `accelerate launch` passes it: `--num_cpu_threads_per_process`, by default "
            f"your OMP_NUM_THREADS, else 1"
        )
    if omp is not None:
        return f"OMP_NUM_THREADS={omp}"
    if int(os.environ.get("WORLD_SIZE", "1")) == 1 and torch.get_num_threads() == usable_cores():
        return "every usable core (OMP_NUM_THREADS unset)"
    return "torch's default (OMP_NUM_THREADS unset)"


def usable_cores() -> int:
    return (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()) or 1


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
    ``WORLD_SIZE``: that signature, in a process :func:`~hf_contrast.training.cli.launched_by_accelerate`,
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
    length = getattr(getattr(trainer, "views", None), "max_length_choice", None)
    if length is not None:  # text: the tokens kept of each text
        tokens, why = length()
        setup["text length"] = f"at most {tokens} tokens, longer texts cut ({why})"
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
    if args.world_size > 1 or args.gather_distributed:  # how many negatives the loss sees
        name = type(objective).__name__
        if not objective.gathers_negatives:
            setup["negatives"] = f"each process's own (`gather_distributed` does not apply to {name})"
        elif args.gather_distributed:
            setup["negatives"] = f"from the batches of all {args.world_size} process(es) (`gather_distributed`)"
        else:
            setup["negatives"] = (
                f"each process's own batch of {per_device} (`gather_distributed=False`; True compares with all "
                f"{args.world_size} processes' batches)"
            )
    if args.gradient_cache_size is not None:
        setup["gradient cache"] = f"the encoder runs in mini-batches of {args.gradient_cache_size} rows"
    if choice is not None:
        views = "made on the device, per batch" if args.views_on_device else "made per sample in the DataLoader"
        if args.views_on_device and args.torch_compile:
            views += ", compiled with the model's torch.compile settings"
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


# ==================== image size ======================================================================


#: A resize by more than this factor (up or down, either side) is warned about.
MAX_RESIZE_FACTOR = 2.0
#: Rows whose image headers are read to find the data's own size.
MAX_ROWS_READ = 32

_REASONS = {
    "argument": "`image_size` was given",
    "encoder": "the encoder's data config was set before training (`set_image_size`, or a saved encoder)",
    "pretrained": "the pretrained backbone's input size",
    "fixed": "the backbone's input size is fixed",
    "data": "the training images' own size",
    "default": "the backbone's default input size",
}


@dataclass(frozen=True)
class ImageSizeChoice:
    """The image size a run trains at, and why.

    Attributes:
        size: ``(height, width)`` of the views.
        rule: ``"argument"``, ``"encoder"``, ``"pretrained"``, ``"fixed"``, ``"data"`` or ``"default"``.
        data_sizes: The distinct ``(height, width)`` of the images read (empty when none could be read).
        rows_read: How many rows' image headers were read.
    """

    size: tuple[int, int]
    rule: str
    data_sizes: tuple[tuple[int, int], ...] = ()
    rows_read: int = 0

    @property
    def reason(self) -> str:
        """Why this size, in words."""
        return _REASONS[self.rule]

    @property
    def resize_factor(self) -> float | None:
        """The largest factor by which the views scale an image read (up or down), ``None`` if none was read."""
        if not self.data_sizes:
            return None
        return max(max(t / d, d / t) for hw in self.data_sizes for t, d in zip(self.size, hw))

    def describe(self) -> str:
        """``"28x28 px (the training images' own size)"``, with the data's sizes when they differ from it."""
        text = f"{_hw(self.size)} px ({self.reason})"
        if self.data_sizes and self.data_sizes != (self.size,):
            seen = ", ".join(_hw(hw) for hw in self.data_sizes[:4]) + (", …" if len(self.data_sizes) > 4 else "")
            text += f"; the images are {seen} px (from {self.rows_read} rows read)"
        return text


def _hw(size: tuple[int, int]) -> str:
    return f"{size[0]}x{size[1]}"


def _header_size(value: Any) -> tuple[int, int] | None:
    """``(height, width)`` of one image cell: a PIL image, an undecoded ``{"path", "bytes"}`` row (only the
    file header is read), a path, or an array ``(H, W[, C])`` / tensor ``(C, H, W)``; ``None`` if unknown."""
    from PIL import Image

    if isinstance(value, Image.Image):
        return value.size[1], value.size[0]
    source: Any = None
    if isinstance(value, dict):
        source = io.BytesIO(value["bytes"]) if value.get("bytes") else value.get("path")
    elif isinstance(value, str):
        source = value
    if source is not None:
        try:
            with Image.open(source) as image:  # lazy: reads the header, decodes nothing
                return image.size[1], image.size[0]
        except Exception:  # noqa: BLE001 - a bad file is the collators' to report, with its row
            return None
    shape = getattr(value, "shape", None)
    if shape is not None and len(shape) in (2, 3):
        shape = tuple(int(s) for s in shape)
        if len(shape) == 3 and shape[0] in (1, 3, 4) and shape[2] not in (1, 3, 4):
            return shape[1], shape[2]  # (C, H, W) tensor
        return shape[0], shape[1]
    return None


def _sample_rows(dataset: Any, image_column: str, max_rows: int) -> list[Any]:
    """At most ``max_rows`` image cells spread evenly over a ``datasets.Dataset`` (undecoded), or the first ones
    of an iterable dataset; ``[]`` when the dataset has no such column or cannot be read."""
    try:
        import datasets
    except ImportError:  # pragma: no cover - the package imports without datasets
        return []
    features = getattr(dataset, "features", None) or {}
    if image_column not in features:  # e.g. LOCAL's (pre, post) pairs: the first image column
        image_column = next((name for name, f in features.items() if isinstance(f, datasets.Image)), image_column)
    if isinstance(dataset, datasets.Dataset):
        if image_column not in dataset.column_names or len(dataset) == 0:
            return []
        n = len(dataset)
        k = min(n, max_rows)
        rows = sorted({round(i * (n - 1) / max(1, k - 1)) for i in range(k)})
        part = dataset.select(rows)
        feature = part.features.get(image_column)
        if isinstance(feature, datasets.Image) and feature.decode:
            part = part.cast_column(image_column, datasets.Image(decode=False))
        return list(part[image_column])
    if isinstance(dataset, datasets.IterableDataset):
        feature = (dataset.features or {}).get(image_column)
        if isinstance(feature, datasets.Image) and feature.decode:
            dataset = dataset.cast_column(image_column, datasets.Image(decode=False))
        cells = []
        for row in dataset.take(max_rows):
            if image_column not in row:
                return []
            cells.append(row[image_column])
        return cells
    return []


def data_image_sizes(
    dataset: Any, image_column: str = "image", max_rows: int = MAX_ROWS_READ
) -> tuple[list[tuple[int, int]], int]:
    """The distinct ``(height, width)`` of the images of at most ``max_rows`` rows, read from the file headers.

    Args:
        dataset: A ``datasets.Dataset`` (rows spread evenly over it) or ``IterableDataset`` (its first rows).
        image_column: The image column (PIL images, undecoded ``{"path", "bytes"}`` rows, paths or arrays); when the
            dataset has no such column, its first ``datasets.Image`` column.
        max_rows: How many rows to read at most.

    Returns:
        ``(sizes, rows_read)``: the sizes seen, most frequent first, and the number of rows whose size was read.
    """
    counts: dict[tuple[int, int], int] = {}
    for cell in _sample_rows(dataset, image_column, max_rows):
        size = _header_size(cell)
        if size is not None:
            counts[size] = counts.get(size, 0) + 1
    return sorted(counts, key=lambda hw: -counts[hw]), sum(counts.values())


def choose_image_size(
    model: Any,
    image_size: int | None = None,
    dataset: Any = None,
    image_column: str = "image",
    *,
    warn: bool = True,
    stacklevel: int = 1,
) -> ImageSizeChoice | None:
    """The image size to train ``model`` at, by the module's rule (``None`` for a model without a ``data_config``:
    a text encoder). Reads nothing but image headers; changes nothing (see :func:`apply_image_size`).

    Args:
        model: A timm :class:`~hf_contrast.models.ContrastiveEncoder`.
        image_size: The ``image_size`` argument (``None``: not given).
        dataset: The training data, whose images' own size is read when no other rule applies.
        image_column: Its image column.
        warn: Warn when the images differ in size and no other rule applies, and when the views resize the
            images by more than :data:`MAX_RESIZE_FACTOR` either way.
        stacklevel: Where the warnings point, as ``warnings.warn``'s counted from this function's caller (1: the
            line that called it).

    Returns:
        An :class:`ImageSizeChoice`, or ``None``.
    """
    check_int("image_size", image_size, 1, MAX_IMAGE_SIDE, allow_none=True)
    check_name("image_column", image_column)
    data_config = getattr(model, "data_config", None)
    backbone = getattr(model, "backbone", None)
    if not data_config or backbone is None:
        return None
    current = tuple(int(v) for v in data_config["input_size"][1:])
    default = tuple(int(v) for v in timm_data_config(backbone)["input_size"][1:])
    sizes, rows_read = data_image_sizes(dataset, image_column) if dataset is not None else ([], 0)
    fixed = bool(getattr(backbone, "pretrained_cfg", {}).get("fixed_input_size", False))
    if image_size is not None:
        size, rule = (int(image_size), int(image_size)), "argument"
    elif current != default:
        size, rule = current, "encoder"
    elif getattr(model.config, "backbone_pretrained", False):
        size, rule = current, "pretrained"
    elif fixed:
        size, rule = current, "fixed"
    elif len(sizes) == 1:
        size, rule = sizes[0], "data"
    else:
        size, rule = current, "default"
    choice = ImageSizeChoice(size=size, rule=rule, data_sizes=tuple(sizes), rows_read=rows_read)
    if warn and rule == "default" and dataset is not None:
        found = (
            f"the images differ in size ({', '.join(_hw(hw) for hw in sizes[:4])} px in {rows_read} rows read)"
            if sizes
            else "the training images' size could not be read"
        )
        warnings.warn(
            f"Training at {_hw(size)} px, the backbone's default input size: `image_size` is not set and {found}. "
            "Pass `image_size=` (`--image_size`) to choose.",
            stacklevel=stacklevel + 1,
        )
    factor = choice.resize_factor
    if warn and factor is not None and factor > MAX_RESIZE_FACTOR:
        warnings.warn(
            f"The views resize the training images by {factor:.1f}x (images {', '.join(_hw(hw) for hw in sizes[:4])} "
            f"px, views {_hw(size)} px, {choice.reason}): more than {MAX_RESIZE_FACTOR:g}x costs compute (or detail) "
            f"for nothing. Pass `image_size=` (`--image_size`) near the images' size, e.g. image_size={sizes[0][0]}, "
            "or resize the data.",
            stacklevel=stacklevel + 1,
        )
    return choice


def apply_image_size(model: Any, choice: ImageSizeChoice | None) -> None:
    """``model.set_image_size(choice.size)``: the encoder's data config (what the evaluators' views and the saved
    model say) carries the training size."""
    if choice is not None and choice.rule not in ("encoder", "pretrained", "fixed", "default"):
        model.set_image_size(list(choice.size))


def resolve_image_size(
    model: Any,
    image_size: int | None = None,
    dataset: Any = None,
    image_column: str = "image",
    *,
    warn: bool = True,
    stacklevel: int = 1,
) -> ImageSizeChoice | None:
    """Decide the image size a run trains ``model`` at, once, and store it in the encoder's ``data_config``: the
    one place a run's preprocessing is decided, as timm's ``resolve_data_config`` is for timm (the size by
    :func:`choose_image_size`'s rule; ``mean``, ``std`` and ``interpolation`` are the backbone's pretrained config,
    read when the encoder was built). The views, the evaluators, the examples and the model card then read
    ``model.data_config``; nothing else decides or patches a size.

    Called again for the same model with the same arguments (an example script decides before building its
    evaluators, the trainer again when it is built), it returns the first decision unchanged: one decision per
    run, its warnings said once and its reason (e.g. "the training images' own size") kept.

    Args:
        model: A timm :class:`~hf_contrast.models.ContrastiveEncoder` (``None`` is returned for a text encoder).
        image_size: The ``image_size`` argument (``None``: not given).
        dataset: The training data, whose images' own size is read when no other rule applies.
        image_column: Its image column.
        warn: See :func:`choose_image_size`.
        stacklevel: See :func:`choose_image_size`.

    Returns:
        The :class:`ImageSizeChoice`, or ``None``.
    """
    key = (image_size, image_column, id(dataset))
    earlier = getattr(model, "_image_size_resolved", None)
    data_config = getattr(model, "data_config", None) or {}
    current = tuple(int(v) for v in data_config.get("input_size", (0, 0, 0))[1:])
    if earlier is not None and earlier[0] == key and earlier[1].size == current:  # not resized since
        return earlier[1]
    choice = choose_image_size(model, image_size, dataset, image_column, warn=warn, stacklevel=stacklevel + 1)
    apply_image_size(model, choice)
    if choice is not None:
        model._image_size_resolved = (key, choice)  # on the encoder: the run's later calls read this decision
    return choice


def check_image_size_fits(model: Any, choice: ImageSizeChoice | None) -> None:
    """One zero image through the encoder at the chosen size, in eval mode and without gradients, before training:
    a size the network cannot take (1 px through a padded convolution, a ViT's fixed patch grid) is refused naming
    ``image_size`` here, not met as a RuntimeError at the first step. Nothing is learned or counted (eval mode:
    BatchNorm statistics stay as they are)."""
    if choice is None:
        return
    parameter = next(model.parameters(), None)
    if parameter is None or parameter.device.type == "meta":
        return
    channels = int(getattr(model, "data_config", {}).get("input_size", (3,))[0])
    image = torch.zeros(1, channels, *choice.size, device=parameter.device, dtype=parameter.dtype)
    training = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(pixel_values=image)
    except (RuntimeError, AssertionError, ValueError) as error:  # InputError is a ValueError: the encoder's own
        first_line = (str(error).splitlines() or [""])[0]
        why = str(error) if isinstance(error, InputError) else f"{type(error).__name__}: {first_line}"
        raise InputError(
            f"`image_size`: the training views would be {choice.describe()}, a size this encoder cannot take. "
            f"{why.rstrip('.')}. Pass a larger `image_size` (`--image_size`)."
        ) from error
    finally:
        model.train(training)


# ==================== length-grouped sampling =========================================================


def measure_token_lengths(trainer: Any) -> None:
    """A text run grouped by length (``train_sampling_strategy="group_by_length"`` / ``"batch_rebalance"``,
    ``group_by_length=True`` before transformers 5.2): the sets the Trainer orders (the training set; for
    ``"group_by_length"`` the evaluation sets too) get ``length_column_name``, each row's token count under the run's
    tokenizer and truncation (:func:`~hf_contrast.data.lengths.with_token_lengths`), unless they have it. The rows
    hold raw text, tokenized per batch: the Trainer, finding neither the column nor ``input_ids``, stopped
    ``train()`` ("Can only automatically infer lengths ..."). Said once in the log. Called by
    ``ContrastiveTrainer.__init__`` once the views exist (refusals: :func:`~hf_contrast.training.checks.
    check_sampling_strategy`); a set given later to ``evaluate`` / ``predict``: :func:`with_evaluation_lengths`."""
    changed: list[str] = []

    def measured(dataset: Any, label: str) -> Any:
        result = _with_lengths(trainer, dataset)
        if result is not dataset:
            changed.append(label)
        return result

    trainer.train_dataset = measured(trainer.train_dataset, "train_dataset")
    if _grouped_by_length(trainer.args) == "group_by_length":  # the Trainer orders the evaluation sets by length too
        evaluation = trainer.eval_dataset
        trainer.eval_dataset = (
            {key: measured(part, f"eval_dataset[{key!r}]") for key, part in evaluation.items()}
            if isinstance(evaluation, dict)
            else measured(evaluation, "eval_dataset")
        )
    _say_lengths(trainer, changed)


def with_evaluation_lengths(trainer: Any, dataset: Any, name: str) -> Any:
    """A set given to ``evaluate`` (``name="eval_dataset"``) or ``predict`` (``"test_dataset"``) with
    ``length_column_name`` measured as :func:`measure_token_lengths` measures the trainer's own, when the Trainer
    orders it by length (``"group_by_length"`` on text) and it lacks the column; else ``dataset`` itself (``None`` and
    a name of ``eval_dataset``'s dict: the trainer's own sets, measured when it was built)."""
    if dataset is None or isinstance(dataset, str) or _grouped_by_length(trainer.args) != "group_by_length":
        return dataset
    measured = _with_lengths(trainer, dataset)
    if measured is not dataset:
        _say_lengths(trainer, [f"the `{name}` given"])
    return measured


def _grouped_by_length(args: Any) -> str | None:
    """The length-grouped order the Trainer was asked for (``"group_by_length"``, ``"batch_rebalance"``), or None."""
    from hf_contrast.training.checks import sampling_strategy

    strategy = sampling_strategy(args)[1]
    return strategy if strategy in ("group_by_length", "batch_rebalance") else None


def _with_lengths(trainer: Any, dataset: Any) -> Any:
    """``dataset`` with the token lengths of its rows in ``length_column_name`` when the run groups text by length
    and an arrow dataset lacks the column; else ``dataset`` itself. Images were refused
    (:func:`~hf_contrast.training.checks.check_sampling_strategy`); without a tokenizer the collator refuses the
    run."""
    from hf_contrast.data.checks import is_arrow_dataset
    from hf_contrast.data.lengths import with_token_lengths

    args = trainer.args
    column = args.length_column_name
    if (
        _grouped_by_length(args) is None
        or trainer.processing_class is None
        or not is_arrow_dataset(dataset)
        or column in dataset.column_names
    ):
        return dataset
    columns = [c for c in (args.text_column, args.text_pair_column) if c is not None]
    progress = not args.disable_tqdm and trainer.is_world_process_zero()
    return with_token_lengths(
        dataset, trainer.processing_class, columns, trainer.views.max_length(), column, progress=progress
    )


def _say_lengths(trainer: Any, measured: list[str]) -> None:
    """Log, once and on the main process, which sets got their rows' token lengths."""
    from hf_contrast.training.checks import sampling_strategy

    if measured and trainer.is_world_process_zero():
        name = sampling_strategy(trainer.args)[0]
        logger.info(
            f"`{name}`: the token length of every row of {', '.join(measured)} (at most {trainer.views.max_length()} "
            f"tokens, the run's truncation) is in a {trainer.args.length_column_name!r} column, which the Trainer "
            "groups the rows by."
        )
