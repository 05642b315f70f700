"""Benchmark the tiled (memory-linear) InfoNCE and SupCon against their dense form and the peers.

Launch (CPU or one GPU; not a test, not part of CI)::

    python benchmarks/bench_tiled.py                       # B in {1024, 4096, 16384, 65536}, D = 128
    python benchmarks/bench_tiled.py --batch-sizes 1024 4096 --output /tmp/tiled.md
    python benchmarks/bench_tiled.py --threads 2           # fix the thread count on a shared machine

Cases, on the *same* random inputs (D = 128, 10 classes for SupCon) in *one* run:
``info_nce`` dense (``tile_size=0``) and tiled (``tile_size=1024``), ``lightly.loss.NTXentLoss``;
``supcon`` dense and tiled, ``pytorch_metric_learning.losses.SupConLoss``; and both tiled losses
through the general rows × columns form (``tiled_row_logsumexp``: what ``gather_distributed=True``
runs, and what one process ran before the symmetric form), to show what the symmetry buys.

- **time**: for ``B <= --repeat-max-batch`` (default 4096), the median wall time of one
  ``loss = f(inputs); loss.backward()`` over ``--repeats`` runs after a warm-up, the cases of one
  loss interleaved run by run (``bench_losses.time_group``) so that machine noise hits all alike.
  Above it (one InfoNCE step at B = 65,536 walks 2·10¹⁰ similarities: minutes on 2 CPU cores) the
  time is the single forward+backward of the memory measurement below.
- **peak memory**: on CUDA, ``torch.cuda.max_memory_allocated`` minus the memory allocated before
  the call. On CPU, the increase of the peak resident set size (``VmHWM``, reset through
  ``/proc/self/clear_refs``) over the resident size just before the call, in a separate worker
  process started with ``MALLOC_MMAP_THRESHOLD_=65536`` (freed buffers go back to the OS, so each
  case starts from a clean slate). It counts everything the call allocates (forward intermediates,
  what autograd saves, the gradients), not the inputs. Resolution ~1 MiB.
- Dense and peer cases whose estimated peak (measured MiB at B = 4096 scaled by ``(B/4096)²``)
  exceeds ``--max-dense-gib`` are skipped and listed as such.

Targets (issue 11): tiled ≤ 1.3× dense time at B = 4096; tiled memory at B = 65,536 under 1 GiB;
log-log slope of tiled memory in B ≤ 1.1 (between the two largest B).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable

import torch
from torch import Tensor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_losses import Case, _status_kib, loglog_slope, time_group

import hf_contrast.losses as hl

D = 128
N_CLASSES = 10
TILE = 1024  # default tile edge of the tiled cases (--tile; the workers read BENCH_TILE)
# Peak MiB of the dense cases at B = 4096 on CPU (bench_losses, docs/benchmarks/losses.md), to decide what to skip.
DENSE_MIB_AT_4096 = {"info_nce dense": 779, "lightly NTXentLoss": 1076, "supcon dense": 324, "PML SupConLoss": 724}
TILED = {"info_nce tiled", "supcon tiled"}  # the cases the targets are about
GROUPS = {
    "InfoNCE": ["info_nce tiled", "info_nce dense", "lightly NTXentLoss", "info_nce tiled (general form)"],
    "SupCon": ["supcon tiled", "supcon dense", "PML SupConLoss", "supcon tiled (general form)"],
}


def build_cases(tile: int) -> dict[str, Case]:
    from lightly.loss import NTXentLoss
    from pytorch_metric_learning.losses import SupConLoss

    ntxent, pml = NTXentLoss(temperature=0.5), SupConLoss(temperature=0.1)
    fns: dict[str, Callable[[dict[str, Tensor]], Tensor]] = {
        "info_nce tiled": lambda x: hl.info_nce_loss(x["z1"], x["z2"], temperature=0.5, tile_size=tile),
        "info_nce dense": lambda x: hl.info_nce_loss(x["z1"], x["z2"], temperature=0.5, tile_size=0),
        "lightly NTXentLoss": lambda x: ntxent(x["z1"], x["z2"]),
        "supcon tiled": lambda x: hl.supcon_loss(x["z1"], x["labels"], temperature=0.1, tile_size=tile),
        "supcon dense": lambda x: hl.supcon_loss(x["z1"], x["labels"], temperature=0.1, tile_size=0),
        "PML SupConLoss": lambda x: pml(x["z1"], x["labels"]),
        "info_nce tiled (general form)": lambda x: _general_info_nce(x["z1"], x["z2"], 0.5, tile),
        "supcon tiled (general form)": lambda x: _general_supcon(x["z1"], x["labels"], 0.1, tile),
    }
    return {name: Case(name, fn) for name, fn in fns.items()}


def _general_info_nce(z1: Tensor, z2: Tensor, temperature: float, tile: int) -> Tensor:
    """InfoNCE through the general rows × columns form (what ``gather_distributed=True`` runs, and
    what one process ran before the symmetric form): every block computed from both sides."""
    from hf_contrast.losses.tiled import tiled_row_logsumexp

    anchors = torch.nn.functional.normalize(torch.cat([z1, z2]), dim=1)
    scaled = anchors / temperature
    positive = (scaled * anchors.roll(z1.shape[0], dims=0)).sum(dim=1)
    return (tiled_row_logsumexp(scaled, anchors, tile_size=tile)[0] - positive).mean()


def _general_supcon(z: Tensor, labels: Tensor, temperature: float, tile: int) -> Tensor:
    """SupCon through the general rows × columns form (see :func:`_general_info_nce`)."""
    from hf_contrast.losses.tiled import tiled_row_logsumexp

    z = torch.nn.functional.normalize(z, dim=1)
    n_pos = (labels[:, None] == labels.unique()[None, :]).sum(dim=0)[torch.searchsorted(labels.unique(), labels)] - 1
    lse, pos = tiled_row_logsumexp(z / temperature, z, labels, labels, 0, False, tile)
    valid = n_pos > 0
    return -((pos - n_pos * lse) / n_pos.clamp(min=1))[valid].mean()


def make_inputs(b: int, device: torch.device, seed: int = 0) -> dict[str, Tensor]:
    g = torch.Generator().manual_seed(seed + b)
    z1 = torch.randn(b, D, generator=g)
    return {
        "z1": z1.to(device).requires_grad_(True),
        "z2": (z1 + 0.5 * torch.randn(b, D, generator=g)).to(device).requires_grad_(True),
        "labels": torch.randint(0, N_CLASSES, (b,), generator=g).to(device),
    }


def _run(case: Case, inputs: dict[str, Tensor]) -> None:
    for t in inputs.values():
        t.grad = None
    case.fn(inputs).backward()


def peak_memory_and_time(case: Case, b: int, device: torch.device) -> tuple[float, float]:
    """Peak MiB above the state before one forward+backward (see module doc), and its seconds."""
    _run(case, make_inputs(64, device))  # lazy initialisation outside the measurement
    inputs = make_inputs(b, device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        start = time.perf_counter()
        _run(case, inputs)
        torch.cuda.synchronize(device)
        return (torch.cuda.max_memory_allocated(device) - before) / 2**20, time.perf_counter() - start
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the peak resident set size (VmHWM) to the current one
    before = _status_kib("VmRSS")
    start = time.perf_counter()
    _run(case, inputs)
    seconds = time.perf_counter() - start
    return (_status_kib("VmHWM") - before) / 1024, seconds


def memory_worker() -> None:
    """Read one ``[case, B]`` as JSON on stdin, print ``{"mib": ..., "seconds": ...}``."""
    name, b = json.load(sys.stdin)
    device = torch.device(os.environ.get("BENCH_DEVICE", "cpu"))
    mib, seconds = peak_memory_and_time(build_cases(int(os.environ["BENCH_TILE"]))[name], b, device)
    print(json.dumps({"mib": mib, "seconds": seconds}))


def measure(name: str, b: int, device: torch.device) -> tuple[float, float]:
    """One fresh worker process per (case, B): no allocator state carries over between cases."""
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", BENCH_DEVICE=str(device))
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--memory-worker", "--threads", str(torch.get_num_threads())],
        input=json.dumps([name, b]), capture_output=True, check=False, text=True, env=env,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"the memory worker failed on {name} at B={b}:\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return out["mib"], out["seconds"]


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.0f}" if seconds >= 1 else f"{seconds * 1e3:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1024, 4096, 16384, 65536])
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per case for B <= --repeat-max-batch")
    parser.add_argument("--repeat-max-batch", type=int, default=4096)
    parser.add_argument("--max-dense-gib", type=float, default=4.0, help="skip dense/peer cases estimated above this")
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's choice)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--output", help="also write the Markdown report to this file")
    parser.add_argument("--tile", type=int, default=TILE, help="tile edge of the tiled cases (default 1024)")
    parser.add_argument("--memory-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.memory_worker:
        memory_worker()
        return
    os.environ["BENCH_TILE"] = str(args.tile)  # for the memory workers
    device = torch.device(args.device)
    cases = build_cases(args.tile)
    t: dict[tuple[str, int], float] = {}
    mem: dict[tuple[str, int], float] = {}
    skipped: list[str] = []
    started = time.perf_counter()

    def feasible(name: str, b: int) -> bool:
        if name not in DENSE_MIB_AT_4096:
            return True
        estimate_gib = DENSE_MIB_AT_4096[name] * (b / 4096) ** 2 / 1024
        if estimate_gib > args.max_dense_gib:
            skipped.append(
                f"{name} at B={b} (estimated {estimate_gib:.0f} GiB > --max-dense-gib {args.max_dense_gib:g})"
            )
            return False
        return True

    for b in args.batch_sizes:
        for group in GROUPS.values():
            names = [n for n in group if feasible(n, b)]
            if b <= args.repeat_max_batch:
                print(f"timing {names} at B={b} ...", file=sys.stderr, flush=True)
                times = time_group([cases[n] for n in names], make_inputs(b, device), args.repeats, device)
                t.update({(n, b): sec for n, sec in times.items()})
                print(f"  times: { {n: round(sec, 4) for n, sec in times.items()} }", file=sys.stderr, flush=True)
            for n in names:
                print(
                    f"memory {n} at B={b} ({time.perf_counter() - started:.0f} s so far) ...",
                    file=sys.stderr,
                    flush=True,
                )
                mib, seconds = measure(n, b, device)
                mem[(n, b)] = mib
                t.setdefault((n, b), seconds)
                print(f"  {n} B={b}: {mib:.0f} MiB, single run {seconds:.3f} s", file=sys.stderr, flush=True)

    cell = lambda n, b: f"{_ms(t[(n, b)])} ms / {mem[(n, b)]:.0f} MiB" if (n, b) in t else "skipped"  # noqa: E731
    lines = [
        f"Tiled-loss benchmark: forward+backward, D = {D}, device `{device}`, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, tile {args.tile}. Time: median of {args.repeats} interleaved runs for "
        f"B ≤ {args.repeat_max_batch}, one run above. Peak memory above the inputs (see the header of "
        f"`benchmarks/bench_tiled.py`). Wall time of the whole run: {time.perf_counter() - started:.0f} s.",
        "",
        "| case | " + " | ".join(f"B={b}" for b in args.batch_sizes) + " |",
        "|---|" + "---:|" * len(args.batch_sizes),
    ]
    for group in GROUPS.values():
        for n in group:
            lines.append(f"| {n} | " + " | ".join(cell(n, b) for b in args.batch_sizes) + " |")
    lines += ["", "| target | measured | status |", "|---|---|---|"]
    for label, group in GROUPS.items():
        tiled, dense, peer, general = group
        if (tiled, 4096) in t and (dense, 4096) in t:
            ratio = t[(tiled, 4096)] / t[(dense, 4096)]
            peer_ratio = f", {t[(tiled, 4096)] / t[(peer, 4096)]:.2f}× {peer}" if (peer, 4096) in t else ""
            if (general, 4096) in t:
                peer_ratio += f"; general form {t[(general, 4096)] / t[(dense, 4096)]:.2f}× dense"
            lines.append(
                f"| {label} tiled ≤ 1.3× dense time at B = 4096 | {ratio:.2f}×{peer_ratio} | "
                f"{'**met**' if ratio <= 1.3 else '**missed**'} |"
            )
        if (tiled, 65536) in mem:
            mib = mem[(tiled, 65536)]
            lines.append(
                f"| {label} tiled memory at B = 65,536 < 1 GiB | {mib:.0f} MiB | "
                f"{'**met**' if mib < 1024 else '**missed**'} |"
            )
        xs = [b for b in args.batch_sizes if (tiled, b) in mem][-2:]
        if len(xs) == 2:
            slope = loglog_slope(xs, [mem[(tiled, b)] for b in xs])
            all_xs = [b for b in args.batch_sizes if (tiled, b) in mem]
            slope_all = loglog_slope(all_xs, [mem[(tiled, b)] for b in all_xs])
            lines.append(
                f"| {label} tiled memory slope in B ≤ 1.1 | {slope:.2f} "
                f"(B = {xs[0]}→{xs[1]}; {slope_all:.2f} over all B) | {'**met**' if slope <= 1.1 else '**missed**'} |"
            )
    if skipped:
        lines += ["", "Skipped (would exceed memory): " + "; ".join(skipped) + "."]
    report = "\n".join(lines)
    print(report)
    if args.output:
        with open(args.output, "w") as f:
            f.write(report + "\n")


if __name__ == "__main__":
    main()
