"""The convergence benchmark's plan and runner (``benchmarks/convergence.py``), without its long runs.

Every command line the plan would run parses with its example's own parser into the settings the plan states
(a flag misspelt in the benchmark would otherwise surface only on the GPU, minutes into a scarce lease); the
calibration reads a step, an evaluation and the start-up from stamped output; the prediction packs runs into
slots; the runner keeps ``--parallel`` scripts going, stops them at the deadline and goes on in the next call;
a work folder refuses a second plan. The runs themselves are a benchmark (docs/benchmarks/convergence.md).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import pytest
from _launch import load_script

from hf_contrast.training import ContrastiveTrainingArguments, parse_args_with_objective

ROOT = Path(__file__).resolve().parents[1]
convergence = load_script("convergence_benchmark", ROOT / "benchmarks" / "convergence.py")
SCRIPT_METHOD = {"run_care.py": "care", "run_simo.py": "simo", "run_ocl.py": "ocl", "run_bert.py": "simclr"}


def plan_options(tmp_path: Path, *flags: str, monkeypatch: pytest.MonkeyPatch) -> argparse.Namespace:
    monkeypatch.setattr(sys, "argv", ["convergence.py", "--work", str(tmp_path / "work"), *flags])
    opts = convergence.parse_args()
    opts.parallel, opts.threads, opts.precision = 2, 1, []
    return opts


def parsed(argv: list[str]) -> tuple[object, ContrastiveTrainingArguments, object]:
    """``argv`` (an example's path, then its flags) parsed by that example's own parser."""
    script = Path(argv[0])
    module = load_script(f"plan_{script.stem}", script)
    return parse_args_with_objective(
        (module.ScriptArguments, ContrastiveTrainingArguments), method=SCRIPT_METHOD[script.name],
        defaults=module.DEFAULTS, args=[*argv[1:], "--output_dir", "unused"],
    )  # fmt: skip


def test_every_planned_command_parses_into_the_papers_settings(tmp_path: Path, monkeypatch) -> None:
    opts = plan_options(
        tmp_path, "--fmnist", str(tmp_path / "fmnist"), "--sick", str(tmp_path / "sick"), monkeypatch=monkeypatch
    )
    opts.text_model = str(tmp_path / "minilm")
    runs = convergence.planned_runs(opts)
    image = [r for r in runs.values() if r.name.startswith("image/") and r.recipe != "random_init"]
    grid = [r for r in runs.values() if r.name.startswith("grid/")]
    text = [r for r in runs.values() if r.name.startswith("text/")]
    # 9 methods + the supervised reference × 3 seeds; 5 λ × 3 n_splits less the default cell; 4 methods × 2 models
    # × 3 seeds; the random-init reference per seed
    assert (len(image), len(grid), len(text), len(runs)) == (30, 14, 24, 71)
    for run in image + grid:
        script, args, config = parsed(run.argv)
        assert args.per_device_train_batch_size == 256 and script.small_image_stem is True
        assert (args.num_train_epochs, args.max_steps, args.eval_steps, args.save_steps) == (100, -1, 0.25, 0.25)
        assert (script.max_train_samples, script.max_eval_samples, args.image_size) == (2000, 1000, 32)
        assert run.steps == 100 * (2000 // 256) and run.evaluations == 4
        assert f"seed{args.seed}" == run.name.rsplit("/", 1)[1]
        if "simo" in run.name:  # 4 classes × 64 images: the batch of the others
            assert (config.classes_per_batch, config.samples_per_class) == (4, 64)
        if "supervised" in run.name:
            assert script.task_head and (config.align_weight, config.uniform_weight) == (0, 0)
    cells = {(c.care_weight, c.n_splits) for _, _, c in (parsed(r.argv) for r in grid)}
    assert len(cells) == 14 and (0.01, 8) not in cells  # the default cell is the CARE run of seed 0
    _, _, care = parsed(runs["image/care/seed0"].argv)
    assert (care.care_weight, care.n_splits) == (0.01, 8) == tuple(map(float, convergence.GRID_DEFAULT))
    for run in text:
        _, args, _ = parsed(run.argv)
        assert args.learning_rate == (5e-4 if "random_bert" in run.name else 3e-5)
        assert (args.num_train_epochs, args.eval_steps) == (1, 0.5)


def test_calibration_timings_come_from_the_stamped_output(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    lines = ["---- call at earlier ----", "[    1.000] {'loss': '9'}", "---- call at now ----", "[    2.000] start"]
    lines += [f"[{10 + 0.5 * 4 * k:9.3f}] {{'loss': '{k}', 'epoch': '0.1'}}" for k in range(4)]  # steps 4, 8, 12, 16
    lines += ["[   17.000] ***** Running Evaluation *****", "[   20.500] {'eval_loss': '1'}", "[   23.000] done"]
    log.write_text("\n".join(lines) + "\n")
    t = convergence.timings(log, logging_steps=4)
    assert t == {"wall": 23.0, "step": 0.5, "startup": 8.0, "evaluation": 3.5, "end": 2.5}


def test_the_prediction_packs_runs_longest_first_into_the_slots(tmp_path: Path, monkeypatch) -> None:
    opts = plan_options(tmp_path, monkeypatch=monkeypatch)
    calibration = {
        "timings": {
            "a": {"startup": 10.0, "step": 1.0, "evaluation": 5.0, "end": 1.0, "wall": 0.0},
            "random_init": {"wall": 7.0},
            "alone/simclr": {"step": 0.5},
            "simclr": {"step": 0.8},
        }
    }
    runs = {
        "x": convergence.Run("x", [], steps=100, evaluations=2, recipe="a"),  # 10 + 100 + 10 + 1 = 121 s
        "y": convergence.Run("y", [], steps=50, evaluations=2, recipe="a"),  # 71 s
        "z": convergence.Run("z", [], steps=40, evaluations=2, recipe="a"),  # 61 s
        "r": convergence.Run("r", ["random_init", "0"], recipe="random_init"),  # 7 s
    }
    p = convergence.predict(runs, calibration, opts)
    assert p["run_seconds"] == {"x": 121.0, "y": 71.0, "z": 61.0, "r": 7.0}
    assert p["plan_minutes"] == round(132 / 60, 1)  # longest first into the emptier slot: x + r = 128 s, y + z = 132 s
    assert p["serial_minutes"] == round(260 / 60, 1) and p["sharing_speed_up"] == round(2 * 0.5 / 0.8, 2)


FAKE_EXAMPLE = """
import json, sys, time, pathlib, signal
out = pathlib.Path(sys.argv[sys.argv.index("--output_dir") + 1])
seconds = float(sys.argv[1])
marker = out / "stopped"  # a stopped run "resumes" and ends at once in the next call
signal.signal(signal.SIGINT, lambda *a: (marker.write_text("1"), sys.exit(130)))
start = time.time()
while time.time() - start < seconds and not marker.exists():
    time.sleep(0.05)
(out / "eval_results.json").write_text(json.dumps({"eval_x": seconds}))
"""


def test_the_runner_keeps_parallel_runs_going_stops_at_the_deadline_and_goes_on(tmp_path: Path, monkeypatch) -> None:
    opts = plan_options(tmp_path, monkeypatch=monkeypatch)
    opts.results.mkdir(parents=True)
    fake = tmp_path / "fake_example.py"
    fake.write_text(FAKE_EXAMPLE)
    log = convergence.Log(opts.results / "log.txt")
    runs = [convergence.Run(f"image/m{i}/seed0", [str(fake), s]) for i, s in enumerate(("0.2", "1000", "0.2"))]
    status = convergence.run_all(runs, opts.work, opts, deadline=convergence.time.time() + 6, log=log)
    # two at a time: m0 ends, m2 starts in its slot and ends; m1 (which would run for 1000 s) is stopped
    assert status == {"image/m0/seed0": "done", "image/m2/seed0": "done", "image/m1/seed0": "stopped"}
    assert not (opts.work / "image/m1/seed0/eval_results.json").exists()
    status = convergence.run_all(runs, opts.work, opts, deadline=math.inf, log=log)  # the next call: m1 only
    assert status == {"image/m1/seed0": "done"}
    assert (opts.work / "logs/image/m1/seed0/wall_seconds.txt").read_text().count("\n") == 2  # two calls
    assert "image/m1/seed0: stopped" in (opts.results / "log.txt").read_text()


def test_a_work_folder_refuses_another_plan_and_the_summary_reads_its_own(tmp_path: Path, monkeypatch) -> None:
    opts = plan_options(tmp_path, "--epochs", "2", monkeypatch=monkeypatch)
    opts.work.mkdir(parents=True)
    convergence.keep_plan(opts)
    assert json.loads((opts.work / "plan.json").read_text())["epochs"] == 2
    other = plan_options(tmp_path, "--epochs", "100", "--batch_size", "64", monkeypatch=monkeypatch)
    said = r"--batch_size 64 \(the folder's runs: 256\); --epochs 100 \(the folder's runs: 2\)"
    with pytest.raises(SystemExit, match=said):
        convergence.keep_plan(other)
    summary = plan_options(tmp_path, "--summary_only", monkeypatch=monkeypatch)
    convergence.keep_plan(summary)
    assert summary.epochs == 2
