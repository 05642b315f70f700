"""A function of CUDA tensors replayed from CUDA graphs, one per input shape: one launch instead of hundreds.

The device views of a batch of small images are a few hundred tiny kernels (crops, flips, four colour-jitter
rounds, grayscale, blur, solarisation, normalisation). On a GPU each costs the host more time to launch than the
device to run, so the host, not the GPU, sets the step's pace (docs/benchmarks/throughput.md). Captured once in a
``torch.cuda.CUDAGraph`` (PyTorch's public graph API), the whole pass is replayed with one launch, plus one copy
per input into the graph's fixed input buffers and one copy of the output out of its buffer.

What can be captured: operations on CUDA tensors with shapes known from the input shapes, no host read and no
host-to-device copy of a Python value (the device views draw their random parameters on the host and hand them in
as a tensor; their graph-friendly pass computes the hue rotation for every row and keeps it where it applies).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

__all__ = ["CUDAGraphs"]

logger = logging.getLogger(__name__)


@dataclass
class _Captured:
    graph: torch.cuda.CUDAGraph
    inputs: tuple[Tensor, ...]  # the graph's input buffers, filled before each replay
    output: Tensor  # the graph's output buffer, overwritten by each replay


class CUDAGraphs:
    """``fn(*inputs)`` replayed from a CUDA graph captured the first time each ``key`` is seen.

    Usage::

        graphs = CUDAGraphs("the view pass")
        out = graphs(("views", x.shape, p.shape), lambda x, p: pass_(x, p), x, p)   # captured, then replayed

    Each replay copies ``inputs`` into the graph's buffers, replays, and returns a copy of the output (a later
    replay overwrites the buffer; the copy is the caller's to keep). The graphs share one memory pool, reserved for
    them: the largest peak memory of one call, not the sum (safe because each replay's output is copied out before
    any other graph replays, on the same stream). At most ``max_graphs`` keys are captured; other keys, every call
    if a capture fails (the failure is logged once as a warning), calls under ``torch.inference_mode``, with an
    input that requires grad (a replay records no autograd graph) or inside another CUDA-graph capture run ``fn``
    eagerly: the same values either way.

    Args:
        what: Named in the log lines.
        max_graphs: Keys captured at most (e.g. the training batch, an epoch's shorter last batch, the evaluation
            batch).
    """

    def __init__(self, what: str, max_graphs: int = 4) -> None:
        self.what = what
        self.max_graphs = max_graphs
        self._captured: dict[Hashable, _Captured] = {}
        self._failed = False
        self._pool: Any = None  # the graphs' memory pool (torch.cuda.graph_pool_handle), made at the first capture

    def __len__(self) -> int:
        return len(self._captured)

    def __call__(self, key: Hashable, fn: Callable[..., Tensor], *inputs: Tensor) -> Tensor:
        """``fn(*inputs)``, replayed from the graph of ``key`` (captured now if new).

        Args:
            key: What decides the graph: the inputs' shapes, dtypes and device, and whatever else ``fn`` depends
                on beyond ``inputs`` (two calls with one key must run the same kernels on inputs of the same shapes).
            fn: Operations on CUDA tensors only; no host read, no data-dependent shapes.
            inputs: CUDA tensors, all on one device.

        Returns:
            ``fn(*inputs)``, a tensor the caller owns.
        """
        if torch.is_inference_mode_enabled() or any(value.requires_grad for value in inputs):
            return fn(*inputs)  # a replay records no autograd graph, and its buffers are not inference tensors
        if torch.cuda.is_current_stream_capturing():  # inside someone else's capture: part of their graph
            return fn(*inputs)
        captured = self._captured.get(key)
        if captured is None:
            if self._failed or len(self._captured) >= self.max_graphs:
                return fn(*inputs)
            captured = self._capture(key, fn, inputs)
            if captured is None:
                return fn(*inputs)
        with torch.cuda.device(inputs[0].device):  # the graph's device's current stream, whichever device is current
            for buffer, value in zip(captured.inputs, inputs):
                buffer.copy_(value, non_blocking=True)
            captured.graph.replay()
            return captured.output.clone()

    def _capture(self, key: Hashable, fn: Callable[..., Tensor], inputs: tuple[Tensor, ...]) -> _Captured | None:
        device = inputs[0].device
        try:
            with torch.cuda.device(device):
                buffers = tuple(value.clone() for value in inputs)
                side, current = torch.cuda.Stream(), torch.cuda.current_stream()
                side.wait_stream(current)
                with torch.cuda.stream(side):  # warm-up off the capture (library handles, workspaces)
                    for _ in range(2):
                        fn(*buffers)
                current.wait_stream(side)
                graph = torch.cuda.CUDAGraph()
                if self._pool is None:
                    self._pool = torch.cuda.graph_pool_handle()
                with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
                    output = fn(*buffers)
        except Exception as error:  # noqa: BLE001 - any failure to capture leaves the eager pass, which is correct
            self._failed = True
            logger.warning(
                "%s: could not be captured in a CUDA graph (%s: %s); it runs eagerly (the same values, more "
                "kernel launches).",
                self.what,
                type(error).__name__,
                error,
            )
            return None
        if not self._captured:
            logger.info(
                "%s: replayed from a CUDA graph captured once per input shape (one launch instead of one per "
                "operation; the same values).",
                self.what,
            )
        self._captured[key] = captured = _Captured(graph, buffers, output)
        return captured
