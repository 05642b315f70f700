"""The tiny loss problem shared by ``gather_losses.py`` and ``tiled_losses.py``.

Imported from a script launched by ``torch.distributed.run`` (same directory on ``sys.path``) and,
through those scripts, by the tests for the single-process reference.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from hf_contrast.losses import (
    afcl_loss,
    info_nce_loss,
    ocl_loss,
    spectral_contrastive_loss,
    supcon_loss,
    uniformity_loss,
)


def linear_problem(labels: Tensor) -> tuple[nn.Module, Tensor, Tensor, Tensor]:
    """A seeded ``nn.Linear(8, 4)`` (float64, no batch statistics) and a global batch ``(x1, x2, labels)``
    of ``len(labels)`` rows, identical in every process. Shapes: ``x1, x2`` ``(N, 8)``."""
    torch.manual_seed(0)
    model = nn.Linear(8, 4).double()
    g = torch.Generator().manual_seed(1)
    x1 = torch.randn(len(labels), 8, generator=g, dtype=torch.float64)
    x2 = x1 + 0.3 * torch.randn(len(labels), 8, generator=g, dtype=torch.float64)
    return model, x1, x2, labels


def loss_and_grads(
    name: str, model: nn.Module, x1: Tensor, x2: Tensor, labels: Tensor, **loss_kwargs: Any
) -> tuple[Tensor, list[Tensor]]:
    """One loss (``info_nce``, ``supcon``, ``ocl``, ``uniformity``, ``spectral`` or ``afcl``: SimO's, on the rows as
    class-major groups of 3) on the given rows with ``loss_kwargs`` (``gather_distributed``, ``tile_size``), its
    backward, and the parameter gradients (not yet averaged)."""
    model.zero_grad(set_to_none=True)
    if name == "info_nce":
        loss = info_nce_loss(model(x1), model(x2), temperature=0.5, **loss_kwargs)
    elif name == "supcon":
        loss = supcon_loss(model(x1), labels, temperature=0.1, **loss_kwargs)
    elif name == "ocl":
        loss = ocl_loss(model(x1), labels, temperature=0.1, **loss_kwargs)
    elif name == "spectral":
        loss = spectral_contrastive_loss(model(x1), model(x2), **loss_kwargs)
    elif name == "afcl":
        loss = afcl_loss(model(x1), n_classes=len(x1) // 3, olean=0.3, **loss_kwargs)
    else:
        loss = uniformity_loss(model(x1), t=2, **loss_kwargs)
    loss.backward()
    return loss.detach(), [p.grad.detach().clone() for p in model.parameters()]
