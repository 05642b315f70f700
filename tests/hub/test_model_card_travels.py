"""The card travels with the model, no local path leaks, and provenance survives a local copy.

A model is trained (with an evaluator, a baseline evaluation and a local backbone folder), saved,
loaded back with ``from_pretrained`` and pushed to the loopback Hub (``tests/hub_server.py``): the
pushed card is the trained one, and no saved or uploaded file holds the test's temporary path, the
home folder or the working directory.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import timm
import torch
import yaml
from _tiny import tiny_bert_config, tiny_text_encoder, tiny_timm_encoder, tiny_tokenizer
from hub_server import HubServer, use_hub_server
from huggingface_hub import HfApi, ModelCard, hf_hub_download
from PIL import Image

from hf_contrast.data import load_image_dataset
from hf_contrast.evaluation import ProbeEvaluator
from hf_contrast.hub import CARD_DATA_FILE, ContrastiveModelCardData, generate_model_card, get_model_card_data
from hf_contrast.models import ContrastiveEncoder
from hf_contrast.training import ContrastiveTrainingArguments, SimCLRTrainer

PLACEHOLDER = "<user>/<repo>"


@pytest.fixture()
def hub(tmp_path: Path) -> Iterator[HubServer]:
    with (
        HubServer(tmp_path / "hub") as server,
        use_hub_server(server.url, cache_dir=tmp_path / "hub-cache") as refused,
    ):
        yield server
    assert refused == [], f"requests left loopback: {refused}"


def _local_paths(tmp_path: Path) -> list[bytes]:
    """What must never be written: this test's folder, the user's home, the working directory."""
    return [os.fsencode(str(tmp_path)), os.fsencode(str(Path.home())), os.fsencode(os.getcwd())]


def _assert_no_local_path(files: dict[str, bytes], needles: list[bytes]) -> None:
    assert files, "nothing to scan"
    for name, content in files.items():
        for needle in needles:
            assert needle not in content, f"{name} holds the local path {needle.decode()!r}"


def _folder_files(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in folder.rglob("*") if path.is_file()}


def _pushed_files(repo_id: str) -> dict[str, bytes]:
    return {name: Path(hf_hub_download(repo_id, name)).read_bytes() for name in HfApi().list_repo_files(repo_id)}


def _image_folder(root: Path, per_class: int = 12, size: int = 32) -> Path:
    """root/<class>/<i>.png: two classes of random RGB images (an `imagefolder` dataset)."""
    rng = np.random.default_rng(0)
    for label in ("cats", "dogs"):
        (root / label).mkdir(parents=True)
        for index in range(per_class):
            Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(root / label / f"{index}.png")
    return root


def _local_timm_copy(folder: Path, pretrained_cfg: dict[str, Any]) -> Path:
    """A local timm model folder (config.json + model.safetensors), as `save_for_hf` writes, with `pretrained_cfg`."""
    from timm.models import save_for_hf

    model = timm.create_model("test_resnet", pretrained=False)
    save_for_hf(model, str(folder))
    config = json.loads((folder / "config.json").read_text())
    config["pretrained_cfg"] = {**config.get("pretrained_cfg", {}), **pretrained_cfg}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _cell(value: float) -> str:
    """A number as the card's tables print it (4 significant digits)."""
    text = f"{value:.4g}"
    return text + ".0" if text.lstrip("-").isdigit() else text


def _metadata(text: str) -> dict[str, Any]:
    return yaml.safe_load(text.split("---")[1])


# ----------------------------------------------------------------------------------------------
# train -> save -> from_pretrained -> push: the same card, no local path
# ----------------------------------------------------------------------------------------------


