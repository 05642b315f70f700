"""End-to-end runs of the scripts in ``examples/``: a few steps on tiny settings.

The scripts run in this process (``runpy`` with a patched ``sys.argv``: no second interpreter start-up,
so the file stays fast); the 2-process run goes through ``accelerate launch`` in subprocesses. Every run
checks its output folder: the encoder (loadable with ``ContrastiveEncoder.from_pretrained``), the model
card written by the library, ``all_results.json`` (``trainer.save_metrics``) with finite numbers and the
PNGs. Nothing touches the network. Each script stands alone: no test imports a shared helper module (one
imports ``run_bert.py`` itself, to check its best-checkpoint rule over generated schedules).
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import logging
import math
import os
import runpy
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest
from _launch import free_port, load_script
from hypothesis import given
from hypothesis import strategies as st

from hf_contrast.models import ContrastiveEncoder

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
# A few steps on a 0.4 M-parameter timm ResNet, 64 training and 32 test images.
TINY_IMAGES = [
    "--max_steps", "2",
    "--logging_steps", "1",
    "--model", "test_resnet",
    "--image_size", "32",
    "--max_train_samples", "64",
    "--max_eval_samples", "32",
    "--per_device_eval_batch_size", "32",
    "--eval_steps", "2",
    "--projection_plot", "pca",
]  # fmt: skip


def run_example(script: str, *args: str, output_dir: Path) -> str:
    """Run ``examples/<script>`` in this process as ``python <script> <args> --output_dir <output_dir>``;
    returns what it printed and logged. The logging set-up the script changes is restored afterwards."""
    import datasets
    import transformers

    argv = sys.argv
    sys.argv = [str(EXAMPLES / script), *args, "--output_dir", str(output_dir)]
    printed = io.StringIO()
    handler = logging.StreamHandler(printed)
    root = logging.getLogger()
    root.addHandler(handler)
    levels = {name: logging.getLogger(name).level for name in ("__main__", "hf_contrast")}
    verbosity = transformers.utils.logging.get_verbosity(), datasets.utils.logging.get_verbosity()
    try:
        with contextlib.redirect_stdout(printed):
            runpy.run_path(str(EXAMPLES / script), run_name="__main__")
    finally:
        sys.argv = argv
        root.removeHandler(handler)
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
        transformers.utils.logging.set_verbosity(verbosity[0])
        datasets.utils.logging.set_verbosity(verbosity[1])
        transformers.utils.logging.reset_format()
    return printed.getvalue()


def check_output(output_dir: Path, metrics: tuple[str, ...], pngs: tuple[str, ...]) -> dict[str, float]:
    """The folder holds a loadable encoder, the library's model card, finite ``metrics`` in
    ``all_results.json`` (``eval_…`` / ``train_…`` names, as ``trainer.save_metrics`` writes them), the
    trainer state and non-empty PNGs; returns ``all_results.json``."""
    encoder = ContrastiveEncoder.from_pretrained(output_dir)
    card = (output_dir / "README.md").read_text(encoding="utf-8")
    assert card.startswith("---") and "hf_contrast" in card
    results = json.loads((output_dir / "all_results.json").read_text(encoding="utf-8"))
    assert results == {**json.loads((output_dir / "train_results.json").read_text(encoding="utf-8")),
                       **json.loads((output_dir / "eval_results.json").read_text(encoding="utf-8"))}  # fmt: skip
    for key in metrics:
        assert key in results, f"{key} missing from all_results.json: {sorted(results)}"
        assert isinstance(results[key], (int, float)) and math.isfinite(results[key]), (key, results[key])
    for name in pngs:
        data = (output_dir / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000, name
    assert encoder is not None
    return results


def assert_in_card(output_dir: Path, results: dict[str, float], prefixes: tuple[str, ...]) -> None:
    """The script's own final numbers (``eval_<prefix>…``, computed after training) are in the card's metrics (the
    saved card data) and its README, equal to ``eval_results.json``'s."""
    card_metrics = json.loads((output_dir / "hf_contrast" / "model_card.json").read_text(encoding="utf-8"))["metrics"]
    card = (output_dir / "README.md").read_text(encoding="utf-8")
    own = [key for key in results if key.startswith(tuple(f"eval_{prefix}" for prefix in prefixes))]
    assert own, f"no eval_{prefixes} in {sorted(results)}"
    for key in own:
        name = key.removeprefix("eval_")
        assert card_metrics[name] == pytest.approx(results[key]) and f"| `{name}` |" in card, key


def global_step(output_dir: Path) -> int:
    """The step the run ended at (``trainer.save_state()``)."""
    return json.loads((output_dir / "trainer_state.json").read_text(encoding="utf-8"))["global_step"]


