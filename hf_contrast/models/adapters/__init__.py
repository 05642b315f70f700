"""Backbone adapters: one class per backbone family (timm, transformers text), picked by ``backbone_type``."""

from __future__ import annotations

from hf_contrast.models.adapters.base import BackboneAdapter
from hf_contrast.models.adapters.registry import adapter_class, adapter_for, register_adapter
from hf_contrast.models.adapters.text import TransformersTextAdapter
from hf_contrast.models.adapters.timm import TimmAdapter

__all__ = [
    "BackboneAdapter",
    "TimmAdapter",
    "TransformersTextAdapter",
    "adapter_class",
    "adapter_for",
    "register_adapter",
]
