"""What a training script sets up around the Trainer: its logging, and where it resumes.

The examples (``examples/run_*.py``) call these, as transformers' example scripts do the same steps:

- :func:`setup_logging`: the script's, transformers' and hf_contrast's messages at ``--log_level`` on the
  main process and ``--log_level_replica`` on the others, on standard output;
- :func:`detect_last_checkpoint`: the newest checkpoint of ``output_dir`` to resume from, or an error
  when ``output_dir`` holds an earlier run's files and no checkpoint (``--overwrite_output_dir`` is the
  way to train from scratch into it; transformers 5 no longer has that argument);
- :func:`set_cpu_threads`: the CPU threads per process — every core for one plain ``python`` process
  without ``OMP_NUM_THREADS``; otherwise what the user (or the launcher) set, never overridden;
- :func:`notice_small_image_stem`: one line when small images meet a ResNet's ImageNet stem and the user made
  no stem choice (``--small_image_stem`` unset), saying what the small-image papers use and how to ask for it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import sys
from typing import Any

import torch
import transformers
from transformers import TrainingArguments
from transformers.trainer_utils import get_last_checkpoint

from hf_contrast.errors import InputError
from hf_contrast.models.backbones import backbone_type_of, close_timm_names
from hf_contrast.models.stems import SMALL_IMAGE_STEM, supports_small_image_stem
from hf_contrast.training.image_size import choose_image_size
from hf_contrast.training.run_identity import RUN_SETTINGS_NAME

__all__ = [
    "cpu_threads_source",
    "detect_last_checkpoint",
    "check_sample_caps",
    "check_image_backbone",
    "check_text_backbone",
    "check_task_head",
    "evaluate_final",
    "finished_run",
    "launched_by_accelerate",
    "run_main",
    "notice_small_image_stem",
    "set_cpu_threads",
    "setup_logging",
    "small_image_stem_field",
    "training_length",
]

logger = logging.getLogger(__name__)


def small_image_stem_field() -> Any:
    """The image examples' ``--small_image_stem`` field, declared once: ``None`` (no choice made: the ImageNet stem,
    and a note for small images, :func:`notice_small_image_stem`), a bare flag for True, ``false`` for False."""
    return dataclasses.field(
        default=None,
        metadata={
            "nargs": "?",  # a bare `--small_image_stem` is True; unset (None): no choice made
            "const": True,
            "help": "ResNet family: a 3x3 stride-1 first conv and no max-pool, as the small-image papers train 32-px "
            "images (default: timm's ImageNet stem; with images <= 64 px a note says so; `false` keeps it quietly).",
        },
    )


def setup_logging(training_args: TrainingArguments, script_logger: str = "__main__") -> None:
    """The script's (``script_logger``, its ``__name__``), transformers' and hf_contrast's messages at
    ``--log_level`` (info by default) on the main process, ``--log_level_replica`` (warning) on the others;
    datasets' at warning or above."""
    import datasets  # not at module level: the package imports without `datasets` (a bare GPU image)

    logging.basicConfig(
        format="%(asctime)s - %(levelname)s - %(name)s - %(message)s",
        datefmt="%m/%d/%Y %H:%M:%S",
        handlers=[logging.StreamHandler(sys.stdout)],
    )
    if training_args.should_log:  # the default `--log_level passive` means info here, as in transformers' examples
        transformers.utils.logging.set_verbosity_info()
    log_level = training_args.get_process_log_level()
    for name in (script_logger, "hf_contrast"):
        logging.getLogger(name).setLevel(log_level)
    datasets.utils.logging.set_verbosity(max(log_level, logging.WARNING))  # its info lines are about its cache
    transformers.utils.logging.set_verbosity(log_level)
    transformers.utils.logging.enable_default_handler()
    transformers.utils.logging.enable_explicit_format()


