"""``views_for``: the one place that picks image or text views, from the encoder's configuration."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from .builder import ViewBuilder
from .image_views import ImageViews
from .text_views import TextViews

__all__ = ["views_for"]


def views_for(
    model: nn.Module, args: Any, processing_class: Any = None, epoch: Callable[[], float] | None = None
) -> ViewBuilder:
    """:class:`~hf_contrast.views.TextViews` for a text encoder (``config.backbone_type == "text"``), else
    :class:`~hf_contrast.views.ImageViews` (timm encoders, and models without that config field).

    Args: as :class:`~hf_contrast.views.ViewBuilder`.
    """
    is_text = getattr(getattr(model, "config", None), "backbone_type", "timm") == "text"
    views_class = TextViews if is_text else ImageViews
    return views_class(model, args, processing_class, epoch=epoch)