def image_folder(
    root: Path, classes: tuple[str, ...] = ("ant", "bee", "cat"), per_class: int = 12, sizes: bool = False
) -> Path:
    """``root/{train,test}/<class>/<i>.png``: a folder sorted by class, like real image folders (``sizes``:
    images of different sizes)."""
    from PIL import Image

    for split, count in (("train", per_class), ("test", per_class // 2)):
        for index, name in enumerate(classes):
            (root / split / name).mkdir(parents=True)
            for i in range(count):
                colour = tuple(int(v) for v in ((index * 90 + i * 7) % 256, (i * 20) % 256, index * 60))
                size = (20 + i, 20 + 2 * index) if sizes else (20, 20)
                Image.new("RGB", size, colour).save(root / split / name / f"{i}.png")
    return root


# ---- the main job ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def care_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One CARE run with an evaluation (equivariance evaluator) that pushes to the loopback Hub stand-in."""
    from hub_server import run_hub_server, use_hub_server
    from huggingface_hub import HfApi

    root = tmp_path_factory.mktemp("care")
    output_dir = root / "care"
    with run_hub_server(root / "hub") as url, use_hub_server(url, cache_dir=root / "cache") as refused:
        stdout = run_example(
            "run_care.py", *TINY_IMAGES, "--per_device_train_batch_size", "16", "--n_splits", "4",
            "--num_augmentations", "2", "--push_to_hub", "--hub_model_id", "user/care-tiny", output_dir=output_dir,
        )  # fmt: skip
        files = set(HfApi().list_repo_files("user/care-tiny"))
        pushed = ContrastiveEncoder.from_pretrained("user/care-tiny")
        assert refused == []
    assert {"README.md", "model.safetensors", "config.json"} <= files
    local = ContrastiveEncoder.from_pretrained(output_dir)
    for name, tensor in local.state_dict().items():
        assert (tensor == pushed.state_dict()[name]).all(), name
    return output_dir, stdout


def test_run_care_writes_encoder_card_metrics_state_and_plots(care_run: tuple[Path, str]) -> None:
    output_dir, stdout = care_run
    results = check_output(
        output_dir,
        ("eval_linear_probe_accuracy", "eval_linear_probe_macro_f1", "eval_knn_accuracy", "eval_knn_macro_f1",
         "eval_alignment", "eval_uniformity", "eval_knn_loo_accuracy", "eval_linear_probe_holdout_accuracy",
         "eval_equivariance_wahba_error", "eval_equivariance_relative_rotational_equivariance", "train_loss"),
        ("embeddings.png", "augmentation_cosines.png", "loss_curves.png", "eval_curves.png"),
    )  # fmt: skip
    assert 0.0 <= results["eval_linear_probe_accuracy"] <= 1.0 and results["eval_equivariance_wahba_error"] >= 0.0
    assert 0.0 <= results["eval_alignment"] <= 4.0  # mean squared distance of two unit vectors
    assert results["train_samples"] == 64 and results["eval_samples"] == 32
    assert "train_skipped_images" not in results  # nothing bad to skip
    assert global_step(output_dir) == 2
    # The Trainer's tables (log_metrics) and the script's own message, through the logger.
    assert "***** train metrics *****" in stdout and "***** eval metrics *****" in stdout
    assert " eval_equivariance_wahba_error " in stdout and " eval_linear_probe_accuracy " in stdout
    assert "Training care on the embedded digits (64 train / 32 test images)" in stdout
    # The start-up set-up, once, with the size and why (TINY_IMAGES passes --image_size 32); the card says it.
    assert stdout.count("Run set-up (defaults that shape the result)") == 1
    assert "32x32 px (`image_size` was given)" in stdout and "chunks of m = 4" in stdout
    assert "- **Image size:** 32x32 px (`image_size` was given)" in (output_dir / "README.md").read_text()
    assert ContrastiveEncoder.from_pretrained(output_dir).data_config["input_size"] == (3, 32, 32)  # the training size


def test_run_care_card_and_results_give_each_number_one_name(care_run: tuple[Path, str]) -> None:
    """The card's evaluation table holds the final evaluation (`trainer.evaluate()`) under the names of
    eval_results.json: the probes fitted on train and scored on test apart from the within-split
    (leave-one-out / held-out) scores."""
    import re

    output_dir, _ = care_run
    results = json.loads((output_dir / "eval_results.json").read_text(encoding="utf-8"))
    card = (output_dir / "README.md").read_text(encoding="utf-8")
    # "| `metric` | this model |" (the evaluator's primary metric in bold; a baseline column may follow)
    table = dict(
        re.findall(r"^\| \*{0,2}`(\w+)`\*{0,2} \| ([-+0-9.e]+) \|", card.split("## Evaluation", 1)[1], flags=re.M)
    )
    for key in (
        "linear_probe_accuracy",
        "knn_accuracy",
        "knn_loo_accuracy",
        "linear_probe_holdout_accuracy",
        "alignment",
    ):
        assert float(table[key]) == pytest.approx(results[f"eval_{key}"], rel=1e-3, abs=1e-12), key


def test_run_care_card_names_its_training_and_evaluation_data_alike(care_run: tuple[Path, str]) -> None:
    """One name per dataset, the loader's (``info.dataset_name``): the card listed the digits' training split as
    "scikit-learn digits" and their test split as "sklearn-digits"."""
    card = (care_run[0] / "README.md").read_text(encoding="utf-8")
    listed = [line for line in card.splitlines() if line.startswith("- ") and " rows, columns " in line]
    assert [line.split(",")[0] for line in listed] == ["- sklearn-digits", "- sklearn-digits"]
    assert "scikit-learn digits" not in card


def test_run_care_card_names_the_objective_and_its_hyperparameters(care_run: tuple[Path, str]) -> None:
    card = (care_run[0] / "README.md").read_text(encoding="utf-8")
    assert "care_weight" in card and "n_splits" in card  # filled by the library's card callback while training


def test_run_linear_probe_on_a_saved_encoder(care_run: tuple[Path, str], tmp_path: Path) -> None:
    model_dir, _ = care_run
    output_dir = tmp_path / "probe"
    stdout = run_example(
        "run_linear_probe.py", "--model", str(model_dir), "--max_train_samples", "64", "--max_eval_samples", "32",
        output_dir=output_dir,
    )  # fmt: skip
    results = json.loads((output_dir / "eval_results.json").read_text(encoding="utf-8"))
    assert 0.0 <= results["linear_probe_accuracy"] <= 1.0 and 0.0 <= results["knn_accuracy"] <= 1.0
    assert results["num_train"] == 64 and results["num_test"] == 32
    assert (output_dir / "embeddings.png").stat().st_size > 2000
    assert "linear_probe_accuracy" in stdout
    # what shapes the numbers is said: the size the images are encoded at, and the subsets
    assert "px (the encoder's input size)" in stdout or "px, the encoder's input size (theirs: " in stdout
    assert "train: a class-balanced subset of 64 of the split's 1,438 rows (`max_train_samples`, seed 0)" in stdout
    # The same splits (seed 0) and the same encoder: the training run's final numbers, under the same names.
    trained = json.loads((model_dir / "eval_results.json").read_text(encoding="utf-8"))
    for key in ("linear_probe_accuracy", "linear_probe_macro_f1", "knn_accuracy", "knn_macro_f1"):
        assert results[key] == pytest.approx(trained[f"eval_{key}"]), key


@pytest.mark.distributed
def test_run_care_under_accelerate_launch_with_two_cpu_processes(tmp_path: Path) -> None:
    output_dir = tmp_path / "care-ddp"
    command = [
        sys.executable, "-m", "accelerate.commands.launch",
        "--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
        "--dynamo_backend", "no", "--main_process_port", str(free_port()),
        str(EXAMPLES / "run_care.py"), *TINY_IMAGES, "--per_device_train_batch_size", "8", "--n_splits", "2",
        "--num_augmentations", "2", "--gather_distributed", "--eval_strategy", "no", "--output_dir", str(output_dir),
    ]  # fmt: skip
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert proc.returncode == 0, f"{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}"
    assert "× 2 process(es)" in proc.stdout  # the script saw both processes
    assert proc.stdout.count("***** eval metrics *****") == 1  # only the main process logs the metrics
    check_output(
        output_dir,
        ("eval_linear_probe_accuracy", "eval_knn_accuracy", "eval_equivariance_wahba_error"),
        ("embeddings.png",),
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "method",
    [
        ["simclr"],
        ["care_moco", "--n_splits", "4", "--moco_queue_size", "64"],
        ["spectral"],
        ["vicreg"],
        ["binary_nce"],
    ],
    ids=lambda m: m[0],
)
def test_run_care_other_methods(method: list[str], tmp_path: Path) -> None:
    output_dir = tmp_path / method[0]
    run_example(
        "run_care.py", *TINY_IMAGES, "--method", *method, "--per_device_train_batch_size", "16",
        "--num_augmentations", "2", "--eval_strategy", "no", output_dir=output_dir,
    )  # fmt: skip
    check_output(
        output_dir,
        ("eval_linear_probe_accuracy", "eval_equivariance_wahba_error"),
        ("embeddings.png", "loss_curves.png"),
    )


def test_the_getting_started_pages_start_up_line_is_what_run_care_prints(tmp_path: Path) -> None:
    """docs/getting-started.md shows the short run's start-up line: the script prints it (with this test's smaller
    model and step count put in), so the page cannot drift from the script again."""
    page = (EXAMPLES.parent / "docs" / "getting-started.md").read_text(encoding="utf-8")
    shown = next(line for line in page.splitlines() if line.startswith("INFO - __main__ - Training "))
    command = page[page.index("A short run on a subset,") :].split("`")[1].split()[2:]  # the flags after the script
    assert command[:2] == ["--max_steps", "10"] and "--model" not in command
    printed = run_example(
        "run_care.py", *command, "--max_steps", "2", "--model", "test_resnet", "--eval_strategy", "no",
        "--num_probe_images", "16", "--num_augmentations", "2", output_dir=tmp_path / "care",
    )  # fmt: skip
    expected = (
        shown.removeprefix("INFO - __main__ - ").replace("resnet18", "test_resnet").replace("10 steps", "2 steps")
    )
    assert expected in printed


def test_run_care_task_head_is_supervised_training_the_saved_encoder_keeps(tmp_path: Path) -> None:
    """--task_head with align_uniform at zero align/uniform weights: cross-entropy alone trains the head (the
    convergence benchmark's supervised reference); the head and the class names are saved and reloaded, and the
    head's own accuracy and macro-F1 on the test split are reported (eval_task_head_*)."""
    import torch

    output_dir = tmp_path / "supervised"
    run_example(
        "run_care.py", *TINY_IMAGES, "--method", "align_uniform", "--align_weight", "0", "--uniform_weight", "0",
        "--task_head", "--max_steps", "16", "--per_device_train_batch_size", "32", "--num_augmentations", "2",
        "--eval_strategy", "no", output_dir=output_dir,
    )  # fmt: skip
    history = json.loads((output_dir / "trainer_state.json").read_text(encoding="utf-8"))["log_history"]
    steps = [entry for entry in history if "loss_task" in entry]
    assert len(steps) == 16
    assert all(entry["loss_align"] == 0 and entry["loss_task"] == entry["loss"] for entry in steps)
    first, last = (sum(e["loss_task"] for e in part) / 4 for part in (steps[:4], steps[-4:]))
    assert last < first - 0.2, (first, last)  # the head learns: cross-entropy falls
    encoder = ContrastiveEncoder.from_pretrained(output_dir).eval()
    assert encoder.config.id2label == {i: str(i) for i in range(10)}  # the digits' class folders
    with torch.no_grad():
        logits = encoder(pixel_values=torch.zeros(2, 3, 32, 32)).logits
    assert logits.shape == (2, 10)
    # the head's own accuracy on the test split, as timm would preprocess it (the same 32 seeded test images)
    import timm.data

    from hf_contrast.data import load_image_splits
    from hf_contrast.metrics import macro_f1

    splits = load_image_splits(None, image_size=32, max_train_samples=64, max_eval_samples=32, seed=0, decode=True)
    test = splits["test"]
    preprocess = timm.data.create_transform(**encoder.data_config, is_training=False)
    pixels = torch.stack([preprocess(image.convert("RGB")) for image in test["image"]])
    with torch.no_grad():
        predicted = encoder(pixel_values=pixels).logits.argmax(dim=1)
    labels = torch.tensor(test["label"])
    results = json.loads((output_dir / "eval_results.json").read_text(encoding="utf-8"))
    assert results["eval_task_head_accuracy"] == pytest.approx(float((predicted == labels).float().mean()))
    assert results["eval_task_head_macro_f1"] == pytest.approx(macro_f1(predicted, labels))


@pytest.mark.parametrize("script", ["run_care.py", "run_bert.py"])
def test_task_head_refused_by_a_method_without_a_task_term(script: str, tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"--task_head: --method simclr does not train a task head"):
        run_example(script, "--method", "simclr", "--task_head", output_dir=tmp_path / "x")
    assert not (tmp_path / "x").exists()  # refused before anything is read or written


@pytest.mark.parametrize("script", ["run_care.py", "run_simo.py", "run_ocl.py", "run_local.py", "run_bert.py"])
def test_phase_flags_the_script_would_ignore_are_refused(script: str, tmp_path: Path) -> None:
    """`--do_train false` trained anyway, `--do_eval false` evaluated anyway, `--do_predict` did nothing: refused
    before anything is read or written; `--do_train --do_eval` (a transformers habit) is what the script does."""
    with pytest.raises(SystemExit, match=rf"--do_train false, --do_predict true: {script} always trains"):
        run_example(script, "--do_train", "false", "--do_eval", "--do_predict", output_dir=tmp_path / "x")
    assert not (tmp_path / "x").exists()


# ---- argument parsing: the registry resolves the method -------------------------------------------


def _import_example(name: str):  # noqa: ANN202
    sys.path.insert(0, str(EXAMPLES))
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(EXAMPLES))


def test_method_flags_come_from_the_chosen_objective(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from hf_contrast.training import ContrastiveTrainingArguments, parse_args_with_objective

    run_care = _import_example("run_care")
    types = (run_care.ScriptArguments, ContrastiveTrainingArguments)
    argv = ["--method", "care_moco", "--moco_queue_size", "32", "--output_dir", str(tmp_path)]
    script, args, config = parse_args_with_objective(types, method="care", defaults=run_care.DEFAULTS, args=argv)
    assert script.method == "care_moco" and type(config).__name__ == "CAREMoCoConfig"
    assert config.moco_queue_size == 32 and config.n_splits == 8  # a flag, and a script default
    assert args.per_device_train_batch_size == 128 and args.output_dir == str(tmp_path)
    with pytest.raises(SystemExit):  # SimCLR has no chunks: its parser has no --n_splits
        parse_args_with_objective(
            types, method="care", defaults=run_care.DEFAULTS, args=["--method", "simclr", "--n_splits", "4"]
        )
    assert "the hyperparameters of --method simclr are ['temperature']" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argparse: invalid choice, listing the registered objectives
        parse_args_with_objective(
            types, method="care", defaults=run_care.DEFAULTS, args=["--method", "no_such_method"]
        )
    with pytest.raises(SystemExit):  # `--method X --help` lists X's hyperparameter flags
        parse_args_with_objective(
            types, method="care", defaults=run_care.DEFAULTS, args=["--method", "care_moco", "--help"]
        )
    assert "--moco_queue_size" in capsys.readouterr().out
    config_file = tmp_path / "args.json"
    config_file.write_text(json.dumps({"method": "simclr", "temperature": 0.3, "output_dir": str(tmp_path)}))
    script, args, config = parse_args_with_objective(
        types, method="care", defaults=run_care.DEFAULTS, args=[str(config_file)]
    )
    assert script.method == "simclr" and config.temperature == 0.3 and args.max_steps == 150


def test_each_example_stands_alone() -> None:
    """No example imports a sibling module: each one can be copied and run on its own."""
    import ast

    scripts = sorted(EXAMPLES.glob("*.py"))
    assert {path.name for path in scripts} == {
        "run_bert.py", "run_care.py", "run_linear_probe.py", "run_local.py", "run_ocl.py", "run_simo.py"
    }  # fmt: skip
    siblings = {path.stem for path in scripts} | {"_common"}
    for path in scripts:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])  # fmt: skip
            assert not any(name.split(".")[0] in siblings for name in names), (path.name, names)


