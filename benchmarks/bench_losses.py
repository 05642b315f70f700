"""Benchmark every hf_contrast loss (forward + backward) against the peer libraries.

Launch (CPU or one GPU; not a test, not part of CI)::

    python benchmarks/bench_losses.py                    # full run, a few minutes on 2 CPU cores
    python benchmarks/bench_losses.py --quick            # B in {256, 1024}, 3 repeats
    python benchmarks/bench_losses.py --output BENCHMARKS.md
    python benchmarks/bench_losses.py --threads 1        # steadier timings on a shared machine

What is measured, for every case on the *same* random inputs (D = 128) in the *same* run:

- **time**: the median wall time (``time.perf_counter``; CUDA synchronised) of one
  ``loss = f(inputs); loss.backward()`` over ``--repeats`` runs after a warm-up. The cases compared
  with each other are run round-robin, so machine noise hits both sides alike.
- **peak memory**: on CUDA, ``torch.cuda.max_memory_allocated`` minus the memory allocated before
  the call. On CPU, the increase of the peak resident set size (``VmHWM``, reset through
  ``/proc/self/clear_refs``) over the resident size just before the call, in a separate worker
  process started with ``MALLOC_MMAP_THRESHOLD_=65536`` so that freed buffers are returned to the OS
  and every case starts from a clean slate. It counts everything the call touches: the forward
  intermediates, what autograd saves, the gradients; not the inputs. Resolution ~1 MiB.

Peers: ``lightly.loss.NTXentLoss`` (vs ``info_nce_loss``), ``pytorch_metric_learning.losses.SupConLoss``
(vs ``supcon_loss`` and ``ocl_loss``), and a literal pair-index SimO written below from the SimO
paper's Algorithm 1 (vs ``simo_loss``). Targets (issues 2 and 6) are marked met/missed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

import hf_contrast.losses as hl

D = 128
N_CLASSES = 10  # labels of the supervised losses (SupCon, OCL): 10 classes, CIFAR-10-like
CARE_SPLITS = 16  # CARE's CIFAR-10 setting
AFCL_CLASSES = 16  # AFCL batch: 16 classes x B/16 samples, class-major
SIMO_LABEL = 0.5  # exercises both terms of SimO


# --------------------------------------------------------------------------------------------
# The literal pair-index SimO of the paper's Algorithm 1 (O(m^2 D) memory: one row per pair).
# --------------------------------------------------------------------------------------------
def _pairwise_dot_product_squared(e1: Tensor, e2: Tensor) -> Tensor:
    return torch.dot(e1, e2) ** 2


def _pairwise_squared_distance(e1: Tensor, e2: Tensor) -> Tensor:
    return ((e1 - e2) ** 2).sum()


def simo_pair_index(embeddings: Tensor, label_batch: float, indices: Tensor, epsilon: float = 1e-6) -> Tensor:
    """SimO exactly as Algorithm 1: gather both members of every pair, vmap the pair functions."""
    e1, e2 = embeddings[indices[0]], embeddings[indices[1]]  # (P, D) each
    ortho_loss = torch.vmap(_pairwise_dot_product_squared)(e1, e2).sum()
    sim_loss = torch.vmap(_pairwise_squared_distance)(e1, e2).sum()
    total = label_batch * sim_loss / (epsilon + ortho_loss) + (1 - label_batch) * ortho_loss / (epsilon + sim_loss)
    return total / indices[0].shape[0]


# --------------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    """One loss: ``fn(inputs) -> scalar`` where ``inputs`` holds leaf tensors of batch size B."""

    name: str
    fn: Callable[[dict[str, Tensor]], Tensor]


def _lightly_ntxent() -> Callable[[dict[str, Tensor]], Tensor]:
    from lightly.loss import NTXentLoss

    loss = NTXentLoss(temperature=0.5)
    return lambda x: loss(x["z1"], x["z2"])


def _pml_supcon() -> Callable[[dict[str, Tensor]], Tensor]:
    from pytorch_metric_learning.losses import SupConLoss

    loss = SupConLoss(temperature=0.1)
    return lambda x: loss(x["z1"], x["labels"])


_align_uniform = hl.AlignUniformLoss()


def build_cases() -> dict[str, Case]:
    cases = [
        Case("info_nce", lambda x: hl.info_nce_loss(x["z1"], x["z2"], temperature=0.5)),
        Case("lightly NTXentLoss", _lightly_ntxent()),
        Case("supcon", lambda x: hl.supcon_loss(x["z1"], x["labels"], temperature=0.1)),
        Case("ocl", lambda x: hl.ocl_loss(x["z1"], x["labels"], temperature=0.1)),
        Case("PML SupConLoss", _pml_supcon()),
        Case("simo", lambda x: hl.simo_loss(x["z1"], SIMO_LABEL)),
        Case("pair-index SimO", lambda x: simo_pair_index(x["z1"], SIMO_LABEL, x["pairs"])),
        Case("care_equivariance", lambda x: hl.care_equivariance_loss(x["z1"], x["z2"], n_splits=CARE_SPLITS)),
        Case("afcl", lambda x: hl.afcl_loss(x["z1"], n_classes=AFCL_CLASSES)),
        Case("align_uniform", lambda x: _align_uniform(x["z1"], x["z2"])["loss"]),
        Case("spectral", lambda x: hl.spectral_contrastive_loss(x["z1"], x["z2"])),
        Case("vicreg", lambda x: hl.vicreg_loss(x["z1"], x["z2"])),
        Case("binary_nce all", lambda x: hl.binary_nce_loss(x["z1"], x["z2"], negatives="all")),
        Case("binary_nce shifted", lambda x: hl.binary_nce_loss(x["z1"], x["z2"], negatives="shifted")),
    ]
    return {c.name: c for c in cases}


def make_inputs(b: int, device: torch.device, seed: int = 0, pairs: bool = False) -> dict[str, Tensor]:
    """Two views, labels, and (for the pair-index SimO) the unique pair indices, all seeded."""
    g = torch.Generator().manual_seed(seed + b)
    z1 = torch.randn(b, D, generator=g)
    inputs = {
        "z1": z1.to(device).requires_grad_(True),
        "z2": (z1 + 0.5 * torch.randn(b, D, generator=g)).to(device).requires_grad_(True),
        "labels": torch.randint(0, N_CLASSES, (b,), generator=g).to(device),
    }
    if pairs:
        inputs["pairs"] = torch.triu_indices(b, b, offset=1, device=device)
    return inputs


def run_once(case: Case, inputs: dict[str, Tensor]) -> None:
    for t in inputs.values():
        t.grad = None
    case.fn(inputs).backward()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_group(
    cases: list[Case], inputs: dict[str, Tensor], repeats: int, device: torch.device, warmup: int = 1
) -> dict[str, float]:
    """Median seconds of forward+backward per case; the cases are interleaved repeat by repeat.

    Cheap groups get more repeats (up to ~1 s of timed work, at most 50), so that a single
    scheduler hiccup on a shared machine cannot move the median of a millisecond-scale case.
    """
    _sync(device)
    start = time.perf_counter()
    for case in cases:
        for _ in range(warmup):
            run_once(case, inputs)
    _sync(device)
    round_time = (time.perf_counter() - start) / max(warmup, 1)
    repeats = max(repeats, min(50, int(1.0 / max(round_time, 1e-6))))
    times: dict[str, list[float]] = {c.name: [] for c in cases}
    for _ in range(repeats):
        for case in cases:
            _sync(device)
            start = time.perf_counter()
            run_once(case, inputs)
            _sync(device)
            times[case.name].append(time.perf_counter() - start)
    return {name: statistics.median(ts) for name, ts in times.items()}


# --------------------------------------------------------------------------------------------
# Peak memory
# --------------------------------------------------------------------------------------------
def _status_kib(key: str) -> int:
    with open("/proc/self/status") as f:
        return int(re.search(rf"^{key}:\s+(\d+) kB", f.read(), re.MULTILINE).group(1))


def peak_memory_mib(case: Case, b: int, device: torch.device) -> float:
    """Peak memory of one forward+backward above the state before it, in MiB (see module doc)."""
    inputs = make_inputs(b, device, pairs=case.name == "pair-index SimO")
    run_once(case, make_inputs(64, device, pairs=case.name == "pair-index SimO"))  # lazy initialisation
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        run_once(case, inputs)
        torch.cuda.synchronize(device)
        return (torch.cuda.max_memory_allocated(device) - before) / 2**20
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the peak resident set size (VmHWM) to the current one
    before = _status_kib("VmRSS")
    run_once(case, inputs)
    return (_status_kib("VmHWM") - before) / 1024


def memory_worker() -> None:
    """Read ``[[case, B], ...]`` as JSON on stdin, print ``{"case|B": MiB}``."""
    cases = build_cases()
    device = torch.device(os.environ.get("BENCH_DEVICE", "cpu"))
    out = {}
    for name, b in json.load(sys.stdin):
        out[f"{name}|{b}"] = peak_memory_mib(cases[name], b, device)
    print(json.dumps(out))


def measure_memory(jobs: list[tuple[str, int]], device: torch.device) -> dict[tuple[str, int], float]:
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", BENCH_DEVICE=str(device))
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--memory-worker", "--threads", str(torch.get_num_threads())],
        input=json.dumps(jobs),
        capture_output=True,
        text=True,
        env=env,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the memory worker failed:\n{proc.stderr[-3000:]}")
    raw = json.loads(proc.stdout.strip().splitlines()[-1])
    return {(k.rsplit("|", 1)[0], int(k.rsplit("|", 1)[1])): v for k, v in raw.items()}


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------
def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f}" if seconds < 10 else f"{seconds * 1e3:.0f}"


def _mib(mem: dict[tuple[str, int], float], name: str, b: int) -> str:
    return f"{mem[(name, b)]:.0f}" if (name, b) in mem else "–"


def _status(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


def loglog_slope(xs: list[int], ys: list[float]) -> float:
    """Least-squares slope of log(time) against log(B)."""
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[256, 1024, 4096])
    parser.add_argument("--shifted-batch-sizes", type=int, nargs="+", default=[256, 1024, 4096, 8192, 16384])
    parser.add_argument("--simo-sizes", type=int, nargs="+", default=[256, 1024])
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="timed runs per case, default 7 (3 with --quick); halved, min 3, for B >= 4096",
    )
    parser.add_argument("--quick", action="store_true", help="B in {256, 1024}, shifted up to 4096, 3 repeats")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory worker")
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's choice)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--output", help="also write the Markdown report to this file")
    parser.add_argument("--memory-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.memory_worker:
        memory_worker()
        return
    if args.quick:
        args.batch_sizes, args.shifted_batch_sizes = [256, 1024], [256, 1024, 4096]
    if args.repeats is None:
        args.repeats = 3 if args.quick else 7
    device = torch.device(args.device)
    cases = build_cases()
    reps = lambda b: args.repeats if b < 4096 else max(3, args.repeats // 2)  # noqa: E731

    # ---- timings ----------------------------------------------------------------------------
    t: dict[tuple[str, int], float] = {}
    main_group = [
        "info_nce",
        "lightly NTXentLoss",
        "supcon",
        "ocl",
        "PML SupConLoss",
        "care_equivariance",
        "afcl",
        "align_uniform",
        "spectral",
        "vicreg",
        "binary_nce all",
        "binary_nce shifted",
    ]
    for b in args.batch_sizes:
        print(f"timing B={b} ...", file=sys.stderr, flush=True)
        inputs = make_inputs(b, device)
        for name, sec in time_group([cases[n] for n in main_group], inputs, reps(b), device).items():
            t[(name, b)] = sec
    for b in args.simo_sizes:
        print(f"timing SimO m={b} ...", file=sys.stderr, flush=True)
        inputs = make_inputs(b, device, pairs=True)
        for name, sec in time_group([cases["simo"], cases["pair-index SimO"]], inputs, reps(b), device).items():
            t[(name, b)] = sec
    for b in args.shifted_batch_sizes:
        if ("binary_nce shifted", b) in t:
            continue
        print(f"timing shifted B={b} ...", file=sys.stderr, flush=True)
        group = [cases["binary_nce shifted"]] + ([cases["binary_nce all"]] if b <= 8192 else [])
        for name, sec in time_group(group, make_inputs(b, device), reps(b), device).items():
            t[(name, b)] = sec

    # ---- memory -----------------------------------------------------------------------------
    mem: dict[tuple[str, int], float] = {}
    if not args.no_memory:
        print("measuring peak memory ...", file=sys.stderr, flush=True)
        jobs = [(name, b) for (name, b) in t if name not in ("simo", "pair-index SimO")]
        jobs += [(name, b) for (name, b) in t if name in ("simo", "pair-index SimO")]
        mem = measure_memory(jobs, device)

    # ---- report -----------------------------------------------------------------------------
    lines = [
        f"Loss benchmark: forward+backward, D = {D}, device `{device}`, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads; median of at least {args.repeats} runs "
        f"({max(3, args.repeats // 2)} for B >= 4096; more for cheap cases, up to ~1 s or 50 runs) after a warm-up. "
        "Peak memory: see the header of `benchmarks/bench_losses.py`.",
        "",
        "### Against the peer libraries",
        "",
        "| ours | reference | B | ours ms | ref ms | ours / ref | ours MiB | ref MiB | target | status |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    pairs = [("info_nce", "lightly NTXentLoss"), ("supcon", "PML SupConLoss"), ("ocl", "PML SupConLoss")]
    for ours, ref in pairs:
        for b in args.batch_sizes:
            ratio = t[(ours, b)] / t[(ref, b)]
            if ours == "info_nce":
                target, ok = ("≤ 0.5×", ratio <= 0.5) if b == 4096 else ("–", None)
            else:
                target, ok = "≤ 1.0×", ratio <= 1.0
            lines.append(
                f"| {ours} | {ref} | {b} | {_ms(t[(ours, b)])} | {_ms(t[(ref, b)])} | {ratio:.2f}× | "
                f"{_mib(mem, ours, b)} | {_mib(mem, ref, b)} | {target} | {'' if ok is None else _status(ok)} |"
            )
    for m in args.simo_sizes:
        speedup = t[("pair-index SimO", m)] / t[("simo", m)]
        target, ok = ("≥ 50× faster", speedup >= 50) if m == 1024 else ("–", None)
        lines.append(
            f"| simo (m = {m}) | pair-index SimO (Alg. 1) | {m} | {_ms(t[('simo', m)])} | "
            f"{_ms(t[('pair-index SimO', m)])} | {1 / speedup:.4f}× ({speedup:.0f}× faster) | "
            f"{_mib(mem, 'simo', m)} | {_mib(mem, 'pair-index SimO', m)} | {target} | "
            f"{'' if ok is None else _status(ok)} |"
        )

    lines += ["", "### Every loss (ms / peak MiB; ratio to `info_nce` at the same B)", ""]
    header = "| loss | " + " | ".join(f"B={b}" for b in args.batch_sizes) + " | target | status |"
    lines += [header, "|---|" + "---:|" * len(args.batch_sizes) + "---|---|"]
    for name in main_group:
        cells = []
        for b in args.batch_sizes:
            rel = t[(name, b)] / t[("info_nce", b)]
            cells.append(f"{_ms(t[(name, b)])} ms / {_mib(mem, name, b)} MiB ({rel:.2f}×)")
        target, status = "", ""
        if name in ("spectral", "vicreg"):
            ok = all(t[(name, b)] <= t[("info_nce", b)] for b in args.batch_sizes)
            target, status = "≤ info_nce at every B", _status(ok)
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {target} | {status} |")

    # Linear scaling is judged between the two largest sizes, where fixed per-call overheads are
    # amortised and the inputs no longer fit in the CPU caches (on CPU the step across the cache
    # size, around B = 4096-8192 at D = 128, is super-linear for any loss), by the log-log slope
    # of time (and of memory) against B.
    sizes = [b for b in args.shifted_batch_sizes if ("binary_nce shifted", b) in t]
    fit = sizes[-2:]

    def slopes(name: str) -> str:
        xs = [b for b in sizes if (name, b) in t][-2:]  # its two largest measured sizes
        if len(xs) < 2:
            return "– | –"
        time_slope = f"{loglog_slope(xs, [t[(name, b)] for b in xs]):.2f}"
        mem_xs = [b for b in xs if mem.get((name, b), 0) > 0]
        mem_slope = f"{loglog_slope(mem_xs, [mem[(name, b)] for b in mem_xs]):.2f}" if len(mem_xs) >= 2 else "–"
        return f"{time_slope} | {mem_slope}"

    shifted_slope = loglog_slope(fit, [t[("binary_nce shifted", b)] for b in fit]) if len(fit) >= 2 else None
    cell = lambda name, b: f"{_ms(t[(name, b)])} / {_mib(mem, name, b)}" if (name, b) in t else "–"  # noqa: E731
    lines += [
        "",
        "### Binary NCE scaling in B (ms / peak MiB)",
        "",
        "| negatives | "
        + " | ".join(f"B={b}" for b in sizes)
        + " | time slope (two largest B) | memory slope | target | status |",
        "|---|" + "---:|" * len(sizes) + "---:|---:|---|---|",
        "| shifted | "
        + " | ".join(cell("binary_nce shifted", b) for b in sizes)
        + f" | {slopes('binary_nce shifted')} | linear (time slope ≤ 1.2) | "
        f"{'–' if shifted_slope is None else _status(shifted_slope <= 1.2)} |",
        "| all | "
        + " | ".join(cell("binary_nce all", b) for b in sizes)
        + f" | {slopes('binary_nce all')} | (quadratic, for contrast) | |",
    ]
    report = "\n".join(lines)
    print(report)
    if args.output:
        with open(args.output, "w") as f:
            f.write(report + "\n")


if __name__ == "__main__":
    main()
