"""The example scripts' command line and set-up: flags with the method's hyperparameters, logging, resume, the checks
said before any data is read.

Formerly also the modules ``argument_parser``, ``scripts`` of ``hf_contrast.training`` (their import paths still
work, with a ``FutureWarning``). Their parts follow.

``parse_args_with_objective``: command-line flags that include the chosen method's hyperparameters.

Each objective owns its hyperparameters in a config dataclass (``get_objective("care").config_class``).
A script that lets the user pick the method with ``--method`` needs that dataclass in its
``HfArgumentParser`` *before* parsing, so ``--method`` is read first; ``--method X --help`` then lists X's
flags, and a flag another method has (``--n_splits`` with ``--method simclr``) is refused by name.

What a training script sets up around the Trainer: its logging, and where it resumes.

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

import argparse
import contextlib
import dataclasses
import json
import logging
import math
import os
import sys
import typing
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
import transformers
from transformers import HfArgumentParser, TrainingArguments
from transformers.hf_argparser import string_to_bool
from transformers.trainer_utils import get_last_checkpoint

from hf_contrast.errors import InputError, InputTypeError
from hf_contrast.hub.card_callback import is_evaluation_log
from hf_contrast.models.backbones import backbone_type_of, close_timm_names
from hf_contrast.models.stems import SMALL_IMAGE_STEM, supports_small_image_stem
from hf_contrast.objectives import available_objectives, get_objective
from hf_contrast.training.checkpointing import checkpoint_step, epoch_run_steps, read_run_settings
from hf_contrast.training.run_setup import choose_image_size, cpu_threads_source, launched_by_accelerate, usable_cores

__all__ = [
    "check_image_backbone",
    "check_sample_caps",
    "check_script_phases",
    "check_task_head",
    "check_text_backbone",
    "cpu_threads_source",
    "detect_last_checkpoint",
    "evaluate_final",
    "finished_run",
    "given_arguments",
    "launched_by_accelerate",
    "notice_small_image_stem",
    "parse_args_with_objective",
    "run_main",
    "set_cpu_threads",
    "setup_logging",
    "small_image_stem_field",
    "training_length",
]


# ==================== argument parser =================================================================


def parse_args_with_objective(
    dataclass_types: Sequence[type],
    *,
    method: str,
    defaults: Mapping[str, Any] | None = None,
    args: Sequence[str] | None = None,
) -> tuple[Any, ...]:
    """Parse the command line into ``(*dataclasses, method_config)``.

    ``--method`` (default ``method``; one of :func:`~hf_contrast.objectives.available_objectives`) is read
    first; the parser then holds the fields of ``dataclass_types`` (e.g. the script's arguments and
    :class:`~hf_contrast.training.ContrastiveTrainingArguments`) and of that method's config dataclass.
    ``defaults`` change the default of any of these fields (a default naming a field the chosen method
    does not have is dropped); every flag overrides them. For a method with class-major batches (SimO's
    ``classes_per_batch`` × ``samples_per_class``) the batch size is that product unless
    ``--per_device_train_batch_size`` is given; with ``--load_best_model_at_end`` a default ``save_total_limit`` of
    1 becomes 2 (the last checkpoint kept beside the best, so that a larger ``--max_steps`` continues the run)
    unless ``--save_total_limit`` is given. Flags are spelled out in full (no argparse abbreviations: a
    script must see which fields the user named). A single ``.json`` argument is read as a
    config file of field values (its ``"method"`` picks the method), as ``transformers`` examples do.

    Args:
        dataclass_types: The dataclasses to fill, in the order returned. One of them should have a
            ``method`` field (it receives the chosen method).
        method: The default method.
        defaults: New defaults by field name.
        args: The arguments (default ``sys.argv[1:]``).

    Returns:
        One instance per dataclass of ``dataclass_types``, then the method's config instance.

    Raises:
        SystemExit: (argparse) on an unknown method or flag; the message lists the method's hyperparameters.

    Example:
        >>> script, training_args, config = parse_args_with_objective(  # doctest: +SKIP
        ...     (ScriptArguments, ContrastiveTrainingArguments), method="care", defaults={"max_steps": 150})
    """
    argv = list(sys.argv[1:] if args is None else args)
    given: dict[str, Any] | None = None
    if _is_config_file(argv):
        given = _read_config_file(argv[0])
        method = given.get("method", method)
    else:
        first = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
        first.add_argument("--method", default=method, choices=available_objectives())
        method = first.parse_known_args(argv)[0].method
    config_class = get_objective(method).config_class
    _check_no_shared_fields(method, config_class, dataclass_types)
    # no abbreviated flags: `--per_device_train_batch 12` would set the batch size while `given_arguments` (and a
    # reader of the command line) sees no `--per_device_train_batch_size`, so a derived default could replace it
    parser = HfArgumentParser((*dataclass_types, config_class), allow_abbrev=False)
    known = {f.name for kind in (*dataclass_types, config_class) for f in dataclasses.fields(kind) if f.init}
    chosen = {key: value for key, value in (defaults or {}).items() if key in known}
    if "method" in known:
        chosen["method"] = method
    parser.set_defaults(**chosen)
    if given is not None:
        unknown = sorted(set(given) - known)
        if unknown:  # HfArgumentParser: "Some keys are not used by the HfArgumentParser", without the file
            fields = sorted(f.name for f in dataclasses.fields(config_class))
            parser.error(
                f"{argv[0]}: unknown key(s) {unknown}. A config file's keys are the flags' names without `--` (e.g. "
                f'"max_steps"; `--help` lists them); the hyperparameters of --method {method} are {fields}.'
            )
        _check_config_types(given, (*dataclass_types, config_class), parser, source=argv[0])
        with _argument_errors():
            parsed = parser.parse_dict({**chosen, **given})
        _check_choices(parsed, parser, source=argv[0])  # argparse checks a flag's choices; a file's values too
    else:
        with _argument_errors():
            *parsed, rest = parser.parse_args_into_dataclasses(args=argv, return_remaining_strings=True)
        if rest:  # e.g. `--n_splits` with `--method simclr`
            fields = sorted(f.name for f in dataclasses.fields(config_class))
            parser.error(
                f"unrecognized arguments: {' '.join(rest)} (flags are spelled out in full; the hyperparameters of "
                f"--method {method} are {fields})"
            )
    named = set(given) if given is not None else given_arguments(argv)
    _derive_class_major_batch_size(parsed, named)
    _keep_last_checkpoint(parsed, named)
    return tuple(parsed)


@contextlib.contextmanager
def _argument_errors() -> Iterator[None]:
    """A value the arguments' own checks refuse (transformers' ``TrainingArguments.__post_init__`` raises plain
    ``ValueError``s: ``--warmup_steps -1``, ``--logging_steps 0``) is an input error: the script ends with its
    message (:func:`~hf_contrast.training.run_main`), not a traceback."""
    try:
        yield
    except InputError:
        raise
    except ValueError as error:
        raise InputError(str(error)) from error


def _check_no_shared_fields(method: str, config_class: type, dataclass_types: Sequence[type]) -> None:
    """Raise when the method's hyperparameters and the script's arguments declare a field of the same name.

    One flag cannot set two fields (argparse would stop with "conflicting option string" and a traceback).
    """
    own = {f.name for f in dataclasses.fields(config_class) if f.init}
    for kind in dataclass_types:
        shared = sorted(own & {f.name for f in dataclasses.fields(kind) if f.init})
        if shared:
            raise InputError(
                f"--method {method}'s hyperparameters ({config_class.__name__}) and {kind.__name__} both declare "
                f"{shared}: one flag cannot set two fields. Rename the field in {config_class.__name__} "
                f"(e.g. {shared[0]!r} → '{method}_{shared[0]}')."
            )


_PLAIN_TYPES = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def _check_config_types(
    given: Mapping[str, Any], kinds: Sequence[type], parser: argparse.ArgumentParser, source: str
) -> None:
    """Exit with argparse's error when a value of the config file ``source`` is not of its field's plain type
    (``bool``, ``int``, ``float``, ``str``, or one of them or ``None``): the file's values reach the dataclasses as
    they are, so ``"resume_with_changes": "no"`` would be a true string, and ``"max_steps": "10"`` a string."""
    for kind in kinds:
        hints = typing.get_type_hints(kind)
        for field in dataclasses.fields(kind):
            if field.name not in given:
                continue
            value, members = given[field.name], set(typing.get_args(hints.get(field.name))) - {type(None)}
            plain = hints.get(field.name) if hints.get(field.name) in _PLAIN_TYPES else None
            if plain is None and len(members) == 1 and next(iter(members)) in _PLAIN_TYPES:
                plain = next(iter(members))  # `X | None`
            if plain is None or (value is None and type(None) in typing.get_args(hints.get(field.name))):
                continue
            fits = (
                isinstance(value, bool)
                if plain is bool
                else isinstance(value, (int, float)) and not isinstance(value, bool)
                if plain is float
                else isinstance(value, plain) and not isinstance(value, bool)
            )
            if not fits:
                parser.error(
                    f"{source}: {field.name!r} is {value!r} ({type(value).__name__}); give {_PLAIN_TYPES[plain]} "
                    f"(the flag --{field.name})"
                )


def _check_choices(parsed: Sequence[Any], parser: argparse.ArgumentParser, source: str) -> None:
    """Exit with argparse's error when a value read from the config file ``source`` is not one of its field's
    ``Literal`` choices (argparse checks them for flags only)."""
    for instance in parsed:
        hints = typing.get_type_hints(type(instance))
        for field in dataclasses.fields(instance):
            kind = hints.get(field.name)
            if typing.get_origin(kind) is typing.Literal and getattr(instance, field.name) not in typing.get_args(
                kind
            ):
                choices = ", ".join(repr(choice) for choice in typing.get_args(kind))
                parser.error(
                    f"{source}: {field.name!r} is {getattr(instance, field.name)!r}; choose one of {choices} "
                    f"(the flag --{field.name})"
                )


def _read_config_file(path: str) -> dict[str, Any]:
    """The flags of a ``.json`` config file, as an object of ``{"flag_name": value}``.

    Raises:
        InputError: naming the file, when it is missing, not JSON, or not one object.
    """
    try:
        with open(path, encoding="utf-8") as handle:
            given = json.load(handle)
    except FileNotFoundError:
        raise InputError(
            f"the config file {path!r} does not exist (the working directory is {os.getcwd()!r})."
        ) from None
    except json.JSONDecodeError as error:
        raise InputError(f"the config file {path!r} is not valid JSON: {error}.") from None
    if not isinstance(given, dict):
        raise InputError(
            f"the config file {path!r} holds a {type(given).__name__}; it must hold one object of flags, e.g. "
            '{"max_steps": 100, "learning_rate": 0.002}.'
        )
    return given


def _is_config_file(argv: Sequence[str]) -> bool:
    return len(argv) == 1 and argv[0].endswith(".json")


def given_arguments(args: Sequence[str] | None = None) -> set[str]:
    """The field names the command line sets (``--name value`` or ``--name=value``), or the keys of its single
    ``.json`` config file: what the user chose, as opposed to a script's default.

    Args:
        args: The arguments (default ``sys.argv[1:]``).

    Example:
        >>> sorted(given_arguments(["--max_steps", "5", "--bf16=true"]))
        ['bf16', 'max_steps']
    """
    argv = list(sys.argv[1:] if args is None else args)
    if _is_config_file(argv):
        return set(_read_config_file(argv[0]))
    return {arg[2:].split("=", 1)[0] for arg in argv if arg.startswith("--")}


def _derive_class_major_batch_size(parsed: Sequence[Any], named: set[str]) -> None:
    """A method with class-major batches (a config with ``classes_per_batch`` and ``samples_per_class``, as
    SimO's) trains on batches of exactly C × k rows: unless the batch size is named on the command line (then
    the trainer checks it equals C × k), ``per_device_train_batch_size`` becomes that product."""
    config = parsed[-1]
    classes, samples = getattr(config, "classes_per_batch", None), getattr(config, "samples_per_class", None)
    if not (isinstance(classes, int) and isinstance(samples, int)) or "per_device_train_batch_size" in named:
        return
    for values in parsed[:-1]:
        if hasattr(values, "per_device_train_batch_size"):
            values.per_device_train_batch_size = classes * samples


def _keep_last_checkpoint(parsed: Sequence[Any], named: set[str]) -> None:
    """With ``load_best_model_at_end`` and a script's default ``save_total_limit`` of 1, keep 2 checkpoints: at the
    end of such a run the Trainer deletes every checkpoint but the best, and a larger ``--max_steps`` could then not
    continue the run (:func:`detect_last_checkpoint` refuses). A ``--save_total_limit`` the user gives is kept."""
    if "save_total_limit" in named:
        return
    for values in parsed[:-1]:
        if getattr(values, "load_best_model_at_end", False) and getattr(values, "save_total_limit", None) == 1:
            values.save_total_limit = 2


# ==================== scripts =========================================================================


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
            (nothing of an earlier run is overwritten unasked), if ``overwrite_output_dir`` and
            ``resume_from_checkpoint`` are both given (opposite requests), or if ``output_dir`` holds a finished run
            whose newest checkpoint is older than its last step (the Trainer keeps only the best checkpoint at the
            end of a run with ``save_total_limit=1`` and ``load_best_model_at_end``, and ``save_strategy="best"``
            saves only the steps whose metric improved): resuming from it would train
            the run's last steps again and replace its model, so a larger ``max_steps`` is refused there, naming
            ``--resume_from_checkpoint`` as the way to branch from that checkpoint on purpose.
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
        behind = _checkpoint_behind_run(training_args, last_checkpoint)
        if behind is not None:
            raise InputError(behind)
        logger.info(
            f"Checkpoint detected, resuming training at {last_checkpoint}. To avoid this behavior, change the "
            "`--output_dir` or add `--overwrite_output_dir` to train from scratch."
        )
    return last_checkpoint


def evaluate_final(trainer: Any) -> dict[str, float]:
    """The evaluation of the run's final weights: the one the run logged at the step those weights are from, else
    ``trainer.evaluate()``. The weights are the last step's, or the best checkpoint's when
    ``load_best_model_at_end`` reloaded it, and a checkpoint is saved after its step's evaluation, so the
    reloaded weights are the ones evaluated at the best step. Weights are never evaluated twice (their evaluators,
    probes and equivariance included: the same numbers, twice the time), and a re-evaluation of the best step's
    weights is not logged at the last step, where the card's log table and ``eval_curves.png`` would show it as that
    step's. With several evaluation sets (a dict ``eval_dataset``) the step's evaluations are merged."""
    state, args = trainer.state, trainer.args
    best_step = getattr(state, "best_global_step", None)
    reloaded = bool(args.load_best_model_at_end) and state.best_model_checkpoint is not None and best_step is not None
    step = best_step if reloaded else state.global_step
    logged: dict[str, float] = {}
    for entry in state.log_history:
        if entry.get("step") == step and is_evaluation_log(entry):
            logged.update({key: value for key, value in entry.items() if key != "step"})
    if not logged:
        return trainer.evaluate()
    kept = "The best checkpoint's weights, reloaded," if step != state.global_step else "The final weights"
    logger.info(f"{kept} were evaluated at step {step}: those metrics are kept.")
    return logged


def run_main(main: Any) -> None:
    """Run a script's ``main()``; the package's own input errors (:class:`~hf_contrast.errors.InputError`, raised
    with the argument and the fix) end it with that message and exit status 1, like argparse's, instead of a
    traceback in front of the message. Any other exception keeps its traceback."""
    try:
        main()
    except InputError as error:
        sys.exit(f"{os.path.basename(sys.argv[0])}: error: {error}")


# A script's counts of rows: (the least it takes, what it counts). Caps above the data are the data's size.
_SCRIPT_COUNTS = {
    "max_train_samples": (1, "a number of rows >= 1 (or left out: every row)"),
    "max_eval_samples": (1, "a number of rows >= 1 (or left out: every row)"),
    "num_probe_images": (2, "a number of test images >= 2 (the Wahba error fits one rotation to several)"),
    "max_plot_samples": (1, "a number of test embeddings >= 1"),
}


def check_sample_caps(script: Any) -> None:
    """A script's counts of rows (where it has them): ``--max_train_samples`` / ``--max_eval_samples`` (>= 1, or
    unset), ``--num_probe_images`` (>= 2) and ``--max_plot_samples`` (>= 1).

    Raises:
        InputError: naming the flag, before any data is read.
    """
    for name, (least, what) in _SCRIPT_COUNTS.items():
        value = getattr(script, name, None)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
            raise InputError(f"`--{name}` must be {what}, got {value!r}.")


#: transformers' phase flags (its Trainer never reads them; scripts do) and what an example script does: it always
#: trains, then evaluates the final encoder, and has no prediction phase.
_SCRIPT_PHASES = {"do_train": True, "do_eval": True, "do_predict": False}


def check_script_phases(args: Sequence[str] | None = None) -> None:
    """``--do_train`` / ``--do_eval`` / ``--do_predict``, which transformers leaves to the scripts: an example script
    always trains and then evaluates the final encoder, so ``--do_train`` and ``--do_eval`` (a transformers habit)
    are what it does, and ``--do_train false``, ``--do_eval false`` or ``--do_predict``, which ask for something
    else, are refused instead of being ignored. The values are read as given (``TrainingArguments`` turns
    ``do_eval`` on by itself when ``eval_strategy`` is not ``"no"``).

    Args:
        args: The command line (default ``sys.argv[1:]``; a single ``.json`` file: its keys).

    Raises:
        InputError: naming each flag and what the script does instead, before any data is read.
    """
    argv = list(sys.argv[1:] if args is None else args)
    if _is_config_file(argv):
        given = {name: value for name, value in _read_config_file(argv[0]).items() if name in _SCRIPT_PHASES}
    else:
        parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
        for name in _SCRIPT_PHASES:  # read as HfArgumentParser reads a bool flag (it has checked the values already)
            parser.add_argument(f"--{name}", type=string_to_bool, nargs="?", const=True, default=argparse.SUPPRESS)
        given = vars(parser.parse_known_args(argv)[0])  # a config file's values are bools (checked when parsed)
    wrong = [
        f"--{name} {str(given[name]).lower()}"
        for name, does in _SCRIPT_PHASES.items()
        if given.get(name, does) != does
    ]
    if wrong:
        script = os.path.basename(sys.argv[0]) or "this script"
        raise InputError(
            f"{', '.join(wrong)}: {script} always trains, then evaluates the final encoder (its metrics, probes and "
            "pictures), and has no prediction phase; transformers leaves these flags to each script, and this one "
            "would ignore them. Drop them. To evaluate a saved encoder without training, run "
            "examples/run_linear_probe.py --model <folder> (or `ProbeEvaluator` / `EmbeddingMetrics` in Python); to "
            "embed new data, `ContrastiveEncoder.from_pretrained(<folder>).encode(...)`."
        )


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
    state = _finished_state(output_dir)
    if state is None:
        return None
    try:
        done, planned = int(state["global_step"]), int(state["max_steps"])
        # the epochs it trained (transformers records `num_train_epochs` rounded up: 1.5 epochs as 2)
        reached = float(state.get("epoch", state.get("num_train_epochs", training_args.num_train_epochs)))
    except (ValueError, KeyError, TypeError):  # unreadable: let the resume say what is wrong
        return None
    if training_args.max_steps > 0:
        wanted, unit = training_args.max_steps, "steps"
        finished = done >= training_args.max_steps
    else:  # the steps transformers plans for the epochs asked for (an epoch reached is at least the steps' share)
        wanted, unit = training_args.num_train_epochs, "epochs"
        if reached.is_integer() or wanted > reached:  # ended with an epoch, or short of the epochs asked for
            finished = done >= planned and wanted <= reached
        elif training_args.gradient_accumulation_steps == 1:  # an epoch's steps are its batches: reached = done / n
            finished = done >= planned and done >= epoch_run_steps(wanted, round(done / reached))
        else:
            # an epoch's ragged last accumulation step puts the epoch ahead of the steps (2 of 3 steps can be 0.8
            # epochs): resuming lets the trainer decide from its loader (refused when done, else trained)
            return None
    if not finished:
        return None
    other = ""
    ran = _checkpoint_method(last_checkpoint)
    if method is not None and ran is not None and ran != method:
        other = f"It is a {ran} run, not the --method {method} asked for. "
    trained = f"{done} training steps" + ("" if unit == "steps" else f" ({reached:.4g} epoch{'s' * (reached != 1)})")
    return (
        f"{output_dir} holds a finished run: {trained}, which is the {wanted:g} {unit} asked for "
        f"(trainer_state.json, train_results.json). {other}Nothing was trained and nothing changed. Pass a larger "
        f"--{'max_steps' if unit == 'steps' else 'num_train_epochs'} to continue this run, --overwrite_output_dir to "
        "train again from scratch, or another --output_dir."
    )


def _finished_state(output_dir: str) -> dict[str, Any] | None:
    """The ``trainer_state.json`` a script wrote at the end of a finished run in ``output_dir`` (``None``: no finished
    run there, its ``trainer_state.json`` or ``train_results.json`` missing, or unreadable)."""
    state_file = os.path.join(output_dir, "trainer_state.json")
    if not (os.path.isfile(state_file) and os.path.isfile(os.path.join(output_dir, "train_results.json"))):
        return None
    try:
        with open(state_file, encoding="utf-8") as handle:
            state = json.load(handle)
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def _checkpoint_behind_run(training_args: TrainingArguments, last_checkpoint: str) -> str | None:
    """Why resuming ``last_checkpoint`` would not continue the finished run of ``output_dir``, or ``None``.

    The newest checkpoint left can be older than the run's last step: at the end of a run with
    ``save_total_limit=1`` and ``load_best_model_at_end`` the Trainer deletes every checkpoint but the best, and
    ``save_strategy="best"`` saves only the steps whose metric improved. Resuming it would train the later steps
    again, from older weights, and replace the finished run's model and results.
    """
    output_dir = training_args.output_dir
    state = _finished_state(output_dir)
    at = checkpoint_step(last_checkpoint)
    try:
        done = int(state["global_step"]) if state is not None else None
    except (KeyError, TypeError, ValueError):
        return None
    if done is None or at is None or at >= done:
        return None
    best = state.get("best_model_checkpoint")
    if training_args.save_strategy == "best":
        why = "`save_strategy='best'` saves a checkpoint only at a step whose `metric_for_best_model` improved"
        keep = "--save_strategy steps saves the last step too"
    elif isinstance(best, str) and checkpoint_step(best) == at:
        why = "the Trainer keeps only the best checkpoint at the end of a run with `save_total_limit=1` and "
        why += "`load_best_model_at_end`"
        keep = "--save_total_limit 2 keeps the last checkpoint beside the best"
    else:
        why, keep = "it is not in the folder", None
    return (
        f"{output_dir} holds a run that finished at step {done}, but its newest checkpoint is {last_checkpoint} "
        f"(step {at}): the checkpoint of step {done} is gone ({why}). Resuming would train steps {at + 1}-{done} "
        f"again from step {at}'s weights and replace this run's model and results with another run's. To branch "
        f"from step {at} on purpose, pass --resume_from_checkpoint {last_checkpoint}; to train again from scratch, "
        "--overwrite_output_dir; or pick another --output_dir."
        + (f" ({keep}, so that a larger --max_steps continues a run.)" if keep else "")
    )


def set_cpu_threads(training_args: TrainingArguments) -> int:
    """Set torch's CPU threads for a CPU run, and return the count.

    One process (``world_size == 1``) on a CPU, with no ``OMP_NUM_THREADS``: every core this process may use
    (torch's default is the physical cores). Anything else is left as it is: ``OMP_NUM_THREADS`` is the user's
    choice, and under ``accelerate launch`` it is ``--num_cpu_threads_per_process`` (by default the user's
    ``OMP_NUM_THREADS``, else 1), so ``OMP_NUM_THREADS=4 accelerate launch run.py`` trains with 4 threads.
    The count and where it comes from are in the trainer's start-up log (:func:`cpu_threads_source`).
    """
    if training_args.world_size == 1 and training_args.device.type == "cpu" and "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(usable_cores())
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
        name = (read_run_settings(checkpoint) or {})["method"]["name"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return name if isinstance(name, str) else None


def training_length(training_args: TrainingArguments) -> str:
    """How long the run trains, as the start-up line says it: ``"150 steps"``, or ``"3 epochs"`` when
    ``max_steps`` is unset (-1) and ``num_train_epochs`` decides.

    Raises:
        InputTypeError: if ``training_args`` is not a ``TrainingArguments``.
    """
    if not isinstance(training_args, TrainingArguments):
        raise InputTypeError(f"`training_args` must be a TrainingArguments, got {type(training_args).__name__}.")
    if training_args.max_steps > 0:
        return f"{training_args.max_steps} step{'' if training_args.max_steps == 1 else 's'}"
    epochs = training_args.num_train_epochs
    return f"{epochs:g} epoch{'' if epochs == 1 else 's'}"
