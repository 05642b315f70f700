"""Contrastive training on ``transformers.Trainer``: arguments, trainers, collators, samplers.

Swap ``Trainer`` for a method trainer, ``TrainingArguments`` for
:class:`ContrastiveTrainingArguments`, pass a ``datasets.Dataset`` and a ``ContrastiveEncoder``.
"""

from __future__ import annotations

from .align_uniform import AlignUniformTrainer
from .arguments import ContrastiveTrainingArguments
from .care import CARETrainer
from .local import LOCALTrainer, PairedImageCollator
from .collators import ImageViewCollator, TextViewCollator, raw_image_transform
from .local import LOCALTrainer, PairedImageCollator
from .moco import CAREMoCoLoss, MoCoState, MomentumUpdateCallback, moco_info_nce_loss
from .samplers import AFCLBatchSampler
from .simclr import PAIR_LOSSES, SimCLRTrainer
from .simo import SimOTrainer
from .supervised import OCLTrainer, SupConTrainer
from .trainer import CONTRASTIVE_STATE_NAME, ContrastiveTrainer

__all__ = [
    "AFCLBatchSampler",
    "AlignUniformTrainer",
    "CAREMoCoLoss",
    "CARETrainer",
    "CONTRASTIVE_STATE_NAME",
    "ContrastiveTrainer",
    "ContrastiveTrainingArguments",
    "ImageViewCollator",
    "LOCALTrainer",
    "LOCALTrainer",
    "PairedImageCollator",
    "MoCoState",
    "MomentumUpdateCallback",
    "OCLTrainer",
    "PairedImageCollator",
    "PAIR_LOSSES",
    "SimCLRTrainer",
    "SimOTrainer",
    "SupConTrainer",
    "TextViewCollator",
    "moco_info_nce_loss",
    "raw_image_transform",
]
