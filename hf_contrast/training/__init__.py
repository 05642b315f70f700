"""Contrastive training on ``transformers.Trainer``: arguments, the trainer and the named trainers.

Swap ``Trainer`` for a named trainer (or :class:`ContrastiveTrainer` with ``objective=``),
``TrainingArguments`` for :class:`ContrastiveTrainingArguments`, pass a dataset and a ``ContrastiveEncoder``.
Collators and the AFCL batch sampler are in :mod:`hf_contrast.views`. :func:`parse_args_with_objective`
parses a script's flags together with the chosen ``--method``'s hyperparameters.
"""

from __future__ import annotations

from .argument_parser import parse_args_with_objective
from .arguments import NONFINITE_POLICIES, ContrastiveTrainingArguments
from .loss_terms import NonFiniteLossError
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
    "parse_args_with_objective",
]
