"""``AlignUniformTrainer``: alignment + uniformity (+ SimCSE, + a supervised task head)."""

from __future__ import annotations

from typing import Any, ClassVar

import torch.nn.functional as F
from torch import Tensor, nn

from ..losses import AlignUniformLoss, InfoNCELoss
from .trainer import ContrastiveTrainer

__all__ = ["AlignUniformTrainer"]


class AlignUniformTrainer(ContrastiveTrainer):
    """Wang & Isola's alignment and uniformity (https://arxiv.org/abs/2005.10242, docs/methods.md §6).

    Terms (each logged): ``align = align_weight·L_align(z1, z2)``, ``uniform =
    uniform_weight·(L_unif(z1) + L_unif(z2))/2``; with ``simcse_weight > 0`` a SimCSE InfoNCE
    ``simcse`` on the same views (τ = ``args.temperature`` or 0.05); with a task head (encoder
    ``config.num_labels > 0``, so the output has ``logits``) ``task = task_loss_weight·CE(logits
    of view 1, labels)`` — the EquiBERT recipe (task loss + align/uniform on a BERT sentence
    embedding). Works for images (two SimCLR views) and text (dropout views or a pair column).

    Raises:
        ValueError: (at a step) if the model has a task head but the batch has no labels.
    """

    method: ClassVar[str] = "align_uniform"
    default_temperature: ClassVar[float] = 0.05

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.simcse = (
            InfoNCELoss(temperature=self.temperature, gather_distributed=self.args.gather_distributed)
            if self.args.simcse_weight > 0
            else None
        )

    def build_loss(self) -> nn.Module:
        """:class:`AlignUniformLoss` with ``align_weight``, ``uniform_weight``, ``gather_distributed``."""
        return AlignUniformLoss(
            align_weight=self.args.align_weight,
            uniform_weight=self.args.uniform_weight,
            gather_distributed=self.args.gather_distributed,
        )

    @property
    def has_task_head(self) -> bool:
        """Whether the encoder has a supervised head (``config.num_labels > 0``)."""
        return int(getattr(getattr(self.model, "config", None), "num_labels", 0) or 0) > 0

    def compute_contrastive_loss(self, model: nn.Module, inputs: dict[str, Any]) -> dict[str, Tensor]:
        """``{"align", "uniform", ["simcse"], ["task"], "loss"}``."""
        out1, out2 = self.forward_views(model, self.positive_pair_views(inputs))
        z1, z2 = out1["projections"], out2["projections"]
        terms = {k: v for k, v in self.loss(z1, z2).items() if k != "loss"}
        if self.simcse is not None:
            terms["simcse"] = self.args.simcse_weight * self.simcse(z1, z2)
        if self.has_task_head:
            labels = self.require_labels(inputs)
            if "logits" not in out1:
                raise ValueError("The model has `config.num_labels > 0` but its output has no `logits`.")
            terms["task"] = self.args.task_loss_weight * F.cross_entropy(out1["logits"].float(), labels)
        terms["loss"] = sum(terms.values())  # type: ignore[assignment]
        return terms
