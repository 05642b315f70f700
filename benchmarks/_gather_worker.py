"""2-process worker of ``bench_training.py``: what the cross-process gather adds to a step.

Run by ``bench_training.py`` as ``torchrun --nproc_per_node 2 benchmarks/_gather_worker.py ...``
(gloo on CPU, one thread per process). Rank 0 writes a JSON result:

- ``trainers``: for SimCLR, CARE (fixed equivariance views) and SupCon, one ``trainer.train()`` run
  where ``gather_distributed`` is switched off/on every other step (on the loss module, and on the
  arguments for SupCon's positive-pair check); the median step time of each setting and the
  median of the paired differences of adjacent steps (warm-up steps excluded). Both settings pay
  DDP's gradient all-reduce.
- ``comm``: the raw cost of one ``hf_contrast.distributed.gather`` of the projections (forward:
  the row-count all-gather and the all-gather; backward: the all-reduce of the gradient), of the
  labels gather, and, for scale, an all-reduce the size of the model's gradients and a 1-float
  all-reduce (latency).
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from transformers import PrinterCallback, TrainerCallback
from transformers.utils import logging as hf_logging

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_training import (  # noqa: E402
    COLLATOR,
    PROJECTION_DIM,
    Settings,
    build_methods,
    make_dataset,
    training_args,
)

from hf_contrast import distributed  # noqa: E402
from hf_contrast.models import ContrastiveEncoder  # noqa: E402

METHODS = ("SimCLR", "CARE (fixed eq. views)", "SupCon")


_COLLECTIVES = ("all_gather", "all_reduce", "all_gather_object", "broadcast", "all_gather_into_tensor", "barrier")
CALLS = [0]


def count_python_collectives() -> None:
    """Count the ``torch.distributed`` collectives called from Python (DDP's C++ reducer is not counted)."""
    for name in _COLLECTIVES:
        original = getattr(dist, name)

        def counted(*args: Any, _original: Callable[..., Any] = original, **kwargs: Any) -> Any:
            CALLS[0] += 1
            return _original(*args, **kwargs)

        setattr(dist, name, counted)


class ToggleGather(TrainerCallback):
    """Switches ``gather_distributed`` every other step and times each step."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self.times: list[tuple[bool, float]] = []
        self.calls: list[tuple[bool, int]] = []
        self._flag = False
        self._last: float | None = None

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._flag = state.global_step % 2 == 1
        self.trainer.loss.gather_distributed = self._flag
        object.__setattr__(self.trainer.args, "gather_distributed", self._flag)
        CALLS[0] = 0

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        now = time.perf_counter()
        self.calls.append((self._flag, CALLS[0]))
        if self._last is not None:
            self.times.append((self._flag, now - self._last))
        self._last = now


def time_trainer(name: str, base: torch.nn.Module, settings: Settings, steps: int, tmp: str) -> dict[str, float]:
    """One run of method ``name`` with ``gather_distributed`` toggled every step; medians and collective counts."""
    method = build_methods(settings.batch_size)[name]
    dataset = make_dataset(settings.pool_batches * settings.batch_size * 2, settings.image_size, method.eq)
    # Step k (0-based) gathers iff k is odd. Untimed warm-up: steps 0 .. warmup-1 (warmup even, >= 2),
    # then `steps` pairs (off at step 2i, on at step 2i+1).
    warmup = max(2, settings.warmup + settings.warmup % 2)
    max_steps = warmup + 2 * steps
    args = training_args(tmp, settings, max_steps, **method.args)
    trainer = method.trainer_cls(
        model=copy.deepcopy(base),
        args=args,
        train_dataset=dataset,
        data_collator=COLLATOR,
        loss=method.make_loss(settings.batch_size),
        **method.trainer_kwargs,
    )
    callback = ToggleGather(trainer)
    trainer.add_callback(callback)
    trainer.remove_callback(PrinterCallback)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    timed = callback.times[warmup - 1 :]  # times[j] is step j + 1: step 0 has no predecessor
    off = [t for flag, t in timed[0::2]]
    on = [t for flag, t in timed[1::2]]
    if any(flag for flag, _ in timed[0::2]) or not all(flag for flag, _ in timed[1::2]):
        raise RuntimeError("timed steps are not (gather off, gather on) pairs")
    return {
        "off": statistics.median(off),
        "on": statistics.median(on),
        "added": statistics.median(b - a for a, b in zip(off, on)),
        "pairs": len(off),
        "collectives_off": max(n for flag, n in callback.calls[warmup:] if not flag),
        "collectives_on": max(n for flag, n in callback.calls[warmup:] if flag),
    }


def time_comm(fn: Callable[[], None], repeats: int) -> float:
    """Median time of ``fn()`` over ``repeats`` calls, each started right after a barrier."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        dist.barrier()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backbone", default="resnet18")
    parser.add_argument("--batch-size", type=int, default=32, help="per process")
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=8, help="timed (off, on) pairs per trainer")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--comm-repeats", type=int, default=20)
    parser.add_argument("--output", required=True)
    args = parser.parse_args()

    torch.set_num_threads(1)
    count_python_collectives()
    hf_logging.set_verbosity_error()
    settings = Settings(args.backbone, args.batch_size, args.image_size, args.steps, args.warmup, 1, 8)
    torch.manual_seed(0)
    base = ContrastiveEncoder.from_backbone(args.backbone, pretrained=False, projection_dim=PROJECTION_DIM)
    n_params = sum(p.numel() for p in base.parameters())

    result: dict[str, Any] = {
        "batch_size": args.batch_size,
        "steps": args.steps,
        "warmup": args.warmup,
        "trainers": {},
    }
    with tempfile.TemporaryDirectory(prefix="bench_gather_") as tmp:
        for name in METHODS:
            start = time.perf_counter()
            result["trainers"][name] = time_trainer(name, base, settings, args.steps, tmp)
            if dist.get_rank() == 0:
                elapsed = time.perf_counter() - start
                print(f"[gather] {name}: {result['trainers'][name]} ({elapsed:.0f} s)", file=sys.stderr, flush=True)

    # ---- raw communication (the process group now exists: the Trainer's Accelerate state made it) ----
    b2 = 2 * args.batch_size  # two views per sample
    z = torch.randn(b2, PROJECTION_DIM, requires_grad=True)
    labels = torch.randint(0, 10, (b2,))

    def gather_forward() -> None:
        with torch.no_grad():
            distributed.gather(z)

    def gather_both() -> None:
        distributed.gather(z).backward(torch.ones(2 * b2, PROJECTION_DIM))

    grads = torch.zeros(n_params)
    one = torch.zeros(1)
    ops: list[tuple[str, str, Callable[[], None]]] = [
        ("`gather(z)` forward (row counts + all_gather)", f"({b2}, {PROJECTION_DIM}) float32", gather_forward),
        ("`gather(z)` forward + backward (+ all_reduce)", f"({b2}, {PROJECTION_DIM}) float32", gather_both),
        ("`gather(labels)`", f"({b2},) int64", lambda: distributed.gather(labels)),
        (
            "all_reduce, model-gradient size (DDP, every step)",
            f"({n_params},) float32",
            lambda: dist.all_reduce(grads),
        ),
        ("all_reduce, 1 float (latency)", "(1,) float32", lambda: dist.all_reduce(one)),
    ]
    result["comm_repeats"] = args.comm_repeats
    result["comm"] = [
        {"op": op, "tensor": tensor, "seconds": time_comm(fn, args.comm_repeats)} for op, tensor, fn in ops
    ]
    if dist.get_rank() == 0:
        Path(args.output).write_text(json.dumps(result, indent=1))
    dist.barrier()


if __name__ == "__main__":
    main()
