"""Contrastive training on ``transformers.Trainer``: arguments, the trainer and the named trainers.

Swap ``Trainer`` for a named trainer (or :class:`ContrastiveTrainer` with ``objective=``),
``TrainingArguments`` for :class:`ContrastiveTrainingArguments`, pass a dataset and a ``ContrastiveEncoder``.
Collators and the AFCL batch sampler are in :mod:`hf_contrast.views`. :func:`parse_args_with_objective`
parses a script's flags together with the chosen ``--method``'s hyperparameters; :func:`setup_logging` and
:func:`detect_last_checkpoint` and :func:`set_cpu_threads` are a script's other set-up steps
(:mod:`~hf_contrast.training.cli`).

The image size a run trains at follows one rule (:mod:`~hf_contrast.training.run_setup`, :func:`choose_image_size`),
decided once per run and stored in the encoder's data config by :func:`resolve_image_size` (the trainer calls it;
a script that builds evaluators first calls it before them); the trainer logs the defaults that shape a result once
at the start of ``train()`` (:mod:`~hf_contrast.training.run_setup`) and the model card's training section repeats
them.
"""

from __future__ import annotations

from ..moved_modules import register_moved_modules
from . import callbacks, checkpointing, checks, cli, run_setup, trainer
from .arguments import NONFINITE_POLICIES, ContrastiveTrainingArguments
from .callbacks import NonFiniteLossError
from .cli import (
    check_image_backbone,
    check_sample_caps,
    check_script_phases,
    check_task_head,
    check_text_backbone,
    detect_last_checkpoint,
    evaluate_final,
    finished_run,
    given_arguments,
    notice_small_image_stem,
    parse_args_with_objective,
    run_main,
    set_cpu_threads,
    setup_logging,
    small_image_stem_field,
    training_length,
)
from .run_setup import ImageSizeChoice, choose_image_size, resolve_image_size
from .trainer import (
    AlignUniformTrainer,
    CARETrainer,
    ContrastiveTrainer,
    LOCALTrainer,
    OCLTrainer,
    SimCLRTrainer,
    SimOTrainer,
    SupConTrainer,
)

__all__ = [
    "NONFINITE_POLICIES",
    "AlignUniformTrainer",
    "CARETrainer",
    "ContrastiveTrainer",
    "ContrastiveTrainingArguments",
    "LOCALTrainer",
    "NonFiniteLossError",
    "OCLTrainer",
    "SimCLRTrainer",
    "SimOTrainer",
    "SupConTrainer",
    "ImageSizeChoice",
    "choose_image_size",
    "resolve_image_size",
    "check_sample_caps",
    "check_script_phases",
    "check_image_backbone",
    "check_task_head",
    "check_text_backbone",
    "detect_last_checkpoint",
    "evaluate_final",
    "finished_run",
    "run_main",
    "given_arguments",
    "notice_small_image_stem",
    "parse_args_with_objective",
    "set_cpu_threads",
    "setup_logging",
    "small_image_stem_field",
    "training_length",
]


# ---- the modules that became parts of others: their old import paths still work, with a FutureWarning ----

_MOVED_MODULES = {
    "loss_terms": callbacks,
    "nonfinite": callbacks,
    "left_out_rows": callbacks,
    "objective_parameters": callbacks,
    "run_sessions": callbacks,
    "gradient_cache": callbacks,
    "doors": checks,
    "setup_checks": checks,
    "engine_checks": checks,
    "image_size": run_setup,
    "checkpoint_validation": checkpointing,
    "run_identity": checkpointing,
    "argument_parser": cli,
    "scripts": cli,
    "trainers": trainer,
    "dataloaders": trainer,
}


register_moved_modules(__name__, _MOVED_MODULES, also=__name__)
