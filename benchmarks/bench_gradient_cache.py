"""What cached-gradient training buys: peak memory and step time, direct step vs ``gradient_cache_size``.

For a ResNet-18 at 32 px (SimCLR and CARE) and a small BERT (SimCSE), one training step
(``ContrastiveTrainer.training_step``: forward, loss, backward) on a fixed batch, measured side by side in
one run:

- direct: the whole batch through the encoder at once (every view's activations alive together);
- cached: ``gradient_cache_size=MINI`` (encoder in mini-batches, objective on the whole batch).

Peak memory is what one step adds over the state before it: ``torch.cuda.max_memory_allocated`` on a GPU;
on a CPU the rise of the peak resident set size (``VmHWM``, reset through ``/proc/self/clear_refs``) in a
fresh process per configuration, so no allocator cache from another configuration hides a peak. A direct
step that runs out of memory is reported as ``OOM``. Usage::

    python benchmarks/bench_gradient_cache.py --batch_sizes 256 1024 --mini_batch 64 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

import numpy as np
import torch
from transformers import BertConfig

from hf_contrast.models import ContrastiveEncoder
from hf_contrast.objectives import CAREObjective
from hf_contrast.training import ContrastiveTrainer, ContrastiveTrainingArguments


def image_model() -> ContrastiveEncoder:
    return ContrastiveEncoder.from_backbone("resnet18", pretrained=False, projection_dim=128)


def text_model() -> tuple[ContrastiveEncoder, Any]:
    from transformers import BertTokenizerFast

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(995)]
    path = "/tmp/bench_gc_vocab.txt"
    with open(path, "w") as handle:
        handle.write("\n".join(vocab))
    tokenizer = BertTokenizerFast(vocab_file=path)
    config = BertConfig(vocab_size=len(vocab), hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                        intermediate_size=1024, max_position_embeddings=128)  # fmt: skip
    return ContrastiveEncoder.from_text_config(
        config, tokenizer=tokenizer, projection_dim=128, projection_norm=None
    ), tokenizer


def image_batch(n: int, device: torch.device, care: bool) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    batch = {f"pixel_values_{v}": torch.randn(n, 3, 32, 32, generator=g) for v in (1, 2)}
    if care:
        batch["pixel_values_eq"] = torch.randint(0, 256, (n, 3, 32, 32), generator=g, dtype=torch.uint8)
    return {k: v.to(device) for k, v in batch.items()}


def text_batch(n: int, device: torch.device, length: int = 32) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 1000, (n, length), generator=g)
    ids[:, 0], ids[:, -1] = 2, 3
    return {"input_ids": ids.to(device), "attention_mask": torch.ones_like(ids).to(device)}


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def step(
    trainer: ContrastiveTrainer, batch: dict[str, torch.Tensor], repeats: int, device: torch.device
) -> dict[str, Any]:
    model = trainer.model
    trainer.current_gradient_accumulation_steps = 1
    times, peak = [], None
    try:
        for i in range(repeats + 1):  # the first is a warm-up
            model.zero_grad(set_to_none=True)
            if device.type == "cuda":
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
            elif os.path.exists("/proc/self/clear_refs"):
                with open("/proc/self/clear_refs", "w") as handle:
                    handle.write("5")  # the peak RSS restarts from the current RSS
                base = _status_kib("VmRSS")
            start = time.perf_counter()
            trainer.training_step(model, dict(batch))
            if device.type == "cuda":
                torch.cuda.synchronize()
                peak = (torch.cuda.max_memory_allocated() - base) / 2**20
            elif os.path.exists("/proc/self/clear_refs"):
                peak = max(peak or 0.0, (_status_kib("VmHWM") - base) / 1024)
            if i:
                times.append(time.perf_counter() - start)
    except torch.OutOfMemoryError:
        model.zero_grad(set_to_none=True)
        torch.cuda.empty_cache()
        return {"time_s": None, "peak_mib": "OOM"}
    return {"time_s": sorted(times)[len(times) // 2], "peak_mib": peak}


def run_case(name: str, batch_size: int, cache: int | None, repeats: int, device: torch.device) -> dict[str, Any]:
    """One configuration: build the trainer, time ``repeats`` steps, measure the peak."""
    args = ContrastiveTrainingArguments(
        output_dir="/tmp/bench_gc", report_to="none", per_device_train_batch_size=batch_size,
        gradient_cache_size=cache, use_cpu=device.type == "cpu", image_size=32,
    )  # fmt: skip
    torch.manual_seed(0)
    if name.startswith("bert"):
        model, tokenizer = text_model()
        data = [{"text": "w1 w2"}] * 8  # not read: the step gets a fixed batch
        trainer = ContrastiveTrainer(
            model=model, args=args, train_dataset=data, objective="simclr", processing_class=tokenizer
        )
        batch = text_batch(batch_size, device)
    else:
        care = name.endswith("care")
        objective = CAREObjective(n_splits=max(1, batch_size // 64)) if care else "simclr"
        data = [{"image": np.zeros((32, 32, 3), dtype=np.uint8)}] * 8  # not read: the step gets a fixed batch
        trainer = ContrastiveTrainer(model=image_model(), args=args, train_dataset=data, objective=objective)
        batch = image_batch(batch_size, device, care)
    return step(trainer, batch, repeats, device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch_sizes", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--mini_batch", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--models", nargs="+", default=["resnet18-simclr", "resnet18-care", "bert-simcse"])
    parser.add_argument("--output", default=None, help="Write the rows as JSON here.")
    parser.add_argument("--case", default=None, help=argparse.SUPPRESS)  # worker: MODEL,BATCH,CACHE
    options = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if options.case:
        name, batch_size, cache = options.case.split(",")
        print(
            json.dumps(
                run_case(name, int(batch_size), None if cache == "none" else int(cache), options.repeats, device)
            )
        )
        return
    where = torch.cuda.get_device_name() if device.type == "cuda" else f"cpu ({torch.get_num_threads()} threads)"
    print(f"device: {where}; mini-batch {options.mini_batch}")
    rows = []
    for name in options.models:
        for batch_size in options.batch_sizes:
            results = {}
            for cache in (None, options.mini_batch):
                if device.type == "cuda":
                    results[cache] = run_case(name, batch_size, cache, options.repeats, device)
                    torch.cuda.empty_cache()
                else:  # a fresh process per configuration: an honest peak RSS
                    case = f"{name},{batch_size},{cache if cache is not None else 'none'}"
                    proc = subprocess.run(
                        [sys.executable, os.path.abspath(__file__), "--case", case, "--repeats", str(options.repeats)],
                        capture_output=True, text=True, check=True,
                    )  # fmt: skip
                    results[cache] = json.loads(proc.stdout.strip().splitlines()[-1])
            direct, cached = results[None], results[options.mini_batch]
            ratio = cached["time_s"] / direct["time_s"] if direct["time_s"] and cached["time_s"] else None
            memory = (
                cached["peak_mib"] / direct["peak_mib"]
                if isinstance(cached["peak_mib"], float)
                and isinstance(direct["peak_mib"], float)
                and direct["peak_mib"]
                else None
            )
            row = {"model": name, "batch": batch_size, "direct": direct, "cached": cached, "time_ratio": ratio,
                   "memory_ratio": memory}  # fmt: skip
            rows.append(row)
            print(json.dumps(row), flush=True)
    if options.output:
        with open(options.output, "w") as handle:
            json.dump(rows, handle, indent=1)


if __name__ == "__main__":
    main()
