"""Images/s of an example script against a plain PyTorch loop on the same model (issue 28, on one GPU).

Not a test, not part of CI. Two modes::

    # the public example, unchanged, with a public TrainerCallback that stamps every step's beginning
    python benchmarks/bench_example_throughput.py example --json run.json -- \\
        examples/run_care.py --method simclr --dataset FOLDER --per_device_train_batch_size 512 --bf16 ...
    # the floor: a plain loop on pre-made views with the same encoder, batch, precision and optimizer
    python benchmarks/bench_example_throughput.py plain --json plain.json --batch_size 512 --bf16 [--small_image_stem]

``example`` runs the script in this process (``runpy``) after wrapping ``ContrastiveTrainer.__init__`` so that
every trainer it builds gets :class:`StepClock`; it reports the time per step over the steps after ``--warmup``
(steps only, logging steps included: the start-up, the image cache, the final evaluation and the pictures are
outside it) and the images/s it gives (source images per second, ``B / period``). ``plain`` times the loop the
same way: two
pre-made view tensors on the device, ``ContrastiveEncoder.from_backbone(model, pretrained=False,
projection_dim=128, small_image_stem=...)`` (run_care's defaults), plain NT-Xent (τ = 0.5, SimCLR's default
here), ``backward``, the optimizer the Trainer builds (``Trainer.get_optimizer_cls_and_kwargs``), bf16 autocast
when asked. On CUDA both modes synchronise once at each end of the timed window and nowhere else (the host runs
ahead of the device as in a real run); ``--sync_each_step`` synchronises after every step instead and reports the
median step (one step's own time, host and device not overlapping).
"""

from __future__ import annotations

import argparse
import collections
import json
import runpy
import statistics
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
import transformers
from transformers import TrainerCallback


class StepClock(TrainerCallback):
    """Times the steps of a training run with public callback events.

    By default (``sync_each_step=False``) nothing is added to the step: the clock synchronises once when step
    ``warmup + 1`` begins and once when the last step ends, and the period is the time between over the number of
    steps (logging steps included): the throughput a user's run gets, the host free to run ahead of the device as
    it is in a real run. With ``sync_each_step`` each step ends with a synchronisation (each period is one step's
    own time, host and device not overlapping: the earlier method of this benchmark).

    With ``sync_debug`` (CUDA), ``torch.cuda.set_sync_debug_mode("warn")`` is on from the training's beginning to
    its end (our own synchronisations aside), and every synchronising operation is recorded with the step it came
    in, whether inside the step (forward, backward, optimizer) or between steps (the next batch, the logging), and
    the Python frames that issued it (:attr:`syncs`)."""

    def __init__(self, warmup: int, sync_each_step: bool = False, sync_debug: bool = False) -> None:
        self.warmup = warmup
        self.sync_each_step = sync_each_step
        self.sync_debug = sync_debug and torch.cuda.is_available()
        self.begins: list[float] = []
        self.window: list[float] = []  # [start, end] of the timed steps
        self.timed_steps = 0
        self.syncs: list[dict[str, Any]] = []
        self._where = "before the first step"
        self._caught: Any = None

    def _synchronize(self) -> None:
        if torch.cuda.is_available():
            if self.sync_debug:
                torch.cuda.set_sync_debug_mode("default")
            torch.cuda.synchronize()
            if self.sync_debug:
                torch.cuda.set_sync_debug_mode("warn")

    def _record(self, message: Any, category: Any, filename: str, lineno: int, *rest: Any, **kw: Any) -> None:
        if "synchroniz" not in str(message):
            return
        frames = [f for f in traceback.extract_stack()[:-1] if not f.filename.endswith(("warnings.py", __file__))]
        stack = " <- ".join(f"{'/'.join(Path(f.filename).parts[-2:])}:{f.lineno} {f.name}" for f in frames[::-1][:5])
        self.syncs.append({"where": self._where, "stack": stack})

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.sync_debug:
            self._caught = warnings.catch_warnings()
            self._caught.__enter__()
            warnings.simplefilter("always")
            warnings.showwarning = self._record
            torch.cuda.set_sync_debug_mode("warn")

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step == self.warmup:
            self._synchronize()
            self.window = [time.perf_counter()]
        self.begins.append(time.perf_counter())
        self._where = f"in step {state.global_step + 1}"

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        logs = args.logging_steps and state.global_step % int(args.logging_steps) == 0
        self._where = f"after step {state.global_step}" + (" (a logging step)" if logs else "")
        if self.sync_each_step:
            self._synchronize()
        if state.global_step == state.max_steps and self.window:
            self._synchronize()
            self.window.append(time.perf_counter())
            self.timed_steps = state.global_step - self.warmup

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._caught is not None:
            torch.cuda.set_sync_debug_mode("default")
            self._caught.__exit__(None, None, None)
            self._caught = None

    def period(self) -> float:
        """Seconds per step: the timed window over its steps, or (``sync_each_step``) the median step period."""
        if self.sync_each_step:
            stamps = self.begins[self.warmup :]
            return statistics.median(b - a for a, b in zip(stamps, stamps[1:]))
        return (self.window[1] - self.window[0]) / self.timed_steps


