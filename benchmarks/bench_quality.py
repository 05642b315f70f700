"""CARE vs SimCLR on the embedded digits: same seed, same budget, side by side (not a test).

Runs ``examples/run_care.py --method simclr`` and ``--method care`` (and any other registered
objective given in ``--methods``: the script's registry resolves it) one after the other in
subprocesses, with the same seed, steps and batch size, then reads each run's ``all_results.json``
and prints, per method: linear-probe and kNN accuracy of the test embeddings (fitted on the train
split), the alignment of two evaluation views, and the Wahba error (W and W/√n) and relative
rotational equivariance γ_f of test projections under sampled augmentations (lower = augmentations
act more like one rotation; CARE, https://arxiv.org/abs/2306.13924, Figures 2c and 5).

Launch::

    python benchmarks/bench_quality.py                           # the run_care.py defaults, ~2 × 6 min on 2 CPU cores
    python benchmarks/bench_quality.py --max_steps 60            # quicker, noisier
    python benchmarks/bench_quality.py --methods simclr care care_moco --output BENCH_QUALITY.md
    python benchmarks/bench_quality.py -- --model resnet10t      # everything after `--` goes to run_care.py

One seed and a few minutes of training: differences of a point or two in accuracy are noise.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "run_care.py"
COLUMNS = (
    ("linear_probe_accuracy", "linear probe acc ↑"),
    ("knn_accuracy", "kNN acc ↑"),
    ("alignment", "alignment ↓"),
    ("equivariance_wahba_error", "Wahba W ↓"),
    ("equivariance_wahba_error_per_sample", "W/√n ↓"),
    ("equivariance_relative_rotational_equivariance", "γ_f ↓"),
    ("equivariance_augmentation_cosine_mean", "mean cos(f(x), f(a(x)))"),
)


def run(
    method: str, output_dir: Path, seed: int, max_steps: int | None, extra: list[str]
) -> tuple[dict[str, float], float]:
    """Train and evaluate one method; returns its final metrics (all_results.json without the ``eval_``
    prefix, and ``train_steps``) and the wall time in seconds."""
    command = [sys.executable, str(SCRIPT), "--method", method, "--seed", str(seed), "--output_dir", str(output_dir)]
    if max_steps is not None:
        command += ["--max_steps", str(max_steps)]
    command += ["--disable_tqdm", "true", *extra]
    print("$", " ".join(command), flush=True)
    start = time.perf_counter()
    subprocess.run(command, check=True)
    elapsed = time.perf_counter() - start
    saved = json.loads((output_dir / "all_results.json").read_text(encoding="utf-8"))
    results = {key.removeprefix("eval_"): value for key, value in saved.items()}
    results["train_steps"] = json.loads((output_dir / "trainer_state.json").read_text(encoding="utf-8"))["global_step"]
    return results, elapsed


def table(rows: dict[str, tuple[dict[str, float], float]]) -> str:
    """A Markdown table: one row per method, the metrics of ``COLUMNS`` and the wall time."""
    header = ["method", *[title for _, title in COLUMNS], "wall time"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for method, (results, seconds) in rows.items():
        cells = [f"{results[key]:.4f}" if key in results else "–" for key, _ in COLUMNS]
        lines.append("| " + " | ".join([method, *cells, f"{seconds / 60:.1f} min"]) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--methods",
        nargs="+",
        default=["simclr", "care"],
        help="Registered objectives to compare (run_care.py --method).",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max_steps", type=int, default=None, help="Default: run_care.py's.")
    parser.add_argument(
        "--output_root", type=Path, default=None, help="Keep the runs there (default: a temporary folder)."
    )
    parser.add_argument("--output", type=Path, default=None, help="Also write the table to this Markdown file.")
    args, extra = parser.parse_known_args()
    extra = [a for a in extra if a != "--"]
    with tempfile.TemporaryDirectory(prefix="bench_quality_") as tmp:
        root = args.output_root or Path(tmp)
        rows = {method: run(method, root / method, args.seed, args.max_steps, extra) for method in args.methods}
    steps = {int(results.get("train_steps", -1)) for results, _ in rows.values()}
    text = (
        f"CARE vs baselines on the embedded digits (seed {args.seed}, {'/'.join(map(str, sorted(steps)))} steps, "
        f"run_care.py defaults otherwise{', extra: ' + ' '.join(extra) if extra else ''}):\n\n{table(rows)}\n"
    )
    print("\n" + text)
    if args.output is not None:
        args.output.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
