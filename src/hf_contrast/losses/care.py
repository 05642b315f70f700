"""STUB: being written."""
from __future__ import annotations

from torch import nn

def care_equivariance_loss(*args, **kwargs):
    raise NotImplementedError


class CARELoss(nn.Module):
    pass