@pytest.mark.filterwarnings(
    "ignore::hf_contrast.evaluation.RepresentationCollapseWarning"
)  # two steps from random weights
def test_trained_card_survives_save_reload_and_push_without_local_paths(tmp_path: Path, hub: HubServer) -> None:
    torch.manual_seed(0)
    backbone = _local_timm_copy(
        tmp_path / "models" / "resnet-copy", {"hf_hub_id": "timm/test_resnet.r160_in1k", "license": "apache-2.0"}
    )
    encoder = ContrastiveEncoder.from_backbone(str(backbone), projection_dim=8)
    images = load_image_dataset(_image_folder(tmp_path / "data" / "pets"), cache_dir=str(tmp_path / "datasets-cache"))
    parts = images.train_test_split(test_size=8, seed=0, stratify_by_column="label")
    probe = ProbeEvaluator(parts["train"], parts["test"], name="probe", knn_k=3, batch_size=8, progress=False)
    args = ContrastiveTrainingArguments(
        output_dir=str(tmp_path / "run"),
        max_steps=2,
        per_device_train_batch_size=8,
        per_device_eval_batch_size=8,
        learning_rate=1e-3,
        eval_strategy="steps",
        eval_steps=2,
        logging_steps=1,
        save_strategy="no",
        use_cpu=True,
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
        image_size=32,
        seed=0,
        knn_k=3,
    )
    trainer = SimCLRTrainer(
        model=encoder, args=args, train_dataset=parts["train"], eval_dataset=parts["test"], evaluator=probe
    )
    baseline = trainer.evaluate()  # step 0: the baseline
    trainer.train()
    final = [entry for entry in trainer.state.log_history if entry.get("step") == 2 and "eval_loss" in entry][-1]
    trainer.save_model()
    saved = tmp_path / "run"
    trained_card = (saved / "README.md").read_text(encoding="utf-8")
    trained_data = encoder.model_card_data.to_dict()

    # What the card says about the run.
    meta = _metadata(trained_card)
    assert (
        meta["base_model"] == "timm/test_resnet.r160_in1k" and meta["license"] == "apache-2.0"
    )  # kept from the local copy
    assert "simclr" in meta["tags"] and encoder.model_card_data.citations
    # a local image folder is no Hub dataset id: its metrics stay in the card's tables, out of model-index
    assert "model-index" not in meta
    assert "Baseline (before training)" in trained_card
    row = (
        f"| **`knn_accuracy`** | {_cell(final['eval_probe_knn_accuracy'])} "
        f"| {_cell(baseline['eval_probe_knn_accuracy'])} |"
    )
    assert row in trained_card  # the evaluator's primary metric, this model next to the labelled baseline
    assert (
        "- pets, split `train`, 16 rows" in trained_card
        and "- pets, held-out rows of split `train`, 8 rows" in trained_card
    )
    assert "### pets: `ProbeEvaluator`" in trained_card and "### pets: the trainer's evaluation" in trained_card
    assert (
        "**GMACs:**" in trained_card
        and "**Parameters:**" in trained_card
        and "### Full model architecture" in trained_card
    )

    # The model folder carries the card data; a reloaded model has it and publishes the same card.
    assert (saved / "hf_contrast" / CARD_DATA_FILE).is_file()
    reloaded = ContrastiveEncoder.from_pretrained(saved)
    assert reloaded.model_card_data.to_dict() == trained_data
    reloaded.push_to_hub("user/travels")
    pushed = ModelCard.load("user/travels")
    assert str(pushed) == trained_card.replace(PLACEHOLDER, "user/travels")
    info = HfApi().model_info("user/travels")  # the stand-in parses the YAML as the Hub does
    assert info.card_data.base_model == "timm/test_resnet.r160_in1k"
    assert info.card_data.eval_results is None
    for citation in encoder.model_card_data.citations:
        assert citation in pushed.text

    # No file written or uploaded names this machine's folders.
    needles = _local_paths(tmp_path)
    _assert_no_local_path(_folder_files(saved), needles)
    _assert_no_local_path(_pushed_files("user/travels"), needles)
    assert json.loads((saved / "hf_contrast" / "config.json").read_text())["backbone"] == "timm/test_resnet.r160_in1k"

    # The pushed model loads from the Hub with its card data, and its backbone with timm.
    from_hub = ContrastiveEncoder.from_pretrained("user/travels")
    assert from_hub.model_card_data.metrics == encoder.model_card_data.metrics
    assert from_hub.model_card_data.model_id == "user/travels"


