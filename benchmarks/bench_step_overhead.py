"""What ``ContrastiveTrainer`` adds to a training step: its step against a plain PyTorch loop's, on a near-free model.

Issue 28. Not a test, not part of CI::

    python benchmarks/bench_step_overhead.py                      # CPU: B = 512, SimCLR and CARE, 3 rounds
    python benchmarks/bench_step_overhead.py --batch_size 64 --steps 4 --rounds 1   # a smoke run
    python benchmarks/bench_step_overhead.py --json out.json --markdown out.md

The model is near-free on purpose, so that what remains of a step is the work around the model (data, views,
logging, checks) — the part that bounds a step on a GPU, where the model's own kernels are fast: a timm ViT with
one block of width 32 and 16-px patches (4 tokens of a 32-px image; ~0.1 M parameters) under a 128-d projection
head, built by ``ContrastiveEncoder.from_backbone`` so both sides run the very same module. Three runs share the
model, the batch size and the optimizer (AdamW, lr 1e-3):

* ``plain``: a plain PyTorch loop fed two pre-made view tensors (made once, outside the timing), plain NT-Xent
  (written here, 8 lines), ``backward``, ``step``, ``zero_grad`` with the optimizer the Trainer builds for the same
  arguments (``Trainer.get_optimizer_cls_and_kwargs``): the floor of a SimCLR step.
* ``trainer simclr`` / ``trainer care``: ``ContrastiveTrainer`` with ``SimCLRObjective`` / ``CAREObjective``
  (``n_splits`` 8), ``views_on_device=True``, on a ``datasets.Dataset`` of PNG-encoded 32-px images
  (``datasets.Image``, decoded by the trainer as a real image folder is), logging every ``--logging_steps``.
  CARE makes twice the model work of the plain loop (four views of each image).

Every step is timed by a public ``TrainerCallback`` (``on_step_begin`` stamps; the plain loop stamps the same
points): the *period* is from one step's beginning to the next (what images/s sees); *between steps* is from a
step's end to the next one's beginning (the next batch, logging). ``--rounds`` rounds, the three runs' order
rotated each round; each figure is the median over the timed steps of a round, then the median over rounds.
The ratio is the trainer's period over the plain loop's, within the same round. *Views alone* is the time of
making one batch's views with ``DeviceViews`` outside the trainer, in the same round (on a GPU a few kernels; on a
CPU real arithmetic on every pixel of every view, which the plain loop, fed pre-made views, never does); the
ratio *views aside* subtracts it, leaving what the trainer adds around the model and the views.

Also counted, on one non-logging step of each run (after the timing, untimed):

* operations that would be kernel launches on a GPU: aten operations seen by a ``TorchDispatchMode`` during a whole
  period (the next batch, forward, backward, optimizer step), not counting views of memory (``is_view``
  operations, ``detach``) nor the random parameters drawn on the host (``hf_contrast.views.batched_params``,
  the hue grouping), which run on the CPU wherever the model runs, nor a non-fused optimizer's step counters
  (CPU tensors unless ``capturable``), with the views in one pass and the non-finite check fused, as on a GPU;
* host reads of tensors (``item``, ``tolist``, ``__bool__``, ``__float__``, ``__int__``, ``numpy``, ``cpu``) by
  the step, outside the same host-side parameter code: on a GPU each is a synchronisation that stalls the host.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import datasets
import numpy as np
import torch
import torch.nn.functional as F
import transformers
from PIL import Image
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import PrinterCallback, TrainerCallback

import hf_contrast.training.callbacks as callbacks
import hf_contrast.views.batched_simclr as batched_simclr
from hf_contrast.models import ContrastiveEncoder
from hf_contrast.objectives import CAREObjective, SimCLRObjective
from hf_contrast.training import ContrastiveTrainer, ContrastiveTrainingArguments
from hf_contrast.views import BatchedSimCLRViews, DeviceViews

IMAGE_SIZE = 32
N_SPLITS = 8
TEMPERATURE = 0.5
LR = 1e-3
# the random view parameters are drawn on the host wherever the model runs: not device work, not device reads; so are
# the step counters of torch's non-fused optimizers (on the CPU unless `capturable`)
HOST_SIDE = ("batched_params.py", "hue_groups", "/torch/optim/")
HOST_READS = ("item", "tolist", "__bool__", "__float__", "__int__", "numpy", "cpu")


def near_free_model(seed: int) -> ContrastiveEncoder:
    """A timm ViT of one 32-wide block on 16-px patches (4 tokens at 32 px) with a 128-d projection head."""
    torch.manual_seed(seed)
    return ContrastiveEncoder.from_backbone(
        "vit_tiny_patch16_224",
        pretrained=False,
        projection_dim=128,
        backbone_kwargs={"img_size": IMAGE_SIZE, "patch_size": 16, "embed_dim": 32, "depth": 1, "num_heads": 1},
    )


def png_images(n_rows: int, seed: int = 0) -> datasets.Dataset:
    """``n_rows`` PNG-encoded random 32-px RGB images with 10 labels, decoded on access like an image folder."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n_rows):
        buffer = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8)).save(buffer, "PNG")
        rows.append({"bytes": buffer.getvalue(), "path": None})
    features = datasets.Features({"image": datasets.Image(), "label": datasets.Value("int64")})
    return datasets.Dataset.from_dict({"image": rows, "label": (np.arange(n_rows) % 10).tolist()}, features=features)


