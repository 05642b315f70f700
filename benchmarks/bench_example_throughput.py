"""Images/s of an example script against a plain PyTorch loop on the same model (issue 28, on one GPU).

Not a test, not part of CI. Three modes::

    # the public example, unchanged, with a public TrainerCallback that stamps every step's beginning
    python benchmarks/bench_example_throughput.py example --json run.json -- \\
        examples/run_care.py --method simclr --dataset FOLDER --per_device_train_batch_size 512 --bf16 ...
    # the floor: a plain loop on pre-made views with the same encoder, batch, precision and optimizer
    python benchmarks/bench_example_throughput.py plain --json plain.json --batch_size 512 --bf16 [--small_image_stem]
    # the device views alone: one batch's two views, launched op by op and replayed from a CUDA graph
    python benchmarks/bench_example_throughput.py views --json views.json --batch_size 512

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

Where the time goes: every example run reports ``host_phases_ms``, the median host time of each part of a step
between public callback events (forward and backward, the optimizer, the scheduler and ``zero_grad``, the logging
and the next batch); ``--trace FILE`` (example, plain) appends a ``torch.profiler`` summary of steps
``warmup + 10`` to ``warmup + 15`` (the device's kernels and their time per step, the top operations);
``--profile FILE`` (example) writes the run's Python functions by cumulative time (``cProfile``);
``--host_breakdown`` (example) reports ``host_breakdown_ms``, the median host milliseconds per step inside the step's
main functions (views and their parameter draws, encoder, loss, backward, clipping, the non-finite check, the
callbacks, the next batch; wrapped on their classes for the run, no synchronisation), which the plain loop reports
for its own five parts. ``views`` mode also times one batch's parameter draws (at torch's thread count and at one
thread) and gradient norms of order 2 and ∞ over the model's parameters (host time to issue them).
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import functools
import json
import pstats
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

    def __init__(
        self, warmup: int, sync_each_step: bool = False, sync_debug: bool = False, trace: str | None = None
    ) -> None:
        self.warmup = warmup
        self.trace = StepTrace(trace, warmup) if trace else None
        self.phases: list[dict[str, float]] = []
        self.sync_each_step = sync_each_step
        self.sync_debug = sync_debug and torch.cuda.is_available()
        self.begins: list[float] = []
        self.window: list[float] = []  # [start, end] of the timed steps
        self.timed_steps = 0
        self.syncs: list[dict[str, Any]] = []
        self._where = "before the first step"
        self._caught: Any = None
        self.timers: HostTimers | None = None  # --host_breakdown

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
        self.phases.append({"begin": self.begins[-1]})
        if self.timers is not None:
            self.timers.next_step()
        if self.trace is not None:
            self.trace.at_step(state.global_step, "example")
        self._where = f"in step {state.global_step + 1}"

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.phases[-1]["pre_optimizer"] = time.perf_counter()

    def on_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.phases[-1]["optimizer"] = time.perf_counter()

    def phase_medians(self) -> dict[str, float]:
        """Median host milliseconds of each part of a step (host clock, no synchronisation: where the host spends
        its time when it, not the device, bounds the step): the step's beginning to this clock's pre-optimizer event
        (views, forward, backward, gradient clipping, and the other callbacks' pre-optimizer work: this clock is
        added last), to the optimizer event (the optimizer step), to the step's end (scheduler, ``zero_grad``), to
        the next step (logging, the next batch)."""
        marks = ("begin", "pre_optimizer", "optimizer", "end")
        parts: dict[str, list[float]] = collections.defaultdict(list)
        for p, following in zip(self.phases[self.warmup : -1], self.phases[self.warmup + 1 :]):
            if not all(m in p for m in marks):  # e.g. a step whose optimizer step did not run: no phases
                continue
            for a, b in zip(marks, marks[1:]):
                parts[f"{a}->{b}"].append(p[b] - p[a])
            parts["end->next step"].append(following["begin"] - p["end"])
        return {name: round(1e3 * statistics.median(values), 2) for name, values in parts.items()}

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.phases[-1]["end"] = time.perf_counter()
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


class StepTrace:
    """``torch.profiler`` over steps ``warmup + 10`` to ``warmup + 15``: the device's kernel time per step against the
    step's period says whether the device or the host bounds the step, and the tables say on what (appended to
    ``path``)."""

    STEPS = 5

    def __init__(self, path: str, warmup: int) -> None:
        self.path, self.start = path, warmup + 10
        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self.profiler = torch.profiler.profile(activities=activities)

    def at_step(self, step: int, title: str) -> None:
        """Call at the beginning of every step (``step`` counted from 0)."""
        if step == self.start:
            self.profiler.start()
        elif step == self.start + self.STEPS:
            self.profiler.stop()
            self.write(title)

    def write(self, title: str) -> None:
        events = self.profiler.key_averages()
        device = torch.cuda.is_available()
        kernels = [e for e in self.profiler.events() if str(getattr(e, "device_type", "")).endswith("CUDA")]
        busy = sum(e.device_time_total for e in kernels) / 1e3 / self.STEPS  # microseconds -> ms
        with open(self.path, "a") as f:
            f.write(f"== {title}: {self.STEPS} steps; device kernels {len(kernels) / self.STEPS:.0f} per step, "
                    f"busy {busy:.2f} ms per step\n")  # fmt: skip
            for key in (["self_device_time_total"] if device else []) + ["self_cpu_time_total", "cpu_time_total"]:
                f.write(events.table(sort_by=key, row_limit=22, max_name_column_width=60) + "\n")


class HostTimers:
    """``--host_breakdown``: the host's milliseconds per step in named functions (inclusive; nested ones overlap),
    no synchronisation. Each is wrapped on its class for the run (this benchmark's process only) and its time added
    to the step it ran in; :meth:`medians` gives the median over the timed steps."""

    def __init__(self) -> None:
        self.steps: list[dict[str, float]] = []
        self.current: dict[str, float] = collections.defaultdict(float)
        self._saved: list[tuple[Any, str, Any]] = []

    def wrap(self, owner: Any, attribute: str, name: str) -> None:
        original = owner.__dict__[attribute]
        current = self

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                current.current[name] += time.perf_counter() - start

        self._saved.append((owner, attribute, original))
        setattr(owner, attribute, timed)

    def next_step(self) -> None:
        self.steps.append(dict(self.current))
        self.current = collections.defaultdict(float)

    def restore(self) -> None:
        for owner, attribute, original in reversed(self._saved):
            setattr(owner, attribute, original)
        self._saved.clear()

    def medians(self, warmup: int) -> dict[str, float]:
        steps = self.steps[warmup + 1 :]
        names = sorted({name for step in steps for name in step})
        return {name: round(1e3 * statistics.median(step.get(name, 0.0) for step in steps), 3) for name in names}


def example_timers() -> HostTimers:
    """The functions of a training step whose host time ``--host_breakdown`` reports for an example run."""
    import accelerate
    from transformers.trainer_callback import CallbackHandler

    from hf_contrast.losses.info_nce import InfoNCELoss
    from hf_contrast.models import ContrastiveEncoder
    from hf_contrast.training import ContrastiveTrainer
    from hf_contrast.training.callbacks import LossTermTracker, NonFinitePolicy
    from hf_contrast.views import BatchedSimCLRViews
    from hf_contrast.views.cuda_graphs import CUDAGraphs

    timers = HostTimers()
    for owner, attribute, name in (
        (transformers.Trainer, "get_batch_samples", "next batch"),
        (transformers.Trainer, "training_step", "training_step"),
        (ContrastiveTrainer, "compute_loss", "compute_loss"),
        (BatchedSimCLRViews, "many", "views"),
        (BatchedSimCLRViews, "sample", "views: parameters drawn"),
        (CUDAGraphs, "__call__", "views: graph replay"),
        (ContrastiveEncoder, "forward", "encoder forward"),
        (InfoNCELoss, "forward", "loss forward"),
        (LossTermTracker, "record", "loss terms recorded"),
        (accelerate.Accelerator, "backward", "backward"),
        (accelerate.Accelerator, "clip_grad_norm_", "gradient clipping"),
        (NonFinitePolicy, "on_pre_optimizer_step", "non-finite check"),
        (CallbackHandler, "call_event", "callback events"),
        (torch.nn.Module, "zero_grad", "zero_grad"),
    ):
        timers.wrap(owner, attribute, name)
    return timers


def time_example(
    script: list[str],
    warmup: int,
    sync_each_step: bool = False,
    sync_debug: bool = False,
    profile: str | None = None,
    trace: str | None = None,
    host_breakdown: bool = False,
) -> dict[str, Any]:
    from hf_contrast.training import ContrastiveTrainer

    clock = StepClock(warmup, sync_each_step, sync_debug, trace)
    timers = clock.timers = example_timers() if host_breakdown else None
    init = ContrastiveTrainer.__init__

    def timed_init(self: ContrastiveTrainer, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self.add_callback(clock)

    ContrastiveTrainer.__init__ = timed_init  # type: ignore[method-assign]
    sys.argv = list(script)
    profiler = cProfile.Profile() if profile else None
    start = time.perf_counter()
    try:
        if profiler is not None:
            profiler.enable()
        runpy.run_path(script[0], run_name="__main__")
    finally:
        if profiler is not None:
            profiler.disable()
        ContrastiveTrainer.__init__ = init  # type: ignore[method-assign]
        if timers is not None:
            timers.restore()
    if profiler is not None and profile:  # where the host's time goes: the run's functions by cumulative time
        with open(profile, "w") as f:
            pstats.Stats(profiler, stream=f).sort_stats("cumulative").print_stats(
                r"training_step|compute_loss|"
                r"_run_epoch|backward|forward|many|_apply|_pass|_draw|packed_on|__call__|step|clip|zero_grad|"
                r"on_|train\(|log\(|get_batch|__next__|_gradients|record|wrapper",
                80,
            )
            pstats.Stats(profiler, stream=f).sort_stats("tottime").print_stats(40)  # and by their own time
    batch = int(script[script.index("--per_device_train_batch_size") + 1])
    period = clock.period()
    result = {"command": " ".join(script), "steps": len(clock.begins), "sync_each_step": sync_each_step,
              "period_ms": 1e3 * period, "images_per_s": batch / period,
              "wall_s": time.perf_counter() - start}  # fmt: skip
    gaps = [(b - a, step) for step, (a, b) in enumerate(zip(clock.begins, clock.begins[1:]), 1) if step > warmup]
    result["host_phases_ms"] = clock.phase_medians()
    if timers is not None:
        result["host_breakdown_ms"] = timers.medians(warmup)
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
    parts: list[dict[str, float]] = []
    sync = device.type == "cuda"
    trace = StepTrace(flags.trace, flags.warmup) if flags.trace else None
    for step in range(flags.steps):
        if trace is not None:
            trace.at_step(step, f"plain loop, small_image_stem={flags.small_image_stem}")
        if step == flags.warmup and sync:
            torch.cuda.synchronize(device)
        stamps.append(time.perf_counter())
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=flags.bf16):
            z = model(pixel_values=views)["projections"]
        marks = [time.perf_counter()]
        loss = nt_xent(*z.split(flags.batch_size))
        marks.append(time.perf_counter())
        loss.backward()
        marks.append(time.perf_counter())
        optimizer.step()
        marks.append(time.perf_counter())
        optimizer.zero_grad()
        marks.append(time.perf_counter())
        parts.append({name: b - a for name, a, b in zip(
            ("encoder forward", "loss forward", "backward", "optimizer step", "zero_grad"), [stamps[-1], *marks], marks
        )})  # fmt: skip
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
    breakdown = {name: round(1e3 * statistics.median(p[name] for p in parts[flags.warmup :]), 3) for name in parts[0]}
    return {"model": flags.model, "small_image_stem": flags.small_image_stem, "batch_size": flags.batch_size,
            "bf16": flags.bf16, "sync_each_step": flags.sync_each_step, "period_ms": 1e3 * period,
            "images_per_s": flags.batch_size / period, "host_breakdown_ms": breakdown}  # fmt: skip


def time_views(flags: argparse.Namespace) -> dict[str, Any]:
    """One batch's two device views (``BatchedSimCLRViews.many``), launched op by op and replayed from a CUDA
    graph: the host's time to issue a call (no synchronisation) and the period over ``--steps`` calls (one
    synchronisation at each end)."""
    from hf_contrast.views import BatchedSimCLRViews

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    images = torch.randint(0, 256, (flags.batch_size, 3, flags.image_size, flags.image_size), dtype=torch.uint8,
                           device=device)  # fmt: skip
    result: dict[str, Any] = {"batch_size": flags.batch_size, "image_size": flags.image_size}
    for graphs in (False, True):
        views = BatchedSimCLRViews(flags.image_size, (0.5,) * 3, (0.25,) * 3, seed=0, cuda_graphs=graphs)
        host = []
        for step in range(flags.steps):
            if step == flags.warmup:
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                start = time.perf_counter()
            begin = time.perf_counter()
            views.many(images, views.generator(step), [None, None])
            host.append(time.perf_counter() - begin)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        name = "graph" if graphs else "eager"
        result[f"{name}_period_ms"] = 1e3 * (time.perf_counter() - start) / (flags.steps - flags.warmup)
        result[f"{name}_host_ms"] = 1e3 * statistics.median(host[flags.warmup :])
    # the host's side of a step's smaller parts: one batch's two parameter draws (CPU tensors, at torch's thread
    # count and at one thread), and a norm over the gradients of the model the example trains (each kernel's launch)
    threads = torch.get_num_threads()
    for count in sorted({threads, 1}):
        torch.set_num_threads(count)
        result[f"parameters_drawn_ms_{count}_threads"] = host_ms(
            lambda: [views.sample(flags.batch_size, (flags.image_size,) * 2, views.generator(0)) for _ in range(2)]
        )
    torch.set_num_threads(threads)
    from hf_contrast.models import ContrastiveEncoder

    model = ContrastiveEncoder.from_backbone(flags.model, pretrained=False, projection_dim=128).to(device)
    grads = [torch.ones_like(p) for p in model.parameters()]
    for order in (2.0, float("inf")):
        norm = functools.partial(torch.nn.utils.get_total_norm, grads, order, foreach=True)
        result[f"gradient_norm_{order}_ms"] = host_ms(norm)
    return result


def host_ms(fn: Any, calls: int = 50) -> float:
    """Median host milliseconds of ``fn()`` (no synchronisation: the time to issue it)."""
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return round(1e3 * statistics.median(times[5:]), 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("example", "plain", "views"))
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
    parser.add_argument("--trace", help="example, plain: append a torch.profiler summary of 5 steps to this file")
    parser.add_argument("--profile", help="example: write the run's functions by cumulative time (cProfile) here")
    parser.add_argument(
        "--host_breakdown",
        action="store_true",
        help="example: the median host milliseconds per step in the step's main functions (the plain loop always "
        "reports its five parts)",
    )
    argv = sys.argv[1:]
    script = argv[argv.index("--") + 1 :] if "--" in argv else []
    flags = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    if flags.mode == "example" and not script:
        parser.error("example mode needs the script and its flags after `--`")
    if flags.mode == "example":
        result = time_example(
            script, flags.warmup, flags.sync_each_step, flags.sync_debug, flags.profile, flags.trace,
            flags.host_breakdown,
        )  # fmt: skip
    elif flags.mode == "views":
        result = time_views(flags)
    else:
        result = time_plain(flags)
    result = {"mode": flags.mode, "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
              **result, **({"traced": True} if flags.trace else {})}  # fmt: skip
    print(json.dumps(result))
    if flags.json:
        with open(flags.json, "a") as f:
            f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
