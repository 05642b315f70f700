"""The objective's own trainable parameters (a learnable temperature, LOCAL's classifier) in the optimizer.

They live in ``trainer.objective``, not in the model, so the Trainer neither puts them in its optimizer nor
averages their gradients (DDP averages the model's): :func:`add_objective_parameter_groups` adds them (after
making them identical on every process), :func:`average_gradients` averages their gradients over the
processes before each optimizer step and :class:`ZeroObjectiveGradients` zeroes them after it.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from transformers import TrainerCallback

import hf_contrast.distributed as distributed

__all__ = ["ZeroObjectiveGradients", "add_objective_parameter_groups", "average_gradients"]


class ZeroObjectiveGradients(TrainerCallback):
    """Zero the objective's gradients before training and after every optimizer step (``Trainer`` zeroes the
    model's only)."""

    def __init__(self, objective: nn.Module) -> None:
        self.objective = objective

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.objective.zero_grad(set_to_none=True)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.objective.zero_grad(set_to_none=True)


def average_gradients(params: list[nn.Parameter]) -> None:
    """Replace each parameter's gradient by its mean over the processes (a missing gradient counts as 0)."""
    world = distributed.world_size()
    if not params or world == 1:
        return
    for p in params:
        grad = p.grad if p.grad is not None else torch.zeros_like(p)
        dist.all_reduce(grad, op=dist.ReduceOp.SUM)
        p.grad = grad / world


def add_objective_parameter_groups(
    optimizer: torch.optim.Optimizer,
    objective: nn.Module,
    params: list[nn.Parameter],
    weight_decay: float,
    created: bool,
) -> None:
    """Give ``params`` (the objective's trainable parameters) their optimizer groups.

    When the trainer ``created`` the optimizer: the objective's parameters and buffers are broadcast from
    process 0, then matrices get ``weight_decay`` and vectors and scalars (temperatures, biases) none. A
    user-given optimizer is left as it is; a warning says when it misses some of ``params``.
    """
    if not params:
        return
    if created:
        if distributed.world_size() > 1:
            for tensor in [*objective.parameters(), *objective.buffers()]:
                dist.broadcast(tensor.data, src=0)
        decay = [p for p in params if p.ndim >= 2]
        no_decay = [p for p in params if p.ndim < 2]
        target = getattr(optimizer, "optimizer", optimizer)
        if decay:
            target.add_param_group({"params": decay, "weight_decay": weight_decay})
        if no_decay:
            target.add_param_group({"params": no_decay, "weight_decay": 0.0})
        return
    known = {id(p) for group in optimizer.param_groups for p in group["params"]}
    if any(id(p) not in known for p in params):
        warnings.warn(
            f"The given optimizer does not hold the trainable parameters of {type(objective).__name__}; "
            "they will not be trained. Add `trainer.objective_parameters()`.",
            UserWarning,
            stacklevel=3,
        )
