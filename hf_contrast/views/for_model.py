"""``views_for``: the one place that picks image or text views, from the encoder's configuration."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from .builder import ViewBuilder
from .image_views import ImageViews
from .text_views import TextViews

__all__ = ["input_modality_of", "views_for"]


def views_for(
    model: nn.Module, args: Any, processing_class: Any = None, epoch: Callable[[], float] | None = None
) -> ViewBuilder:
    """:class:`~hf_contrast.views.TextViews` for a text encoder (``model.input_modality == "text"``, from its
    backbone adapter; or ``config.backbone_type == "text"``), else :class:`~hf_contrast.views.ImageViews`
    (image encoders, and models that say neither).

    Args: as :class:`~hf_contrast.views.ViewBuilder`.
    """
    views_class = TextViews if input_modality_of(model) == "text" else ImageViews
    return views_class(model, args, processing_class, epoch=epoch)


def input_modality_of(model: Any) -> str:
    """What ``model`` reads: ``"text"`` or ``"image"``: a ``ContrastiveEncoder``'s ``input_modality`` (from its
    backbone adapter); for another model, ``"text"`` iff ``config.backbone_type == "text"``, else ``"image"``."""
    modality = getattr(model, "input_modality", None)
    if modality is None:  # not a ContrastiveEncoder: its config may still say
        modality = "text" if getattr(getattr(model, "config", None), "backbone_type", None) == "text" else "image"
    return modality
