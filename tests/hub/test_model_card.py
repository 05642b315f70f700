"""Model cards: card data on the model, the callback filling it in a real Trainer run, what the card says is true."""

from __future__ import annotations

import ast
import dataclasses
import logging
import os
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from _errors import assert_message
from _tiny import tiny_text_encoder, tiny_timm_encoder, tiny_tokenizer
from huggingface_hub import ModelCard
from PIL import Image
from transformers import Trainer, TrainerState, TrainingArguments

from hf_contrast.errors import InputError
from hf_contrast.hub import (
    GENERATED_MARKER,
    ContrastiveModelCardData,
    ModelCardCallback,
    dataset_metadata,
    generate_model_card,
    get_model_card_data,
    non_default_training_args,
    write_model_card,
)
from hf_contrast.models.adapters import adapter_for

BIBTEX = "@inproceedings{care2025,\n  title = {Escaping the Big Data Paradigm},\n  year = {2025}\n}"


class _Objective(torch.nn.Module):
    name = "CARE"
    citation = BIBTEX

    def get_config_dict(self) -> dict[str, Any]:
        return {"temperature": 0.07, "n_splits": 4}


def _yaml(text: str) -> dict[str, Any]:
    return yaml.safe_load(text.split("---")[1])  # what the Hub parses


def _save(model: Any, folder: Path, repo_id: str = "user/repo") -> Path:
    """The one layout `save_pretrained` writes, its card included."""
    get_model_card_data(model).model_id = repo_id
    model.save_pretrained(folder)
    assert (folder / "hf_contrast").is_dir() and f'"{repo_id}"' in (folder / "README.md").read_text()
    return folder


