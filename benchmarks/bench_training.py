"""Benchmark the contrastive trainers against a hand-written PyTorch loop doing the same work.

Launch (CPU; not a test, not part of CI)::

    python benchmarks/bench_training.py                  # resnet18, 32x32, B = 64: ~7-10 min on 2 cores
    python benchmarks/bench_training.py --quick          # test_resnet, B = 32: ~1 min
    python benchmarks/bench_training.py --steps 12 --rounds 3 --output BENCHMARKS_TRAINING.md
    python benchmarks/bench_training.py --no-distributed --methods SimCLR CARE

What is compared (issue 4, "Benchmark"):

1. **Trainer overhead.** For every method trainer, full ``trainer.train()`` steps against a minimal
   hand loop: ``next(batch)``, the *same* objective instance (built from the registry by the
   trainer: one forward pass over the concatenated views and the loss), ``backward``,
   ``clip_grad_norm_`` (the Trainer's default ``max_grad_norm=1.0``), fused
   ``AdamW`` (the Trainer's default ``adamw_torch_fused``; checked against the optimizer the
   trainer built), the same linear LR schedule, ``zero_grad``. Both start from copies of the same
   model and read the same pre-computed view tensors (a map-style dataset of ``pixel_values_1``,
   ``pixel_values_2``, CARE's ``pixel_values_eq`` and ``label``; ``ImageViewCollator`` stacking
   them; a ``DataLoader`` with ``num_workers=0``, batch ``B``, ``drop_last``; SimO's class-major
   ``AFCLBatchSampler`` for both), so per-sample augmentation is out of the comparison but
   batching is in. The trainer runs with ``report_to="none"``, no evaluation, no saving,
   ``logging_steps`` beyond the run, ``disable_tqdm``. The two are **interleaved step by step**: a
   ``TrainerCallback`` runs one hand-loop step at each ``on_step_end`` of the trainer, and the
   trainer's step is timed from the end of that hand step to the next ``on_step_end``, so it holds
   everything the Trainer's loop does per step (fetching and collating the batch,
   ``_prepare_inputs``, ``compute_loss``, backward, clipping, optimizer, scheduler, callbacks,
   the log/save/eval checks). Load from other processes then hits both sides alike. The overhead
   is the median over steps of ``trainer step / hand step`` (warm-up steps of each run excluded),
   pooled over ``--rounds`` fresh runs (method order rotated every round, after one untimed
   warm-up run of each method). Control: in the SimCLR runs a second, identical hand loop runs
   too; its ratio to the first is the noise floor of the measurement.
2. **CARE vs SimCLR.** CARE forwards 4 views per sample (2 per-sample + 2 chunk-shared) where SimCLR
   forwards 2, and builds its two equivariance views on the training device inside the step
   (``ChunkedAugmentation``, ``n_splits = 8``; the hand loop calls the same object). Reported as
   shipped and with fixed pre-computed equivariance views (the pure 4-vs-2 views cost). In every
   CARE run a SimCLR hand loop runs interleaved too, so the ratio comes from paired steps:
   ``CARE trainer / SimCLR trainer = (CARE trainer / SimCLR hand) / (SimCLR trainer / SimCLR hand)``.
3. **Cross-process gather.** ``benchmarks/_gather_worker.py`` under ``torchrun --nproc_per_node 2``
   (gloo, one thread per process, a free port): the two processes share the 2 cores, so this
   reports the *communication* cost, not scaling: the step time with ``gather_distributed`` on vs
   off (toggled every other step of one run, paired adjacent steps), the number of Python-side
   collectives per step, and the raw cost of ``hf_contrast.distributed.gather`` (forward
   all-gather + backward all-reduce) next to the DDP gradient all-reduce every step pays anyway.

Threads: ``--threads 1`` by default. On this shared 2-core machine two intra-op threads made steps
3-6x slower and far noisier (the threads wait for each other while other jobs hold the cores).

All times are wall-clock ``time.perf_counter`` medians. The load average is printed before and
after: on a shared machine absolute numbers move; the interleaved ratios much less.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset
from transformers import PrinterCallback, TrainerCallback, get_linear_schedule_with_warmup
from transformers.utils import logging as hf_logging

from hf_contrast.models import ContrastiveEncoder
from hf_contrast.objectives import Objective, build_objective
from hf_contrast.training import (
    AlignUniformTrainer,
    CARETrainer,
    ContrastiveTrainer,
    ContrastiveTrainingArguments,
    OCLTrainer,
    SimCLRTrainer,
    SimOTrainer,
    SupConTrainer,
)
from hf_contrast.views import ImageViewCollator, ViewBuilder, pop_view_batch_index

HERE = Path(__file__).resolve().parent
PROJECTION_DIM = 128
N_SPLITS = 8  # CARE: chunks sharing one augmentation pair
N_CLASSES = 20  # labels of the supervised methods; SimO needs C < N_CLASSES / 2
SIMO_CLASSES = 8  # SimO / AFCL: C classes x B / C samples per batch
LEARNING_RATE = 1e-4
MAX_GRAD_NORM = 1.0  # the Trainer's default, repeated in the hand loop
OVERHEAD_TARGET = 1.10
CARE_TARGET = 2.1
CONTROL = "SimCLR"  # the method of the A/A control (two identical hand loops)


# --------------------------------------------------------------------------------------------
# Data: pre-computed views, the same for the trainer and the hand loop
# --------------------------------------------------------------------------------------------
class PrecomputedViews(Dataset):
    """Rows of pre-computed view tensors (``pixel_values_*``) and an int ``label``."""

    def __init__(self, columns: Mapping[str, Tensor], labels: list[int]) -> None:
        self.columns = dict(columns)
        self.labels = labels

    @property
    def column_names(self) -> list[str]:
        return [*self.columns, "label"]

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int | str) -> Any:
        if isinstance(index, str):  # a column, as `datasets.Dataset` (the SimO sampler reads labels)
            return self.labels if index == "label" else self.columns[index]
        row: dict[str, Any] = {key: value[index] for key, value in self.columns.items()}
        row["label"] = self.labels[index]
        return row


def make_dataset(n: int, image_size: int, eq: str | None, seed: int = 0) -> PrecomputedViews:
    """``n`` rows of two normalised views, labels ``0..N_CLASSES-1`` (shuffled) and optionally
    CARE's equivariance input: ``eq="raw"`` uint8 images (on-device chunked augmentation),
    ``eq="fixed"`` normalised float images (fixed views, see :func:`fixed_equivariance_views`)."""
    g = torch.Generator().manual_seed(seed)
    shape = (n, 3, image_size, image_size)
    columns = {"pixel_values_1": torch.randn(shape, generator=g), "pixel_values_2": torch.randn(shape, generator=g)}
    if eq == "raw":
        columns["pixel_values_eq"] = torch.randint(0, 256, shape, generator=g, dtype=torch.uint8)
    elif eq == "fixed":
        columns["pixel_values_eq"] = torch.randn(shape, generator=g)
    labels = (torch.randperm(n, generator=g) % N_CLASSES).tolist()
    return PrecomputedViews(columns, labels)


def fixed_equivariance_views(images: Tensor) -> tuple[Tensor, Tensor]:
    """Pre-computed 'equivariance views': the (already normalised) images and their mirror."""
    return images, images.flip(-1)


COLLATOR = ImageViewCollator(transform=None, n_views=0, label_column="label")  # stacks pixel_values_* + labels


# --------------------------------------------------------------------------------------------
# Methods: a named trainer and a registered objective (the registry resolves the name)
# --------------------------------------------------------------------------------------------
@dataclass
class Method:
    """A named trainer class and the registered objective it trains, with its hyperparameters.

    The hand loop calls the *same* objective instance the trainer built (``objective(model, batch,
    views)``), so both do the same view→loss work and nothing here re-implements a method.
    """

    name: str
    trainer_cls: type[ContrastiveTrainer]
    objective: str  # a name of hf_contrast.objectives.available_objectives()
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    views: int = 2  # forward passes of B images per step (for the table)
    eq: str | None = None  # CARE's equivariance input, see make_dataset

    def build(self) -> Objective:
        """A fresh objective from the registry."""
        return build_objective(self.objective, **self.hyperparameters)


def build_methods(batch_size: int) -> dict[str, Method]:
    care = {"temperature": 0.5, "care_weight": 0.01, "n_splits": N_SPLITS}
    simo = {"classes_per_batch": SIMO_CLASSES, "samples_per_class": batch_size // SIMO_CLASSES}
    methods = [
        Method("SimCLR", SimCLRTrainer, "simclr", {"temperature": 0.5}),
        Method("CARE", CARETrainer, "care", care, views=4, eq="raw"),
        Method(
            "CARE (fixed eq. views)",
            CARETrainer,
            "care",
            {**care, "equivariance_augmentation": fixed_equivariance_views},
            views=4,
            eq="fixed",
        ),  # fmt: skip
        Method("SupCon", SupConTrainer, "supcon", {"temperature": 0.1}),
        Method("OCL", OCLTrainer, "ocl", {"temperature": 0.1}),
        Method("SimO", SimOTrainer, "simo", {**simo, "olean": 0.01}, views=1),
        Method("AlignUniform", AlignUniformTrainer, "align_uniform"),
    ]
    return {m.name: m for m in methods}


# --------------------------------------------------------------------------------------------
# The hand loop and the interleaving callback
# --------------------------------------------------------------------------------------------
class HandLoop:
    """The minimal PyTorch loop: batch, the objective's loss, backward, clip, AdamW, LR schedule."""

    def __init__(
        self,
        model: nn.Module,
        objective: Objective,
        views: ViewBuilder,
        loader: DataLoader,
        max_steps: int,
        fused: bool,
    ) -> None:
        self.model, self.objective, self.views, self.loader = model.train(), objective, views, loader
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=0.0, fused=fused)
        self.scheduler = get_linear_schedule_with_warmup(self.optimizer, 0, max_steps)
        self._batches: Iterator[dict[str, Tensor]] = iter(loader)

    def _next(self) -> dict[str, Tensor]:
        try:
            return next(self._batches)
        except StopIteration:
            self._batches = iter(self.loader)
            return next(self._batches)

    def step(self) -> None:
        batch = self._next()
        pop_view_batch_index(batch)
        loss = self.objective(self.model, batch, self.views)["loss"]
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), MAX_GRAD_NORM)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)


