"""Contrastive training on ``transformers.Trainer``: arguments, the trainer, named trainers, collators.

Swap ``Trainer`` for a named trainer (or :class:`ContrastiveTrainer` with ``objective=``),
``TrainingArguments`` for :class:`ContrastiveTrainingArguments`, pass a dataset and a ``ContrastiveEncoder``.
Names are imported on first use, so ``hf_contrast.training.collators`` can be imported without the trainer.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_LAZY = {
    "ContrastiveTrainingArguments": "arguments",
    "NONFINITE_POLICIES": "arguments",
    "ContrastiveTrainer": "trainer",
    "NonFiniteLossError": "loss_terms",
    "SimCLRTrainer": "trainers",
    "CARETrainer": "trainers",
    "SupConTrainer": "trainers",
    "OCLTrainer": "trainers",
    "SimOTrainer": "trainers",
    "AlignUniformTrainer": "trainers",
    "LOCALTrainer": "trainers",
    "ImageViewCollator": "collators",
    "TextViewCollator": "collators",
    "PairedImageCollator": "collators",
    "raw_image_transform": "collators",
    "AFCLBatchSampler": "samplers",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
