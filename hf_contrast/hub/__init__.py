"""Model cards and Hub upload for hf_contrast encoders."""

from __future__ import annotations

from hf_contrast.hub.model_card import (
    GENERATED_MARKER,
    ContrastiveModelCardData,
    generate_model_card,
    non_default_training_args,
    write_model_card,
)
from hf_contrast.hub.push import push_encoder_to_hub

__all__ = [
    "GENERATED_MARKER",
    "ContrastiveModelCardData",
    "generate_model_card",
    "non_default_training_args",
    "push_encoder_to_hub",
    "write_model_card",
]