# ---- resuming, the transformers way ---------------------------------------------------------------


def test_detect_last_checkpoint_resumes_refuses_or_overwrites(tmp_path: Path) -> None:
    from hf_contrast.training import ContrastiveTrainingArguments

    run_ocl = _import_example("run_ocl")
    args = ContrastiveTrainingArguments(output_dir=str(tmp_path / "run"), report_to="none")
    assert run_ocl.detect_last_checkpoint(args, overwrite_output_dir=False) is None  # no folder yet
    (tmp_path / "run").mkdir()
    assert run_ocl.detect_last_checkpoint(args, overwrite_output_dir=False) is None  # an empty folder
    (tmp_path / "run" / "model.safetensors").write_bytes(b"earlier run")
    with pytest.raises(ValueError, match="already exists and is not empty. Use --overwrite_output_dir"):
        run_ocl.detect_last_checkpoint(args, overwrite_output_dir=False)
    assert run_ocl.detect_last_checkpoint(args, overwrite_output_dir=True) is None
    for step in (3, 12):
        (tmp_path / "run" / f"checkpoint-{step}").mkdir()
    assert run_ocl.detect_last_checkpoint(args, overwrite_output_dir=False) == str(tmp_path / "run" / "checkpoint-12")
    assert run_ocl.detect_last_checkpoint(args, overwrite_output_dir=True) is None
    args.resume_from_checkpoint = str(tmp_path / "run" / "checkpoint-3")  # and overwrite: opposite requests
    with pytest.raises(ValueError, match="--overwrite_output_dir .* and --resume_from_checkpoint .* drop one"):
        run_ocl.detect_last_checkpoint(args, overwrite_output_dir=True)
    assert (tmp_path / "run" / "checkpoint-3").is_dir()  # nothing removed


