"""STUB: being written."""
from __future__ import annotations

from torch import nn

def spectral_contrastive_loss(*args, **kwargs):
    raise NotImplementedError


class SpectralContrastiveLoss(nn.Module):
    pass


