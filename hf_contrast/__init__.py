"""hf_contrast: structured contrastive representation learning for the Hugging Face ecosystem.

Subpackages: :mod:`~hf_contrast.losses` (pure loss functions + ``nn.Module`` wrappers),
:mod:`~hf_contrast.models` (``ContrastiveEncoder`` on timm / BERT-style backbones),
:mod:`~hf_contrast.objectives` (methods as registered objectives),
:mod:`~hf_contrast.training` (``ContrastiveTrainer`` and the named trainers, arguments),
:mod:`~hf_contrast.evaluation` (the one evaluation path) on :mod:`~hf_contrast.metrics`,
:mod:`~hf_contrast.views` (rows to views: transforms, collators, sampler), :mod:`~hf_contrast.hub`
(model cards, push), :mod:`~hf_contrast.data` (embedded data, loaders, checks).

The most used names are available at the top level and imported on first use, so that
``import hf_contrast`` stays cheap:

>>> from hf_contrast import ContrastiveEncoder, CARETrainer, ContrastiveTrainingArguments  # doctest: +SKIP
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "ContrastiveEncoder": "models",
    "ContrastiveEncoderConfig": "models",
    "ContrastiveTrainingArguments": "training",
    "ContrastiveTrainer": "training",
    "SimCLRTrainer": "training",
    "CARETrainer": "training",
    "SimOTrainer": "training",
    "SupConTrainer": "training",
    "OCLTrainer": "training",
    "LOCALTrainer": "training",
    "AlignUniformTrainer": "training",
    "AFCLBatchSampler": "views",
    "get_objective": "objectives",
    "available_objectives": "objectives",
    "register_objective": "objectives",
    "Objective": "objectives",
    "EmbeddingMetrics": "evaluation",
    "STSEvaluator": "evaluation",
    "ContrastiveModelCardData": "hub",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