@pytest.mark.filterwarnings("ignore::hf_contrast.evaluation.RepresentationCollapseWarning")
def test_retraining_a_loaded_model_replaces_the_runs_fields_and_keeps_the_users(tmp_path: Path) -> None:
    from distributed_scripts.trainer_utils import image_dataset, training_args

    torch.manual_seed(0)
    encoder = tiny_timm_encoder(projection_dim=8)
    data = get_model_card_data(encoder)
    data.license, data.language = "mit", None
    first = SimCLRTrainer(
        model=encoder,
        args=training_args(tmp_path / "first", image_size=32, knn_k=3),
        train_dataset=image_dataset(16, 32),
        eval_dataset=image_dataset(8, 32, seed=1),
    )
    first.train()
    first.evaluate()
    encoder.model_card_data.model_id = "user/first"  # as a push sets it
    encoder.save_pretrained(tmp_path / "saved")
    loaded = ContrastiveEncoder.from_pretrained(tmp_path / "saved")
    assert (
        loaded.model_card_data.objective_name == encoder.model_card_data.objective_name
        and loaded.model_card_data.metrics
    )
    loaded.model_card_data.add_tags("vision")  # a change by hand after loading is the user's
    second = SimCLRTrainer(
        model=loaded,
        args=training_args(tmp_path / "second", image_size=32, max_steps=3, learning_rate=5e-4),
        train_dataset=image_dataset(24, 32, seed=2),
    )
    second.train()
    card = loaded.model_card_data
    assert card.metrics == {} and card.baseline_metrics == {}  # the first run's metrics are not this model's
    assert [d["size"] for d in card.train_datasets] == [24] and card.eval_datasets == []
    assert card.hyperparameters["max_steps"] == 3 and card.hyperparameters["learning_rate"] == 5e-4
    assert max(row["step"] for row in card.training_logs) == 3 and len(card.training_logs) == 3
    assert card.license == "mit" and "vision" in card.tags  # what the user set stays
    assert card.base_model == "user/first" and card.model_id is None  # trained from the pushed model


def test_fields_given_to_create_model_card_are_saved_with_the_model(tmp_path: Path) -> None:
    from distributed_scripts.trainer_utils import image_dataset, training_args

    trainer = SimCLRTrainer(
        model=tiny_timm_encoder(projection_dim=8),
        args=training_args(tmp_path / "run", image_size=32, max_steps=1),
        train_dataset=image_dataset(8, 32),
    )
    trainer.train()
    trainer.save_model()
    trainer.create_model_card(license="mit", tags="pets", dataset_tags="my-org/pets", dataset="Pets")
    loaded = ContrastiveEncoder.from_pretrained(tmp_path / "run").model_card_data
    assert loaded.license == "mit" and "pets" in loaded.tags and loaded.objective_class == "SimCLRObjective"
    assert (
        generate_model_card(ContrastiveEncoder.from_pretrained(tmp_path / "run"))
        == (tmp_path / "run" / "README.md").read_text()
    )


def test_dataset_names_alone_rename_the_training_data_of_the_card(tmp_path: Path, caplog) -> None:
    """``create_model_card(dataset=...)`` without ``dataset_tags`` names the training data the card lists."""
    from distributed_scripts.trainer_utils import image_dataset, training_args

    trainer = SimCLRTrainer(
        model=tiny_timm_encoder(projection_dim=8),
        args=training_args(tmp_path / "run", image_size=32, max_steps=1),
        train_dataset=image_dataset(8, 32),
    )
    trainer.train()
    trainer.save_model()
    trainer.create_model_card(dataset="fashion-folder")
    card = ContrastiveEncoder.from_pretrained(tmp_path / "run").model_card_data
    assert [d["name"] for d in card.train_datasets] == ["fashion-folder"]
    assert "fashion-folder" in (tmp_path / "run" / "README.md").read_text()
    with caplog.at_level("WARNING"):
        trainer.create_model_card(dataset=["a", "b"])  # two names for one dataset: not used, and said so
    assert "2 name(s) for 1 training dataset(s)" in caplog.text
    assert [
        d["name"] for d in ContrastiveEncoder.from_pretrained(tmp_path / "run").model_card_data.train_datasets
    ] == ["fashion-folder"]


# ----------------------------------------------------------------------------------------------
# Provenance of local copies
# ----------------------------------------------------------------------------------------------


