"""The backbone families: ``config.backbone_type`` → :class:`BackboneAdapter` class.

This is the one place a ``backbone_type`` string is mapped to behaviour. A new family is one adapter
module plus one line in :data:`_ADAPTERS` (or :func:`register_adapter` from outside the package).
"""

from __future__ import annotations

from typing import Any

from hf_contrast.errors import InputError
from hf_contrast.models.adapters.base import BackboneAdapter
from hf_contrast.models.adapters.text import TransformersTextAdapter
from hf_contrast.models.adapters.timm import TimmAdapter
from hf_contrast.models.configuration import register_backbone_type
from hf_contrast.tensor_checks import check_name

__all__ = ["adapter_class", "adapter_for", "register_adapter"]

_ADAPTERS: dict[str, type[BackboneAdapter]] = {
    "timm": TimmAdapter,
    "text": TransformersTextAdapter,
}


def register_adapter(backbone_type: str, adapter: type[BackboneAdapter]) -> None:
    """Make ``backbone_type`` a valid ``ContrastiveEncoderConfig.backbone_type`` served by ``adapter``.

    Raises:
        InputError: If ``backbone_type`` is not a non-empty string, ``adapter`` is not a :class:`BackboneAdapter`
            subclass, or the name is taken by another.
    """
    check_name("backbone_type", backbone_type, what="string (the family's name in the config)")
    if not (isinstance(adapter, type) and issubclass(adapter, BackboneAdapter)):
        raise InputError(f"`adapter` must be a BackboneAdapter subclass, got {adapter!r}.")
    if _ADAPTERS.get(backbone_type, adapter) is not adapter:
        raise InputError(
            f"`backbone_type` {backbone_type!r} is already served by {_ADAPTERS[backbone_type].__name__}."
        )
    _ADAPTERS[backbone_type] = adapter
    register_backbone_type(backbone_type)


def adapter_class(backbone_type: str) -> type[BackboneAdapter]:
    """The adapter class of ``backbone_type`` (a name of ``ContrastiveEncoderConfig``'s ``BACKBONE_TYPES``)."""
    try:
        return _ADAPTERS[backbone_type]
    except KeyError:
        raise InputError(f"`backbone_type` must be one of {tuple(_ADAPTERS)}, got {backbone_type!r}.") from None


def adapter_for(config: Any) -> BackboneAdapter:
    """A fresh adapter for the encoder config ``config`` (read: ``config.backbone_type``)."""
    return adapter_class(config.backbone_type)()
