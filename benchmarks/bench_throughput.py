"""Training throughput of ``ContrastiveTrainer``: views made per sample in DataLoader workers vs on the device.

Issue 18.

Launch (not a test, not part of CI)::

    python benchmarks/bench_throughput.py --quick                 # CPU, ResNet-18 32 px, B = 16, 1 thread
    python benchmarks/bench_throughput.py --json out.json         # CUDA: ResNet-18 @ 32 px and ViT-S/16 @ 224 px
    python benchmarks/bench_throughput.py --models resnet18:32 --batch_size 512 --compile --workers 16

Every configuration (method × model × pipeline) is a real training run: ``ContrastiveTrainer`` with the
method's objective on a random-init timm ``ContrastiveEncoder`` (``pretrained=False``, projection 128),
AdamW, ``--warmup`` untimed steps then ``--steps`` timed ones, ``--rounds`` times (the pipelines' order
rotated every round; medians reported), on synthetic images (a ``datasets.Dataset`` of random PNG
images, ``--raw_size`` pixels, decoded in the DataLoader as real data is). A callback stamps every
step's end and the moment the Trainer, with the next batch in hand, begins the next step, so the time
in between is the *wait* for data. On CUDA a callback synchronises at every step end so the step's time
is the device's time.

Pipelines (the same trainer, objective and collator code a user runs):

* ``workers``: ``views_on_device=False``: the objective's collator makes the views per sample
  (``simclr_transform``, torchvision v2) in ``--workers`` DataLoader workers, as the CARE authors' code
  does; CARE's chunk-shared views come from ``ChunkedAugmentation`` on the device.
* ``device``: ``views_on_device=True``: the workers only decode and resize (``uint8``), the batch goes to
  the device once, and every view is made there by ``BatchedSimCLRViews``, seeded per batch.
* ``model-only``: a collator handing out one pre-made batch of view tensors (CARE: its equivariance
  views too): the ceiling of the two.

Methods: SimCLR (2 views, InfoNCE), CARE (2 per-sample + 2 chunk-shared views, ``n_splits = 8``),
SupCon (2 views, 10 random classes).

Reported per configuration: images/s (source images, not views, per second of step time), the share
of the step spent waiting for the DataLoader, ``views ms``: the cost of making one batch's views alone
in the main process (the objective's collator on a batch of rows, then the views the objective asks
the trainer's ViewBuilder for; median over ``--steps`` batches), and on CUDA the peak allocated memory
(``torch.cuda.max_memory_allocated``) and the mean GPU utilisation sampled by ``nvidia-smi`` every
0.2 s (when available). Flags: ``--bf16`` (autocast), ``--channels_last`` and ``--compile``
(``torch_compile``) default to on, on, off on CUDA and are ignored on the CPU.

On a shared CPU the images/s move with the load of other jobs (the model step dominates); ``views ms``
is the robust comparison of the two view pipelines there.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import datasets
import numpy as np
import torch
import transformers
from PIL import Image
from transformers import PrinterCallback, TrainerCallback

from hf_contrast.models import ContrastiveEncoder
from hf_contrast.objectives import CAREObjective, SimCLRObjective, SupConObjective
from hf_contrast.training import ContrastiveTrainer, ContrastiveTrainingArguments

MODELS = {"resnet18": "resnet18", "vit_s16": "vit_small_patch16_224"}
PIPELINES = ("model-only", "workers", "device")
N_SPLITS = 8
N_CLASSES = 10
PROJECTION_DIM = 128


def synthetic_images(length: int, n_unique: int, size: int, seed: int = 0) -> datasets.Dataset:
    """``length`` rows ``{"image": PNG-encoded RGB, "label": int}`` cycling over ``n_unique`` random images."""
    rng = np.random.default_rng(seed)
    unique = datasets.Dataset.from_dict(
        {
            "image": [Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)) for _ in range(n_unique)],
            "label": rng.integers(0, N_CLASSES, n_unique).tolist(),
        },
        features=datasets.Features({"image": datasets.Image(), "label": datasets.Value("int64")}),
    )
    return unique.select([i % n_unique for i in range(length)])


class GpuUtilisation:
    """Mean ``utilization.gpu`` from ``nvidia-smi`` sampled every 0.2 s in a thread (None if absent)."""

    def __init__(self, device: torch.device) -> None:
        self.enabled = device.type == "cuda" and shutil.which("nvidia-smi") is not None
        self.index = device.index if device.index is not None else torch.cuda.current_device() if self.enabled else 0
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                out = subprocess.run(
                    [
                        "nvidia-smi",
                        f"--id={self.index}",
                        "--query-gpu=utilization.gpu",
                        "--format=csv,noheader,nounits",
                    ],
                    capture_output=True,
                    text=True,
                    timeout=2,
                )
                self.samples.append(float(out.stdout.strip().splitlines()[0]))
            except (OSError, ValueError, IndexError, subprocess.SubprocessError):
                pass
            self._stop.wait(0.2)

    def __enter__(self) -> GpuUtilisation:
        if self.enabled:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.samples) if self.samples else None


@dataclass
class Result:
    method: str
    model: str
    image_size: int
    pipeline: str
    batch_size: int
    steps: int
    images_per_s: float
    step_ms: float
    wait_share: float
    views_ms: float
    peak_mem_gib: float | None
    gpu_util: float | None


@dataclass(frozen=True)
class Workload:
    """A method: its objective and the views it asks the ViewBuilder for (for ``views ms``).

    Attributes:
        name: The method (``--methods``).
        objective: Builds the objective (``equivariance_augmentation=`` for CARE's model-only run).
        chunked: Whether the method also makes CARE's chunk-shared views.
    """

    name: str
    objective: Callable[..., Any]
    chunked: bool = False


WORKLOADS = {
    w.name: w
    for w in (
        Workload("simclr", lambda **kw: SimCLRObjective(temperature=0.5, **kw)),
        Workload("care", lambda **kw: CAREObjective(n_splits=N_SPLITS, **kw), chunked=True),
        Workload("supcon", lambda **kw: SupConObjective(n_views=2, **kw)),
    )
}


class StepClock(TrainerCallback):
    """Stamps the end of every step and the beginning of the next (the batch is in hand by then)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.begins: list[float] = []
        self.ends: list[float] = []

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.begins.append(time.perf_counter())

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.ends.append(time.perf_counter())

    def timed(self, warmup: int) -> tuple[list[float], list[float]]:
        """``(wait, total)`` seconds of every step after ``warmup``: from the previous step's end to this one's
        beginning (fetching the batch), and to this one's end."""
        waits = [self.begins[k] - self.ends[k - 1] for k in range(max(warmup, 1), len(self.ends))]
        totals = [self.ends[k] - self.ends[k - 1] for k in range(max(warmup, 1), len(self.ends))]
        return waits, totals


class PremadeBatches:
    """The model-only collator: one batch of pre-made normalised views, whatever the rows."""

    def __init__(self, batch: int, image_size: int, chunked: bool) -> None:
        g = torch.Generator().manual_seed(0)
        views = torch.randn(2, batch, 3, image_size, image_size, generator=g)
        self.batch = {
            "pixel_values_1": views[0],
            "pixel_values_2": views[1],
            "labels": torch.randint(0, N_CLASSES, (batch,), generator=g),
        }
        if chunked:  # the two equivariance views, handed back by the identity augmentation below
            self.batch["pixel_values_eq"] = torch.randn(2, batch, 3, image_size, image_size, generator=g)

    def __call__(self, rows: list[dict]) -> dict[str, torch.Tensor]:
        return dict(self.batch)


def _premade_equivariance_views(pair: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return pair[0], pair[1]


def _views_ms(trainer: ContrastiveTrainer, workload: Workload, rows: list[dict], warmup: int, steps: int) -> float:
    """Median cost of one batch's views in this process: the objective's collator, then the views it asks for."""
    views, device = trainer.views, trainer.args.device
    costs = []
    for index in range(warmup + steps):
        _sync(device)
        start = time.perf_counter()
        batch = {k: v.to(device, non_blocking=True) for k, v in trainer.data_collator(rows).items()}
        views.start_batch(index, training=True)
        made = views.augmented(batch, 2)
        if workload.chunked:
            made += views.chunked_views(trainer.objective.equivariance_augmentation, batch)
        _sync(device)
        costs.append(time.perf_counter() - start)
    return 1000 * statistics.median(costs[warmup:])


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_config(args: argparse.Namespace, method: str, model_key: str, image_size: int, pipeline: str) -> Result:
    """Train one configuration with ``ContrastiveTrainer`` and measure it."""
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    batch = args.batch_size
    raw_size = image_size if image_size <= 64 else args.raw_size
    workload = WORKLOADS[method]
    total_steps = args.warmup + args.steps
    torch.manual_seed(0)
    backbone_kwargs = {"img_size": image_size} if model_key.startswith("vit") else {}
    model = ContrastiveEncoder.from_backbone(
        MODELS[model_key], pretrained=False, projection_dim=PROJECTION_DIM, backbone_kwargs=backbone_kwargs
    )
    if cuda and args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    premade = pipeline == "model-only"
    with tempfile.TemporaryDirectory() as output_dir:
        training_args = ContrastiveTrainingArguments(
            output_dir=output_dir, max_steps=total_steps, per_device_train_batch_size=batch, learning_rate=1e-4,
            image_size=image_size, views_on_device=pipeline == "device", use_cpu=not cuda, bf16=cuda and args.bf16,
            torch_compile=cuda and args.compile, dataloader_num_workers=0 if premade else args.workers,
            dataloader_prefetch_factor=args.prefetch if args.workers and not premade else None,
            dataloader_pin_memory=cuda, report_to="none", save_strategy="no", logging_strategy="no",
            disable_tqdm=True, seed=0,
        )  # fmt: skip
        objective_kwargs = (
            {"equivariance_augmentation": _premade_equivariance_views} if premade and workload.chunked else {}
        )
        dataset = synthetic_images(batch * total_steps, min(batch * total_steps, args.unique_images), raw_size)
        clock = StepClock(device)
        trainer = ContrastiveTrainer(
            model=model, args=training_args, train_dataset=dataset, objective=workload.objective(**objective_kwargs),
            data_collator=PremadeBatches(batch, image_size, workload.chunked) if premade else None, callbacks=[clock],
        )  # fmt: skip
        trainer.remove_callback(PrinterCallback)  # no log lines between the table's rows
        views_ms = (
            0.0
            if premade
            else _views_ms(trainer, workload, [dataset[i] for i in range(batch)], args.warmup, args.steps)
        )
        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
        with GpuUtilisation(device) as util:
            trainer.train()
    waits, totals = clock.timed(args.warmup)
    total = sum(totals)
    return Result(
        method=method, model=model_key, image_size=image_size, pipeline=pipeline, batch_size=batch, steps=len(totals),
        images_per_s=batch * len(totals) / total, step_ms=1000 * total / len(totals), wait_share=sum(waits) / total,
        views_ms=views_ms,
        peak_mem_gib=torch.cuda.max_memory_allocated(device) / 2**30 if cuda else None, gpu_util=util.mean,
    )  # fmt: skip


def run_configs(args: argparse.Namespace, method: str, model_key: str, image_size: int) -> dict[str, list[Result]]:
    """Every pipeline of one method and model, ``--rounds`` times, the pipelines' order rotated every round."""
    runs: dict[str, list[Result]] = {p: [] for p in args.pipelines}
    for round_ in range(args.rounds):
        shift = round_ % len(args.pipelines)
        for pipeline in args.pipelines[shift:] + args.pipelines[:shift]:
            runs[pipeline].append(run_config(args, method, model_key, image_size, pipeline))
    return runs


def _median_result(runs: list[Result]) -> Result:
    """One result per configuration: the median of every measured field over the rounds."""
    if len(runs) == 1:
        return runs[0]

    def median(name: str) -> float | None:
        values = [getattr(r, name) for r in runs if getattr(r, name) is not None]
        return statistics.median(values) if values else None

    measured = ("images_per_s", "step_ms", "wait_share", "views_ms", "peak_mem_gib", "gpu_util")
    return Result(**{**asdict(runs[0]), **{name: median(name) for name in measured}})


def _parse_models(values: list[str]) -> list[tuple[str, int]]:
    out = []
    for value in values:
        name, _, size = value.partition(":")
        if name not in MODELS or not size.isdigit():
            raise SystemExit(f"--models entries are NAME:SIZE with NAME in {sorted(MODELS)}, got {value!r}.")
        out.append((name, int(size)))
    return out


def main(argv: list[str] | None = None) -> list[Result]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="CPU, resnet18:32, B=16, 4 timed steps, 1 thread")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--models", nargs="+", default=["resnet18:32", "vit_s16:224"])
    parser.add_argument("--methods", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    parser.add_argument("--pipelines", nargs="+", default=list(PIPELINES), choices=PIPELINES)
    parser.add_argument("--batch_size", type=int, default=512)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=1, help="runs per configuration (median reported)")
    parser.add_argument("--workers", type=int, default=min(16, os.cpu_count() or 1))
    parser.add_argument("--prefetch", type=int, default=4)
    parser.add_argument("--raw_size", type=int, default=256, help="decoded image side for models above 64 px")
    parser.add_argument("--unique_images", type=int, default=1024)
    parser.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--channels_last", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=False)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads of the main process")
    parser.add_argument("--json", default=None, help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    if args.quick:
        args.device, args.models, args.batch_size, args.steps, args.warmup = "cpu", ["resnet18:32"], 16, 4, 1
        args.workers, args.threads = min(args.workers, 2), args.threads or 1
    if args.batch_size % N_SPLITS or args.batch_size < 2 * N_SPLITS:
        raise SystemExit(
            f"--batch_size must be a multiple of n_splits={N_SPLITS} and at least {2 * N_SPLITS} (CARE's chunks need "
            f"2 samples or more), got {args.batch_size}."
        )
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    transformers.logging.set_verbosity_error()
    datasets.disable_progress_bars()
    logging.getLogger("hf_contrast").setLevel(logging.ERROR)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU ({os.cpu_count()} cores)"
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"device: {name}; torch {torch.__version__}; load average {load:.1f}; workers {args.workers}; "
        f"bf16={args.bf16 and device.type == 'cuda'} channels_last={args.channels_last and device.type == 'cuda'} "
        f"compile={args.compile and device.type == 'cuda'}"
    )
    results = []
    header = (
        f"{'method':7} {'model':9} {'px':>4} {'pipeline':10} {'img/s':>9} {'step ms':>8} {'wait':>6} {'views ms':>8} "
        f"{'peak GiB':>8} {'GPU %':>6}"
    )
    print(header)
    print("-" * len(header))
    for model_key, size in _parse_models(args.models):
        for method in args.methods:
            runs = run_configs(args, method, model_key, size)
            for pipeline in args.pipelines:
                r = _median_result(runs[pipeline])
                results.append(r)
                mem = f"{r.peak_mem_gib:8.2f}" if r.peak_mem_gib is not None else f"{'-':>8}"
                util = f"{r.gpu_util:6.0f}" if r.gpu_util is not None else f"{'-':>6}"
                print(
                    f"{r.method:7} {r.model:9} {r.image_size:4d} {r.pipeline:10} {r.images_per_s:9.1f} "
                    f"{r.step_ms:8.1f} {r.wait_share:6.1%} {r.views_ms:8.1f} {mem} {util}",
                    flush=True,
                )
    for model_key, size in _parse_models(args.models):
        for method in args.methods:
            same = [r for r in results if (r.method, r.model, r.image_size) == (method, model_key, size)]
            rate = {r.pipeline: r.images_per_s for r in same}
            cost = {r.pipeline: r.views_ms for r in same}
            if "workers" in rate and "device" in rate:
                ceiling = (
                    f"; model-only / device {rate['model-only'] / rate['device']:.2f}x" if "model-only" in rate else ""
                )
                print(
                    f"{method} {model_key}@{size}: images/s device / workers {rate['device'] / rate['workers']:.2f}x"
                    f"{ceiling}; views of a batch per-sample / device {cost['workers'] / cost['device']:.1f}x"
                )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": name, "args": vars(args), "results": [asdict(r) for r in results]}, f, indent=2)
    return results


if __name__ == "__main__":
    main()
