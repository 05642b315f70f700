"""Contrastive and geometry-structuring losses: pure functions + thin ``nn.Module`` wrappers.

Every loss follows ``docs/methods.md``; see each module for the formula, shapes and errors.
"""
from __future__ import annotations
from .info_nce import info_nce_loss, InfoNCELoss
from .supcon import flatten_views, supcon_loss, SupConLoss
from .ocl import ocl_loss, OCLoss
from .local import (
    LOCALLoss,
    inverse_frequency_weights,
    latent_correlation_embedding,
    local_alpha,
    local_loss,
    pair_difference,
)
from .care import care_equivariance_loss, CARELoss
from .moco import moco_info_nce_loss, CAREMoCoLoss
from .simo import simo_loss, afcl_loss, SimOLoss, AFCLLoss
from .align_uniform import alignment_loss, uniformity_loss, AlignUniformLoss
from .spectral import spectral_contrastive_loss, SpectralContrastiveLoss
from .vicreg import vicreg_loss, VICRegLoss
from .binary_nce import binary_nce_loss, BinaryNCELoss
from ..tensor_checks import finite_input_checks

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
