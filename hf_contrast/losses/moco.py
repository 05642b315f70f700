"""MoCo v2's queue InfoNCE and CARE-MoCo's loss (docs/methods.md §4).

MoCo v2 (https://arxiv.org/abs/2003.04297): the query encoder embeds view 1, a momentum copy embeds view 2,
and InfoNCE contrasts each query with its key against a queue of ``K`` keys from earlier batches.

- :func:`moco_info_nce_loss` — the queue InfoNCE (pure function);
- :class:`CAREMoCoLoss` — ``{"invariance", "equivariance", "loss"}`` from queries, keys, queue and the
  equivariance views.

The key encoder and the queue themselves are training state: :class:`hf_contrast.objectives.moco.MoCoState`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from hf_contrast.errors import InputError

from ..tensor_checks import (
    check_embeddings,
    check_finite_weighted,
    check_temperature,
    float32_math,
    l2_normalize,
)
from .care import CAREHyperparameters, CARELoss, _care_equivariance_loss
from .hyperparameters import HyperparameterModule, Hyperparameters, hyperparameter, same_hyperparameter

__all__ = ["moco_info_nce_loss", "CAREMoCoLoss"]

_MOCO_BIBTEX = """@article{chen2020improved,
  title   = {Improved Baselines with Momentum Contrastive Learning},
  author  = {Chen, Xinlei and Fan, Haoqi and Girshick, Ross and He, Kaiming},
  journal = {arXiv preprint arXiv:2003.04297},
  year    = {2020},
  url     = {https://arxiv.org/abs/2003.04297}
}"""


def moco_info_nce_loss(q: Tensor, k: Tensor, queue: Tensor, temperature: float = 0.2) -> Tensor:
    """InfoNCE of each query against its key (positive) and a queue of negative keys.

    ``ℓ_i = −log exp(q_i·k_i/τ) / (exp(q_i·k_i/τ) + Σ_j exp(q_i·u_j/τ))`` on L2-normalised ``q``,
    ``k`` and queue rows ``u``; the loss is the mean over the ``B`` queries. Computed in float32.

    Args:
        q: Queries (gradient flows). Shape: ``(B, D)``.
        k: Keys of the same samples, other view (treated as constants). Shape: ``(B, D)``.
        queue: Negative keys. Shape: ``(K, D)``.
        temperature: τ > 0 (MoCo v2: 0.2).

    Returns:
        Scalar loss.

    Raises:
        ValueError: on shape mismatches or ``temperature <= 0``.

    >>> q = torch.randn(4, 8)
    >>> moco_info_nce_loss(q, q, torch.randn(16, 8)).shape
    torch.Size([])
    """
    check_embeddings("q", q)
    check_embeddings("k", k)
    check_embeddings("queue", queue, shape_doc="(K, D)")
    if k.shape != q.shape:
        raise InputError(f"`q` and `k` must have the same shape, got {tuple(q.shape)} and {tuple(k.shape)}.")
    if queue.shape[1] != q.shape[1]:
        raise InputError(f"`queue` must have D={q.shape[1]} columns like `q`, got shape {tuple(queue.shape)}.")
    temperature = check_temperature("temperature", temperature)
    with float32_math(q.device.type):
        q = l2_normalize(q.float())
        k = l2_normalize(k.detach().float())
        positive = (q * k).sum(dim=1, keepdim=True)  # (B, 1)
        negative = q @ queue.detach().float().T  # (B, K)
        logits = torch.cat([positive, negative], dim=1) / temperature
        target = torch.zeros(q.shape[0], dtype=torch.long, device=q.device)
        return F.cross_entropy(logits, target)


@dataclass
class CAREMoCoHyperparameters(Hyperparameters):
    """:class:`CAREMoCoLoss`'s hyperparameters, declared once (see :mod:`.hyperparameters`)."""

    temperature: float = hyperparameter(0.2, check_temperature, help="CARE-MoCo: temperature of the queue InfoNCE.")
    care_weight: float = same_hyperparameter(CAREHyperparameters, "care_weight")
    n_splits: int = same_hyperparameter(CAREHyperparameters, "n_splits")


class CAREMoCoLoss(HyperparameterModule):
    """CARE with a MoCo-v2 invariance term: ``moco_info_nce(q, k, queue) + λ·L_equi(z1_eq, z2_eq)``.

    Args:
        temperature: τ of the queue InfoNCE (MoCo v2: 0.2).
        care_weight: λ >= 0.
        n_splits: Equivariance chunks ``S`` (must divide the equivariance batch).

    Shape:
        ``forward(q, k, queue, z1_eq, z2_eq)``: ``q, k`` ``(B, D)``, ``queue`` ``(K, D)``,
        ``z1_eq, z2_eq`` ``(B_eq, D)``; returns ``{"invariance", "equivariance", "loss"}``.
    """

    citation = CARELoss.citation + "\n" + _MOCO_BIBTEX
    hyperparameters_class = CAREMoCoHyperparameters

    def forward(self, q: Tensor, k: Tensor, queue: Tensor, z1_eq: Tensor, z2_eq: Tensor) -> dict[str, Tensor]:
        invariance = moco_info_nce_loss(q, k, queue, self.temperature)
        equivariance = self.care_weight * _care_equivariance_loss(
            z1_eq, z2_eq, n_splits=self.n_splits, names=("z1_eq", "z2_eq")
        )
        check_finite_weighted(
            equivariance,
            "the CARE equivariance term",
            f"`care_weight`={self.care_weight:g}",
            "use the paper's 0.01 to 0.001",
        )
        return {"invariance": invariance, "equivariance": equivariance, "loss": invariance + equivariance}
