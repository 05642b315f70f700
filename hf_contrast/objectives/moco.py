"""CARE-MoCo: a MoCo-v2 momentum encoder and queue for CARE's invariance term (docs/methods.md §4).

MoCo v2 (https://arxiv.org/abs/2003.04297): the query encoder ``f_q`` (the trained model) embeds
view 1, a momentum copy ``f_k`` embeds view 2, and InfoNCE contrasts each query with its key
against a queue of ``K`` keys from earlier batches. After every optimizer step
``θ_k ← m·θ_k + (1 − m)·θ_q``. The CARE equivariance views both go through ``f_q``.

- :class:`MoCoState` — key encoder + queue (part of the objective's ``state_dict``, so checkpointed);
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
from torch import Tensor, nn
from transformers import TrainerCallback

from hf_contrast.errors import InputError

from ..tensor_checks import check_int, check_unit_interval, l2_normalize

__all__ = ["MoCoState", "MomentumUpdateCallback"]


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
        check_int("queue_size", queue_size, 1)
        check_unit_interval("momentum", momentum, include_one=False)
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
            raise InputError(
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
            raise InputError(
                f"`moco_queue_size`={self.queue_size} must be at least the number of keys per step ({n}); increase it."
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


class MomentumUpdateCallback(TrainerCallback):
    """Run :meth:`MoCoState.momentum_update` after every optimizer step."""

    def __init__(self, state: MoCoState) -> None:
        self.moco = state

    def on_optimizer_step(
        self, args: Any, state: Any, control: Any, model: nn.Module | None = None, **kwargs: Any
    ) -> None:
        if model is not None:
            self.moco.momentum_update(model)
