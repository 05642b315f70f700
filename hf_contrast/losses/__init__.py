"""Contrastive and geometry-structuring losses: pure functions + thin ``nn.Module`` wrappers.

Every loss follows ``docs/methods.md``; see each module for the formula, shapes and errors.
"""

from __future__ import annotations

from ..tensor_checks import finite_input_checks
from .align_uniform import AlignUniformLoss, alignment_loss, uniformity_loss
from .binary_nce import BinaryNCELoss, binary_nce_loss
from .care import CARELoss, care_equivariance_loss
from .info_nce import InfoNCELoss, info_nce_loss
from .local import (
    LOCALLoss,
    inverse_frequency_weights,
    latent_correlation_embedding,
    local_alpha,
    local_loss,
    pair_difference,
)
from .moco import CAREMoCoLoss, moco_info_nce_loss
from .ocl import OCLoss, ocl_loss
from .simo import AFCLLoss, SimOLoss, afcl_loss, simo_loss
from .spectral import SpectralContrastiveLoss, spectral_contrastive_loss
from .supcon import SupConLoss, flatten_views, supcon_loss
from .vicreg import VICRegLoss, vicreg_loss

__all__ = [
    "info_nce_loss",
    "InfoNCELoss",
    "supcon_loss",
    "SupConLoss",
    "flatten_views",
    "ocl_loss",
    "OCLoss",
    "local_loss",
    "LOCALLoss",
    "latent_correlation_embedding",
    "inverse_frequency_weights",
    "local_alpha",
    "pair_difference",
    "care_equivariance_loss",
    "CARELoss",
    "moco_info_nce_loss",
    "CAREMoCoLoss",
    "simo_loss",
    "afcl_loss",
    "SimOLoss",
    "AFCLLoss",
    "alignment_loss",
    "uniformity_loss",
    "AlignUniformLoss",
    "spectral_contrastive_loss",
    "SpectralContrastiveLoss",
    "vicreg_loss",
    "VICRegLoss",
    "binary_nce_loss",
    "BinaryNCELoss",
    "finite_input_checks",
]