def test_run_ocl_resumes_from_the_last_checkpoint(tmp_path: Path) -> None:
    """A second run into the same folder picks up the checkpoint and trains on to the new `--max_steps`."""
    root = image_folder(tmp_path / "images")
    output_dir = tmp_path / "ocl"
    common = ("--dataset", str(root), "--logging_steps", "1", "--model", "test_resnet", "--image_size", "32",
              "--per_device_train_batch_size", "8", "--eval_strategy", "no", "--save_steps", "2",
              "--projection_plot", "pca")  # fmt: skip
    run_example("run_ocl.py", *common, "--max_steps", "2", output_dir=output_dir)
    assert global_step(output_dir) == 2 and (output_dir / "checkpoint-2").is_dir()
    stdout = run_example("run_ocl.py", *common, "--max_steps", "3", output_dir=output_dir)
    assert f"Checkpoint detected, resuming training at {output_dir / 'checkpoint-2'}" in stdout
    assert global_step(output_dir) == 3
    history = json.loads((output_dir / "trainer_state.json").read_text(encoding="utf-8"))["log_history"]
    assert [entry["step"] for entry in history if "loss" in entry] == [1, 2, 3]  # steps 1-2 from the checkpoint


# ---- the other image examples -------------------------------------------------------------------


def test_run_ocl_on_a_class_sorted_image_folder_as_is(tmp_path: Path) -> None:
    """A folder sorted by class trains and evaluates (balanced samples).

    Without --imbalance_ratio the data is as is.
    """
    root = image_folder(tmp_path / "images")
    output_dir = tmp_path / "ocl"
    stdout = run_example(
        "run_ocl.py", "--dataset", str(root), "--max_steps", "2", "--logging_steps", "1", "--model", "test_resnet",
        "--image_size", "32", "--per_device_train_batch_size", "8", "--eval_steps", "2", "--projection_plot", "pca",
        output_dir=output_dir,
    )  # fmt: skip
    results = check_output(
        output_dir, ("eval_linear_probe_accuracy", "eval_linear_probe_macro_f1", "eval_knn_accuracy",
                     "eval_knn_macro_f1", "eval_projection_class_orthogonality"),
        ("embeddings.png", "loss_curves.png"),
    )  # fmt: skip
    assert results["train_imbalance_ratio"] == 1.0  # as is: nothing trimmed
    assert "as is: class sizes [12, 12, 12]" in stdout
    card = (output_dir / "README.md").read_text(encoding="utf-8")
    assert "images" in card  # the card names the data by its folder (create_model_card(dataset=...))