def _local_sentence_transformer(folder: Path, readme_metadata: str) -> Path:
    from sentence_transformers import SentenceTransformer

    try:  # sentence-transformers >= 6
        from sentence_transformers.sentence_transformer import modules as models
    except ImportError:  # 5.x, the lowest supported
        from sentence_transformers import models
    from transformers import BertModel

    bert = BertModel(tiny_bert_config())
    bert_dir = folder.parent / "bert-parts"
    bert.save_pretrained(bert_dir)
    tiny_tokenizer(bert_dir).save_pretrained(bert_dir)
    transformer = models.Transformer(str(bert_dir), max_seq_length=24)
    width = (
        transformer.get_embedding_dimension()
        if hasattr(transformer, "get_embedding_dimension")
        else transformer.get_word_embedding_dimension()
    )
    pooling = models.Pooling(width, pooling_mode="mean")
    SentenceTransformer(modules=[transformer, pooling, models.Normalize()], device="cpu").save(str(folder))
    readme = (folder / "README.md").read_text(encoding="utf-8").split("---", 2)
    (folder / "README.md").write_text(f"---\n{readme_metadata}{readme[1].lstrip()}---{readme[2]}", encoding="utf-8")
    return folder


def test_local_sentence_transformers_copy_keeps_base_model_and_license(tmp_path: Path) -> None:
    folder = _local_sentence_transformer(
        tmp_path / "checkouts" / "mini-lm", "base_model: sentence-transformers/all-MiniLM-L6-v2\nlicense: apache-2.0\n"
    )
    encoder = ContrastiveEncoder.from_backbone(str(folder), projection_dim=8)
    assert encoder.model_card_data.base_model == "sentence-transformers/all-MiniLM-L6-v2"
    encoder.save_pretrained(tmp_path / "saved")
    card = (tmp_path / "saved" / "README.md").read_text(encoding="utf-8")
    meta = _metadata(card)
    assert meta["base_model"] == "sentence-transformers/all-MiniLM-L6-v2" and meta["license"] == "apache-2.0"
    assert (
        "- **Maximum sequence length:** 24 tokens" in card and "- **Similarity function:** cosine similarity" in card
    )
    assert "- **Pooling:** mean, then L2 normalisation" in card and "- **Output dimensionality:** 32" in card
    assert (
        json.loads((tmp_path / "saved" / "hf_contrast" / "config.json").read_text())["backbone"] == "mini-lm"
    )  # its name, not its path
    _assert_no_local_path(_folder_files(tmp_path / "saved"), _local_paths(tmp_path))
    # The user's word wins; a local path is refused as a base model.
    mine = ContrastiveEncoder.from_backbone(
        str(folder), projection_dim=8, base_model="my-org/my-minilm", license="mit"
    )
    assert (mine.model_card_data.base_model, mine.model_card_data.license) == ("my-org/my-minilm", "mit")
    with pytest.raises(ValueError, match="`base_model`=.* is not a Hub repository id"):
        ContrastiveEncoder.from_backbone(str(folder), base_model=str(folder))


def test_local_timm_copy_keeps_its_hub_identity_from_the_pretrained_cfg(tmp_path: Path) -> None:
    by_id = _local_timm_copy(
        tmp_path / "a" / "weights", {"hf_hub_id": "timm/test_resnet.r160_in1k", "license": "apache-2.0"}
    )
    by_tag = _local_timm_copy(tmp_path / "b" / "weights", {"tag": "r160_in1k"})  # what timm's own save_for_hf keeps
    for folder in (by_id, f"local-dir:{by_tag}"):
        encoder = ContrastiveEncoder.from_backbone(str(folder), projection_dim=8)
        assert encoder.config.backbone == "timm/test_resnet.r160_in1k"
        assert _metadata(generate_model_card(encoder))["base_model"] == "timm/test_resnet.r160_in1k"
    unnamed = tmp_path / "c" / "my-resnet"
    _local_timm_copy(unnamed, {})
    config = json.loads((unnamed / "config.json").read_text())
    config["pretrained_cfg"].pop("tag", None)
    (unnamed / "config.json").write_text(json.dumps(config))
    encoder = ContrastiveEncoder.from_backbone(str(unnamed), projection_dim=8)
    meta = _metadata(generate_model_card(encoder))
    assert encoder.config.backbone == "my-resnet" and "base_model" not in meta  # no claim without evidence
    assert str(tmp_path) not in generate_model_card(encoder)


