"""The save layout's format version: a folder from a newer hf_contrast warns once; a broken version raises."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch
from _tiny import tiny_timm_encoder

from hf_contrast.errors import InputError
from hf_contrast.models import (
    SAVE_FORMAT_VERSION,
    ContrastiveEncoder,
    NewerSaveFormatWarning,
)


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("saved")
    tiny_timm_encoder(projection_dim=8).save_pretrained(folder)
    return folder


def _edit(folder: Path, name: str, **changes) -> None:
    path = folder / "hf_contrast" / name
    content = json.loads(path.read_text(encoding="utf-8"))
    content.update(changes)
    path.write_text(json.dumps(content), encoding="utf-8")


def _copy(saved: Path, tmp_path: Path) -> Path:
    import shutil

    return Path(shutil.copytree(saved, tmp_path / "copy"))


def test_a_save_writes_its_format_version_and_loads_without_warning(saved: Path) -> None:
    assert json.loads((saved / "hf_contrast" / "config.json").read_text())["format_version"] == SAVE_FORMAT_VERSION
    assert json.loads((saved / "hf_contrast" / "model_card.json").read_text())["version"] == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", NewerSaveFormatWarning)
        ContrastiveEncoder.from_pretrained(saved)


def test_a_model_trained_by_the_trainer_loads_without_warning(tmp_path: Path) -> None:
    """transformers' Trainer writes `use_cache` into every trained model's config (TrainingArguments.use_cache): a
    trained encoder's save is this release's own, not a newer one's."""
    from _tiny_trainer import RandomImages, TinyTrainer, tiny_args

    encoder = tiny_timm_encoder(projection_dim=8)
    trainer = TinyTrainer(
        model=encoder, args=tiny_args(tmp_path / "run", max_steps=1), train_dataset=RandomImages(n=8, projection_dim=8)
    )
    trainer.train()
    trainer.save_model(tmp_path / "model")
    assert "use_cache" in json.loads((tmp_path / "model" / "hf_contrast" / "config.json").read_text())
    with warnings.catch_warnings():
        warnings.simplefilter("error", NewerSaveFormatWarning)
        ContrastiveEncoder.from_pretrained(tmp_path / "model")


def test_newer_versions_and_unknown_keys_warn_once_naming_them(saved: Path, tmp_path: Path) -> None:
    folder = _copy(saved, tmp_path)
    _edit(folder, "config.json", format_version=SAVE_FORMAT_VERSION + 1, token_mixer="hyena")
    _edit(folder, "model_card.json", version=7)
    with pytest.warns(NewerSaveFormatWarning) as record:
        model = ContrastiveEncoder.from_pretrained(folder)
    assert len([w for w in record if issubclass(w.category, NewerSaveFormatWarning)]) == 1
    message = str(record[0].message)
    for part in (
        f"format_version {SAVE_FORMAT_VERSION + 1}",
        "['token_mixer']",
        "version 7",
        "pip install -U hf-contrast",
    ):
        assert part in message
    assert model(pixel_values=torch.rand(2, 3, 32, 32)).embeddings.shape == (2, 96)  # still loads


@pytest.mark.parametrize(
    ("name", "key", "value"), [("config.json", "format_version", "2.0"), ("model_card.json", "version", -1)]
)
def test_an_unparseable_version_raises_naming_the_file(
    saved: Path, tmp_path: Path, name: str, key: str, value
) -> None:
    folder = _copy(saved, tmp_path)
    _edit(folder, name, **{key: value})
    with pytest.raises(InputError, match=rf"{name} has `{key}`={value!r}, which is not a version"):
        ContrastiveEncoder.from_pretrained(folder)


def test_a_save_from_before_versioning_loads_silently(saved: Path, tmp_path: Path) -> None:
    folder = _copy(saved, tmp_path)
    path = folder / "hf_contrast" / "config.json"
    content = json.loads(path.read_text())
    del content["format_version"]
    path.write_text(json.dumps(content))
    with warnings.catch_warnings():
        warnings.simplefilter("error", NewerSaveFormatWarning)
        ContrastiveEncoder.from_pretrained(folder)
