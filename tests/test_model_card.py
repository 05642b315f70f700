"""Model cards: YAML metadata, sections present/absent, soft failures, README protection."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import yaml
from huggingface_hub import ModelCard

from hf_contrast.hub import (
    GENERATED_MARKER,
    ContrastiveModelCardData,
    generate_model_card,
    non_default_training_args,
    write_model_card,
)

CARE_BIBTEX = """@inproceedings{care2025,
  title     = {Escaping the Big Data Paradigm in Self-Supervised Representation Learning},
  author    = {Someone, A. and Else, B.},
  year      = {2025}
}"""
LOGGER = "hf_contrast.hub.model_card"


class _StubConfig:
    """The slice of `ContrastiveEncoderConfig` the card reads."""

    def __init__(self, backbone: str, backbone_type: str, projection_dim: int, **extra: Any) -> None:
        self.backbone = backbone
        self.backbone_type = backbone_type
        self.projection_dim = projection_dim
        self.extra = extra

    def to_dict(self) -> dict[str, Any]:
        return {"backbone": self.backbone, "backbone_type": self.backbone_type, "projection_dim": self.projection_dim, **self.extra}


def _vision_encoder(pretrained: bool = False) -> SimpleNamespace:
    config = _StubConfig("resnet18", "timm", 16, projection_hidden_dim=32, normalize=True, pretrained=pretrained)
    return SimpleNamespace(config=config, embedding_dim=512)


def _text_encoder() -> SimpleNamespace:
    return SimpleNamespace(config=_StubConfig("/tmp/tiny-bert", "text", 8, pooling="mean"), embedding_dim=32)


class _CareLikeLoss(torch.nn.Module):
    citation = CARE_BIBTEX

    def get_config_dict(self) -> dict[str, Any]:
        return {"temperature": 0.07, "equivariance_weight": 0.25, "n_splits": 4}


@pytest.fixture()
def full_data() -> ContrastiveModelCardData:
    data = ContrastiveModelCardData(
        model_id="user/care-resnet",
        method="CARE",
        datasets=["sklearn-digits"],
        training_data="1,797 8x8 digit images, two augmented views each.",
        license="apache-2.0",
        metrics={"geometry": {"alignment": torch.tensor(0.3125), "uniformity": -2.5}, "probe": {"accuracy": 0.875}},
        training_logs=[
            {"loss": 4.25, "learning_rate": 0.001, "epoch": 0.5, "step": 5},
            {"eval_loss": 3.75, "epoch": 0.5, "step": 5, "eval_runtime": 0.1, "eval_samples_per_second": 9.0},
            {"loss": 3.5, "learning_rate": 0.0005, "epoch": 1.0, "step": 10},
            {"train_runtime": 2.0, "train_loss": 3.9, "epoch": 1.0, "step": 10, "total_flos": 1.0},
        ],
        tags=["digits"],
    )
    data.set_loss(_CareLikeLoss())
    return data


def _section(text: str, title: str) -> str:
    """The body of a `## title` section."""
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def test_full_card_metadata_is_valid_yaml_with_model_index(full_data: ContrastiveModelCardData) -> None:
    card = generate_model_card(_vision_encoder(pretrained=True), full_data)
    text = str(card)
    raw = yaml.safe_load(text.split("---")[1])  # what the Hub parses
    assert raw["library_name"] == "hf_contrast"
    assert raw["pipeline_tag"] == "image-feature-extraction"
    assert raw["license"] == "apache-2.0"
    assert raw["datasets"] == ["sklearn-digits"]
    assert raw["base_model"] == "timm/resnet18.a1_in1k"  # timm's default pretrained tag
    assert {"hf_contrast", "contrastive-learning", "care", "timm", "digits"} <= set(raw["tags"])
    reparsed = ModelCard(text).data
    assert reparsed.model_name == "care-resnet"
    values = {result.metric_name: result.metric_value for result in reparsed.eval_results}
    assert values == {"geometry/alignment": 0.3125, "geometry/uniformity": -2.5, "probe/accuracy": 0.875}
    assert {result.dataset_type for result in reparsed.eval_results} == {"sklearn-digits"}


def test_full_card_has_every_section(full_data: ContrastiveModelCardData) -> None:
    text = str(generate_model_card(_vision_encoder(), full_data))
    for title in ("Method", "Backbone", "Training data", "Training logs", "Evaluation", "Usage", "Framework versions"):
        assert f"## {title}\n" in text
    method = _section(text, "Method")
    assert "**CARE** (`hf_contrast.losses._CareLikeLoss`)" in method
    assert "| `temperature` | 0.07 |" in method and "| `n_splits` | 4 |" in method
    assert f"```bibtex\n{CARE_BIBTEX}\n```" in method
    backbone = _section(text, "Backbone")
    assert "`resnet18` (timm vision model)" in backbone and "trained from scratch" in backbone
    assert "| Embedding size (`embeddings`) | 512 |" in backbone
    assert "1,797 8x8 digit images" in _section(text, "Training data")
    usage = _section(text, "Usage")
    assert 'ContrastiveEncoder.from_pretrained("user/care-resnet")' in usage
    assert 'timm.create_model("hf-hub:user/care-resnet", pretrained=True)' in usage
    assert "SentenceTransformer" not in usage
    assert text.count(GENERATED_MARKER) == 1


def test_training_log_rows_are_merged_by_step_without_bookkeeping(full_data: ContrastiveModelCardData) -> None:
    logs = _section(str(generate_model_card(_vision_encoder(), full_data)), "Training logs")
    lines = [line for line in logs.splitlines() if line.startswith("|")]
    assert lines[0] == "| `epoch` | `step` | `loss` | `learning_rate` | `eval_loss` |"
    assert lines[2:] == ["| 0.5 | 5 | 4.25 | 0.001 | 3.75 |", "| 1.0 | 10 | 3.5 | 0.0005 | - |"]
    assert "runtime" not in logs and "total_flos" not in logs and "per_second" not in logs


def test_text_card_metadata_and_usage() -> None:
    data = ContrastiveModelCardData(model_id="user/tiny-bert", language="en")
    text = str(generate_model_card(_text_encoder(), data))
    meta = ModelCard(text).data
    assert meta.pipeline_tag == "sentence-similarity"
    assert meta.language == "en"
    assert "sentence-transformers" in meta.tags
    assert meta.base_model is None  # a local path is not a Hub base model
    usage = _section(text, "Usage")
    assert 'SentenceTransformer("user/tiny-bert")' in usage
    assert 'AutoModel.from_pretrained("user/tiny-bert")' in usage
    assert "| `pooling` | mean |" in _section(text, "Backbone")


def test_sections_without_data_are_left_out_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        text = str(generate_model_card(_vision_encoder(), None))
    for title in ("Method", "Training data", "Training arguments", "Training logs", "Evaluation"):
        assert f"## {title}\n" not in text
    assert "## Backbone\n" in text and "## Usage\n" in text and "<user>/<repo>" in text
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "method, training data, training arguments, training logs, evaluation metrics" in warnings[0]
    assert ModelCard(text).data.library_name == "hf_contrast"


def test_failing_section_is_skipped_with_a_warning(full_data: ContrastiveModelCardData, caplog: pytest.LogCaptureFixture) -> None:
    full_data.training_logs.append("not a log entry")  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        text = str(generate_model_card(_vision_encoder(), full_data))
    assert "## Training logs" not in text
    assert "## Method\n" in text and "## Evaluation\n" in text
    assert any("training logs section, it failed with AttributeError" in r.getMessage() for r in caplog.records)


def test_unreadable_encoder_config_still_gives_a_card(caplog: pytest.LogCaptureFixture) -> None:
    class BrokenConfig:
        backbone = "resnet18"
        backbone_type = "timm"
        projection_dim = 16

        def to_dict(self) -> dict[str, Any]:
            raise RuntimeError("boom")

    with caplog.at_level(logging.WARNING, logger=LOGGER):
        card = generate_model_card(SimpleNamespace(config=BrokenConfig(), embedding_dim=8), None)
    assert "`resnet18` (timm vision model)" in str(card)
    assert any("RuntimeError: boom" in r.getMessage() for r in caplog.records)


def test_write_keeps_a_user_readme_unless_overwrite(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# My own notes\n")
    assert write_model_card(_vision_encoder(), tmp_path) is None
    assert readme.read_text() == "# My own notes\n"
    assert write_model_card(_vision_encoder(), tmp_path, overwrite=True) == readme
    assert GENERATED_MARKER in readme.read_text()


def test_write_refreshes_its_own_card(tmp_path: Path) -> None:
    assert write_model_card(_vision_encoder(), tmp_path, ContrastiveModelCardData(license="mit")) == tmp_path / "README.md"
    assert ModelCard.load(tmp_path / "README.md").data.license == "mit"
    assert write_model_card(_vision_encoder(), tmp_path, ContrastiveModelCardData(license="apache-2.0")) is not None
    assert ModelCard.load(tmp_path / "README.md").data.license == "apache-2.0"


def test_write_never_raises(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert write_model_card(_vision_encoder(), not_a_dir) is None
    assert any("not written" in r.getMessage() for r in caplog.records)


def test_card_data_is_not_modified(full_data: ContrastiveModelCardData) -> None:
    before = repr(full_data)
    generate_model_card(_vision_encoder(), full_data)
    assert repr(full_data) == before


def test_non_default_training_args_drop_defaults_and_secrets() -> None:
    from transformers import TrainingArguments

    args = TrainingArguments(
        output_dir="/tmp/unused-card-test", learning_rate=3e-4, num_train_epochs=7, hub_token="hf_secret", report_to="none"
    )
    assert non_default_training_args(args) == {"learning_rate": 3e-4, "num_train_epochs": 7}


def test_from_trainer_reads_args_logs_and_loss() -> None:
    from transformers import TrainingArguments

    trainer = SimpleNamespace(
        args=TrainingArguments(output_dir="/tmp/unused-card-test", per_device_train_batch_size=32),
        state=SimpleNamespace(log_history=[{"loss": 1.5, "step": 1, "epoch": 0.1}]),
        loss=_CareLikeLoss(),
    )
    data = ContrastiveModelCardData.from_trainer(trainer, license="mit")
    assert data.training_args == {"per_device_train_batch_size": 32}
    assert data.training_logs == [{"loss": 1.5, "step": 1, "epoch": 0.1}]
    assert data.loss_name == "_CareLikeLoss" and data.loss_config["n_splits"] == 4
    assert data.citations == [CARE_BIBTEX] and data.license == "mit"
    text = str(generate_model_card(_vision_encoder(), data))
    assert "| `per_device_train_batch_size` | 32 |" in _section(text, "Training arguments")