class Interleave(TrainerCallback):
    """At every trainer ``on_step_end``, runs one step of each hand loop in order; times all of them.

    ``times["trainer"][k]`` runs from the end of the last hand step after trainer step ``k - 1``
    to the end of trainer step ``k``; ``times[name][k]`` is hand loop ``name``'s step ``k``.
    """

    def __init__(self, hands: Mapping[str, HandLoop]) -> None:
        self.hands = dict(hands)
        self.times: dict[str, list[float]] = {"trainer": [], **{name: [] for name in self.hands}}
        self._resumed: float | None = None

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        now = time.perf_counter()
        if self._resumed is not None:
            self.times["trainer"].append(now - self._resumed)
            for name, hand in self.hands.items():
                start = time.perf_counter()
                hand.step()
                self.times[name].append(time.perf_counter() - start)
        self._resumed = time.perf_counter()


# --------------------------------------------------------------------------------------------
# One interleaved run
# --------------------------------------------------------------------------------------------
@dataclass
class Settings:
    """Model and timing sizes of one benchmark run (``pool_batches``: dataset rows = pool_batches × B)."""

    backbone: str
    batch_size: int
    image_size: int
    steps: int
    warmup: int
    rounds: int
    pool_batches: int


def training_args(
    output_dir: str, settings: Settings, max_steps: int, **overrides: Any
) -> ContrastiveTrainingArguments:
    """Quiet CPU arguments: no eval, no saving, no reporting, no progress bar, logging past the run."""
    options: dict[str, Any] = {
        "output_dir": output_dir,
        "max_steps": max_steps,
        "per_device_train_batch_size": settings.batch_size,
        "learning_rate": LEARNING_RATE,
        "max_grad_norm": MAX_GRAD_NORM,
        "use_cpu": True,
        "report_to": "none",
        "save_strategy": "no",
        "eval_strategy": "no",
        "logging_steps": 10 * max_steps,
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
        "dataloader_drop_last": True,
        "image_size": settings.image_size,
        "seed": 0,
    }
    options.update(overrides)
    return ContrastiveTrainingArguments(**options)


