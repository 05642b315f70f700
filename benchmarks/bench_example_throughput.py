"""Images/s of an example script against a plain PyTorch loop on the same model (issue 28, on one GPU).

Not a test, not part of CI. Two modes::

    # the public example, unchanged, with a public TrainerCallback that stamps every step's beginning
    python benchmarks/bench_example_throughput.py example --json run.json -- \\
        examples/run_care.py --method simclr --dataset FOLDER --per_device_train_batch_size 512 --bf16 ...
    # the floor: a plain loop on pre-made views with the same encoder, batch, precision and optimizer
    python benchmarks/bench_example_throughput.py plain --json plain.json --batch_size 512 --bf16 [--small_image_stem]

``example`` runs the script in this process (``runpy``) after wrapping ``ContrastiveTrainer.__init__`` so that
every trainer it builds gets :class:`StepClock`; it reports the median step period from step ``--warmup`` on
(steps only: the start-up, the image cache, the final evaluation and the pictures are outside it) and the
images/s it gives (source images per second, ``B / period``). ``plain`` times the loop the same way: two
pre-made view tensors on the device, ``ContrastiveEncoder.from_backbone(model, pretrained=False,
projection_dim=128, small_image_stem=...)`` (run_care's defaults), plain NT-Xent (τ = 0.5, SimCLR's default
here), ``backward``, the optimizer the Trainer builds (``Trainer.get_optimizer_cls_and_kwargs``), bf16 autocast
when asked. On CUDA each step ends with a synchronisation in both modes, so a period is the device's time.
"""

from __future__ import annotations

import argparse
import json
import runpy
import statistics
import sys
import tempfile
import time
import warnings
from typing import Any

import torch
import torch.nn.functional as F
import transformers
from transformers import TrainerCallback


class StepClock(TrainerCallback):
    """Stamps each step's beginning; on CUDA synchronises at each step's end (a period is the device's time).

    With ``sync_debug`` (CUDA), ``torch.cuda.set_sync_debug_mode("warn")`` is on from each step's beginning to its
    end (the step itself: forward, backward, optimizer; not the next batch or the logging after it), and the
    synchronising operations it reports are counted in :attr:`syncs`."""

    def __init__(self, sync_debug: bool = False) -> None:
        self.begins: list[float] = []
        self.sync_debug = sync_debug and torch.cuda.is_available()
        self.syncs: list[str] = []
        self._caught: Any = None

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.begins.append(time.perf_counter())
        if self.sync_debug:
            self._caught = warnings.catch_warnings(record=True)
            self._records = self._caught.__enter__()
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.sync_debug and self._caught is not None:
            torch.cuda.set_sync_debug_mode("default")
            self._caught.__exit__(None, None, None)
            self.syncs += [str(w.message)[:200] for w in self._records if "synchroniz" in str(w.message)]
            self._caught = None
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    def period(self, warmup: int) -> float:
        """Median seconds from one step's beginning to the next, from step ``warmup`` on."""
        stamps = self.begins[warmup:]
        return statistics.median(b - a for a, b in zip(stamps, stamps[1:]))


def time_example(script: list[str], warmup: int, sync_debug: bool = False) -> dict[str, Any]:
    from hf_contrast.training import ContrastiveTrainer

    clock = StepClock(sync_debug)
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
    period = clock.period(warmup)
    result = {"command": " ".join(script), "steps": len(clock.begins), "period_ms": 1e3 * period,
              "images_per_s": batch / period, "wall_s": time.perf_counter() - start}  # fmt: skip
    if clock.sync_debug:
        result["syncs_in_steps"] = len(clock.syncs)
        result["sync_examples"] = sorted(set(clock.syncs))[:5]
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
    for _ in range(flags.steps):
        stamps.append(time.perf_counter())
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=flags.bf16):
            z = model(pixel_values=views)["projections"]
        loss = nt_xent(*z.split(flags.batch_size))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    stamps = stamps[flags.warmup :]
    period = statistics.median(b - a for a, b in zip(stamps, stamps[1:]))
    return {"model": flags.model, "small_image_stem": flags.small_image_stem, "batch_size": flags.batch_size,
            "bf16": flags.bf16, "period_ms": 1e3 * period, "images_per_s": flags.batch_size / period}  # fmt: skip


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
        "--sync_debug", action="store_true", help="example, CUDA: count synchronising operations inside steps"
    )
    argv = sys.argv[1:]
    script = argv[argv.index("--") + 1 :] if "--" in argv else []
    flags = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    if flags.mode == "example" and not script:
        parser.error("example mode needs the script and its flags after `--`")
    result = time_example(script, flags.warmup, flags.sync_debug) if flags.mode == "example" else time_plain(flags)
    result = {"mode": flags.mode, "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
              **result}  # fmt: skip
    print(json.dumps(result))
    if flags.json:
        with open(flags.json, "a") as f:
            f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
