"""The backbone families: ``config.backbone_type`` → :class:`BackboneAdapter` class, and which family a name or a
model object given to ``from_backbone`` belongs to.

This is the one place a ``backbone_type`` string is mapped to behaviour. A new family is one adapter
module plus one line in :data:`_ADAPTERS` (or :func:`register_adapter` from outside the package).
"""

from __future__ import annotations

from typing import Any

from hf_contrast.errors import InputError
from hf_contrast.models.adapters.base import BackboneAdapter
from hf_contrast.models.adapters.text import TransformersTextAdapter
from hf_contrast.models.adapters.timm import TimmAdapter
from hf_contrast.models.backbones import backbone_type_of
from hf_contrast.models.configuration import register_backbone_type
from hf_contrast.tensor_checks import check_name

__all__ = ["adapter_class", "adapter_for", "adapter_for_instance", "adapter_for_name", "register_adapter"]

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


def adapter_for_name(name: str) -> type[BackboneAdapter]:
    """The family ``from_backbone(name)`` builds: the newest registered family whose
    :meth:`~BackboneAdapter.claims_name` accepts ``name``, else timm's or the text family, as
    :func:`~hf_contrast.models.backbones.backbone_type_of` decides (it names close timm names for a typo)."""
    for adapter in reversed(_ADAPTERS.values()):
        if adapter.claims_name(name):
            return adapter
    return _ADAPTERS[backbone_type_of(name)]


def adapter_for_instance(backbone: Any) -> type[BackboneAdapter] | None:
    """The family that wraps the model object ``backbone`` (the newest registered one whose
    :meth:`~BackboneAdapter.claims_instance` accepts it), or ``None``."""
    for adapter in reversed(_ADAPTERS.values()):
        if adapter.claims_instance(backbone):
            return adapter
    return None
