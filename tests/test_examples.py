"""End-to-end runs of the scripts in ``examples/``: a few steps on tiny settings, in subprocesses.

Every run checks its output folder: the encoder (config + safetensors, loadable with
``ContrastiveEncoder.from_pretrained``), the model card, ``results.json`` with finite numbers and the
PNGs. The main job (``run_care.py``) also pushes to the loopback Hub stand-in and runs once under
``accelerate launch`` with two CPU processes. Nothing here touches the network.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from _launch import free_port
from hf_contrast.models import ContrastiveEncoder

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
PNGS = ("embeddings.png", "augmentation_cosines.png", "loss_curves.png")
TIMEOUT = 300  # seconds per subprocess: a tiny run takes ~20-60 s on a loaded 2-core CPU
# A few steps on a 0.4 M-parameter timm ResNet, 64 training and 32 test images.
TINY_IMAGES = [
    "--max_steps", "2",
    "--logging_steps", "1",
    "--model", "test_resnet",
    "--image_size", "32",
    "--max_train_samples", "64",
    "--max_eval_samples", "32",
    "--per_device_eval_batch_size", "32",
    "--num_augmentations", "2",
    "--projection_plot", "pca",
]  # fmt: skip




def run_example(script: str, *args: str, output_dir: Path, launcher: list[str] | None = None) -> str:
    """Run ``examples/<script>`` with ``args`` in a subprocess; returns its stdout, fails with its output."""
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}
    command = [*(launcher or [sys.executable]), str(EXAMPLES / script), *args, "--output_dir", str(output_dir)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT, env=env, cwd=output_dir.parent)
    assert proc.returncode == 0, f"{' '.join(command)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}"
    return proc.stdout


def check_output(output_dir: Path, metrics: tuple[str, ...], pngs: tuple[str, ...] = PNGS) -> dict[str, float]:
    """The folder holds a loadable encoder, a generated card, finite ``metrics`` and non-empty PNGs."""
    assert (output_dir / "config.json").is_file() and (output_dir / "model.safetensors").is_file()
    card = (output_dir / "README.md").read_text(encoding="utf-8")
    assert card.startswith("---") and "library_name: hf_contrast" in card
    results = json.loads((output_dir / "results.json").read_text(encoding="utf-8"))
    for key in metrics:
        assert key in results, f"{key} missing from results.json: {sorted(results)}"
        assert isinstance(results[key], (int, float)) and math.isfinite(results[key]), (key, results[key])
    for name in pngs:
        data = (output_dir / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000, name
    return results


# ---- the main job ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def care_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One CARE run with an evaluation (geometry callback) that pushes to the loopback Hub stand-in."""
    from huggingface_hub import HfApi

    from hub_server import run_hub_server, use_hub_server

    root = tmp_path_factory.mktemp("care")
    output_dir = root / "care"
    with run_hub_server(root / "hub") as url, use_hub_server(url, cache_dir=root / "cache") as refused:
        stdout = run_example(
            "run_care.py",
            *TINY_IMAGES,
            "--per_device_train_batch_size", "16",
            "--n_splits", "4",
            "--eval_steps", "2",
            "--push_to_hub",
            "--hub_model_id", "user/care-tiny",
            output_dir=output_dir,
        )  # fmt: skip
        files = set(HfApi().list_repo_files("user/care-tiny"))
        pushed = ContrastiveEncoder.from_pretrained("user/care-tiny")
        assert refused == []
    assert {"README.md", "hf_contrast/config.json", "hf_contrast/model.safetensors", "model.safetensors"} <= files
    local = ContrastiveEncoder.from_pretrained(output_dir)
    for name, tensor in local.state_dict().items():
        assert (tensor == pushed.state_dict()[name]).all(), name
    return output_dir, stdout


