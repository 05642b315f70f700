"""End-to-end runs of the scripts in ``examples/``: a few steps on tiny settings.

The scripts run in this process (``runpy`` with a patched ``sys.argv``: no second interpreter start-up,
so the file stays fast); the 2-process run goes through ``accelerate launch`` in subprocesses. Every run
checks its output folder: the encoder (loadable with ``ContrastiveEncoder.from_pretrained``), the model
card written by the library, ``results.json`` with finite numbers and the PNGs. Nothing touches the network.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from _launch import free_port
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
    returns what it printed."""
    argv, path = sys.argv, list(sys.path)
    sys.argv = [str(EXAMPLES / script), *args, "--output_dir", str(output_dir)]
    sys.path.insert(0, str(EXAMPLES))
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            runpy.run_path(str(EXAMPLES / script), run_name="__main__")
    finally:
        sys.argv, sys.path[:] = argv, path
    return printed.getvalue()


def check_output(output_dir: Path, metrics: tuple[str, ...], pngs: tuple[str, ...]) -> dict[str, float]:
    """The folder holds a loadable encoder, the library's model card, finite ``metrics`` and non-empty PNGs."""
    encoder = ContrastiveEncoder.from_pretrained(output_dir)
    card = (output_dir / "README.md").read_text(encoding="utf-8")
    assert card.startswith("---") and "hf_contrast" in card
    results = json.loads((output_dir / "results.json").read_text(encoding="utf-8"))
    for key in metrics:
        assert key in results, f"{key} missing from results.json: {sorted(results)}"
        assert isinstance(results[key], (int, float)) and math.isfinite(results[key]), (key, results[key])
    for name in pngs:
        data = (output_dir / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000, name
    assert encoder is not None
    return results


def image_folder(root: Path, classes: tuple[str, ...] = ("ant", "bee", "cat"), per_class: int = (12)) -> Path:
    """``root/{train,test}/<class>/<i>.png``: a folder sorted by class, like real image folders."""
    from PIL import Image

    for split, count in (("train", per_class), ("test", per_class // 2)):
        for index, name in enumerate(classes):
            (root / split / name).mkdir(parents=True)
            for i in range(count):
                colour = tuple(int(v) for v in ((index * 90 + i * 7) % 256, (i * 20) % 256, index * 60))
                Image.new("RGB", (20, 20), colour).save(root / split / name / f"{i}.png")
    return root


# ---- the main job ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def care_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One CARE run with an evaluation (equivariance evaluator) that pushes to the loopback Hub stand-in."""
    from huggingface_hub import HfApi

    from hub_server import run_hub_server, use_hub_server

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


def test_run_care_writes_encoder_card_results_and_plots(care_run: tuple[Path, str]) -> None:
    output_dir, stdout = care_run
    results = check_output(
        output_dir,
        ("linear_probe_accuracy", "linear_probe_macro_f1", "knn_accuracy", "knn_macro_f1", "alignment", "uniformity",
         "knn_loo_accuracy", "linear_probe_holdout_accuracy", "equivariance_wahba_error",
         "equivariance_relative_rotational_equivariance"),
        ("embeddings.png", "augmentation_cosines.png", "loss_curves.png", "eval_curves.png"),
    )  # fmt: skip
    assert 0.0 <= results["linear_probe_accuracy"] <= 1.0 and results["equivariance_wahba_error"] >= 0.0
    assert 0.0 <= results["alignment"] <= 4.0  # mean squared distance of two unit vectors
    assert results["train_steps"] == 2
    assert "care: final metrics" in stdout and "equivariance_wahba_error" in stdout
    assert " alignment " in stdout and " linear_probe_accuracy " in stdout
    assert ContrastiveEncoder.from_pretrained(output_dir).data_config["input_size"] == (3, 32, 32)  # the training size


def test_run_care_card_and_results_give_each_number_one_name(care_run: tuple[Path, str]) -> None:
    """The card's evaluation table holds the final evaluation under the names of results.json: the probes
    fitted on train and scored on test apart from the within-split (leave-one-out / held-out) scores."""
    import re

    output_dir, _ = care_run
    results = json.loads((output_dir / "results.json").read_text(encoding="utf-8"))
    card = (output_dir / "README.md").read_text(encoding="utf-8")
    # "| `metric` | this model |" (the evaluator's primary metric in bold; a baseline column may follow)
    table = dict(re.findall(r"^\| \*{0,2}`(\w+)`\*{0,2} \| ([-+0-9.e]+) \|", card.split("## Evaluation", 1)[1], flags=re.M))
    for key in ("linear_probe_accuracy", "knn_accuracy", "knn_loo_accuracy", "linear_probe_holdout_accuracy", "alignment"):
        assert float(table[key]) == pytest.approx(results[key], rel=1e-3, abs=1e-12), key


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
    results = json.loads((output_dir / "results.json").read_text(encoding="utf-8"))
    assert 0.0 <= results["linear_probe_accuracy"] <= 1.0 and 0.0 <= results["knn_accuracy"] <= 1.0
    assert results["num_train"] == 64 and results["num_test"] == 32
    assert (output_dir / "embeddings.png").stat().st_size > 2000
    assert "linear_probe_accuracy" in stdout
    # The same splits (seed 0) and the same encoder: the training run's final numbers, under the same names.
    trained = json.loads((model_dir / "results.json").read_text(encoding="utf-8"))
    for key in ("linear_probe_accuracy", "linear_probe_macro_f1", "knn_accuracy", "knn_macro_f1"):
        assert results[key] == pytest.approx(trained[key]), key


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
    assert proc.stdout.count("care: final metrics") == 1  # only the main process evaluates and writes
    check_output(output_dir, ("linear_probe_accuracy", "knn_accuracy", "equivariance_wahba_error"), ("embeddings.png",))


@pytest.mark.slow
@pytest.mark.parametrize(
    "method",
    [["simclr"], ["care_moco", "--n_splits", "4", "--moco_queue_size", "64"], ["spectral"], ["vicreg"], ["binary_nce"]],
    ids=lambda m: m[0],
)
def test_run_care_other_methods(method: list[str], tmp_path: Path) -> None:
    output_dir = tmp_path / method[0]
    run_example(
        "run_care.py", *TINY_IMAGES, "--method", *method, "--per_device_train_batch_size", "16",
        "--num_augmentations", "2", "--eval_strategy", "no", output_dir=output_dir,
    )  # fmt: skip
    check_output(output_dir, ("linear_probe_accuracy", "equivariance_wahba_error"), ("embeddings.png", "loss_curves.png"))


# ---- argument parsing: the registry resolves the method -------------------------------------------


def test_method_flags_come_from_the_chosen_objective(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    sys.path.insert(0, str(EXAMPLES))
    try:
        import _common
        import run_care
    finally:
        sys.path.remove(str(EXAMPLES))
    argv = ["run_care.py", "--method", "care_moco", "--moco_queue_size", "32", "--output_dir", str(tmp_path)]
    monkeypatch.setattr(sys, "argv", argv)
    script, args, config = _common.parse_args(run_care.ScriptArguments, run_care.DEFAULTS, method="care")
    assert script.method == "care_moco" and type(config).__name__ == "CAREMoCoConfig"
    assert config.moco_queue_size == 32 and config.n_splits == 8  # a flag, and a script default
    assert args.per_device_train_batch_size == 128 and args.output_dir == str(tmp_path)
    monkeypatch.setattr(sys, "argv", ["run_care.py", "--method", "simclr", "--n_splits", "4"])
    with pytest.raises(SystemExit):  # SimCLR has no chunks: its parser has no --n_splits
        _common.parse_args(run_care.ScriptArguments, run_care.DEFAULTS, method="care")
    monkeypatch.setattr(sys, "argv", ["run_care.py", "--method", "no_such_method"])
    with pytest.raises(SystemExit):  # argparse: invalid choice, listing the registered objectives
        _common.parse_args(run_care.ScriptArguments, run_care.DEFAULTS, method="care")


# ---- the other image examples -------------------------------------------------------------------


def test_run_ocl_on_a_class_sorted_image_folder_as_is(tmp_path: Path) -> None:
    """A folder sorted by class trains and evaluates (balanced samples); without --imbalance_ratio the data is as is."""
    root = image_folder(tmp_path / "images")
    output_dir = tmp_path / "ocl"
    stdout = run_example(
        "run_ocl.py", "--dataset", str(root), "--max_steps", "2", "--logging_steps", "1", "--model", "test_resnet",
        "--image_size", "32", "--per_device_train_batch_size", "8", "--eval_steps", "2", "--projection_plot", "pca",
        output_dir=output_dir,
    )  # fmt: skip
    results = check_output(
        output_dir, ("linear_probe_accuracy", "linear_probe_macro_f1", "knn_accuracy", "knn_macro_f1"),
        ("embeddings.png", "loss_curves.png"),
    )  # fmt: skip
    assert results["train_class_sizes"] == [12, 12, 12]  # as is: nothing trimmed
    assert "as is: class sizes [12, 12, 12]" in stdout


@pytest.mark.slow
def test_run_ocl_supcon_long_tailed(tmp_path: Path) -> None:
    output_dir = tmp_path / "supcon"
    stdout = run_example(
        "run_ocl.py", *TINY_IMAGES, "--method", "supcon", "--per_device_train_batch_size", "8", "--imbalance_ratio", "4",
        output_dir=output_dir,
    )  # fmt: skip
    results = check_output(output_dir, ("linear_probe_macro_f1", "knn_macro_f1", "projection_class_orthogonality"), ("embeddings.png",))
    assert results["train_class_sizes"][0] / results["train_class_sizes"][-1] > 2
    assert "long-tailed with imbalance 4" in stdout


def test_run_simo(tmp_path: Path) -> None:
    output_dir = tmp_path / "simo"
    run_example(
        "run_simo.py", *TINY_IMAGES,
        "--classes_per_batch", "4", "--samples_per_class", "2", "--per_device_train_batch_size", "8",
        output_dir=output_dir,
    )  # fmt: skip
    results = check_output(
        output_dir, ("projection_class_orthogonality", "knn_accuracy", "linear_probe_accuracy", "alignment"), ("embeddings.png",)
    )
    assert 0.0 <= results["projection_class_orthogonality"] <= 1.0
    assert ContrastiveEncoder.from_pretrained(output_dir).config.normalize_projections is False


@pytest.mark.parametrize("contrastive", ["ocl", pytest.param("supcon", marks=pytest.mark.slow)])
def test_run_local_pairs(contrastive: str, tmp_path: Path) -> None:
    output_dir = tmp_path / contrastive
    run_example(
        "run_local.py", *TINY_IMAGES, "--contrastive", contrastive, "--per_device_train_batch_size", "8",
        output_dir=output_dir,
    )  # fmt: skip
    results = check_output(output_dir, ("accuracy", "macro_f1", "knn_loo_accuracy", "majority_class_accuracy"), ("embeddings.png",))
    assert 0.0 <= results["macro_f1"] <= 1.0 and 0.0 <= results["accuracy"] <= 1.0
    state = __import__("torch").load(output_dir / "local_objective.pt")
    assert any(key.startswith("loss.") for key in state)  # the pair classifier, kept next to the encoder


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


TINY_TEXT = [
    "--max_steps", "2", "--logging_steps", "1", "--per_device_train_batch_size", "8", "--num_augmentations", "2",
    "--eval_steps", "1", "--save_steps", "1",
]  # fmt: skip


def test_run_bert_supervised_pairs_from_a_local_file_with_sts_checkpoint_selection(tiny_bert_dir: Path, tmp_path: Path) -> None:
    import csv

    rows = [(f"the {a} eats {b}", f"a {a} is eating {b}", a) for a in ("cat", "dog", "cow", "fox") for b in ("food", "grass", "meat", "fish")]
    train = tmp_path / "pairs.csv"
    with train.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([("text", "paraphrase", "animal"), *rows])
    sts = tmp_path / "sts.tsv"
    sts.write_text("a\tb\tgold\n" + "".join(f"{x}\t{y}\t{i % 5}\n" for i, (x, y, _) in enumerate(rows)), encoding="utf-8")
    output_dir = tmp_path / "bert"
    stdout = run_example(
        "run_bert.py", "--model", str(tiny_bert_dir), *TINY_TEXT, "--method", "simclr", "--dataset", str(train),
        "--text_column", "text", "--text_pair_column", "paraphrase", "--sts_file", str(sts),
        "--sts_sentence1_column", "a", "--sts_sentence2_column", "b", "--sts_score_column", "gold",
        output_dir=output_dir,
    )  # fmt: skip
    results = check_output(
        output_dir, ("sts_spearman", "sts_spearman_before_training", "equivariance_wahba_error"),
        ("loss_curves.png", "augmentation_cosines.png"),
    )  # fmt: skip
    assert -1.0 <= results["sts_spearman"] <= 1.0 and results["best_step"] in (1, 2)
    assert "paired with `paraphrase`" in stdout and "before training" in stdout
    encoder = ContrastiveEncoder.from_pretrained(output_dir)
    assert encoder.config.backbone_type == "text" and encoder.tokenizer is not None
    history = json.loads(next(output_dir.glob("checkpoint-*/trainer_state.json")).read_text())["log_history"]
    assert any("eval_sts_spearman" in entry for entry in history)  # the STS evaluator ran during training


@pytest.mark.slow
@pytest.mark.parametrize(
    "method", [["--method", "care", "--n_splits", "2"], ["--method", "align_uniform", "--task_head"]], ids=["care", "equibert"]
)
def test_run_bert_on_the_shipped_sentences(method: list[str], tiny_bert_dir: Path, tmp_path: Path) -> None:
    output_dir = tmp_path / "bert"
    run_example("run_bert.py", "--model", str(tiny_bert_dir), *TINY_TEXT, *method, output_dir=output_dir)
    results = check_output(output_dir, ("sts_spearman", "knn_accuracy", "equivariance_wahba_error"), ("embeddings.png",))
    assert -1.0 <= results["sts_spearman"] <= 1.0


# ---- offline errors (in-process: nothing to train) -----------------------------------------------


def _import_example(name: str):  # noqa: ANN202
    sys.path.insert(0, str(EXAMPLES))
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(EXAMPLES))


def test_offline_hub_model_says_how_to_use_a_local_one() -> None:
    run_bert = _import_example("run_bert")
    with pytest.raises(SystemExit, match="--model at a local copy"):
        run_bert.load_encoder(run_bert.ScriptArguments(model="bert-base-uncased"), num_labels=0)


def test_offline_hub_dataset_says_how_to_use_a_local_folder() -> None:
    from types import SimpleNamespace

    common = _import_example("_common")
    args = SimpleNamespace(image_column="image", label_column="label", image_size=32, seed=0)
    with pytest.raises(SystemExit, match="local image folder"):
        common.load_images("someone/some-dataset", args)


def test_local_image_folder_without_test_split_is_split_by_class_and_subsampled(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from PIL import Image

    common = _import_example("_common")
    for label in ("cat", "dog"):
        (tmp_path / label).mkdir()
        for i in range(10):
            Image.new("RGB", (12, 12), (i * 20, 0, 0)).save(tmp_path / label / f"{i}.png")
    args = SimpleNamespace(image_column="image", label_column="label", image_size=32, seed=0)
    data = common.load_images(str(tmp_path), args, max_eval_samples=2)
    assert len(data["train"]) == 16 and sorted(data["test"]["label"]) == [0, 1]  # 20 % per class, then balanced
    assert data["train"].features["label"].names == ["cat", "dog"]