def _snippets(folder: Path, repo_id: str = "user/repo") -> list[str]:
    """The card's python blocks, pointed at the local folder instead of the Hub repository."""
    text = (folder / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    return [
        block.replace(f"hf-hub:{repo_id}", f"local-dir:{folder}").replace(f'"{repo_id}"', f'"{folder}"')
        for block in blocks
    ]


# ----------------------------------------------------------------------------------------------
# Metadata: library, base model, license, datasets, no local paths
# ----------------------------------------------------------------------------------------------


def test_from_scratch_image_card_has_timm_library_and_no_provenance() -> None:
    model = tiny_timm_encoder()
    meta = _yaml(generate_model_card(model))
    assert meta["library_name"] == "timm" and meta["pipeline_tag"] == "image-feature-extraction"
    assert {"hf_contrast", "timm"} <= set(meta["tags"])
    assert "base_model" not in meta and "license" not in meta  # from scratch: nothing to inherit, no constant
    assert "(trained from scratch)" in generate_model_card(model)


def _pretrained_stub(backbone: str, backbone_type: str = "timm") -> SimpleNamespace:
    config = SimpleNamespace(
        backbone=backbone,
        backbone_type=backbone_type,
        backbone_pretrained=True,
        embedding_dim=512,
        projection_dim=16,
        normalize_projections=True,
        pooling="mean",
    )
    model = SimpleNamespace(config=config, data_config={"input_size": (3, 224, 224)})
    model.card_facts = lambda: adapter_for(config).card_facts(model)  # as ContrastiveEncoder's
    return model


def test_pretrained_timm_backbone_gives_base_model_and_its_license() -> None:
    model = _pretrained_stub("resnet18")
    meta = _yaml(generate_model_card(model))
    assert meta["base_model"] == "timm/resnet18.a1_in1k"  # timm's default pretrained tag
    assert meta["license"] == "apache-2.0"  # what timm's pretrained config says
    get_model_card_data(model).license = "mit"
    assert _yaml(generate_model_card(model))["license"] == "mit"  # the user's wins


def test_no_local_path_reaches_the_card(tmp_path: Path) -> None:
    import datasets

    local_backbone = tmp_path / "my-bert"
    local_backbone.mkdir()
    model = _pretrained_stub(str(local_backbone), backbone_type="text")
    csv = tmp_path / "corpus" / "train.csv"
    csv.parent.mkdir()
    csv.write_text("sentence,label\nhello world,0\nthe cat,1\n")
    data = get_model_card_data(model)
    data.train_datasets = [{"name": str(tmp_path / "corpus")}]
    data.set_datasets(
        datasets.load_dataset("csv", data_files=str(csv), split="train", cache_dir=str(tmp_path / "cache"))
    )
    text = generate_model_card(model)
    assert str(tmp_path) not in text and "/tmp" not in text
    meta = _yaml(text)
    assert meta["library_name"] == "sentence-transformers" and "base_model" not in meta and "datasets" not in meta
    assert "# Contrastive encoder on my-bert" in text
    assert "- corpus, split `train`, 2 rows, columns `sentence`, `label`" in text


def test_hub_dataset_id_goes_to_metadata_and_metrics_to_model_index() -> None:
    model = tiny_timm_encoder()
    data = get_model_card_data(model)
    data.train_datasets = [{"name": "Fashion-MNIST", "id": "zalando-datasets/fashion_mnist", "size": 60000}]
    data.set_metrics({"eval_knn_top1": 0.25, "eval_runtime": 1.0}, step=0)
    data.set_metrics({"eval_knn_top1": torch.tensor(0.75), "eval_loss": float("nan")}, step=20)
    text = generate_model_card(model)
    meta = ModelCard(text).data
    assert meta.datasets == ["zalando-datasets/fashion_mnist"]
    assert [(r.metric_type, r.metric_value, r.dataset_type) for r in meta.eval_results] == [
        ("knn_top1", 0.75, "zalando-datasets/fashion_mnist")
    ]  # this model's metric only: no baseline, no NaN, no runtime
    assert "| `knn_top1` | 0.75 | 0.25 |" in text and "Baseline (before training)" in text


def test_dataset_metadata_of_a_dataset_dict_and_an_iterable() -> None:
    import datasets

    splits = datasets.DatasetDict(
        {"train": datasets.Dataset.from_dict({"a": [1, 2, 3]}), "test": datasets.Dataset.from_dict({"a": [4]})}
    )
    assert [(e["size"], e["columns"]) for e in dataset_metadata(splits)] == [(3, ["a"]), (1, ["a"])]
    stream = datasets.Dataset.from_dict({"a": [1, 2]}).to_iterable_dataset()
    assert dataset_metadata(stream)[0]["size"] is None


# ----------------------------------------------------------------------------------------------
# The callback in a real Trainer run
# ----------------------------------------------------------------------------------------------


class _TinyTrainer(Trainer):
    """A Trainer with the attributes the contrastive trainers expose (`objective`) and the card callback."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.objective = _Objective()
        self.add_callback(ModelCardCallback(self))

    def compute_loss(self, model: Any, inputs: dict[str, Any], return_outputs: bool = False, **kwargs: Any) -> Any:
        projections = model(pixel_values=inputs["pixel_values"]).projections
        loss = (projections @ projections.T).pow(2).mean()
        return (loss, {"projections": projections}) if return_outputs else loss


def _images(n: int) -> Any:
    import datasets

    rng = np.random.default_rng(0)
    return datasets.Dataset.from_dict(
        {"pixel_values": rng.standard_normal((n, 3, 32, 32)).astype(np.float32).tolist(), "index": list(range(n))}
    )


def test_callback_fills_datasets_hyperparameters_logs_and_metrics(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = tiny_timm_encoder()
    args = TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=4,
        per_device_train_batch_size=4,
        learning_rate=3e-3,
        logging_steps=2,
        eval_strategy="steps",
        eval_steps=4,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        disable_tqdm=True,
        hub_token="hf_secret_never_in_a_card",
        remove_unused_columns=False,
        label_names=["index"],
    )
    trainer = _TinyTrainer(model=model, args=args, train_dataset=_images(8), eval_dataset=_images(4))
    baseline = trainer.evaluate()  # step 0: the baseline
    trainer.train()
    data = model.model_card_data
    assert data.objective_name == "CARE" and data.objective_config == {"temperature": 0.07, "n_splits": 4}
    assert data.citations == [BIBTEX]
    assert [(d["size"], d["columns"]) for d in data.train_datasets] == [(8, ["pixel_values", "index"])]
    assert data.eval_datasets[0]["size"] == 4
    assert data.hyperparameters["learning_rate"] == 3e-3 and data.hyperparameters["max_steps"] == 4
    assert not any("token" in key for key in data.hyperparameters)
    assert [row["step"] for row in data.training_logs] == [0, 2, 4]  # baseline eval, logs at 2 and 4 (+ eval at 4)
    assert "eval_loss" in data.training_logs[0] and "loss" in data.training_logs[1]
    assert {"loss", "eval_loss"} <= set(data.training_logs[2])
    final = [e for e in trainer.state.log_history if e.get("step") == 4 and "eval_loss" in e][0]
    assert data.metrics["loss"] == pytest.approx(final["eval_loss"])
    assert data.baseline_metrics == {"loss": pytest.approx(baseline["eval_loss"])}  # no runtime bookkeeping
    assert data.metrics["loss"] != data.baseline_metrics["loss"]
    text = generate_model_card(model)
    assert "hf_secret" not in text and str(tmp_path) not in text
    assert "| `learning_rate` | 0.003 |" in text and f"```bibtex\n{BIBTEX}\n```" in text
    assert "| epoch | step | loss | eval_loss |" in text  # losses first, as sentence-transformers orders them


def test_callback_hooks_record_baseline_only_at_step_zero() -> None:
    model = tiny_timm_encoder()
    trainer = SimpleNamespace(
        model=model,
        args=TrainingArguments(output_dir="unused", report_to="none"),
        train_dataset=None,
        eval_dataset=None,
        objective=None,
    )
    callback = ModelCardCallback(trainer)
    state = TrainerState()
    state.global_step = 0
    callback.on_evaluate(trainer.args, state, None, metrics={"eval_alignment": 0.9})
    state.global_step, state.epoch = 3, 1.0
    callback.on_log(trainer.args, state, None, logs={"loss": 1.25, "learning_rate": 0.1, "train_runtime": 2.0})
    callback.on_evaluate(trainer.args, state, None, metrics={"eval_alignment": 0.4})
    data = model.model_card_data
    assert data.baseline_metrics == {"alignment": 0.9} and data.metrics == {"alignment": 0.4}
    assert data.training_logs[-1] == {"epoch": 1.0, "step": 3, "loss": 1.25, "learning_rate": 0.1}
    assert "hf_contrast" in data.tags


def test_an_evaluation_of_the_reloaded_best_weights_is_not_the_last_steps_row() -> None:
    """``load_best_model_at_end`` reloaded step 10's weights at step 20; ``trainer.evaluate()`` then logs their
    evaluation at step 20, which overwrote step 20's row of the log table (the card showed step 10's numbers as step
    20's). The metrics still take it (the kept model's); without a reload an evaluation after training is the last
    step's, as before."""
    args = TrainingArguments(
        output_dir="unused",
        report_to="none",
        load_best_model_at_end=True,
        eval_strategy="steps",
        save_strategy="steps",
    )
    for best, expected_row in ((10, 0.5), (20, 0.25)):
        model = tiny_timm_encoder()
        trainer = SimpleNamespace(model=model, args=args, train_dataset=None, eval_dataset=None, objective=None)
        callback = ModelCardCallback(trainer)
        state = TrainerState()
        callback.on_train_begin(args, state, None)
        for step, value in ((10, 1.0), (20, 0.5)):  # training: step 10 is the best when `best` is 10
            state.global_step, state.epoch = step, step / 20
            state.log_history.append({"eval_loss": value, "step": step})
            callback.on_log(args, state, None, logs={"eval_loss": value})
            callback.on_evaluate(args, state, None, metrics={"eval_loss": value})
        state.best_global_step = best
        callback.on_train_end(args, state, None)
        kept = 1.0 if best == 10 else 0.25  # trainer.evaluate() of the kept weights, logged at step 20
        callback.on_log(args, state, None, logs={"eval_loss": kept})
        callback.on_evaluate(args, state, None, metrics={"eval_loss": kept})
        data = model.model_card_data
        assert [row["eval_loss"] for row in data.training_logs] == [1.0, expected_row], best
        assert data.metrics == {"loss": kept} and data.best_model_step == best


