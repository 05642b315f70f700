"""Cached-gradient training (GradCache, Gao et al. 2021, https://arxiv.org/abs/2101.06983): batches beyond memory.

The objective sees the whole batch — all negatives, whole CARE chunks, MoCo's queue once — while the
encoder only ever holds the activations of ``mini_batch_size`` rows:

1. every encoder call of the objective's forward (:meth:`GradientCache.encode`) runs the encoder in
   mini-batches **without a graph** and returns the outputs as leaf tensors that require gradients;
2. the objective's loss is computed and back-propagated on the whole batch: the leaves receive
   ``∂loss/∂outputs`` (and objective-owned parameters their gradients);
3. :meth:`GradientCache.backward` re-runs each mini-batch **with a graph**, under the RNG state it had in
   step 1 (so dropout — SimCSE's views — and any randomness inside the encoder are the same), and
   back-propagates ``Σ outputs · cached gradient``, which gives each parameter exactly the full-batch
   gradient.

Exactness: equal to the direct step (to float rounding) for encoders without batch statistics
(LayerNorm, GroupNorm, BERT). With BatchNorm the normalisation statistics are per mini-batch, as with
any micro-batching (the running statistics are updated by the graph pass only, once per mini-batch);
the usual remedies are a larger ``mini_batch_size``, ``GroupNorm``/``LayerNorm`` backbones, or frozen BN
statistics. Cost: one extra forward pass of the encoder per step.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from ..tensor_checks import check_int

__all__ = ["GradientCache"]


@dataclass
class _RNGState:
    """The CPU and accelerator generator states at one point (to replay dropout)."""

    cpu: Tensor
    cuda: list[Tensor] | None = None
    devices: list[int] = field(default_factory=list)

    @classmethod
    def capture(cls, tensors: list[Tensor]) -> _RNGState:
        devices = sorted({t.device.index or 0 for t in tensors if t.device.type == "cuda"})
        cuda = [torch.cuda.get_rng_state(d) for d in devices] if devices else None
        return cls(torch.get_rng_state(), cuda, devices)

    @contextlib.contextmanager
    def replay(self) -> Iterator[None]:
        with torch.random.fork_rng(devices=self.devices):
            torch.set_rng_state(self.cpu)
            for device, state in zip(self.devices, self.cuda or []):
                torch.cuda.set_rng_state(state, device)
            yield


def _rows(inputs: Mapping[str, Any]) -> int:
    return next(v.shape[0] for v in inputs.values() if isinstance(v, Tensor) and v.ndim > 0)


def _slice(inputs: Mapping[str, Any], start: int, stop: int, n: int) -> dict[str, Any]:
    return {
        k: v[start:stop] if isinstance(v, Tensor) and v.ndim > 0 and v.shape[0] == n else v for k, v in inputs.items()
    }


def _leaf(value: Tensor) -> Tensor:
    return value.detach().requires_grad_(value.is_floating_point())


@dataclass
class _Record:
    model: nn.Module
    chunks: list[dict[str, Any]]
    forward_kwargs: dict[str, Any]
    rng: list[_RNGState]
    outputs: dict[str, Any]
    bounds: list[tuple[int, int]]


class GradientCache:
    """Run the encoder in mini-batches for one training step (see the module docstring).

    Args:
        mini_batch_size: Rows per encoder pass (``args.gradient_cache_size``).

    Raises:
        ValueError: if ``mini_batch_size`` is not a positive int.
    """

    def __init__(self, mini_batch_size: int) -> None:
        self.mini_batch_size = check_int("gradient_cache_size", mini_batch_size, 1)
        self.records: list[_Record] = []

    def encode(self, model: nn.Module, inputs: Mapping[str, Any], **forward_kwargs: Any) -> dict[str, Any]:
        """The model's outputs for ``inputs``, computed in mini-batches without a graph, as leaves.

        Returns:
            A dict like the model output: each batched tensor (and tuple of tensors) concatenated over the
            mini-batches, detached and requiring gradients.
        """
        n = _rows(inputs)
        bounds = [(s, min(s + self.mini_batch_size, n)) for s in range(0, n, self.mini_batch_size)]
        chunks = [_slice(inputs, a, b, n) for a, b in bounds]
        rng: list[_RNGState] = []
        parts: list[Mapping[str, Any]] = []
        # BatchNorm running statistics move in the graph pass only (once per row, as in a direct step).
        norms = [
            m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats
        ]
        saved = [
            [b.clone() for b in (m.running_mean, m.running_var, m.num_batches_tracked) if b is not None] for m in norms
        ]
        for chunk in chunks:
            rng.append(_RNGState.capture([v for v in chunk.values() if isinstance(v, Tensor)]))
            with torch.no_grad():
                parts.append(model(**chunk, **forward_kwargs))
        with torch.no_grad():
            for module, buffers in zip(norms, saved):
                current = [
                    b for b in (module.running_mean, module.running_var, module.num_batches_tracked) if b is not None
                ]
                for target, value in zip(current, buffers):
                    target.copy_(value)
        outputs: dict[str, Any] = {}
        for key, value in parts[0].items():
            if isinstance(value, Tensor) and value.ndim > 0:
                outputs[key] = _leaf(torch.cat([p[key] for p in parts]))
            elif isinstance(value, (tuple, list)) and value and all(isinstance(v, Tensor) for v in value):
                outputs[key] = tuple(_leaf(torch.cat([p[key][i] for p in parts])) for i in range(len(value)))
        self.records.append(_Record(model, chunks, dict(forward_kwargs), rng, outputs, bounds))
        return outputs

    def backward(self) -> None:
        """Re-run every recorded mini-batch with a graph and back-propagate the cached output gradients.

        Under DDP the gradient all-reduce runs once, with the last mini-batch.
        """
        work = [(r, i) for r in self.records for i in range(len(r.chunks))]
        for position, (record, i) in enumerate(work):
            last = position == len(work) - 1
            sync = contextlib.nullcontext() if last or not hasattr(record.model, "no_sync") else record.model.no_sync()
            a, b = record.bounds[i]
            with sync, record.rng[i].replay():
                out = record.model(**record.chunks[i], **record.forward_kwargs)
                surrogate = None
                for key, leaf in record.outputs.items():
                    pairs = zip(out[key], leaf) if isinstance(leaf, tuple) else [(out[key], leaf)]
                    for value, cached in pairs:
                        if cached.grad is not None:
                            term = (value * cached.grad[a:b].to(value.dtype)).sum()
                            surrogate = term if surrogate is None else surrogate + term
                if surrogate is not None:
                    surrogate.backward()
        self.records.clear()
