"""hf_contrast: structured contrastive representation learning for the Hugging Face ecosystem.

Subpackages: :mod:`~hf_contrast.losses` (pure loss functions + ``nn.Module`` wrappers),
:mod:`~hf_contrast.models` (``ContrastiveEncoder`` on timm / BERT-style backbones),
:mod:`~hf_contrast.training` (``transformers.Trainer`` subclasses, arguments, samplers),
:mod:`~hf_contrast.augment` (views), :mod:`~hf_contrast.metrics` (geometry and probes),
:mod:`~hf_contrast.hub` (model cards, push), :mod:`~hf_contrast.data` (embedded offline data).

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
    "AFCLBatchSampler": "training",
    "ContrastiveModelCardData": "hub",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
