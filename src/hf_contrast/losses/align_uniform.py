"""STUB: being written."""
from __future__ import annotations

from torch import nn

def alignment_loss(*args, **kwargs):
    raise NotImplementedError


def uniformity_loss(*args, **kwargs):
    raise NotImplementedError


class AlignUniformLoss(nn.Module):
    pass