def time_example(
    script: list[str], warmup: int, sync_each_step: bool = False, sync_debug: bool = False
) -> dict[str, Any]:
    from hf_contrast.training import ContrastiveTrainer

    clock = StepClock(warmup, sync_each_step, sync_debug)
    init = ContrastiveTrainer.__init__

    def timed_init(self: ContrastiveTrainer, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self.add_callback(clock)

    ContrastiveTrainer.__init__ = timed_init  # type: ignore[method-assign]
    sys.argv = list(script)
    start = time.perf_counter()
    try:
        runpy.run_path(script[0], run_name="__main__")
    finally:
        ContrastiveTrainer.__init__ = init  # type: ignore[method-assign]
    batch = int(script[script.index("--per_device_train_batch_size") + 1])
    period = clock.period()
    result = {"command": " ".join(script), "steps": len(clock.begins), "sync_each_step": sync_each_step,
              "period_ms": 1e3 * period, "images_per_s": batch / period,
              "wall_s": time.perf_counter() - start}  # fmt: skip
    gaps = [(b - a, step) for step, (a, b) in enumerate(zip(clock.begins, clock.begins[1:]), 1) if step > warmup]
    if gaps:  # where the time goes: the median step and the slowest ones (logging steps, epoch starts), host clock
        result["median_step_ms"] = 1e3 * statistics.median(g for g, _ in gaps)
        result["slowest_steps_ms"] = {str(step): round(1e3 * g, 1) for g, step in sorted(gaps, reverse=True)[:8]}
    if clock.sync_debug:
        result["syncs"] = len(clock.syncs)
        inside = [s for s in clock.syncs if s["where"].startswith("in step")]
        between = [s for s in clock.syncs if s["where"].startswith("after") and "logging" not in s["where"]]
        result["syncs_inside_steps"], result["syncs_between_non_logging_steps"] = len(inside), len(between)
        kinds = collections.Counter(
            (s["where"].split(" ")[0] + (" logging" if "logging" in s["where"] else ""), s["stack"])
            for s in clock.syncs
        )
        result["sync_stacks"] = [f"{n}x {where}: {stack}" for (where, stack), n in kinds.most_common(12)]
    return result


def nt_xent(z1: torch.Tensor, z2: torch.Tensor, temperature: float = 0.5) -> torch.Tensor:
    z = F.normalize(torch.cat([z1, z2]).float(), dim=1)
    sim = z @ z.T / temperature
    n = z1.shape[0]
    sim.fill_diagonal_(float("-inf"))
    targets = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)]).to(z.device)
    return F.cross_entropy(sim, targets)


def time_plain(flags: argparse.Namespace) -> dict[str, Any]:
    from hf_contrast.models import ContrastiveEncoder
    from hf_contrast.training import ContrastiveTrainingArguments

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    model = ContrastiveEncoder.from_backbone(
        flags.model, pretrained=False, projection_dim=128, small_image_stem=flags.small_image_stem
    ).to(device)
    with tempfile.TemporaryDirectory() as out:
        args = ContrastiveTrainingArguments(output_dir=out, learning_rate=2e-3, weight_decay=1e-4)
        optimizer_cls, optimizer_kwargs = transformers.Trainer.get_optimizer_cls_and_kwargs(args, model)
    optimizer = optimizer_cls(model.parameters(), **optimizer_kwargs)
    size = flags.image_size
    views = torch.randn(2 * flags.batch_size, 3, size, size, device=device)
    stamps = []
    sync = device.type == "cuda"
    for step in range(flags.steps):
        if step == flags.warmup and sync:
            torch.cuda.synchronize(device)
        stamps.append(time.perf_counter())
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=flags.bf16):
            z = model(pixel_values=views)["projections"]
        loss = nt_xent(*z.split(flags.batch_size))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if sync and flags.sync_each_step:
            torch.cuda.synchronize(device)
    if sync:
        torch.cuda.synchronize(device)
    end = time.perf_counter()
    if flags.sync_each_step:
        stamps = stamps[flags.warmup :]
        period = statistics.median(b - a for a, b in zip(stamps, stamps[1:]))
    else:
        period = (end - stamps[flags.warmup]) / (flags.steps - flags.warmup)
    return {"model": flags.model, "small_image_stem": flags.small_image_stem, "batch_size": flags.batch_size,
            "bf16": flags.bf16, "sync_each_step": flags.sync_each_step, "period_ms": 1e3 * period,
            "images_per_s": flags.batch_size / period}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("example", "plain"))
    parser.add_argument("--json", help="append the result (one JSON object per line) to this file")
    parser.add_argument("--warmup", type=int, default=10, help="untimed steps at the start")
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--small_image_stem", action="store_true")
    parser.add_argument("--batch_size", type=int, default=512)
    parser.add_argument("--image_size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument(
        "--sync_each_step",
        action="store_true",
        help="CUDA: synchronise at each step's end and report the median step (default: the throughput of the "
        "steps after --warmup, one synchronisation at each end of that window)",
    )
    parser.add_argument(
        "--sync_debug",
        action="store_true",
        help="example, CUDA: record every synchronising operation of the training (where and which frames)",
    )
    argv = sys.argv[1:]
    script = argv[argv.index("--") + 1 :] if "--" in argv else []
    flags = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    if flags.mode == "example" and not script:
        parser.error("example mode needs the script and its flags after `--`")
    if flags.mode == "example":
        result = time_example(script, flags.warmup, flags.sync_each_step, flags.sync_debug)
    else:
        result = time_plain(flags)
    result = {"mode": flags.mode, "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
              **result}  # fmt: skip
    print(json.dumps(result))
    if flags.json:
        with open(flags.json, "a") as f:
            f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
