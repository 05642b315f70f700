"""``SupConTrainer`` and ``OCLTrainer``: supervised contrastive losses over labelled views."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from ..losses import OCLoss, SupConLoss
from .trainer import ContrastiveTrainer

__all__ = ["SupConTrainer", "OCLTrainer"]


class SupConTrainer(ContrastiveTrainer):
    """SupCon (https://arxiv.org/abs/2004.11362, docs/methods.md §2) on ``n_views`` views per sample.

    The views of a batch are flattened view-major with their labels repeated, so with
    ``n_views=2`` (default) every anchor has a positive (its other view). With ``n_views=1`` a
    batch where all labels differ has no positive pair: it is skipped with a warning (zero loss,
    counted in the logged ``skipped_batches``), never a crash. Temperature: ``args.temperature``
    or 0.1. Needs the dataset's ``label_column``.
    """

    method: ClassVar[str] = "supcon"
    default_temperature: ClassVar[float] = 0.1

    def build_loss(self) -> nn.Module:
        """:class:`SupConLoss` with ``temperature`` and ``gather_distributed``."""
        return SupConLoss(temperature=self.temperature, gather_distributed=self.args.gather_distributed)

    def compute_contrastive_loss(self, model: nn.Module, inputs: dict[str, Any]) -> Tensor:
        """The loss on the flattened views; a zero (skipped) loss without positive pairs."""
        labels = self.require_labels(inputs)
        z_views = self.projections(model, self.augmented_views(inputs, self.num_views))
        z = torch.cat(z_views)
        y = labels.repeat(len(z_views))
        # With two or more views every anchor has a positive (its other view): no check, no sync.
        if len(z_views) == 1 and not self.has_positive_pair(y):
            return self.skip_batch(z, y)
        return self.loss(z, y)


class OCLTrainer(SupConTrainer):
    """OCL, the orthonormal contrastive loss of LOCAL (docs/methods.md §3): as :class:`SupConTrainer`
    with every negative entering the denominator through ``|cos|``. Temperature: 0.1."""

    method: ClassVar[str] = "ocl"

    def build_loss(self) -> nn.Module:
        """:class:`OCLoss` with ``temperature`` and ``gather_distributed``."""
        return OCLoss(temperature=self.temperature, gather_distributed=self.args.gather_distributed)