def test_run_care_writes_encoder_card_results_and_plots(care_run: tuple[Path, str]) -> None:
    output_dir, stdout = care_run
    results = check_output(
        output_dir,
        ("linear_probe_accuracy", "knn_accuracy", "wahba_error", "wahba_error_per_sample", "relative_rotational_equivariance"),
        PNGS + ("equivariance_curves.png",),
    )
    assert 0.0 <= results["linear_probe_accuracy"] <= 1.0 and results["wahba_error"] >= 0.0
    assert results["train_steps"] == 2
    assert "CARE: final metrics" in stdout and "wahba_error" in stdout
    encoder = ContrastiveEncoder.from_pretrained(output_dir)
    assert encoder.data_config["input_size"] == (3, 32, 32)  # the training size travels with the weights
    card = (output_dir / "README.md").read_text(encoding="utf-8")
    assert "CARE" in card and "care_weight" in card


def test_run_linear_probe_on_a_saved_encoder(care_run: tuple[Path, str], tmp_path: Path) -> None:
    model_dir, _ = care_run
    output_dir = tmp_path / "probe"
    stdout = run_example(
        "run_linear_probe.py",
        "--model_name_or_path", str(model_dir),
        "--max_train_samples", "64",
        "--max_eval_samples", "32",
        output_dir=output_dir,
    )  # fmt: skip
    results = json.loads((output_dir / "results.json").read_text(encoding="utf-8"))
    assert 0.0 <= results["linear_probe_accuracy"] <= 1.0 and 0.0 <= results["knn_accuracy"] <= 1.0
    assert results["num_train"] == 64 and results["num_test"] == 32
    assert (output_dir / "embeddings.png").stat().st_size > 2000
    assert "linear_probe_accuracy" in stdout


@pytest.mark.distributed
def test_run_care_under_accelerate_launch_with_two_cpu_processes(tmp_path: Path) -> None:
    output_dir = tmp_path / "care-ddp"
    launcher = [
        sys.executable, "-m", "accelerate.commands.launch",
        "--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
        "--dynamo_backend", "no", "--main_process_port", str(free_port()),
    ]  # fmt: skip
    stdout = run_example(
        "run_care.py",
        *TINY_IMAGES,
        "--per_device_train_batch_size", "8",
        "--n_splits", "2",
        "--gather_distributed",
        "--eval_strategy", "no",
        output_dir=output_dir,
        launcher=launcher,
    )  # fmt: skip
    assert "× 2 process(es)" in stdout  # the script saw both processes
    assert stdout.count("CARE: final metrics") == 1  # only the main process evaluates and writes
    check_output(output_dir, ("linear_probe_accuracy", "knn_accuracy", "wahba_error", "relative_rotational_equivariance"))


@pytest.mark.slow
@pytest.mark.parametrize("method", ["simclr", "moco", "spectral", "vicreg", "binary_nce"])
def test_run_care_other_methods(method: str, tmp_path: Path) -> None:
    output_dir = tmp_path / method
    run_example(
        "run_care.py", *TINY_IMAGES, "--method", method, "--per_device_train_batch_size", "16", "--n_splits", "4",
        "--eval_strategy", "no", output_dir=output_dir,
    )  # fmt: skip
    check_output(output_dir, ("linear_probe_accuracy", "wahba_error", "relative_rotational_equivariance"))


# ---- the other examples -------------------------------------------------------------------------


def test_run_simo(tmp_path: Path) -> None:
    output_dir = tmp_path / "simo"
    run_example(
        "run_simo.py", *TINY_IMAGES,
        "--classes_per_batch", "4", "--samples_per_class", "2", "--per_device_train_batch_size", "8",
        output_dir=output_dir,
    )  # fmt: skip
    results = check_output(output_dir, ("class_orthogonality", "knn_accuracy", "linear_probe_accuracy"))
    assert 0.0 <= results["class_orthogonality"] <= 1.0
    assert ContrastiveEncoder.from_pretrained(output_dir).config.normalize_projections is False


@pytest.mark.parametrize("loss", ["ocl", pytest.param("supcon", marks=pytest.mark.slow)])
def test_run_ocl_long_tailed(loss: str, tmp_path: Path) -> None:
    output_dir = tmp_path / loss
    stdout = run_example(
        "run_ocl.py", *TINY_IMAGES, "--loss", loss, "--per_device_train_batch_size", "8", "--imbalance_ratio", "4",
        output_dir=output_dir,
    )  # fmt: skip
    results = check_output(output_dir, ("linear_probe_accuracy", "linear_probe_macro_f1", "knn_accuracy", "knn_macro_f1"))
    assert 0.0 <= results["linear_probe_macro_f1"] <= 1.0
    assert "imbalance 4: class sizes" in stdout


