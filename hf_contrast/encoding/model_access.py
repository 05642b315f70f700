"""What every evaluator does with a model: find its device, switch to eval mode and back, read an output."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn

from hf_contrast.errors import InputError

__all__ = ["eval_mode", "model_device", "model_output", "to_device", "unwrap_model"]


def unwrap_model(model: nn.Module) -> nn.Module:
    """The module inside ``DistributedDataParallel`` / ``torch.compile`` wrappers (for attributes)."""
    while isinstance(getattr(model, "module", None), nn.Module):
        model = model.module
    return getattr(model, "_orig_mod", model)


def model_device(model: nn.Module) -> torch.device:
    """The device of the model's first parameter (CPU for a parameter-free module)."""
    for tensor in model.parameters():
        return tensor.device
    return torch.device("cpu")


@contextmanager
def eval_mode(model: nn.Module) -> Iterator[nn.Module]:
    """Run the block with ``model.eval()`` under ``torch.no_grad()``; restore the previous mode after."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield model
    finally:
        model.train(was_training)


def to_device(batch: Mapping[str, Any], device: torch.device) -> dict[str, Any]:
    """Move every tensor of a batch dict to ``device``."""
    return {key: value.to(device) if isinstance(value, Tensor) else value for key, value in batch.items()}


def model_output(outputs: Any, output: str, n: int | None = None) -> Tensor:
    """``outputs.<output>`` (or ``outputs[output]``) as a detached float32 CPU tensor ``(n, D)``.

    Raises:
        ValueError: if the output is missing, not a 2-D tensor, or has not ``n`` rows.
    """
    z = outputs.get(output) if isinstance(outputs, Mapping) else getattr(outputs, output, None)
    if not isinstance(z, Tensor):
        available = list(outputs.keys()) if isinstance(outputs, Mapping) else type(outputs).__name__
        fix = (
            "the model has no task head: build the encoder with `num_labels` (one class per label)"
            if output == "logits"
            else "use 'embeddings' or 'projections'"
        )
        raise InputError(f"`output` {output!r} is not a tensor output of the model (got {available}); {fix}.")
    if z.ndim != 2 or (n is not None and z.shape[0] != n):
        expected = f"({n}, D)" if n is not None else "(n, D)"
        raise InputError(f"model output `{output}` must have shape {expected}, got {tuple(z.shape)}.")
    return z.detach().float().cpu()