def detect_last_checkpoint(training_args: TrainingArguments, overwrite_output_dir: bool) -> str | None:
    """The newest checkpoint in ``output_dir`` to resume from (``None``: start from scratch).

    Raises:
        ValueError: if ``output_dir`` holds files but no checkpoint and ``overwrite_output_dir`` is false
            (nothing of an earlier run is overwritten unasked), or if ``overwrite_output_dir`` and
            ``resume_from_checkpoint`` are both given (opposite requests).
    """
    output_dir = training_args.output_dir
    if overwrite_output_dir and training_args.resume_from_checkpoint:
        raise InputError(
            f"--overwrite_output_dir (train from scratch) and --resume_from_checkpoint "
            f"{training_args.resume_from_checkpoint} (continue a run) ask for opposite things: drop one of them."
        )
    if not os.path.isdir(output_dir) or overwrite_output_dir:
        return None
    last_checkpoint = get_last_checkpoint(output_dir)
    if last_checkpoint is None and os.listdir(output_dir):
        raise InputError(
            f"Output directory ({output_dir}) already exists and is not empty. Use --overwrite_output_dir to train "
            "from scratch into it, or pick another --output_dir."
        )
    resuming = last_checkpoint is not None and training_args.resume_from_checkpoint is None
    if resuming and finished_run(training_args, last_checkpoint) is None:  # a finished run is said by the script
        logger.info(
            f"Checkpoint detected, resuming training at {last_checkpoint}. To avoid this behavior, change the "
            "`--output_dir` or add `--overwrite_output_dir` to train from scratch."
        )
    return last_checkpoint


def evaluate_final(trainer: Any) -> dict[str, float]:
    """The evaluation of the run's final weights: the one the run made at its last step when there is one and the
    weights have not changed since (no best checkpoint reloaded at the end), else ``trainer.evaluate()``. A run whose
    last step is an evaluation step is not evaluated twice on the same weights (its evaluators, probes and
    equivariance included: the same numbers, twice the time)."""
    state, args = trainer.state, trainer.args
    best_step = getattr(state, "best_global_step", None)
    reloaded = bool(args.load_best_model_at_end) and state.best_model_checkpoint is not None
    if not reloaded or best_step == state.global_step:
        for entry in reversed(state.log_history):
            if any(key.startswith("eval_") for key in entry):
                if entry.get("step") == state.global_step:
                    logger.info(
                        f"The final weights were evaluated at step {state.global_step}: those metrics are kept."
                    )
                    return {key: value for key, value in entry.items() if key != "step"}
                break
    return trainer.evaluate()


def run_main(main: Any) -> None:
    """Run a script's ``main()``; the package's own input errors (:class:`~hf_contrast.errors.InputError`, raised
    with the argument and the fix) end it with that message and exit status 1, like argparse's, instead of a
    traceback in front of the message. Any other exception keeps its traceback."""
    try:
        main()
    except InputError as error:
        sys.exit(f"{os.path.basename(sys.argv[0])}: error: {error}")


def check_sample_caps(script: Any) -> None:
    """``--max_train_samples`` / ``--max_eval_samples`` (where a script has them): a number of rows >= 1, or unset.

    Raises:
        InputError: naming the flag, before any data is read.
    """
    for name in ("max_train_samples", "max_eval_samples"):
        value = getattr(script, name, None)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise InputError(f"`--{name}` must be a number of rows >= 1 (or left out: every row), got {value!r}.")


def check_image_backbone(model: str) -> None:
    """``--model`` of an image script: a timm model (a timm name, ``hf-hub:…``, ``local-dir:…`` or a folder saved
    from one). Any other name would be looked up on the Hub as a text encoder (a minute of retries offline) and
    could not train on images.

    Raises:
        InputError: naming the flag, with the close timm names, before any data is read.
    """
    if backbone_type_of(model) == "timm":
        return
    matches = close_timm_names(model)
    hint = f" Close timm names: {', '.join(matches)}." if matches else ""
    raise InputError(
        f"--model {model!r} is not a timm image model (a timm name such as 'resnet18', 'hf-hub:<repo>', "
        f"'local-dir:<path>', or a folder saved from one).{hint} List them with `timm.list_models('*resnet*')`; "
        "text encoders train with examples/run_bert.py."
    )