@pytest.mark.slow
def test_run_ocl_supcon_long_tailed(tmp_path: Path) -> None:
    output_dir = tmp_path / "supcon"
    stdout = run_example(
        "run_ocl.py", *TINY_IMAGES, "--method", "supcon", "--per_device_train_batch_size", "8",
        "--imbalance_ratio", "4", output_dir=output_dir,
    )  # fmt: skip
    results = check_output(
        output_dir,
        ("eval_linear_probe_macro_f1", "eval_knn_macro_f1", "eval_projection_class_orthogonality"),
        ("embeddings.png",),
    )
    assert results["train_imbalance_ratio"] > 2
    assert "long-tailed with imbalance 4" in stdout
    assert_in_card(output_dir, results, ("projection_",))
    assert "; note: made long-tailed: " in (output_dir / "README.md").read_text(encoding="utf-8")


def test_run_simo(tmp_path: Path) -> None:
    output_dir = tmp_path / "simo"
    run_example(
        "run_simo.py", *TINY_IMAGES,  # 64 balanced digits: 6 or 7 per class, fewer than k = 8 without --replacement
        "--classes_per_batch", "4", "--samples_per_class", "8", "--replacement",
        output_dir=output_dir,
    )  # fmt: skip
    args = __import__("torch").load(output_dir / "training_args.bin", weights_only=False)
    assert args.per_device_train_batch_size == 32  # derived: classes_per_batch × samples_per_class
    results = check_output(
        output_dir,
        ("eval_projection_class_orthogonality", "eval_knn_accuracy", "eval_linear_probe_accuracy", "eval_alignment"),
        ("embeddings.png",),
    )  # fmt: skip
    assert 0.0 <= results["eval_projection_class_orthogonality"] <= 1.0
    assert ContrastiveEncoder.from_pretrained(output_dir).config.normalize_projections is False
    assert_in_card(output_dir, results, ("projection_",))


@pytest.mark.parametrize("contrastive", ["ocl", pytest.param("supcon", marks=pytest.mark.slow)])
def test_run_local_pairs(contrastive: str, tmp_path: Path) -> None:
    output_dir = tmp_path / contrastive
    run_example(
        "run_local.py", *TINY_IMAGES, "--contrastive", contrastive, "--per_device_train_batch_size", "8",
        output_dir=output_dir,
    )  # fmt: skip
    results = check_output(
        output_dir,
        ("eval_accuracy", "eval_macro_f1", "eval_knn_loo_accuracy", "eval_majority_class_accuracy"),
        ("embeddings.png",),
    )
    assert 0.0 <= results["eval_macro_f1"] <= 1.0 and 0.0 <= results["eval_accuracy"] <= 1.0
    assert_in_card(output_dir, results, ("recall_", "majority_class_"))
    state = __import__("torch").load(output_dir / "local_objective.pt")
    assert any(key.startswith("loss.") for key in state)  # the pair classifier, kept next to the encoder


