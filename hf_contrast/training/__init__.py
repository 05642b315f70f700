"""Contrastive training on ``transformers.Trainer``: arguments, the trainer and the named trainers.

Swap ``Trainer`` for a named trainer (or :class:`ContrastiveTrainer` with ``objective=``),
``TrainingArguments`` for :class:`ContrastiveTrainingArguments`, pass a dataset and a ``ContrastiveEncoder``.
Collators and the AFCL batch sampler are in :mod:`hf_contrast.views`. :func:`parse_args_with_objective`
parses a script's flags together with the chosen ``--method``'s hyperparameters; :func:`setup_logging` and
:func:`detect_last_checkpoint` and :func:`set_cpu_threads` are a script's other set-up steps
(:mod:`~hf_contrast.training.scripts`).

The image size a run trains at follows one rule (:mod:`~hf_contrast.training.image_size`, :func:`choose_image_size`);
the trainer logs the defaults that shape a result once at the start of ``train()``
(:mod:`~hf_contrast.training.run_setup`) and the model card's training section repeats them.
"""

from __future__ import annotations

from .argument_parser import given_arguments, parse_args_with_objective
from .arguments import NONFINITE_POLICIES, ContrastiveTrainingArguments
from .image_size import ImageSizeChoice, choose_image_size
from .loss_terms import NonFiniteLossError
from .scripts import (
    check_image_backbone,
    check_sample_caps,
    check_task_head,
    check_text_backbone,
    detect_last_checkpoint,
    evaluate_final,
    finished_run,
    notice_small_image_stem,
    run_main,
    set_cpu_threads,
    setup_logging,
    small_image_stem_field,
    training_length,
)
from .trainer import ContrastiveTrainer
from .trainers import (
    AlignUniformTrainer,
    CARETrainer,
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
    "check_sample_caps",
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