# ----------------------------------------------------------------------------------------------
# The usage snippets run as written against the saved folder
# ----------------------------------------------------------------------------------------------


def test_timm_usage_snippets_give_the_encoders_embeddings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    encoder = tiny_timm_encoder(data_config={"input_size": (3, 48, 48)}).eval()
    folder = _save(encoder, tmp_path / "saved")
    timm_block, ours = _snippets(folder)
    assert ".eval()" in timm_block and "is_training=False" in timm_block
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (64, 80, 3), dtype=np.uint8)).save(tmp_path / "image.jpg")
    namespace: dict[str, Any] = {}
    exec(timm_block, namespace)  # noqa: S102 - the card's own code
    assert tuple(namespace["data_config"]["input_size"]) == (3, 48, 48)
    pixels = namespace["transform"](Image.open(tmp_path / "image.jpg").convert("RGB")).unsqueeze(0)
    with torch.no_grad():
        expected = encoder(pixel_values=pixels).embeddings
    torch.testing.assert_close(namespace["embeddings"], expected, atol=1e-5, rtol=1e-5)
    exec(ours, namespace)  # noqa: S102
    with torch.no_grad():
        torch.testing.assert_close(
            namespace["encoder"](pixel_values=pixels).projections, encoder(pixel_values=pixels).projections
        )


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_text_usage_snippets_give_the_encoders_embeddings(tmp_path: Path, pooling: str) -> None:
    torch.manual_seed(0)
    encoder = tiny_text_encoder(tiny_tokenizer(tmp_path / "vocab"), pooling=pooling).eval()
    folder = _save(encoder, tmp_path / "saved")
    st_block, transformers_block, _ = _snippets(folder)
    sentences = ast.literal_eval(re.search(r"model\.encode\((\[.*?\])\)", st_block).group(1))
    batch = encoder.tokenizer(sentences, padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = encoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).embeddings
    namespace: dict[str, Any] = {}
    exec(st_block, namespace)  # noqa: S102
    torch.testing.assert_close(torch.as_tensor(namespace["embeddings"]), expected, atol=1e-5, rtol=1e-5)
    namespace = {}
    exec(transformers_block, namespace)  # noqa: S102
    torch.testing.assert_close(namespace["embeddings"], expected, atol=1e-5, rtol=1e-5)