def nt_xent(z1: torch.Tensor, z2: torch.Tensor, temperature: float) -> torch.Tensor:
    """Plain NT-Xent (SimCLR) over ``2B`` projections."""
    z = F.normalize(torch.cat([z1, z2]), dim=1)
    sim = z @ z.T / temperature
    n = z1.shape[0]
    sim.fill_diagonal_(float("-inf"))
    targets = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)]).to(z.device)
    return F.cross_entropy(sim, targets)


# ---- counting ------------------------------------------------------------------------------------------------


def _host_side() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        if any(name in frame.f_code.co_filename or name == frame.f_code.co_name for name in HOST_SIDE):
            return True
        frame = frame.f_back
    return False


class OpCounter(TorchDispatchMode):
    """Counts aten operations that would launch a kernel (see the module's docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if not func.is_view and func.__name__ not in ("detach.default", "lift_fresh.default") and not _host_side():
            self.count += 1
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def counting_host_reads() -> Iterator[list[str]]:
    """Patch ``torch.Tensor``'s reading methods; yield the list of reads made inside (outside host-side code)."""
    reads: list[str] = []
    saved = {name: getattr(torch.Tensor, name) for name in HOST_READS}

    def wrap(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def read(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            if not _host_side():
                caller = traceback.extract_stack(limit=3)[0]
                reads.append(f"{name} at {os.path.basename(caller.filename)}:{caller.lineno}")
            return method(self, *args, **kwargs)

        return read

    for name, method in saved.items():
        setattr(torch.Tensor, name, wrap(name, method))
    try:
        yield reads
    finally:
        for name, method in saved.items():
            setattr(torch.Tensor, name, method)


# ---- the runs --------------------------------------------------------------------------------------------------


class StepStamps(TrainerCallback):
    """Stamps every step's beginning and end; counts operations and host reads over step ``count_step``'s period."""

    def __init__(self, count_step: int | None = None) -> None:
        self.begins: list[float] = []
        self.ends: list[float] = []
        self.count_step = count_step
        self.ops: int | None = None
        self.reads: list[str] | None = None
        self._counter: OpCounter | None = None
        self._reads: contextlib.ExitStack | None = None

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        now = time.perf_counter()
        if self._counter is not None:  # the counted period ends where the next step begins
            self._counter.__exit__(None, None, None)
            self._reads.close()
            self.ops, self._counter = self._counter.count, None
        if self.count_step is not None and state.global_step == self.count_step:
            self._reads = contextlib.ExitStack()
            self.reads = self._reads.enter_context(counting_host_reads())
            self._counter = OpCounter()
            self._counter.__enter__()
        self.begins.append(now)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.ends.append(time.perf_counter())


def run_trainer(
    objective: Callable[[], Any], dataset: datasets.Dataset, batch: int, steps: int, logging_steps: int, count: bool
) -> StepStamps:
    """``steps`` steps of ``ContrastiveTrainer``; with ``count``, one non-logging step is counted (not timed)."""
    count_step = logging_steps if count else None  # step logging_steps + 1: right after a logging step, not one
    stamps = StepStamps(count_step)
    with tempfile.TemporaryDirectory() as out:
        args = ContrastiveTrainingArguments(
            output_dir=out, per_device_train_batch_size=batch, max_steps=steps, learning_rate=LR,
            lr_scheduler_type="constant", logging_steps=logging_steps, save_strategy="no", eval_strategy="no",
            report_to="none", disable_tqdm=True, views_on_device=True, image_size=IMAGE_SIZE,
            use_cpu=not torch.cuda.is_available(), dataloader_num_workers=0, seed=0,
        )  # fmt: skip
        trainer = ContrastiveTrainer(
            model=near_free_model(0), args=args, objective=objective(), train_dataset=dataset, callbacks=[stamps]
        )
        trainer.remove_callback(PrinterCallback)
        trainer.train()
    return stamps


def run_plain(batch: int, steps: int, device: torch.device, count: bool) -> StepStamps:
    """A plain loop over pre-made views, stamped at the same points as the trainer's callback."""
    model = near_free_model(0).to(device).train()
    with tempfile.TemporaryDirectory() as out:  # the optimizer the Trainer builds (AdamW, fused where torch has it)
        args = ContrastiveTrainingArguments(output_dir=out, learning_rate=LR, use_cpu=device.type == "cpu")
        optimizer_cls, optimizer_kwargs = transformers.Trainer.get_optimizer_cls_and_kwargs(args, model)
    optimizer = optimizer_cls(model.parameters(), **optimizer_kwargs)
    generator = torch.Generator().manual_seed(0)
    views = [torch.randn(batch, 3, IMAGE_SIZE, IMAGE_SIZE, generator=generator).to(device) for _ in range(2)]
    stamps = StepStamps(1 if count else None)

    class State:
        global_step = 0

    for step in range(steps):
        State.global_step = step
        stamps.on_step_begin(None, State, None)
        z = model(pixel_values=torch.cat(views))["projections"]
        loss = nt_xent(*z.split(batch), TEMPERATURE)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        stamps.on_step_end(None, State, None)
    stamps.on_step_begin(None, State, None)  # closes the counted period
    return stamps


def views_ms(name: str, batch: int, device: torch.device) -> float:
    """Median ms of making one batch's views alone (``DeviceViews``, as the trainer does; 0 for the plain loop)."""
    if name == "plain":
        return 0.0
    views = DeviceViews(BatchedSimCLRViews(IMAGE_SIZE, (0.5, 0.5, 0.5), (0.25, 0.25, 0.25), seed=0))
    images = torch.randint(0, 256, (batch, 3, IMAGE_SIZE, IMAGE_SIZE), dtype=torch.uint8, device=device)
    make = {
        "trainer simclr": lambda: views.per_sample(images, 2),
        # one pass where the views have it (older trees: the two calls their trainer made)
        "trainer care": (lambda: views.chunk_shared_and_per_sample(images, N_SPLITS, 2))
        if hasattr(views, "chunk_shared_and_per_sample")
        else (lambda: (views.chunk_shared(images, N_SPLITS), views.per_sample(images, 2))),
    }[name]
    times = []
    for index in range(6):
        views.start_batch(index, training=True)
        start = time.perf_counter()
        make()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times[1:])


def medians(stamps: StepStamps, warmup: int) -> dict[str, float]:
    """Median period and time between steps (ms) over the steps after ``warmup``."""
    periods = [b - a for a, b in zip(stamps.begins[warmup:], stamps.begins[warmup + 1 :])]
    between = [stamps.begins[k + 1] - stamps.ends[k] for k in range(warmup, len(stamps.ends) - 1)]
    return {"period_ms": 1e3 * statistics.median(periods), "between_ms": 1e3 * statistics.median(between)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch_size", type=int, default=512)
    parser.add_argument("--steps", type=int, default=12, help="timed steps per run")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps at the start of each run")
    parser.add_argument("--logging_steps", type=int, default=5, help="at least 2 (a non-logging step is counted)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--markdown", help="write the table here")
    flags = parser.parse_args()
    if flags.logging_steps < 2:
        parser.error(
            f"--logging_steps must be at least 2 (a step that does not log is counted), got {flags.logging_steps}"
        )
    transformers.utils.logging.set_verbosity_error()
    logging.getLogger("hf_contrast").setLevel(logging.ERROR)
    datasets.disable_progress_bars()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    total = flags.warmup + flags.steps + 1
    dataset = png_images(flags.batch_size * (total + 1))
    runs: dict[str, Callable[[bool], StepStamps]] = {
        "plain": lambda count: run_plain(flags.batch_size, total, device, count),
        "trainer simclr": lambda count: run_trainer(
            lambda: SimCLRObjective(temperature=TEMPERATURE),
            dataset,
            flags.batch_size,
            total,
            flags.logging_steps,
            count,
        ),
        "trainer care": lambda count: run_trainer(
            lambda: CAREObjective(n_splits=N_SPLITS), dataset, flags.batch_size, total, flags.logging_steps, count
        ),
    }
    names = list(runs)
    rounds: list[dict[str, dict[str, float]]] = []
    for r in range(flags.rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        figures = {name: medians(runs[name](False), flags.warmup) for name in order}
        for name in names:
            plain = figures["plain"]["period_ms"]
            figures[name]["views_ms"] = views_ms(name, flags.batch_size, device)
            figures[name]["ratio"] = figures[name]["period_ms"] / plain
            figures[name]["ratio_without_views"] = (figures[name]["period_ms"] - figures[name]["views_ms"]) / plain
        rounds.append(figures)
        print(
            f"round {r + 1}: "
            + "; ".join(f"{n} {f['period_ms']:.1f} ms ({f['ratio']:.2f}x)" for n, f in figures.items())
        )
    counts = {}
    # ops are counted on the path a GPU runs: every view of a batch in one pass (on a CPU the views split into a
    # pass each above a size, hf_contrast.views.batched_simclr._CPU_ONE_PASS_BYTES, which is faster there)
    one_pass = getattr(batched_simclr, "_CPU_ONE_PASS_BYTES", None)
    if one_pass is not None:
        batched_simclr._CPU_ONE_PASS_BYTES = float("inf")
    # and the gradients' non-finite check as a GPU runs it (one fused reduction; a CPU checks each tensor: faster)
    fused_check = getattr(callbacks, "_FUSED_CHECK_ON_CPU", None)
    if fused_check is not None:
        callbacks._FUSED_CHECK_ON_CPU = True
    for name in names:
        stamps = runs[name](True)
        counts[name] = {"ops": stamps.ops, "host_reads": len(stamps.reads or []), "reads": stamps.reads or []}
    if one_pass is not None:
        batched_simclr._CPU_ONE_PASS_BYTES = one_pass
    if fused_check is not None:
        callbacks._FUSED_CHECK_ON_CPU = fused_check
    results = {
        "device": str(device),
        "torch_threads": torch.get_num_threads(),
        "batch_size": flags.batch_size,
        "rounds": rounds,
        "median": {
            name: {
                key: statistics.median(r[name][key] for r in rounds)
                for key in ("period_ms", "between_ms", "ratio", "views_ms", "ratio_without_views")
            }
            for name in names
        },
        "counts": counts,
    }
    lines = [
        f"| run (B = {flags.batch_size}, {device}, {torch.get_num_threads()} threads) | period, ms "
        "| between steps, ms | × plain loop | views alone, ms | × plain loop, views aside | ops per step "
        "| host reads per step |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name in names:
        m, c = results["median"][name], counts[name]
        lines.append(
            f"| {name} | {m['period_ms']:.1f} | {m['between_ms']:.1f} | {m['ratio']:.2f} | {m['views_ms']:.1f} "
            f"| {m['ratio_without_views']:.2f} | {c['ops']} "
            f"| {c['host_reads']} |"
        )
    table = "\n".join(lines)
    print(table)
    for name in names:
        if counts[name]["reads"]:
            print(f"{name}: host reads: {counts[name]['reads']}")
    if flags.json:
        with open(flags.json, "w") as f:
            json.dump(results, f, indent=2)
    if flags.markdown:
        with open(flags.markdown, "w") as f:
            f.write(table + "\n")


if __name__ == "__main__":
    main()
