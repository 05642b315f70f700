"""``SimCLRTrainer``: a pair objective on two per-sample random views (SimCLR, SimCSE)."""

from __future__ import annotations

from typing import Any, ClassVar

from torch import nn

from ..losses import BinaryNCELoss, InfoNCELoss, SpectralContrastiveLoss, VICRegLoss
from .trainer import ContrastiveTrainer

__all__ = ["SimCLRTrainer", "PAIR_LOSSES"]

#: Names accepted by ``SimCLRTrainer(loss=...)`` (docs/methods.md §1 and §9).
PAIR_LOSSES = ("info_nce", "spectral", "vicreg", "binary_nce")


class SimCLRTrainer(ContrastiveTrainer):
    """SimCLR (https://arxiv.org/abs/2002.05709): InfoNCE between two random views of each sample.

    Images get two independent SimCLR augmentations; text gets the same sentence twice, so the
    encoder's dropout makes the views (SimCSE, https://arxiv.org/abs/2104.08821), or the
    ``text_pair_column`` sentence as the second view.

    Args:
        loss: The pair objective: ``"info_nce"`` (default; ``args.temperature``, default 0.5),
            ``"spectral"`` (spectral contrastive loss), ``"vicreg"`` (VICReg, logs its three
            terms), ``"binary_nce"`` (sigmoid NCE; ``args.temperature``, default 0.1) — or any
            ``nn.Module`` called as ``loss(z1, z2)``.
        *args, **kwargs: As :class:`ContrastiveTrainer`.

    Raises:
        ValueError: on an unknown loss name.
    """

    method: ClassVar[str] = "simclr"
    default_temperature: ClassVar[float] = 0.5

    def __init__(self, *args: Any, loss: str | nn.Module = "info_nce", **kwargs: Any) -> None:
        if isinstance(loss, str) and loss not in PAIR_LOSSES:
            raise ValueError(f"`loss` must be one of {PAIR_LOSSES} or an nn.Module, got {loss!r}.")
        self.loss_name = loss if isinstance(loss, str) else type(loss).__name__
        super().__init__(*args, loss=None if isinstance(loss, str) else loss, **kwargs)

    def build_loss(self) -> nn.Module:
        """The pair objective named by ``loss``, configured from the arguments."""
        gather = self.args.gather_distributed
        if self.loss_name == "spectral":
            return SpectralContrastiveLoss(gather_distributed=gather)
        if self.loss_name == "vicreg":
            return VICRegLoss()
        if self.loss_name == "binary_nce":
            return BinaryNCELoss(temperature=self.args.temperature if self.args.temperature is not None else 0.1)
        return InfoNCELoss(temperature=self.temperature, gather_distributed=gather)