# ----------------------------------------------------------------------------------------------
# Card data: user input, the log table, the JSON file
# ----------------------------------------------------------------------------------------------


def test_card_data_round_trips_through_json_and_rejects_other_files(tmp_path: Path) -> None:
    data = ContrastiveModelCardData(train_datasets="my-org/imgs", tags="vision", license="mit")
    data.set_metrics({"eval_knn": np.float32(0.5)}, step=4)
    copy = ContrastiveModelCardData.from_dict(json.loads(json.dumps(data.to_dict())))
    assert copy.to_dict() == data.to_dict() and copy.tags == ["vision"] and copy.metrics == {"knn": 0.5}
    with pytest.raises(ValueError, match="Not hf_contrast model card data"):
        ContrastiveModelCardData.from_dict({"license": "mit"})
    with pytest.raises(ValueError, match="`tags` must be a tag or a list of tags"):
        ContrastiveModelCardData(tags=["vision", 3])


def test_paths_in_card_data_are_published_as_names() -> None:
    data = ContrastiveModelCardData(
        train_datasets=[{"name": "/home/someone/data/pets", "id": "/home/someone/data/pets"}]
    )
    data.hyperparameters = {
        "resume_from_checkpoint": "/home/someone/run/checkpoint-4",
        "learning_rate": 0.1,
        "deepspeed": "C:\\Users\\someone\\ds.json",
        "run_name": "relative/name",
    }
    data.citations = ['@article{m, author = {M\\"uller}}']  # a backslash is not a path
    public = data.to_dict()
    assert public["train_datasets"][0]["name"] == "pets" and public["train_datasets"][0]["id"] is None
    assert public["hyperparameters"] == {
        "resume_from_checkpoint": "checkpoint-4",
        "learning_rate": 0.1,
        "deepspeed": "ds.json",
        "run_name": "relative/name",
    }
    assert public["citations"] == data.citations
    assert "/home/someone" not in json.dumps(public)


def test_log_table_shows_at_most_eight_columns_and_the_rest_in_a_details_block() -> None:
    model = tiny_timm_encoder()
    data = get_model_card_data(model)
    data.evaluators = [
        {"prefix": "probe", "class": "ProbeEvaluator", "dataset_name": "pets", "primary_metric": "probe_knn_accuracy"}
    ]
    extra = {f"eval_metric_{i}": 0.1 * i for i in range(12)}
    for step in (0, 5, 10):
        data.log(step, step / 10, {"loss": 1.0, "learning_rate": 0.1, "grad_norm": 2.0})
        data.log(step, step / 10, {"eval_loss": 0.9, "eval_probe_knn_accuracy": 0.5, **extra})
    text = generate_model_card(model)
    section = text.split("## Training logs")[1].split("<details>")[0]
    header = next(line for line in section.splitlines() if line.startswith("| epoch"))
    assert (
        header == "| epoch | step | loss | eval_loss | eval_probe_knn_accuracy | eval_metric_0 | eval_metric_1 | "
        "eval_metric_2 |"
    )
    details = text.split("<details>")[1].split("</details>")[0]
    assert "eval_metric_11" in details and "grad_norm" in details and "learning_rate" in details


