"""Alignment + uniformity (+ SimCSE, + a supervised task head): Wang & Isola, docs/methods.md §6.

Terms (each logged): ``align = align_weight·L_align(z1, z2)``, ``uniform = uniform_weight·(L_unif(z1) +
L_unif(z2))/2``; with ``simcse_weight > 0`` a SimCSE InfoNCE ``simcse`` on the same views (τ =
``temperature``); with a task head (encoder ``config.num_labels > 0``, so the output has ``logits``)
``task = task_loss_weight·CE(logits of view 1, labels)`` — the EquiBERT recipe (task loss + align/uniform
on a BERT sentence embedding). Works for images (two SimCLR views) and text (dropout views or a pair column).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn

from hf_contrast.errors import InputError

from ..losses import AlignUniformLoss, InfoNCELoss
from ..losses.info_nce import InfoNCEHyperparameters
from ..tensor_checks import check_non_negative
from ..views import ViewBuilder
from .base import Objective
from .config import loss_config, loss_field
from .registry import register_objective

__all__ = ["AlignUniformConfig", "AlignUniformObjective"]


@dataclass
class AlignUniformConfig(loss_config(AlignUniformLoss)):  # align_weight, uniform_weight: declared by AlignUniformLoss
    simcse_weight: float = field(
        default=0.0, metadata={"help": "Align/uniform: weight >= 0 of an extra SimCSE InfoNCE term on the two views."}
    )
    temperature: float = loss_field(  # the SimCSE term's InfoNCE, at SimCSE's temperature
        InfoNCEHyperparameters, default=0.05, help="Align/uniform: temperature τ > 0 of the SimCSE term."
    )
    task_loss_weight: float = field(
        default=1.0,
        metadata={"help": "Weight >= 0 of the task head's cross-entropy (encoder config.num_labels > 0): EquiBERT."},
    )

    def validate(self) -> None:
        super().validate()  # align_weight, uniform_weight; temperature (of the SimCSE term)
        for name in ("simcse_weight", "task_loss_weight"):
            check_non_negative(name, getattr(self, name))


@register_objective("align_uniform")
class AlignUniformObjective(Objective):
    """``{"align", "uniform", ["simcse"], ["task"], "loss"}`` on two views of each sample."""

    config_class = AlignUniformConfig
    config: AlignUniformConfig
    trains_task_head = True

    def setup(self, views: ViewBuilder, train_dataset: Any) -> None:
        super().setup(views, train_dataset)
        c = self.config
        self.loss = AlignUniformLoss(c.align_weight, c.uniform_weight, gather_distributed=views.gather_distributed)
        self.simcse = (
            InfoNCELoss(temperature=c.temperature, gather_distributed=views.gather_distributed)
            if c.simcse_weight > 0
            else None
        )
        # the labels are the head's classes (0..num_labels - 1): checked for every dataset when the trainer is built
        self.has_task_head = int(getattr(getattr(views.model, "config", None), "num_labels", 0) or 0) > 0

    def forward(self, model: nn.Module, inputs: Mapping[str, Any], views: ViewBuilder) -> dict[str, Tensor]:
        out1, out2 = views.encode(model, views.augmented(inputs, 2))
        z1, z2 = out1["projections"], out2["projections"]
        terms = {k: v for k, v in self.loss(z1, z2).items() if k != "loss"}
        if self.simcse is not None:
            terms["simcse"] = self.config.simcse_weight * self.simcse(z1, z2)
        if self.has_task_head:
            labels = views.labels(inputs)
            if "logits" not in out1:
                raise InputError("The model has `config.num_labels > 0` but its output has no `logits`.")
            terms["task"] = self.config.task_loss_weight * F.cross_entropy(out1["logits"].float(), labels)
        terms["loss"] = sum(terms.values())  # type: ignore[assignment]
        return terms