def test_run_local_makes_change_pairs_from_a_class_image_folder(tmp_path: Path) -> None:
    """Any class image folder (images of different sizes) gives change pairs: train pairs from the train
    split, test pairs from the held-out one."""
    root = image_folder(tmp_path / "images", sizes=True)
    output_dir = tmp_path / "local"
    stdout = run_example(
        "run_local.py", "--dataset", str(root), "--max_steps", "2", "--logging_steps", "1", "--model", "test_resnet",
        "--per_device_train_batch_size", "8", "--eval_steps", "2", "--projection_plot", "pca", output_dir=output_dir,
    )  # fmt: skip
    results = check_output(output_dir, ("eval_accuracy", "eval_macro_f1"), ("embeddings.png",))
    assert results["train_samples"] == 36 and results["eval_samples"] == 18  # one pair per image of each split
    assert "on 36 pairs of" in stdout


# ---- bad image files: decoded where the file can be named -----------------------------------------


def bad_image_folder(root: Path) -> Path:
    """``image_folder`` plus, in its train split, a 0-byte PNG, a truncated JPEG and an empty class folder."""
    import io as _io

    from PIL import Image

    image_folder(root)
    (root / "train" / "ant" / "empty.png").write_bytes(b"")
    buffer = _io.BytesIO()
    Image.new("RGB", (64, 64), (200, 10, 10)).save(buffer, "JPEG")
    (root / "train" / "bee" / "truncated.jpg").write_bytes(buffer.getvalue()[:300])
    (root / "train" / "dog").mkdir()
    return root


BAD_RUN = ("--logging_steps", "1", "--model", "test_resnet", "--image_size", "32",
           "--per_device_train_batch_size", "8", "--max_steps", "-1", "--num_train_epochs", "1",
           "--eval_strategy", "no", "--projection_plot", "pca")  # fmt: skip


def test_bad_images_are_skipped_and_counted(tmp_path: Path) -> None:
    """`--on_bad_image skip`: one epoch over a train split holding two unreadable files trains, counts 2
    skipped images in the train metrics and names both files in warnings; the empty class folder is warned
    about once."""
    root = bad_image_folder(tmp_path / "images")
    output_dir = tmp_path / "ocl"
    with pytest.warns(UserWarning) as caught:
        stdout = run_example(
            "run_ocl.py", "--dataset", str(root), *BAD_RUN, "--on_bad_image", "skip", output_dir=output_dir
        )
    messages = [str(w.message) for w in caught]
    results = check_output(output_dir, ("eval_linear_probe_accuracy", "train_loss"), ("embeddings.png",))
    assert results["train_skipped_images"] == 2
    assert results["train_samples"] == 38 and global_step(output_dir) == 5  # 38 rows, batches of 8
    assert "2 unreadable image row(s) were left out of the training batches" in stdout
    skipped = [m for m in messages if m.startswith("Skipped: Bad image")]
    assert any("empty.png" in m for m in skipped) and any("truncated.jpg" in m for m in skipped)
    empty = [m for m in messages if "hold no image" in m]
    assert len(empty) == 1 and "train/dog" in empty[0]
    classes = ContrastiveEncoder.from_pretrained(output_dir)  # the run finished and saved
    assert classes is not None


def test_a_bad_image_raises_naming_the_file(tmp_path: Path) -> None:
    """`--on_bad_image raise` (the default) stops before the first step (the trainer's start-up scan), naming
    both bad files and the fix, as the script's error message (no traceback: `run_main`)."""
    root = bad_image_folder(tmp_path / "images")
    with pytest.raises(SystemExit) as caught:
        run_example("run_ocl.py", "--dataset", str(root), *BAD_RUN, output_dir=tmp_path / "ocl")
    message = str(caught.value.code)
    assert message.startswith("run_ocl.py: error: ")
    assert "2 unreadable image(s) found before training" in message and "on_bad_image='skip'" in message
    assert "empty.png" in message and "truncated.jpg" in message
    assert not (tmp_path / "ocl" / "checkpoint-1").exists()


def test_the_equivariance_evaluator_names_a_bad_file_before_training(tmp_path: Path) -> None:
    """A bad file among the test images fails before training, naming the row and the file."""
    root = image_folder(tmp_path / "images")
    (root / "test" / "cat" / "0.png").write_bytes(b"not a png")
    with pytest.raises(SystemExit, match=r"run_care.py: error: .*EquivarianceEvaluator: row \d+ .*cat/0\.png"):
        run_example("run_care.py", "--dataset", str(root), *TINY_IMAGES[:4], output_dir=tmp_path / "care")


@pytest.mark.parametrize(
    ("layout", "said"), [("test", "18 test"), ("validation", "18 validation"), (None, "6 held-out")]
)
def test_the_start_up_line_names_where_the_evaluation_images_come_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, layout: str | None, said: str
) -> None:
    """run_care's start-up line said "test images" of a validation/ folder and of a fraction held out of train/."""
    from hf_contrast.training import ContrastiveTrainer

    class _Stop(Exception):
        pass

    def stop(*_: object, **__: object) -> None:  # the line is logged before training: stop there
        raise _Stop

    root = image_folder(tmp_path / "images")  # train/: 3 classes x 12; test/: 3 x 6
    if layout is None:
        shutil.rmtree(root / "test")
    else:
        (root / "test").rename(root / layout)
    monkeypatch.setattr(ContrastiveTrainer, "train", stop)
    with caplog.at_level(logging.INFO), pytest.raises(_Stop):
        run_example("run_care.py", "--dataset", str(root), "--max_steps", "1", "--model", "test_resnet",
                    output_dir=tmp_path / "care")  # fmt: skip
    train = 36 if layout else 30  # `test_fraction` 0.2 holds 2 of each class's 12 out
    assert f"Training care on {root} ({train} train / {said} images) with test_resnet (from scratch) for 1 step " in (
        caplog.text
    )


