"""CARE-MoCo: a MoCo-v2 momentum encoder and queue for CARE's invariance term (docs/methods.md §4).

MoCo v2 (https://arxiv.org/abs/2003.04297): the query encoder ``f_q`` (the trained model) embeds
view 1, a momentum copy ``f_k`` embeds view 2, and InfoNCE contrasts each query with its key
against a queue of ``K`` keys from earlier batches. After every optimizer step
``θ_k ← m·θ_k + (1 − m)·θ_q``. The CARE equivariance views both go through ``f_q``.

- :func:`moco_info_nce_loss` — the queue InfoNCE (pure function);
- :class:`MoCoState` — key encoder + queue (part of the objective's ``state_dict``, so checkpointed);
- :class:`CAREMoCoLoss` — ``{"invariance", "equivariance", "loss"}`` from queries, keys, queue
  and the equivariance views;
- :class:`MomentumUpdateCallback` — the EMA update once per optimizer step (so gradient
  accumulation updates once per accumulated step).

Differences from the official MoCo v2 code, documented: no shuffled BatchNorm for the key
encoder (use a backbone without batch statistics, or accept the small leak it prevents); keys are
gathered from all processes before they are enqueued, as in MoCo.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import TrainerCallback

from ..losses import CARELoss
from ..losses._checks import check_embeddings, check_non_negative, check_positive, float32_math, l2_normalize
from ..losses.care import care_equivariance_loss

__all__ = ["moco_info_nce_loss", "MoCoState", "CAREMoCoLoss", "MomentumUpdateCallback"]

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
        raise ValueError(f"`q` and `k` must have the same shape, got {tuple(q.shape)} and {tuple(k.shape)}.")
    if queue.shape[1] != q.shape[1]:
        raise ValueError(f"`queue` must have D={q.shape[1]} columns like `q`, got shape {tuple(queue.shape)}.")
    temperature = check_positive("temperature", temperature)
    with float32_math(q.device.type):
        q = l2_normalize(q.float())
        k = l2_normalize(k.detach().float())
        positive = (q * k).sum(dim=1, keepdim=True)  # (B, 1)
        negative = q @ queue.detach().float().T  # (B, K)
        logits = torch.cat([positive, negative], dim=1) / temperature
        target = torch.zeros(q.shape[0], dtype=torch.long, device=q.device)
        return F.cross_entropy(logits, target)


class MoCoState(nn.Module):
    """The momentum (key) encoder and the queue of normalised keys.

    Args:
        encoder: The query encoder; deep-copied, frozen (``requires_grad=False``).
        queue_size: ``K``, number of queued keys.
        momentum: ``m`` in ``[0, 1)``.
        seed: Seed of the random initial queue (unit vectors), identical on every process.

    The queue is created at the first :meth:`enqueue` / :meth:`queue_for` with the key width
    ``D``. ``queue_ptr`` is the next row to overwrite; ``num_enqueued`` counts keys ever enqueued.
    """

    def __init__(self, encoder: nn.Module, queue_size: int = 4096, momentum: float = 0.99, seed: int = 0) -> None:
        super().__init__()
        if not isinstance(queue_size, int) or queue_size < 1:
            raise ValueError(f"`queue_size` must be an int >= 1, got {queue_size!r}.")
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"`momentum` must be in [0, 1), got {momentum!r}.")
        self.queue_size = queue_size
        self.momentum = float(momentum)
        self.seed = seed
        self.key_encoder = copy.deepcopy(encoder)
        self.key_encoder.requires_grad_(False)
        self.queue: Tensor | None = None
        self.queue_ptr = 0
        self.num_enqueued = 0

    @torch.no_grad()
    def momentum_update(self, encoder: nn.Module) -> None:
        """``θ_k ← m·θ_k + (1 − m)·θ_q`` for every parameter (buffers are the key encoder's own)."""
        keys = [p for p in self.key_encoder.parameters()]
        queries = [p.detach() for p in encoder.parameters()]
        if len(keys) != len(queries):
            raise ValueError(
                f"`encoder` has {len(queries)} parameters but the key encoder {len(keys)}: not the same architecture."
            )
        torch._foreach_mul_(keys, self.momentum)
        torch._foreach_add_(keys, queries, alpha=1.0 - self.momentum)

    @torch.no_grad()
    def keys(self, **inputs: Tensor) -> Tensor:
        """Projections of the key encoder (no gradient)."""
        return self.key_encoder(**inputs)["projections"]

    def queue_for(self, dim: int, device: torch.device) -> Tensor:
        """The queue, created (random unit rows from ``seed``) on first use. Shape: ``(K, dim)``."""
        if self.queue is None:
            generator = torch.Generator().manual_seed(self.seed)
            self.queue = l2_normalize(torch.randn(self.queue_size, dim, generator=generator)).to(device)
        return self.queue

    @torch.no_grad()
    def enqueue(self, keys: Tensor) -> None:
        """Write ``keys`` (normalised) over the oldest queue rows, wrapping around.

        Out-of-place, so a loss graph that still holds the previous queue stays valid.

        Raises:
            ValueError: if more keys than ``queue_size`` arrive at once.
        """
        n = keys.shape[0]
        if n > self.queue_size:
            raise ValueError(
                f"`moco_queue_size`={self.queue_size} must be at least the number of keys per step ({n}); "
                "increase it."
            )
        queue = self.queue_for(keys.shape[1], keys.device)
        index = (self.queue_ptr + torch.arange(n, device=queue.device)) % self.queue_size
        self.queue = queue.index_copy(0, index, l2_normalize(keys.float()).to(queue.dtype))
        self.queue_ptr = (self.queue_ptr + n) % self.queue_size
        self.num_enqueued += n

    def get_extra_state(self) -> dict[str, Any]:
        """Queue and pointers (the key encoder is in the ``state_dict`` as a submodule)."""
        return {
            "queue": self.queue,
            "queue_ptr": torch.tensor(self.queue_ptr),
            "num_enqueued": torch.tensor(self.num_enqueued),
        }

    def set_extra_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`get_extra_state`."""
        self.queue = None if state["queue"] is None else state["queue"].clone()
        self.queue_ptr = int(state["queue_ptr"])
        self.num_enqueued = int(state["num_enqueued"])


class CAREMoCoLoss(nn.Module):
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

    def __init__(self, temperature: float = 0.2, care_weight: float = 0.01, n_splits: int = 8) -> None:
        super().__init__()
        self.temperature = check_positive("temperature", temperature)
        self.care_weight = check_non_negative("care_weight", care_weight)
        self.n_splits = n_splits

    def forward(self, q: Tensor, k: Tensor, queue: Tensor, z1_eq: Tensor, z2_eq: Tensor) -> dict[str, Tensor]:
        invariance = moco_info_nce_loss(q, k, queue, self.temperature)
        equivariance = self.care_weight * care_equivariance_loss(z1_eq, z2_eq, n_splits=self.n_splits)
        return {"invariance": invariance, "equivariance": equivariance, "loss": invariance + equivariance}

    def get_config_dict(self) -> dict[str, object]:
        return {"temperature": self.temperature, "care_weight": self.care_weight, "n_splits": self.n_splits}


class MomentumUpdateCallback(TrainerCallback):
    """Run :meth:`MoCoState.momentum_update` after every optimizer step."""

    def __init__(self, state: MoCoState) -> None:
        self.moco = state

    def on_optimizer_step(self, args: Any, state: Any, control: Any, model: nn.Module | None = None, **kwargs: Any) -> None:
        if model is not None:
            self.moco.momentum_update(model)