@pytest.mark.parametrize("loss", ["ocl", pytest.param("supcon", marks=pytest.mark.slow)])
def test_run_local_pairs(loss: str, tmp_path: Path) -> None:
    output_dir = tmp_path / loss
    run_example("run_local.py", *TINY_IMAGES, "--loss", loss, "--per_device_train_batch_size", "8", output_dir=output_dir)
    results = check_output(output_dir, ("pair_classifier_accuracy", "pair_classifier_macro_f1", "majority_class_accuracy"))
    assert 0.0 <= results["pair_classifier_macro_f1"] <= 1.0
    assert (output_dir / "local_loss.pt").is_file()  # the pair classifier, kept next to the encoder


# ---- text ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_bert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random 2-layer BERT (hidden 32) with its tokenizer, saved like a Hub checkpoint."""
    from transformers import BertModel

    from _tiny import tiny_bert_config, tiny_tokenizer

    path = tmp_path_factory.mktemp("tiny-bert")
    BertModel(tiny_bert_config()).save_pretrained(path)
    tiny_tokenizer(path).save_pretrained(path)
    return path


TINY_TEXT = ["--max_steps", "2", "--logging_steps", "1", "--per_device_train_batch_size", "8", "--num_augmentations", "2"]


@pytest.mark.parametrize(
    "method",
    [
        ["--method", "care", "--n_splits", "2"],
        pytest.param(["--method", "align_uniform", "--task_head"], marks=pytest.mark.slow),
        pytest.param(["--method", "simcse"], marks=pytest.mark.slow),
    ],
    ids=["care", "equibert", "simcse"],
)
def test_run_bert_on_a_local_tiny_bert(method: list[str], tiny_bert_dir: Path, tmp_path: Path) -> None:
    output_dir = tmp_path / "bert"
    stdout = run_example(
        "run_bert.py", "--model_name_or_path", str(tiny_bert_dir), *TINY_TEXT, *method, output_dir=output_dir
    )
    results = check_output(output_dir, ("sts_spearman", "sts_spearman_before_training", "topic_knn_accuracy", "wahba_error"))
    assert -1.0 <= results["sts_spearman"] <= 1.0
    assert "STS Spearman before" in stdout
    encoder = ContrastiveEncoder.from_pretrained(output_dir)
    assert encoder.config.backbone_type == "text" and encoder.tokenizer is not None


# ---- offline errors (in-process: nothing to train) -----------------------------------------------


def _import_example(name: str):  # noqa: ANN202
    sys.path.insert(0, str(EXAMPLES))
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(EXAMPLES))


def test_offline_hub_model_says_how_to_use_a_local_one() -> None:
    run_bert = _import_example("run_bert")
    with pytest.raises(SystemExit, match="--model_name_or_path at a local copy"):
        run_bert.load_encoder(run_bert.ModelArguments(model_name_or_path="bert-base-uncased"))


def test_offline_hub_dataset_says_how_to_use_a_local_folder() -> None:
    common = _import_example("_common")
    with pytest.raises(SystemExit, match="local image folder"):
        common.load_image_dataset("someone/some-dataset", 32, seed=0)


def test_local_image_folder_is_split_and_subsampled(tmp_path: Path) -> None:
    from PIL import Image

    common = _import_example("_common")
    for label in ("cat", "dog"):
        (tmp_path / label).mkdir()
        for i in range(10):
            Image.new("RGB", (12, 12), (i * 20, 0, 0)).save(tmp_path / label / f"{i}.png")
    data = common.load_image_dataset(str(tmp_path), 32, seed=0, max_eval_samples=3)
    assert len(data["train"]) == 16 and len(data["test"]) == 3  # stratified 20 % test split, then subsampled
    assert data["train"].features["label"].names == ["cat", "dog"]