# ---- text ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_bert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random 2-layer BERT (hidden 32) with its tokenizer, saved like a Hub checkpoint."""
    from _tiny import tiny_bert_config, tiny_tokenizer
    from transformers import BertModel

    path = tmp_path_factory.mktemp("tiny-bert")
    BertModel(tiny_bert_config()).save_pretrained(path)
    tiny_tokenizer(path).save_pretrained(path)
    return path


TINY_TEXT = [
    "--max_steps", "2", "--logging_steps", "1", "--per_device_train_batch_size", "8", "--num_augmentations", "2",
    "--eval_steps", "1", "--save_steps", "1",
]  # fmt: skip


def test_run_bert_supervised_pairs_from_a_local_file_with_sts_checkpoint_selection(
    tiny_bert_dir: Path, tmp_path: Path
) -> None:
    import csv

    rows = [
        (f"the {a} eats {b}", f"a {a} is eating {b}", a)
        for a in ("cat", "dog", "cow", "fox")
        for b in ("food", "grass", "meat", "fish")
    ]
    train = tmp_path / "pairs.csv"
    with train.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([("text", "paraphrase", "animal"), *rows])
    sts = tmp_path / "sts.tsv"
    sts.write_text(
        "a\tb\tgold\n" + "".join(f"{x}\t{y}\t{i % 5}\n" for i, (x, y, _) in enumerate(rows)), encoding="utf-8"
    )
    output_dir = tmp_path / "bert"
    stdout = run_example(
        "run_bert.py", "--model", str(tiny_bert_dir), *TINY_TEXT, "--method", "simclr", "--dataset", str(train),
        "--text_column", "text", "--text_pair_column", "paraphrase", "--sts_file", str(sts),
        "--sts_sentence1_column", "a", "--sts_sentence2_column", "b", "--sts_score_column", "gold",
        "--max_sts_pairs", "10", output_dir=output_dir,
    )  # fmt: skip
    results = check_output(
        output_dir, ("eval_sts_spearman", "eval_sts_spearman_before_training", "eval_equivariance_wahba_error"),
        ("loss_curves.png", "augmentation_cosines.png"),
    )  # fmt: skip
    assert -1.0 <= results["eval_sts_spearman"] <= 1.0 and results["eval_best_step"] in (1, 2)
    assert results["eval_sts_pairs"] == 10  # capped by --max_sts_pairs, and the log says by how much
    assert "STS on 10 of 16 pairs" in stdout
    assert "paired with `paraphrase`" in stdout and "before training" in stdout
    encoder = ContrastiveEncoder.from_pretrained(output_dir)
    assert encoder.config.backbone_type == "text" and encoder.tokenizer is not None
    history = json.loads(next(output_dir.glob("checkpoint-*/trainer_state.json")).read_text())["log_history"]
    assert any("eval_sts_spearman" in entry for entry in history)  # the STS evaluator ran during training
    assert_in_card(output_dir, results, ("equivariance_",))  # under token edits, after training
    # the card names the STS file and shows the starting model's score beside the kept one's
    card = (output_dir / "README.md").read_text(encoding="utf-8")
    section = card.split("### sts: `STSEvaluator`\n")[1].split("###")[0]
    before = f"{results['eval_sts_spearman_before_training']:.4g}"
    assert "| Metric | This model | Baseline (before training) |" in section
    assert f"| **`spearman`** | {results['eval_sts_spearman']:.4g} | {before} |" in section


@pytest.mark.slow
@pytest.mark.parametrize(
    "method",
    [["--method", "care", "--n_splits", "2"], ["--method", "align_uniform", "--task_head", "--eval_strategy", "no"]],
    ids=["care", "equibert-no-evaluation-during-training"],
)
def test_run_bert_on_the_shipped_sentences(method: list[str], tiny_bert_dir: Path, tmp_path: Path) -> None:
    output_dir = tmp_path / "bert"
    stdout = run_example("run_bert.py", "--model", str(tiny_bert_dir), *TINY_TEXT, *method, output_dir=output_dir)
    results = check_output(
        output_dir, ("eval_sts_spearman", "eval_knn_accuracy", "eval_equivariance_wahba_error"), ("embeddings.png",)
    )
    assert -1.0 <= results["eval_sts_spearman"] <= 1.0
    assert "STS on all 60 pairs" in stdout
    assert ("eval_best_step" in results) == ("--eval_strategy" not in method)  # no best step without evaluations


def test_run_bert_refuses_a_label_column_it_was_given_that_the_data_lacks(tiny_bert_dir: Path, tmp_path: Path) -> None:
    """Data without labels trains unlabelled (probes left out) when ``--label_column`` is left at its default; one the
    user named was dropped the same way, without a word, and SupCon then said the data had no column 'label'. A
    ``--label_column`` given must be there: refused with the data's columns, before anything is written."""
    data = tmp_path / "sentences.csv"
    data.write_text("sentence,kind\n" + "".join(f"sentence number {i},{i % 2}\n" for i in range(24)))
    output_dir = tmp_path / "bert"
    argv = ["--model", str(tiny_bert_dir), *TINY_TEXT, "--dataset", str(data), "--text_column", "sentence"]
    with pytest.raises(SystemExit, match=r"`label_column`='label_kind' is not a column .* 'kind'"):
        run_example("run_bert.py", *argv, "--method", "supcon", "--label_column", "label_kind", output_dir=output_dir)
    with pytest.raises(SystemExit, match=r"`label_column`='label' is not a column"):  # named, even as the default
        run_example("run_bert.py", *argv, "--label_column", "label", output_dir=output_dir)
    assert not output_dir.exists()
    stdout = run_example("run_bert.py", *argv, "--eval_strategy", "no", output_dir=output_dir)  # default: unlabelled
    assert (output_dir / "train_results.json").is_file() and "eval_knn_accuracy" not in stdout  # trained, no labels