def check_text_backbone(model: str) -> None:
    """``--model`` of a text script: not a timm image model (a timm name would be looked up on the Hub as a text
    encoder, a minute of retries offline, and then called "not a timm model name").

    Raises:
        InputError: naming the flag and the image scripts, before any data is read.
    """
    if isinstance(model, str) and backbone_type_of(model) == "timm":
        raise InputError(
            f"--model {model!r} is a timm image model; examples/run_bert.py trains text encoders (a Hub id or a "
            "local folder of a BERT-style or sentence-transformers model). Train image models with "
            "examples/run_care.py."
        )


def check_task_head(method: str, task_head: bool) -> None:
    """``--task_head`` only with a method that trains the head (:attr:`Objective.trains_task_head
    <hf_contrast.objectives.Objective.trains_task_head>`): with any other it would stay random.

    Raises:
        InputError: naming the flag and the method, before any data is read.
    """
    from hf_contrast.objectives import get_objective

    if task_head and not get_objective(method).trains_task_head:
        raise InputError(
            f"--task_head: --method {method} does not train a task head (it would stay random); use --method "
            "align_uniform (its --task_loss_weight term; EquiBERT for text), or drop --task_head."
        )


def finished_run(
    training_args: TrainingArguments, last_checkpoint: str | None, method: str | None = None
) -> str | None:
    """Why there is nothing to train, or ``None``: ``output_dir`` already holds a run that reached the steps these
    arguments ask for (its ``trainer_state.json`` and ``train_results.json`` are there, as a script writes them at
    its end). Resuming it would train past its last step and rewrite its results with that one step; a script
    says so and stops instead, changing nothing. A larger ``--max_steps`` (or more epochs) continues the run.

    Only for a checkpoint found in ``output_dir`` (``last_checkpoint``), not one named by
    ``--resume_from_checkpoint``. With ``method`` (the ``--method`` asked for), the message also says when the
    finished run is of another method (its checkpoint's ``run_settings.json``): continuing it is not what was asked.
    """
    if last_checkpoint is None or training_args.resume_from_checkpoint is not None:
        return None
    output_dir = training_args.output_dir
    state_file = os.path.join(output_dir, "trainer_state.json")
    if not (os.path.isfile(state_file) and os.path.isfile(os.path.join(output_dir, "train_results.json"))):
        return None
    try:
        with open(state_file, encoding="utf-8") as handle:
            state = json.load(handle)
        done, planned = int(state["global_step"]), int(state["max_steps"])
        epochs = float(state.get("num_train_epochs", training_args.num_train_epochs))
    except (OSError, ValueError, KeyError, TypeError):  # unreadable: let the resume say what is wrong
        return None
    if training_args.max_steps > 0:
        wanted, unit = training_args.max_steps, "steps"
        finished = done >= training_args.max_steps
    else:
        wanted, unit = training_args.num_train_epochs, "epochs"
        finished = done >= planned and training_args.num_train_epochs <= epochs
    if not finished:
        return None
    other = ""
    ran = _checkpoint_method(last_checkpoint)
    if method is not None and ran is not None and ran != method:
        other = f"It is a {ran} run, not the --method {method} asked for. "
    return (
        f"{output_dir} holds a finished run: {done} training steps, which is the {wanted:g} {unit} asked for "
        f"(trainer_state.json, train_results.json). {other}Nothing was trained and nothing changed. Pass a larger "
        f"--{'max_steps' if unit == 'steps' else 'num_train_epochs'} to continue this run, --overwrite_output_dir to "
        "train again from scratch, or another --output_dir."
    )


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
    if int(os.environ.get("WORLD_SIZE", "1")) == 1 and torch.get_num_threads() == _usable_cores():
        return "every usable core (OMP_NUM_THREADS unset)"
    return "torch's default (OMP_NUM_THREADS unset)"


def _usable_cores() -> int:
    return (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()) or 1


def set_cpu_threads(training_args: TrainingArguments) -> int:
    """Set torch's CPU threads for a CPU run, and return the count.

    One process (``world_size == 1``) on a CPU, with no ``OMP_NUM_THREADS``: every core this process may use
    (torch's default is the physical cores). Anything else is left as it is: ``OMP_NUM_THREADS`` is the user's
    choice, and under ``accelerate launch`` it is ``--num_cpu_threads_per_process`` (by default the user's
    ``OMP_NUM_THREADS``, else 1), so ``OMP_NUM_THREADS=4 accelerate launch run.py`` trains with 4 threads.
    The count and where it comes from are in the trainer's start-up log (:func:`cpu_threads_source`).
    """
    if training_args.world_size == 1 and training_args.device.type == "cpu" and "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(_usable_cores())
    threads = torch.get_num_threads()
    logger.info(f"CPU threads per process: {threads} ({cpu_threads_source()}).")
    return threads


