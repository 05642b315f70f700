"""Memory per process under DDP vs FSDP full shard, on 2 CPU processes (gloo).

For a BERT-base-sized text encoder (``BertConfig()`` defaults, random init, no download) and a ViT-B/16 image
encoder (``timm`` ``vit_base_patch16_224``, ``pretrained=False``), each a :class:`ContrastiveEncoder` with a
128-d projection head, a few AdamW steps of InfoNCE with ``gather_distributed=True`` on two views, each
engine in a fresh pair of processes started by ``torchrun``:

- DDP: ``DistributedDataParallel`` as the Trainer wraps it (every process holds the whole model);
- FSDP: torch's FSDP2 ``fully_shard``, each transformer block (``BertLayer``, timm ``Block``) a unit, then
  the root: what ``examples/accelerate_configs/fsdp.yaml`` does on GPUs (Accelerate runs no FSDP on CPU
  processes, see docs/scaling-out.md).

Per process it records the bytes of parameters, gradients and AdamW state it holds (a DTensor counts its
local shard), the resident set after the model is built and after it is wrapped (``VmRSS``, after
``gc.collect`` and ``malloc_trim``, so the full copy FSDP shards away is returned), and the peak resident
set over the training steps (``VmHWM``, reset through ``/proc/self/clear_refs`` once the model is
wrapped) and over the whole process (``ru_maxrss``, which includes building the full model on every
process before sharding). Linux only. Usage::

    python benchmarks/bench_memory_distributed.py --steps 3 --batch 4 --seq_len 32 --img_size 64

The JSON of every process goes to ``--out`` (default ``benchmarks/results/memory_distributed.json``,
gitignored); the table is printed as Markdown.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

MiB = 2**20


def _status(field: str) -> int:
    """A ``/proc/self/status`` memory field (``VmRSS``, ``VmHWM``) in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def _settle() -> None:
    """Return freed memory to the system, so the resident set counts what is alive."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _reset_peak() -> None:
    """Reset ``VmHWM`` to the current resident set (Linux >= 4.0)."""
    Path("/proc/self/clear_refs").write_text("5")


def _local_bytes(tensor: torch.Tensor) -> int:
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
    return local.numel() * local.element_size()


def build(model_name: str, img_size: int) -> torch.nn.Module:
    from hf_contrast.models import ContrastiveEncoder

    torch.manual_seed(0)
    if model_name == "bert":
        from transformers import BertConfig

        return ContrastiveEncoder.from_text_config(BertConfig(), projection_dim=128, projection_norm=None)
    return ContrastiveEncoder.from_backbone(
        "vit_base_patch16_224",
        pretrained=False,
        projection_dim=128,
        projection_norm=None,
        backbone_kwargs={"img_size": img_size},
    )


def wrap(model: torch.nn.Module, engine: str) -> torch.nn.Module:
    if engine == "ddp":
        return torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=True)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (torch.distributed.get_world_size(),))
    for module in list(model.modules()):
        if type(module).__name__ in ("Block", "BertLayer"):
            fully_shard(module, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def batch(model_name: str, args: argparse.Namespace, rank: int, step: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * step + rank)
    if model_name == "bert":
        return {"input_ids": torch.randint(1000, 30000, (args.batch, args.seq_len), generator=g)}
    return {"pixel_values": torch.randn(args.batch, 3, args.img_size, args.img_size, generator=g)}


def worker(args: argparse.Namespace) -> None:
    from hf_contrast.losses import info_nce_loss

    torch.distributed.init_process_group("gloo")
    rank = torch.distributed.get_rank()
    _settle()
    rss_start = _status("VmRSS")
    model = build(args.model, args.img_size)
    n_params = sum(p.numel() for p in model.parameters())
    _settle()
    rss_built = _status("VmRSS")
    model = wrap(model, args.engine)
    _settle()
    rss_wrapped = _status("VmRSS")
    _reset_peak()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model.train()
    times, grad_bytes = [], 0
    for step in range(args.steps):
        start = time.perf_counter()
        inputs = batch(args.model, args, rank, step)
        if args.model == "bert":  # two views: the same tokens through dropout (SimCSE)
            z1, z2 = model(**inputs).projections, model(**inputs).projections
        else:  # two views: two noisy copies
            noise = torch.randn_like(inputs["pixel_values"])
            z1, z2 = (
                model(pixel_values=inputs["pixel_values"]).projections,
                model(pixel_values=inputs["pixel_values"] + 0.1 * noise).projections,
            )
        loss = info_nce_loss(z1, z2, gather_distributed=True)
        loss.backward()
        grad_bytes = sum(_local_bytes(p.grad) for p in model.parameters() if p.grad is not None)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
    peak_train = _status("VmHWM")
    record = {
        "model": args.model,
        "engine": args.engine,
        "rank": rank,
        "world_size": torch.distributed.get_world_size(),
        "n_params": n_params,
        "param_bytes": sum(_local_bytes(p) for p in model.parameters()),
        "grad_bytes": grad_bytes,
        "optimizer_bytes": sum(
            _local_bytes(v) for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v)
        ),
        "rss_start": rss_start,
        "rss_built": rss_built,
        "rss_wrapped": rss_wrapped,
        "peak_train": peak_train,
        "ru_maxrss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "step_seconds": times,
        "loss": loss.item(),
    }
    records: list[Any] = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(records, record)
    if rank == 0:
        Path(args.record).write_text(json.dumps(records))
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def launch(model: str, engine: str, args: argparse.Namespace, record: Path) -> list[dict[str, Any]]:
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
        "--master_port", str(_free_port()), __file__, "--worker", "--model", model, "--engine", engine,
        "--steps", str(args.steps), "--batch", str(args.batch), "--seq_len", str(args.seq_len),
        "--img_size", str(args.img_size), "--record", str(record),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(command, check=False, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"{model}/{engine} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return json.loads(record.read_text())


def table(records: list[dict[str, Any]]) -> str:
    """Markdown: the largest value over the processes, per model and engine, and FSDP/DDP."""
    rows = [
        "| encoder | engine | params + grads + AdamW held | RSS after wrap | peak RSS in training | peak RSS, whole "
        "process | step |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    by = {(r["model"], r["engine"]): r for r in records}
    names = {"bert": "BERT-base (110 M)", "vit": "ViT-B/16 (86 M)"}
    for model in dict.fromkeys(r["model"] for r in records):
        for engine in ("ddp", "fsdp", "fsdp/ddp"):
            if engine == "fsdp/ddp":
                d, f = by[(model, "ddp")], by[(model, "fsdp")]
                ratio = [f[k] / d[k] for k in ("held", "rss_wrapped", "peak_train", "ru_maxrss", "step")]
                rows.append(
                    f"| | **FSDP / DDP** | **{ratio[0]:.2f}** | **{ratio[1]:.2f}** | **{ratio[2]:.2f}** | "
                    f"**{ratio[3]:.2f}** | {ratio[4]:.2f} |"
                )
                continue
            r = by[(model, engine)]
            rows.append(
                f"| {names.get(model, model)} | {engine.upper()} | {r['held'] / MiB:,.0f} MiB | "
                f"{r['rss_wrapped'] / MiB:,.0f} MiB "
                f"| {r['peak_train'] / MiB:,.0f} MiB | {r['ru_maxrss'] / MiB:,.0f} MiB | {r['step']:.2f} s |"
            )
    return "\n".join(rows)


def summarise(per_process: list[dict[str, Any]]) -> dict[str, Any]:
    """The largest value over the processes (the one that runs out of memory first).

    The step time is the median over the steps after the first.
    """
    import statistics

    first = per_process[0]
    steps = [t for r in per_process for t in (r["step_seconds"][1:] or r["step_seconds"])]
    return {
        "model": first["model"],
        "engine": first["engine"],
        "held": max(r["param_bytes"] + r["grad_bytes"] + r["optimizer_bytes"] for r in per_process),
        "rss_start": max(r["rss_start"] for r in per_process),
        "rss_wrapped": max(r["rss_wrapped"] for r in per_process),
        "peak_train": max(r["peak_train"] for r in per_process),
        "ru_maxrss": max(r["ru_maxrss"] for r in per_process),
        "step": statistics.median(steps),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["bert", "vit"], choices=["bert", "vit"])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=4, help="rows per process (two views each)")
    parser.add_argument("--seq_len", type=int, default=32)
    parser.add_argument("--img_size", type=int, default=64)
    parser.add_argument("--out", default="benchmarks/results/memory_distributed.json")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--engine", help=argparse.SUPPRESS)
    parser.add_argument("--record", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    raw, summary = [], []
    for model in args.models:
        for engine in ("ddp", "fsdp"):
            per_process = launch(model, engine, args, out.with_suffix(f".{model}.{engine}.json"))
            raw.extend(per_process)
            summary.append(summarise(per_process))
            print(json.dumps(summary[-1]), flush=True)
    allocator = {k: v for k, v in os.environ.items() if k.startswith("MALLOC_")}
    out.write_text(
        json.dumps({"args": vars(args), "allocator": allocator, "processes": raw, "summary": summary}, indent=1)
    )
    print(table(summary))


if __name__ == "__main__":
    main()
