"""Training throughput with views made per sample in DataLoader workers vs on the device (issue 18).

Launch (not a test, not part of CI)::

    python benchmarks/bench_throughput.py --quick                 # CPU, ResNet-18 32 px, B = 16, 1 thread
    python benchmarks/bench_throughput.py --json out.json         # CUDA: ResNet-18 @ 32 px and ViT-S/16 @ 224 px
    python benchmarks/bench_throughput.py --models resnet18:32 --batch_size 512 --compile --workers 16

Every configuration (method × model × pipeline) trains a random-init timm encoder
(``pretrained=False``) with a linear projection for ``--steps`` timed steps after ``--warmup``
untimed ones, ``--rounds`` times (medians reported), on synthetic images (random PIL images,
``--raw_size`` pixels, decoded in the DataLoader as real data would be). On the CPU the pipelines of
a method advance step by step in turn (``--interleave``), so the load of other jobs hits them alike. One step: fetch the batch (the *wait*), move it to the device,
make the views, forward all views in one pass, the method's loss, backward, AdamW step; on CUDA the
step ends with a synchronisation so its time is the device's time.

Pipelines:

* ``workers``: the library's per-sample pipeline: ``ImageViewCollator`` with ``simclr_transform``
  (torchvision v2, one image at a time) in ``--workers`` DataLoader workers, as the CARE authors'
  code makes its views; CARE's chunk-shared views come from ``ChunkedAugmentation`` on the device.
* ``device``: workers only decode and resize (``raw_image_transform``: ``uint8``), the batch goes to
  the device once, and ``BatchedSimCLRViews`` makes every view there (CARE: ``chunk_size = B /
  n_splits`` for the chunk-shared ones), seeded per batch.
* ``model-only``: pre-made view tensors already on the device: the ceiling of the two.

Methods: SimCLR (2 views, InfoNCE), CARE (2 per-sample + 2 chunk-shared views, ``CARELoss``,
``n_splits = 8``), SupCon (2 views, ``supcon_loss`` on 10 random classes).

Reported per configuration: images/s (source images, not views, per second of step time), the
share of the step spent waiting for the DataLoader, ``views ms``: the cost of making one batch's
views alone in the main process (collate the rows, then per-sample views + CARE's chunked views,
or the uint8 batch + device views; median over ``--steps`` batches), and on CUDA the peak allocated memory
(``torch.cuda.max_memory_allocated``) and the mean GPU utilisation sampled by ``nvidia-smi``
every 0.2 s (when available). Flags: ``--bf16`` (autocast), ``--channels_last`` and ``--compile``
default to on, on, off on CUDA and are ignored on the CPU.

On a shared CPU the images/s of the three pipelines move with the load of other jobs (the model
step dominates all three); ``views ms`` is the robust comparison of the two view pipelines there.
``--quick`` takes about 20 s of CPU time (a minute of wall time at a load average of 9 on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from contextlib import nullcontext
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import timm  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402
from torch import nn  # noqa: E402

from hf_contrast.views import ChunkedAugmentation, simclr_transform  # noqa: E402
from hf_contrast.losses import CARELoss, info_nce_loss, supcon_loss  # noqa: E402
from hf_contrast.training.collators import ImageViewCollator, raw_image_transform  # noqa: E402
from hf_contrast.views.batched_simclr import BatchedSimCLRViews  # noqa: E402

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
MODELS = {"resnet18": "resnet18", "vit_s16": "vit_small_patch16_224"}
PIPELINES = ("model-only", "workers", "device")
N_SPLITS = 8
N_CLASSES = 10


class SyntheticImages(torch.utils.data.Dataset):
    """``length`` rows ``{"image": PIL RGB, "label": int}`` cycling over ``n_unique`` random images."""

    def __init__(self, length: int, n_unique: int, size: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.images = [Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)) for _ in range(n_unique)]
        self.labels = rng.integers(0, N_CLASSES, length).tolist()
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict:
        return {"image": self.images[index % len(self.images)], "label": self.labels[index]}


class Encoder(nn.Module):
    """timm backbone (random init) + linear projection to 128."""

    def __init__(self, name: str, image_size: int) -> None:
        super().__init__()
        kwargs = {"img_size": image_size} if name.startswith("vit") else {}
        self.backbone = timm.create_model(name, pretrained=False, num_classes=0, **kwargs)
        self.head = nn.Linear(self.backbone.num_features, 128)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))


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
                    ["nvidia-smi", f"--id={self.index}", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"],
                    capture_output=True, text=True, timeout=2,
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


def _info_nce(z: torch.Tensor, labels: torch.Tensor, batch: int) -> torch.Tensor:
    z1, z2 = z.split(batch)
    return info_nce_loss(z1, z2, temperature=0.5)


def _supcon(z: torch.Tensor, labels: torch.Tensor, batch: int) -> torch.Tensor:
    return supcon_loss(z, labels.repeat(2))


_CARE_LOSS = CARELoss(n_splits=N_SPLITS)


def _care(z: torch.Tensor, labels: torch.Tensor, batch: int) -> torch.Tensor:
    z1, z2, e1, e2 = z.split(batch)
    return _CARE_LOSS(z1, z2, e1, e2)["loss"]


@dataclass(frozen=True)
class Workload:
    """What a method asks of the data pipeline and the step: views per image and a loss.

    Attributes:
        name: The method (``--methods``).
        chunk_shared_views: Chunk-shared views per batch besides the 2 per-sample ones (0 or 2).
        loss: ``(z, labels, B) -> loss`` on the projections of all views, view-major ``(V·B, D)``.
    """

    name: str
    chunk_shared_views: int
    loss: Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]


WORKLOADS = {
    w.name: w
    for w in (Workload("simclr", 0, _info_nce), Workload("care", 2, _care), Workload("supcon", 0, _supcon))
}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def config_steps(
    args: argparse.Namespace, method: str, model_key: str, image_size: int, pipeline: str
) -> Iterator[None]:
    """Set up one configuration and train it, yielding after every step; returns its :class:`Result`."""
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    batch = args.batch_size
    raw_size = image_size if image_size <= 64 else args.raw_size
    torch.manual_seed(0)
    model = Encoder(MODELS[model_key], image_size).to(device)
    channels_last = cuda and args.channels_last
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    step_model = torch.compile(model) if (cuda and args.compile) else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda)
    workload = WORKLOADS[method]
    chunk_shared = workload.chunk_shared_views > 0
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if (cuda and args.bf16) else nullcontext()
    n_views = 2 + workload.chunk_shared_views
    total_steps = args.warmup + args.steps

    per_sample = simclr_transform(image_size, MEAN, STD)
    chunked = ChunkedAugmentation.simclr(N_SPLITS, image_size, MEAN, STD, generator=torch.Generator().manual_seed(0))
    device_views = BatchedSimCLRViews(image_size, MEAN, STD, seed=0)

    loader = None
    if pipeline != "model-only":
        dataset = SyntheticImages(batch * total_steps, min(batch * total_steps, args.unique_images), raw_size)
        if pipeline == "workers":
            collator = ImageViewCollator(
                transform=per_sample, n_views=2, n_channels=3,
                raw_transform=raw_image_transform(raw_size) if chunk_shared else None,
            )
        else:
            collator = ImageViewCollator(n_views=0, n_channels=3, raw_transform=raw_image_transform(raw_size))
        loader = iter(
            torch.utils.data.DataLoader(
                dataset, batch_size=batch, collate_fn=collator, num_workers=args.workers, pin_memory=cuda,
                drop_last=True, persistent_workers=False, prefetch_factor=args.prefetch if args.workers else None,
            )
        )
    else:
        premade = torch.randn(n_views * batch, 3, image_size, image_size, device=device)
        premade_labels = torch.randint(0, N_CLASSES, (batch,), device=device)

    def views_of(data: dict, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        labels = data["labels"].to(device, non_blocking=True)
        if pipeline == "workers":
            views = [data["pixel_values_1"], data["pixel_values_2"]]
            views = [v.to(device, non_blocking=True) for v in views]
            if chunk_shared:
                views += list(chunked(data["pixel_values_eq"].to(device, non_blocking=True)))
            return torch.cat(views), labels
        raw = data["pixel_values_eq"].to(device, non_blocking=True)
        g = device_views.generator(step)
        views = [device_views(raw, g), device_views(raw, g)]
        views += [device_views(raw, g, chunk_size=batch // N_SPLITS) for _ in range(workload.chunk_shared_views)]
        return torch.cat(views), labels

    views_ms = 0.0
    if pipeline != "model-only":
        # The view-making cost alone, in this process: collate (decode, per-sample views or uint8
        # resize) a batch of rows and make all the method's views on the device.
        rows = [dataset[i] for i in range(batch)]
        costs = []
        for rep in range(args.warmup + args.steps):
            _sync(device)
            start = time.perf_counter()
            views_of(collator(rows), rep)
            _sync(device)
            costs.append(time.perf_counter() - start)
        views_ms = 1000 * statistics.median(costs[args.warmup:])

    waits, totals = [], []
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    with GpuUtilisation(device) as util:
        for step in range(total_steps):
            if step == args.warmup:
                util.samples.clear()
            start = time.perf_counter()
            data = next(loader) if loader is not None else None
            fetched = time.perf_counter()
            x, labels = views_of(data, step) if data is not None else (premade, premade_labels)
            if channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            with autocast:
                z = step_model(x)
                loss = workload.loss(z.float(), labels, batch)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            _sync(device)
            end = time.perf_counter()
            if step >= args.warmup:
                waits.append(fetched - start)
                totals.append(end - start)
            yield
    total = sum(totals)
    return Result(
        method=method, model=model_key, image_size=image_size, pipeline=pipeline, batch_size=batch, steps=args.steps,
        images_per_s=batch * len(totals) / total, step_ms=1000 * total / len(totals), wait_share=sum(waits) / total,
        views_ms=views_ms,
        peak_mem_gib=torch.cuda.max_memory_allocated(device) / 2**30 if cuda else None, gpu_util=util.mean,
    )


def run_configs(args: argparse.Namespace, method: str, model_key: str, image_size: int) -> dict[str, list[Result]]:
    """Every pipeline of one method and model, ``--rounds`` times.

    Sequential (``--no-interleave``): one configuration after the other, the pipelines' order rotated
    every round. Interleaved: the pipelines advance one step each in turn (rotated every step), so load
    from other jobs hits all of them alike; the worker pipeline's DataLoader workers keep preparing
    batches meanwhile, as they do during any training step.
    """
    runs: dict[str, list[Result]] = {p: [] for p in args.pipelines}
    for round_ in range(args.rounds):
        shift = round_ % len(args.pipelines)
        order = args.pipelines[shift:] + args.pipelines[:shift]
        if not args.interleave:
            for pipeline in order:
                steps = config_steps(args, method, model_key, image_size, pipeline)
                while True:
                    try:
                        next(steps)
                    except StopIteration as done:
                        runs[pipeline].append(done.value)
                        break
            continue
        live = {p: config_steps(args, method, model_key, image_size, p) for p in order}
        turn = 0
        while live:
            names = list(live)
            for pipeline in names[turn % len(names):] + names[: turn % len(names)]:
                try:
                    next(live[pipeline])
                except StopIteration as done:
                    runs[pipeline].append(done.value)
                    del live[pipeline]
            turn += 1
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
    parser.add_argument("--quick", action="store_true", help="CPU, resnet18:32, B=16, 4 interleaved steps, 1 thread")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--models", nargs="+", default=["resnet18:32", "vit_s16:224"])
    parser.add_argument("--methods", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    parser.add_argument("--pipelines", nargs="+", default=list(PIPELINES), choices=PIPELINES)
    parser.add_argument("--batch_size", type=int, default=512)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=1, help="runs per configuration (median reported)")
    parser.add_argument("--interleave", action=argparse.BooleanOptionalAction, default=None,
                        help="advance the pipelines step by step in turn (default: on the CPU only)")
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
    if args.interleave is None:
        args.interleave = device.type == "cpu"
    if args.interleave and device.type == "cuda":
        print("note: interleaved on CUDA, peak memory is the maximum over the pipelines run together")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU ({os.cpu_count()} cores)"
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"device: {name}; torch {torch.__version__}; load average {load:.1f}; workers {args.workers}; "
          f"bf16={args.bf16 and device.type == 'cuda'} channels_last={args.channels_last and device.type == 'cuda'} "
          f"compile={args.compile and device.type == 'cuda'}")
    results = []
    header = f"{'method':7} {'model':9} {'px':>4} {'pipeline':10} {'img/s':>9} {'step ms':>8} {'wait':>6} {'views ms':>8} {'peak GiB':>8} {'GPU %':>6}"
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
                print(f"{r.method:7} {r.model:9} {r.image_size:4d} {r.pipeline:10} {r.images_per_s:9.1f} "
                      f"{r.step_ms:8.1f} {r.wait_share:6.1%} {r.views_ms:8.1f} {mem} {util}", flush=True)
    for model_key, size in _parse_models(args.models):
        for method in args.methods:
            same = [r for r in results if (r.method, r.model, r.image_size) == (method, model_key, size)]
            rate = {r.pipeline: r.images_per_s for r in same}
            cost = {r.pipeline: r.views_ms for r in same}
            if "workers" in rate and "device" in rate:
                ceiling = f"; model-only / device {rate['model-only'] / rate['device']:.2f}x" if "model-only" in rate else ""
                print(f"{method} {model_key}@{size}: images/s device / workers {rate['device'] / rate['workers']:.2f}x"
                      f"{ceiling}; views of a batch per-sample / device {cost['workers'] / cost['device']:.1f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": name, "args": vars(args), "results": [asdict(r) for r in results]}, f, indent=2)
    return results


if __name__ == "__main__":
    main()