def test_metrics_are_attributed_to_the_evaluator_that_reported_them() -> None:
    model = tiny_timm_encoder()
    data = get_model_card_data(model)
    data.eval_datasets = [{"name": "pets-test", "id": "user/pets-test", "split": "test"}]
    data.evaluators = [
        {
            "prefix": "",
            "class": "ProbeEvaluator",
            "dataset_name": "pets",
            "dataset_id": "user/pets",
            "split": "test",
            "primary_metric": "knn_accuracy",
            "metric_names": ["knn_accuracy", "knn_macro_f1"],
        },
        {
            "prefix": "sts",
            "class": "STSEvaluator",
            "dataset_name": "sick",
            "dataset_id": "user/sick",
            "primary_metric": "sts_spearman",
        },
    ]
    data.set_metrics(
        {
            "eval_knn_accuracy": 0.5,
            "eval_knn_macro_f1": 0.4,
            "eval_alignment": 0.1,
            "eval_loss": 1.0,
            "eval_sts_spearman": 0.7,
        },
        step=8,
    )
    text = generate_model_card(model)
    probe = text.split("### pets: `ProbeEvaluator`")[1].split("###")[0]
    trainer_eval = text.split("### pets-test: the trainer's evaluation")[1].split("##")[0]
    assert "**`knn_accuracy`** | 0.5" in probe and "`knn_macro_f1`" in probe and "alignment" not in probe
    assert "`alignment` | 0.1" in trainer_eval and "`loss` | 1.0" in trainer_eval and "knn" not in trainer_eval
    results = {(r.dataset_name, r.dataset_type, r.task_type, r.metric_type) for r in ModelCard(text).data.eval_results}
    assert results == {
        ("pets", "user/pets", "image-classification", "knn_accuracy"),
        ("pets", "user/pets", "image-classification", "knn_macro_f1"),
        ("sick", "user/sick", "semantic-similarity", "spearman"),
        ("pets-test", "user/pets-test", "image-feature-extraction", "alignment"),
    }


@pytest.mark.filterwarnings("ignore::hf_contrast.evaluation.RepresentationCollapseWarning")
def test_trainer_push_with_checkpoints_and_the_best_model_leaks_no_local_path(tmp_path: Path, hub: HubServer) -> None:
    """The end-of-training push of a run that kept the best checkpoint (``trainer_state.json`` names it) and
    pushed its last checkpoint: no uploaded file names this machine's folders, and the local files still
    hold what resuming needs."""
    from distributed_scripts.trainer_utils import image_dataset, training_args

    torch.manual_seed(0)
    output_dir = tmp_path / "run"
    args = training_args(
        output_dir, image_size=32, max_steps=4, eval_strategy="steps", eval_steps=2, save_strategy="steps",
        save_steps=2, load_best_model_at_end=True, metric_for_best_model="loss", push_to_hub=True,
        hub_model_id="user/best", hub_strategy="checkpoint",
    )  # fmt: skip
    trainer = SimCLRTrainer(
        model=tiny_timm_encoder(projection_dim=8),
        args=args,
        train_dataset=image_dataset(16, 32),
        eval_dataset=image_dataset(16, 32, seed=1),
    )
    # an earlier run's state in output_dir, as Trainer.save_state writes it (absolute paths)
    stale = {"best_model_checkpoint": str(output_dir / "checkpoint-9"), "global_step": 9}
    output_dir.mkdir(exist_ok=True)
    (output_dir / "trainer_state.json").write_text(json.dumps(stale))
    trainer.train()
    if trainer.push_in_progress is not None:
        trainer.push_in_progress.wait_until_done()
    assert "last-checkpoint/trainer_state.json" in HfApi().list_repo_files("user/best")
    assert "trainer_state.json" not in HfApi().list_repo_files("user/best")  # left to the final push
    trainer.save_state()  # the Trainer's own file: the path it resumes from
    local = json.loads((output_dir / "trainer_state.json").read_text())["best_model_checkpoint"]
    assert Path(local).is_absolute() and Path(local).parent == output_dir
    trainer.push_to_hub()

    pushed = _pushed_files("user/best")
    assert "trainer_state.json" in pushed and "last-checkpoint/trainer_state.json" in pushed
    _assert_no_local_path(pushed, _local_paths(tmp_path))
    best = json.loads(pushed["trainer_state.json"])["best_model_checkpoint"]
    assert best in {"checkpoint-2", "checkpoint-4"}  # named relative to output_dir
    assert json.loads(pushed["last-checkpoint/trainer_state.json"])["best_model_checkpoint"] == best
    assert json.loads((output_dir / "trainer_state.json").read_text())["best_model_checkpoint"] == best
    # The checkpoint on disk keeps the path the Trainer reads back when resuming.
    on_disk = json.loads((output_dir / "checkpoint-4" / "trainer_state.json").read_text())
    assert on_disk["best_model_checkpoint"] == str(output_dir / best)