#: Images at most this many pixels on their longer side are "small" (CIFAR, STL-10 at 64 px, the digits).
SMALL_IMAGE_MAX_PX = 64


def _imagenet_stem(backbone: Any) -> tuple[str, int]:
    """``("7x7 stride-2 conv + max-pool", 4)``: a ResNet's stem in words, and its total stride."""
    conv = backbone.conv1
    if isinstance(conv, torch.nn.Conv2d):
        words = f"{conv.kernel_size[0]}x{conv.kernel_size[1]} stride-{conv.stride[0]} conv + max-pool"
    else:
        words = "stride-2 deep stem + max-pool"
    info = getattr(backbone, "feature_info", None) or []
    stride = next((int(e["reduction"]) for e in info if isinstance(e, dict) and e.get("module") == "layer1"), 4)
    return words, stride


def notice_small_image_stem(
    encoder: Any,
    small_image_stem: bool | None,
    image_size: int | None = None,
    dataset: Any = None,
    image_column: str = "image",
) -> str | None:
    """Log one line when a run trains small images (at most :data:`SMALL_IMAGE_MAX_PX` px, by
    :func:`~hf_contrast.training.choose_image_size`'s rule) on a ResNet's ImageNet stem and the user made no stem
    choice, saying what the small-image papers use and how to ask for it (``--small_image_stem``). Call it once,
    after building the encoder.

    Args:
        encoder: The ``ContrastiveEncoder`` the run trains.
        small_image_stem: The script's ``--small_image_stem`` (``None``: not given; ``True``/``False``: the user
            chose, and nothing is logged).
        image_size: The ``--image_size`` argument (``None``: not given).
        dataset: The training data (its images' own size is read when no other rule applies).
        image_column: Its image column.

    Returns:
        The line logged, or ``None`` (a choice was made, the encoder has the small stem or another family, or
        the images are larger).
    """
    backbone = getattr(encoder, "backbone", None)
    if small_image_stem is not None or getattr(encoder.config, "small_image_stem", False):
        return None
    if backbone is None or not supports_small_image_stem(backbone):
        return None
    choice = choose_image_size(encoder, image_size, dataset, image_column, warn=False)
    if choice is None or max(choice.size) > SMALL_IMAGE_MAX_PX:
        return None
    (height, width), (words, stride) = choice.size, _imagenet_stem(backbone)
    name = encoder.config.backbone_architecture or encoder.config.backbone
    size = f"{height}-px" if height == width else f"{height}x{width}-px"
    message = (
        f"{size} images on {name}'s ImageNet stem ({words}: {math.ceil(height / stride)}x{math.ceil(width / stride)} "
        f"after the stem); the CARE/SimCLR/SupCon papers train small images with a {SMALL_IMAGE_STEM}: pass "
        "--small_image_stem (or --small_image_stem false to keep this stem without this note)."
    )
    logger.info(message)
    return message


def _checkpoint_method(checkpoint: str) -> str | None:
    """The method named in ``checkpoint``'s ``run_settings.json`` (``None`` when it has none or it is unreadable)."""
    try:
        with open(os.path.join(checkpoint, RUN_SETTINGS_NAME), encoding="utf-8") as handle:
            name = json.load(handle)["method"]["name"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return name if isinstance(name, str) else None


def training_length(training_args: TrainingArguments) -> str:
    """How long the run trains, as the start-up line says it: ``"150 steps"``, or ``"3 epochs"`` when
    ``max_steps`` is unset (-1) and ``num_train_epochs`` decides."""
    if training_args.max_steps > 0:
        return f"{training_args.max_steps} steps"
    epochs = training_args.num_train_epochs
    return f"{epochs:g} epoch{'' if epochs == 1 else 's'}"
