"""Pair objectives on two per-sample random views: SimCLR (InfoNCE), spectral, VICReg, binary NCE.

Images get two independent SimCLR augmentations; text gets the same sentence twice, so the encoder's
dropout makes the views (SimCSE, https://arxiv.org/abs/2104.08821), or the ``text_pair_column``
sentence as the second view. docs/methods.md §1 and §9.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

import hf_contrast.distributed as distributed
from hf_contrast.errors import InputError

from ..losses import BinaryNCELoss, InfoNCELoss, SpectralContrastiveLoss, VICRegLoss
from ..losses.binary_nce import BinaryNCEHyperparameters
from ..losses.info_nce import InfoNCEHyperparameters
from ..losses.vicreg import VICRegHyperparameters
from ..views import ViewBuilder
from .base import Objective
from .config import ObjectiveConfig, loss_field
from .registry import register_objective

__all__ = [
    "PairObjective",
    "SimCLRObjective",
    "SimCLRConfig",
    "SpectralObjective",
    "VICRegObjective",
    "VICRegConfig",
    "BinaryNCEObjective",
    "BinaryNCEConfig",
]


def as_terms(result: Tensor | Mapping[str, Tensor]) -> dict[str, Tensor]:
    """A loss result as a dict of terms with the total under ``"loss"``."""
    return dict(result) if isinstance(result, Mapping) else {"loss": result}


class PairObjective(Objective):
    """``loss(z1, z2)`` on the projections of two random views of each sample.

    Subclasses build ``self.loss`` in :meth:`build_loss`; pass ``loss=`` to use any module called as
    ``loss(z1, z2)`` (returning a scalar or a dict of terms with ``"loss"``).
    """

    def __init__(self, config: ObjectiveConfig | None = None, loss: nn.Module | None = None, **hyperparameters: Any):
        super().__init__(config, **hyperparameters)
        self.loss = loss

    def build_loss(self, views: ViewBuilder) -> nn.Module:
        raise InputError(f"{type(self).__name__} needs `loss=`: a module called as loss(z1, z2).")

    def setup(self, views: ViewBuilder, train_dataset: Any) -> None:
        super().setup(views, train_dataset)
        if self.loss is None:
            self.loss = self.build_loss(views)

    def forward(self, model: nn.Module, inputs: Mapping[str, Any], views: ViewBuilder) -> dict[str, Tensor]:
        """The loss terms of two views; a batch of one sample (the ragged end of an epoch or of an evaluation
        set) has no negative: it is skipped (zero loss on the graph, counted as ``skipped_batches``, not
        scored in ``eval_loss``) with a warning, unless the loss gathers negatives from other processes."""
        z1, z2 = views.projections(model, views.augmented(inputs, 2))
        if z1.shape[0] < 2 and not (views.gather_distributed and distributed.world_size() > 1):
            warnings.warn(
                f"{type(self).__name__}: skipped a batch of 1 sample (no negatives; usually the last, ragged batch of "
                "an epoch or evaluation set). Choose a batch size that leaves no single sample, or set "
                "`dataloader_drop_last=True`. Training continues; the count is logged as `skipped_batches`.",
                RuntimeWarning,
                stacklevel=2,
            )
            return {"loss": (z1.sum() + z2.sum()) * 0.0, "skipped": torch.ones((), device=z1.device)}
        return as_terms(self.loss(z1, z2))


@register_objective("pair")
class CustomPairObjective(PairObjective):
    """Any pair loss module: ``ContrastiveTrainer(objective=CustomPairObjective(loss=MyLoss()))``."""


@dataclass
class SimCLRConfig(ObjectiveConfig):
    temperature: float = loss_field(InfoNCEHyperparameters)


@register_objective("simclr")
class SimCLRObjective(PairObjective):
    """SimCLR (https://arxiv.org/abs/2002.05709): InfoNCE between two random views of each sample."""

    config_class = SimCLRConfig
    config: SimCLRConfig

    def build_loss(self, views: ViewBuilder) -> nn.Module:
        return InfoNCELoss(temperature=self.config.temperature, gather_distributed=views.gather_distributed)


@register_objective("spectral")
class SpectralObjective(PairObjective):
    """Spectral contrastive loss (HaoChen et al. 2021, docs/methods.md §9)."""

    def build_loss(self, views: ViewBuilder) -> nn.Module:
        return SpectralContrastiveLoss(gather_distributed=views.gather_distributed)


@dataclass
class VICRegConfig(ObjectiveConfig):
    invariance_weight: float = loss_field(VICRegHyperparameters)
    variance_weight: float = loss_field(VICRegHyperparameters)
    covariance_weight: float = loss_field(VICRegHyperparameters)


@register_objective("vicreg")
class VICRegObjective(PairObjective):
    """VICReg (Bardes et al. 2022, docs/methods.md §9); logs its three terms."""

    config_class = VICRegConfig
    config: VICRegConfig

    def build_loss(self, views: ViewBuilder) -> nn.Module:
        c = self.config
        return VICRegLoss(c.invariance_weight, c.variance_weight, c.covariance_weight)


@dataclass
class BinaryNCEConfig(ObjectiveConfig):
    temperature: float = loss_field(BinaryNCEHyperparameters)
    negatives: str = loss_field(BinaryNCEHyperparameters)
    learnable_temperature: bool = loss_field(BinaryNCEHyperparameters)
    learnable_bias: bool = loss_field(BinaryNCEHyperparameters)


@register_objective("binary_nce")
class BinaryNCEObjective(PairObjective):
    """Sigmoid (binary) NCE (docs/methods.md §9); a learnable temperature/bias is trained and checkpointed."""

    config_class = BinaryNCEConfig
    config: BinaryNCEConfig

    def build_loss(self, views: ViewBuilder) -> nn.Module:
        c = self.config
        return BinaryNCELoss(
            temperature=c.temperature,
            negatives=c.negatives,
            learnable_temperature=c.learnable_temperature,
            learnable_bias=c.learnable_bias,
        )