# ----------------------------------------------------------------------------------------------
# Writing: README protection, never raising
# ----------------------------------------------------------------------------------------------


def test_write_keeps_a_user_readme_unless_overwrite(tmp_path: Path) -> None:
    model = tiny_timm_encoder()
    readme = tmp_path / "README.md"
    readme.write_text("# My own notes\n")
    assert write_model_card(model, tmp_path) is None
    assert readme.read_text() == "# My own notes\n"
    assert write_model_card(model, tmp_path, overwrite=True) == readme
    assert GENERATED_MARKER in readme.read_text()


def test_write_refreshes_its_own_card(tmp_path: Path) -> None:
    model = tiny_timm_encoder()
    model.model_card_data = ContrastiveModelCardData(license="mit")
    assert write_model_card(model, tmp_path) == tmp_path / "README.md"
    assert ModelCard.load(tmp_path / "README.md").data.license == "mit"
    model.model_card_data.license = "apache-2.0"
    assert write_model_card(model, tmp_path) is not None
    assert ModelCard.load(tmp_path / "README.md").data.license == "apache-2.0"


def test_write_never_raises(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    with caplog.at_level(logging.WARNING, logger="hf_contrast.hub.card_render"):
        assert write_model_card(tiny_timm_encoder(), not_a_dir) is None
    assert any("not written" in r.getMessage() for r in caplog.records)


def test_generating_does_not_modify_the_card_data() -> None:
    model = tiny_timm_encoder()
    get_model_card_data(model).metrics = {"alignment": 0.5}
    before = repr(model.model_card_data)
    generate_model_card(model)
    assert repr(model.model_card_data) == before


def test_non_default_training_args_drop_defaults_and_secrets() -> None:
    args = TrainingArguments(
        output_dir=os.path.join("unused", "x"),
        learning_rate=3e-4,
        num_train_epochs=7,
        hub_token="hf_secret",
        report_to="none",
    )
    assert non_default_training_args(args) == {"learning_rate": 3e-4, "num_train_epochs": 7}


def test_the_card_takes_what_differs_by_backbone_family_from_the_model_s_card_facts() -> None:
    """The renderer has no image/text branch: a model with other facts gets a card that says them."""
    model = _pretrained_stub("org/some-backbone", backbone_type="timm")
    facts = dataclasses.replace(
        model.card_facts(),
        model_type="hf_contrast ContrastiveEncoder (audio)",
        input_noun="clip",
        inputs_noun="clips",
        detail_rows=(("Sample rate", "16 kHz"),),
        library_name="transformers",
        pipeline_tag="audio-classification",
        tags=("audio",),
        base_model="org/audio-base",
        base_model_license="cc-by-4.0",
    )
    model.card_facts = lambda: facts
    text = generate_model_card(model)
    meta = _yaml(text)
    assert (meta["library_name"], meta["pipeline_tag"], meta["base_model"], meta["license"]) == (
        "transformers",
        "audio-classification",
        "org/audio-base",
        "cc-by-4.0",
    )
    assert "audio" in meta["tags"] and "timm" not in meta["tags"]
    assert "A contrastive clip encoder" in text and "It maps clips to" in text
    assert "- **Model type:** hf_contrast ContrastiveEncoder (audio)" in text and "- **Sample rate:** 16 kHz" in text


def test_renderer_and_template_have_no_image_text_branch() -> None:
    import hf_contrast.hub.card_render as card_render

    template = Path(card_render.TEMPLATE_PATH).read_text(encoding="utf-8")
    source = Path(card_render.__file__).read_text(encoding="utf-8")
    for text in (template, source):
        assert "is_text" not in text and "backbone_type" not in text


def test_card_data_takes_one_dataset_id_and_one_tag() -> None:
    data = ContrastiveModelCardData(train_datasets="my-org/imgs", tags="vision")
    assert [entry["id"] for entry in data.train_datasets] == ["my-org/imgs"] and data.tags == ["vision"]
    data.eval_datasets = "my-org/test"  # also on assignment
    assert [entry["id"] for entry in data.eval_datasets] == ["my-org/test"]
    encoder = tiny_timm_encoder()
    encoder.model_card_data = data
    metadata = generate_model_card(encoder).split("---")[1]
    assert re.search(r"^- my-org/imgs$", metadata, re.M) and re.search(r"^- vision$", metadata, re.M)
    assert not re.search(r"^- v$", metadata, re.M)
    with pytest.raises(ValueError) as caught:
        ContrastiveModelCardData(train_datasets=5)
    assert_message(caught, "`train_datasets`", "5", "{'id': 'my-org/imgs'")


@pytest.mark.parametrize("model", [None, "resnet18", torch.nn.Linear(2, 2)], ids=["None", "a name", "a module"])
def test_generate_model_card_names_what_is_no_encoder(model) -> None:
    """None raised "'NoneType' object has no attribute 'card_facts'" (found by a property run)."""
    with pytest.raises(InputError) as caught:
        generate_model_card(model)
    assert_message(caught, "`model`", "ContrastiveEncoder", type(model).__name__)