def test_equivariance_evaluator_is_named_by_the_data_its_batch_comes_from(tmp_path: Path) -> None:
    """Its card section names the image folder and split, not the metric prefix "equivariance"; a local folder
    is no Hub dataset id, so model-index leaves its metrics out."""
    from hf_contrast.evaluation import EquivarianceEvaluator

    images = load_image_dataset(
        _image_folder(tmp_path / "pets", per_class=4), cache_dir=str(tmp_path / "datasets-cache")
    )
    model = tiny_timm_encoder(projection_dim=8)
    evaluator = EquivarianceEvaluator.from_image_dataset(images, model.data_config, num_samples=4, num_augmentations=1)
    data = get_model_card_data(model)
    data.set_evaluator(evaluator)
    assert [(e["dataset_name"], e["split"], e["prefix"]) for e in data.evaluators] == [
        ("pets", "train", "equivariance")
    ]
    data.set_metrics({f"eval_{k}": v for k, v in evaluator(model).items()}, step=1)  # keys: equivariance_*
    text = generate_model_card(model)
    assert (
        "### pets: `EquivarianceEvaluator`" in text
        and "wahba_error" in text.split("### pets: `EquivarianceEvaluator`")[1]
    )
    assert ModelCard(text).data.eval_results is None


def test_sts_pairs_are_named_by_their_file_and_its_own_columns(tmp_path: Path) -> None:
    """``STSEvaluator.from_dataset`` names the pairs in the card (it said "on sts", the metric prefix), without a
    split: pairs drawn from the file the encoder trained on are not held-out rows of it. The loader's note names
    the source's columns and the ones it gave them (it said `text` / `text_pair`, then renamed them again)."""
    from hf_contrast.data import load_sts_pairs, load_text_dataset, take_subset
    from hf_contrast.data.naming import loader_notes
    from hf_contrast.evaluation import STSEvaluator

    path = tmp_path / "sick.tsv"
    rows = ["sentence_A\tsentence_B\trelatedness_score"]
    rows += [f"a man plays {i}\ta man is playing {i}\t{1 + i % 4}" for i in range(8)]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    cache = str(tmp_path / "datasets-cache")
    pairs = load_sts_pairs(path, "sentence_A", "sentence_B", "relatedness_score", cache_dir=cache)
    assert pairs.column_names == ["sentence1", "sentence2", "score"]
    assert loader_notes(pairs) == [
        "the loader renamed the source's columns `sentence_A` to `sentence1`, `sentence_B` to `sentence2`, "
        "`relatedness_score` to `score`"
    ]
    model = tiny_text_encoder()
    data = get_model_card_data(model)
    data.set_datasets(train_dataset=load_text_dataset(path, text_column="sentence_A", cache_dir=cache))
    data.set_evaluator(STSEvaluator.from_dataset(take_subset(pairs, 4, argument="max_sts_pairs", seed=0)))
    assert [(e["dataset_name"], e["split"], e["held_out"]) for e in data.evaluators] == [("sick", None, False)]
    data.set_metrics({"eval_sts_spearman": 0.5, "eval_sts_pearson": 0.4}, step=1)
    text = generate_model_card(model)
    # the card lists the pairs nowhere else: what their loaders did (renamed, a subset of them) is said here
    assert "### sick: `STSEvaluator`" in text
    assert (
        "`STSEvaluator` on sick; note: the loader renamed the source's columns `sentence_A` to `sentence1`, "
        "`sentence_B` to `sentence2`, `relatedness_score` to `score`; note: a random subset of 4 of the split's 8 "
        "rows (`max_sts_pairs`, seed 0)." in text
    )
    saved = json.loads(json.dumps(data.to_dict()))  # the notes travel with the card data (model_card.json)
    assert ContrastiveModelCardData.from_dict(saved).evaluators[0]["notes"] == data.evaluators[0]["notes"]
    assert data.evaluators[0]["notes"][1].startswith("a random subset of 4")
    columns = {"sentence1": ["a", "b"], "sentence2": ["a", "c"], "score": [1, 0]}  # a dict of columns has no name
    assert STSEvaluator.from_dataset(columns).dataset_name is None
    data.set_evaluator(STSEvaluator.from_dataset(columns))  # no notes: the card data is written as before them
    assert "notes" not in data.evaluators[0]