def run_pair(
    method: Method, base_model: nn.Module, dataset: PrecomputedViews, settings: Settings, tmp: str
) -> dict[str, list[float]]:
    """One fresh trainer run interleaved with its hand loop (``hand``; for the :data:`CONTROL` method also an
    identical ``twin``; for CARE a SimCLR hand loop ``simclr`` on the same batches); step times after warm-up."""
    # +1: the first step has no predecessor to time from.
    max_steps = settings.warmup + settings.steps + 1
    args = training_args(tmp, settings, max_steps)
    trainer = method.trainer_cls(
        model=copy.deepcopy(base_model),
        args=args,
        train_dataset=dataset,
        data_collator=COLLATOR,
        objective=method.build(),
    )
    objective, views = trainer.objective, trainer.views  # set up by the trainer; the hand loops share them

    def loader_for() -> DataLoader:  # the objective's batch sampler (SimO: class-major batches) or plain batches
        sampler = objective.train_batch_sampler(dataset, views)
        if sampler is not None:
            return DataLoader(dataset, batch_sampler=sampler, collate_fn=COLLATOR, num_workers=0)
        return DataLoader(dataset, batch_size=settings.batch_size, shuffle=True, drop_last=True, collate_fn=COLLATOR)

    fused = "fused" in getattr(args.optim, "value", str(args.optim))  # the Trainer's default: adamw_torch_fused
    names = ("hand", "twin") if method.name == CONTROL else ("hand",)
    hands = {
        name: HandLoop(copy.deepcopy(base_model), objective, views, loader_for(), max_steps, fused) for name in names
    }
    if method.eq is not None:  # CARE: a SimCLR hand loop on the same batches, for the CARE / SimCLR ratio
        simclr = build_methods(settings.batch_size)["SimCLR"].build()
        simclr.setup(views, dataset)
        hands["simclr"] = HandLoop(copy.deepcopy(base_model), simclr, views, loader_for(), max_steps, fused)
    callback = Interleave(hands)
    trainer.add_callback(callback)
    trainer.remove_callback(PrinterCallback)  # no log lines on stdout (the report goes there)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    if len(callback.times["trainer"]) != max_steps - 1:
        raise RuntimeError(f"timed {len(callback.times['trainer'])} trainer steps, expected {max_steps - 1}")
    built = getattr(trainer.optimizer, "optimizer", trainer.optimizer)
    if type(built) is not torch.optim.AdamW or bool(built.defaults.get("fused")) != fused:
        raise RuntimeError(f"the hand loop's optimizer (AdamW, fused={fused}) differs from the trainer's: {built!r}")
    return {name: t[settings.warmup :] for name, t in callback.times.items()}


