"""Encoders: ``ContrastiveEncoder`` on timm or transformers backbones, and native exports.

Importing this package registers ``ContrastiveEncoderConfig`` / ``ContrastiveEncoder`` with
``AutoConfig`` / ``AutoModel`` (model type ``"hf_contrast_encoder"``).
"""

from __future__ import annotations

from transformers import AutoConfig, AutoModel

from hf_contrast.hub.staging import staged_directory
from hf_contrast.models.backbones import HubUnavailableError
from hf_contrast.models.configuration import ContrastiveEncoderConfig
from hf_contrast.models.export import (
    HUB_SUBFOLDER,
    export_native,
    export_sentence_transformers,
    export_timm,
    export_transformers,
)
from hf_contrast.models.heads import ProjectionHead
from hf_contrast.models.modeling import ContrastiveEncoder, ContrastiveEncoderOutput
from hf_contrast.models.pooling import cls_pool, max_pool, mean_pool
from hf_contrast.models.save_format import SAVE_FORMAT_VERSION, NewerSaveFormatWarning
from hf_contrast.models.st_layout import SentenceTransformerLayout, read_st_layout

AutoConfig.register(ContrastiveEncoderConfig.model_type, ContrastiveEncoderConfig, exist_ok=True)
AutoModel.register(ContrastiveEncoderConfig, ContrastiveEncoder, exist_ok=True)

__all__ = [
    "ContrastiveEncoderConfig",
    "ContrastiveEncoder",
    "ContrastiveEncoderOutput",
    "ProjectionHead",
    "HubUnavailableError",
    "NewerSaveFormatWarning",
    "SAVE_FORMAT_VERSION",
    "HUB_SUBFOLDER",
    "mean_pool",
    "cls_pool",
    "max_pool",
    "SentenceTransformerLayout",
    "read_st_layout",
    "staged_directory",
    "export_native",
    "export_timm",
    "export_transformers",
    "export_sentence_transformers",
]