def test_run_bert_task_head_keeps_the_class_names(tiny_bert_dir: Path) -> None:
    """A string label column (SICK's entailment_judgment) becomes a ClassLabel; the task head was saved with
    LABEL_0, LABEL_1, … where run_care saves the class names."""
    run_bert = _import_example("run_bert")
    script = run_bert.ScriptArguments(model=str(tiny_bert_dir))
    names = ["CONTRADICTION", "ENTAILMENT", "NEUTRAL"]
    assert run_bert.load_encoder(script, num_labels=3, class_names=names).config.id2label == dict(enumerate(names))
    assert run_bert.load_encoder(script, num_labels=0, class_names=names).config.num_labels == 0  # no task head
    unnamed = run_bert.load_encoder(script, num_labels=2, class_names=None)  # integer labels: transformers' names
    assert unnamed.config.id2label == {0: "LABEL_0", 1: "LABEL_1"}


# ---- offline errors (in-process: nothing to train) -----------------------------------------------


def test_offline_hub_model_says_how_to_use_a_local_one() -> None:
    run_bert = _import_example("run_bert")
    with pytest.raises(SystemExit, match="--model at a local copy"):
        run_bert.load_encoder(run_bert.ScriptArguments(model="bert-base-uncased"), num_labels=0, class_names=None)


def test_offline_hub_dataset_says_how_to_use_a_local_folder(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="local image folder"):
        run_example("run_care.py", "--dataset", "someone/some-dataset", output_dir=tmp_path / "care")


@functools.cache
def _example_module(name: str) -> types.ModuleType:
    """An example script imported once as a module, to call its functions."""
    return load_script(f"example_{name}", EXAMPLES / f"{name}.py")


@given(
    evaluate=st.sampled_from(["no", "steps", "epoch"]),
    save=st.sampled_from(["no", "steps", "epoch", "best"]),
    eval_steps=st.integers(1, 60) | st.sampled_from([0.05, 0.1, 0.25, 0.5]),  # a float < 1: a fraction of the run
    save_steps=st.integers(1, 120) | st.sampled_from([0.05, 0.1, 0.2, 0.5]),
)
def test_run_bert_keeps_the_best_checkpoint_exactly_where_transformers_can(
    tmp_path_factory, evaluate: str, save: str, eval_steps: float, save_steps: float
) -> None:
    """run_bert's default ``load_best_model_at_end`` is on where transformers accepts it with the user's schedules
    (the reference: ``TrainingArguments(load_best_model_at_end=True)`` itself), else off with the reason said."""
    from hf_contrast.training import ContrastiveTrainingArguments

    run_bert = _example_module("run_bert")
    schedule = dict(
        output_dir=str(tmp_path_factory.getbasetemp() / "bert"), eval_strategy=evaluate, save_strategy=save,
        eval_steps=eval_steps, save_steps=save_steps, metric_for_best_model="eval_sts_spearman", use_cpu=True,
    )  # fmt: skip
    try:
        ContrastiveTrainingArguments(**schedule, load_best_model_at_end=True)
        accepted = True
    except ValueError:
        accepted = False
    why_not = run_bert.best_checkpoint_unavailable(ContrastiveTrainingArguments(**schedule))
    if evaluate == "no":  # transformers accepts it with `save_strategy='no'` too, but there is no best to keep
        assert why_not == "there are no evaluations during training (`--eval_strategy no`)"
    else:
        assert (why_not is None) == accepted, why_not
    if why_not:
        assert "`--eval_strategy" in why_not  # names the flags to change
        assert not why_not.rstrip(".").endswith("but found")  # transformers' reason without its dangling tail


def test_given_arguments_are_what_the_command_line_names(tmp_path) -> None:
    from hf_contrast.training import given_arguments

    argv = ["--max_steps", "5", "--bf16=true", "--method", "care", "positional"]
    assert given_arguments(argv) == {"max_steps", "bf16", "method"}
    config = tmp_path / "args.json"
    config.write_text(json.dumps({"max_steps": 5, "output_dir": "x"}))
    assert given_arguments([str(config)]) == {"max_steps", "output_dir"}


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--sts_file", "missing.tsv"], r"`--sts_file`='missing.tsv' does not exist"),
        (["--sts_score_column", "label"], r"`--sts_score_column`='label' of '.*' must hold numbers"),
        (["--sts_sentence2_column", "nope"], r"`--sts_sentence2_column`='nope' is not a column of .* pass "
         r"`--sts_sentence2_column` with one of them"),
        (["--max_sts_pairs", "-1"], r"--max_sts_pairs must be >= 0"),
        (["--model", "resnet18"], r"--model 'resnet18' is a timm image model; examples/run_bert.py trains text"),
    ],
)  # fmt: skip
def test_run_bert_names_the_sts_flags_as_typed(tiny_bert_dir: Path, tmp_path: Path, flags, said) -> None:
    """The STS loader names its own arguments (`path`, `score_column`); run_bert's messages name the flags, and end
    the script without a traceback (an input error)."""
    sts = tmp_path / "sts.tsv"
    sts.write_text("sentence1\tsentence2\tscore\tlabel\na cat\ta dog\t1.0\tno\n", encoding="utf-8")
    flags = [f if f != "missing.tsv" else str(tmp_path / "missing.tsv") for f in flags]
    say = said.replace("missing.tsv", ".*missing.tsv")
    base = ["--model", str(tiny_bert_dir), "--sts_file", str(sts)]
    with pytest.raises(SystemExit, match="run_bert.py: error: " + say):  # run_main's ending: no traceback
        run_example("run_bert.py", *base, *flags, output_dir=tmp_path / "x")
    assert not (tmp_path / "x").exists()