# --------------------------------------------------------------------------------------------
# Distributed part
# --------------------------------------------------------------------------------------------
def free_port() -> int:
    """A free TCP port on localhost (bind to port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_distributed(settings: Settings, steps: int, timeout: float) -> dict[str, Any]:
    """Run ``_gather_worker.py`` on 2 processes (B/2 each, one thread each); its JSON result."""
    out = Path(tempfile.mkdtemp(prefix="bench_gather_")) / "result.json"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(free_port()),
        str(HERE / "_gather_worker.py"),
        "--backbone",
        settings.backbone,
        "--batch-size",
        str(settings.batch_size // 2),
        "--image-size",
        str(settings.image_size),
        "--steps",
        str(steps),
        "--warmup",
        str(settings.warmup),
        "--output",
        str(out),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0 or not out.exists():
        raise RuntimeError(f"2-process run failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return json.loads(out.read_text())


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------
def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.0f}"


def _status(ok: bool) -> str:
    return "met" if ok else "**missed**"


def paired(a: list[float], b: list[float]) -> float:
    """Median of the step-by-step ratios ``a[k] / b[k]``."""
    return statistics.median(x / y for x, y in zip(a, b, strict=True))


def _delta(a: list[float], b: list[float]) -> str:
    """Median of the step-by-step differences ``a[k] - b[k]``, in ms."""
    return f"{statistics.median(x - y for x, y in zip(a, b, strict=True)) * 1e3:+.1f}"


def _load() -> str:
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> str:
    """Run the benchmark, print the Markdown report (and write it to ``--output``); return it."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="test_resnet, B = 32, fewer steps (~2 min)")
    parser.add_argument("--backbone", default=None, help="timm backbone (default resnet18; --quick: test_resnet)")
    parser.add_argument("--batch-size", type=int, default=None, help="B (default 64; --quick: 32)")
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=None, help="timed steps per run (default 10; --quick: 6)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps at the start of every run")
    parser.add_argument("--rounds", type=int, default=None, help="fresh runs per method (default 3)")
    parser.add_argument("--methods", nargs="*", default=None, help="subset of methods to run")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads (default 1: steadier and faster on a loaded 2-core machine)",
    )
    parser.add_argument("--no-distributed", action="store_true", help="skip the 2-process gather part")
    parser.add_argument(
        "--dist-steps", type=int, default=None, help="timed (off, on) step pairs per trainer (default 12)"
    )
    parser.add_argument("--output", default=None, help="also write the Markdown report to this file")
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    hf_logging.set_verbosity_error()
    settings = Settings(
        backbone=args.backbone or ("test_resnet" if args.quick else "resnet18"),
        batch_size=args.batch_size or (32 if args.quick else 64),
        image_size=args.image_size,
        steps=args.steps or (6 if args.quick else 10),
        warmup=args.warmup,
        rounds=args.rounds or 3,
        pool_batches=8,
    )
    if settings.batch_size % N_SPLITS or settings.batch_size % SIMO_CLASSES or settings.batch_size % 2:
        parser.error(f"--batch-size must be a multiple of {N_SPLITS}, {SIMO_CLASSES} and 2")
    dist_steps = args.dist_steps or (6 if args.quick else 12)
    methods = build_methods(settings.batch_size)
    names = args.methods or list(methods)
    unknown = [n for n in names if n not in methods]
    if unknown:
        parser.error(f"unknown methods {unknown}; choose from {list(methods)}")

    load_before = _load()
    t_start = time.perf_counter()
    torch.manual_seed(0)
    base_model = ContrastiveEncoder.from_backbone(settings.backbone, pretrained=False, projection_dim=PROJECTION_DIM)
    n_params = sum(p.numel() for p in base_model.parameters())
    n_rows = settings.pool_batches * settings.batch_size
    datasets = {eq: make_dataset(n_rows, settings.image_size, eq) for eq in {methods[n].eq for n in names}}

    times: dict[str, dict[str, list[float]]] = {n: {} for n in names}
    with tempfile.TemporaryDirectory(prefix="bench_training_") as tmp:
        # Untimed: the first steps at each input shape in the process are slow (oneDNN primitive
        # creation, allocator growth); without this the first method of round 1 pays for it.
        print("warm-up run of every method ...", file=sys.stderr, flush=True)
        short = dataclasses.replace(settings, steps=1, warmup=1)
        for name in names:
            run_pair(methods[name], base_model, datasets[methods[name].eq], short, tmp)
        for r in range(settings.rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:  # rotate the order every round
                m = methods[name]
                start = time.perf_counter()
                run = run_pair(m, base_model, datasets[m.eq], settings, tmp)
                for key, values in run.items():
                    times[name].setdefault(key, []).extend(values)
                print(
                    f"round {r + 1}/{settings.rounds} {name:<24} trainer {_ms(statistics.median(run['trainer']))} ms  "
                    f"hand {_ms(statistics.median(run['hand']))} ms  "
                    f"({time.perf_counter() - start:.0f} s, load {_load()})",
                    file=sys.stderr,
                    flush=True,
                )

    dist: dict[str, Any] | None = None
    dist_error = None
    if not args.no_distributed:
        print("2-process gather run ...", file=sys.stderr, flush=True)
        try:
            dist = run_distributed(settings, dist_steps, timeout=900)
        except (RuntimeError, subprocess.TimeoutExpired) as err:
            dist_error = str(err)
            print(dist_error, file=sys.stderr)
    total = time.perf_counter() - t_start

    # ---- tables --------------------------------------------------------------------------------
    b = settings.batch_size
    lines = [
        f"Training benchmark: `{settings.backbone}` ({n_params / 1e6:.1f} M parameters incl. projection head "
        f"→ {PROJECTION_DIM}), {settings.image_size}×{settings.image_size} images, B = {b}, CPU, torch "
        f"{torch.__version__}, {torch.get_num_threads()} threads on {os.cpu_count()} cores. "
        f"{settings.rounds} rounds × {settings.steps} timed steps per method (after {settings.warmup} warm-up "
        f"steps per run); medians. Load average (1/5/15 min) before: {load_before}, after: {_load()}; "
        f"wall time {total / 60:.1f} min."
        + (
            " **--quick is a smoke test**: on the tiny model, fixed per-step costs (CARE's on-device augmentation, "
            "the Trainer's ~1-2 ms of bookkeeping) dominate; judge the targets on the default run."
            if args.quick
            else ""
        ),
        "",
        "### Trainer vs hand-written loop (same model, objective, batches, optimizer; interleaved step by step)",
        "",
        "| trainer | views × B | hand loop ms/step | trainer ms/step | hand steps/s | trainer steps/s "
        f"| Δ ms/step (paired) | overhead (median of paired ratios) | target ≤ {OVERHEAD_TARGET:.2f}× | status |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for name in names:
        m, t = methods[name], times[name]
        th, tt = statistics.median(t["hand"]), statistics.median(t["trainer"])
        ratio = paired(t["trainer"], t["hand"])
        lines.append(
            f"| {name} | {m.views} × {b} | {_ms(th)} | {_ms(tt)} | {1 / th:.2f} | {1 / tt:.2f} "
            f"| {_delta(t['trainer'], t['hand'])} | {ratio:.3f}× "
            f"| ≤ {OVERHEAD_TARGET:.2f}× | {_status(ratio <= OVERHEAD_TARGET)} |"
        )
    if CONTROL in names:
        t = times[CONTROL]
        th, tt = statistics.median(t["hand"]), statistics.median(t["twin"])
        lines.append(
            f"| *control: a 2nd identical {CONTROL} hand loop vs the 1st* | 2 × {b} | {_ms(th)} | {_ms(tt)} | "
            f"{1 / th:.2f} | {1 / tt:.2f} | {_delta(t['twin'], t['hand'])} | {paired(t['twin'], t['hand']):.3f}× | "
            "| (noise floor) |"
        )

    cares = [c for c in names if methods[c].eq is not None]
    if cares and CONTROL in names:
        simclr_overhead = paired(times[CONTROL]["trainer"], times[CONTROL]["hand"])
        lines += [
            "",
            "### CARE vs SimCLR step time (4 views vs 2, same model and batches)",
            "",
            "In every CARE run a SimCLR hand loop runs interleaved on the same batches, so CARE's steps are "
            "paired with SimCLR steps taken seconds apart. CARE trainer / SimCLR trainer = "
            "(CARE trainer / SimCLR hand loop, paired) ÷ (SimCLR trainer / SimCLR hand loop, paired, "
            f"= {simclr_overhead:.3f}).",
            "",
            "| CARE variant | CARE hand / SimCLR hand | CARE trainer / SimCLR hand | "
            f"**CARE trainer / SimCLR trainer** | target ≤ {CARE_TARGET}× | status | "
            "unpaired: CARE trainer ms / SimCLR trainer ms |",
            "|---|---:|---:|---:|---|---|---|",
        ]
        for care in cares:
            t = times[care]
            hand_ratio = paired(t["hand"], t["simclr"])
            trainer_vs_hand = paired(t["trainer"], t["simclr"])
            ratio = trainer_vs_hand / simclr_overhead
            unpaired = statistics.median(t["trainer"]) / statistics.median(times[CONTROL]["trainer"])
            lines.append(
                f"| {care} | {hand_ratio:.2f}× | {trainer_vs_hand:.2f}× | **{ratio:.2f}×** | ≤ {CARE_TARGET}× | "
                f"{_status(ratio <= CARE_TARGET)} | {_ms(statistics.median(t['trainer']))} / "
                f"{_ms(statistics.median(times[CONTROL]['trainer']))} = {unpaired:.2f}× |"
            )

    if dist is not None:
        lines += [
            "",
            f"### Cross-process gather: 2 processes (torchrun, gloo, 1 thread each, sharing the {os.cpu_count()} "
            f"cores), B = {dist['batch_size']} per process",
            "",
            "Step time of the trainer with `gather_distributed` off and on, toggled every other step of one "
            f"run ({dist['steps']} pairs of adjacent steps after {dist['warmup']} warm-up steps); 'added' is the "
            "median of the paired differences. Both include DDP's gradient all-reduce; 'collectives' counts the "
            "other `torch.distributed` calls per step (each one is a point where the faster process waits for "
            "the slower).",
            "",
            "| trainer | gather off ms/step | gather on ms/step | added ms/step | added % "
            "| collectives per step off → on |",
            "|---|---:|---:|---:|---:|---|",
        ]
        for name, row in dist["trainers"].items():
            off, on, added = row["off"], row["on"], row["added"]
            lines.append(
                f"| {name} | {_ms(off)} | {_ms(on)} | {added * 1e3:+.1f} | {100 * added / off:+.1f}% | "
                f"{row['collectives_off']} → {row['collectives_on']} |"
            )
        lines += [
            "",
            f"Raw communication per call (median of {dist['comm_repeats']} calls, after warm-up):",
            "",
            "| operation | tensor | ms |",
            "|---|---|---:|",
        ]
        for row in dist["comm"]:
            lines.append(f"| {row['op']} | {row['tensor']} | {row['seconds'] * 1e3:.2f} |")
    elif dist_error is not None:
        lines += ["", f"2-process gather run failed: {dist_error.splitlines()[0]}"]

    report = "\n".join(lines)
    print(report)
    if args.output:
        Path(args.output).write_text(report + "\n", encoding="utf-8")
    return report


if __name__ == "__main__":
    main()
