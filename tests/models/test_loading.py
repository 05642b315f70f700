"""Loading a saved encoder (:mod:`hf_contrast.models.loading`): a damaged or missing file, a path that is no folder,
NaN weights or weights without the projection head are refused naming the file and the fix; a new task head may be
missing (and is reported)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from _errors import assert_message
from _tiny import tiny_timm_encoder
from safetensors.torch import load_file, save_file

from hf_contrast.models import ContrastiveEncoder


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("saved")
    torch.manual_seed(0)
    tiny_timm_encoder().save_pretrained(folder)
    return folder


def copy_of(saved: Path, tmp_path: Path) -> Path:
    target = tmp_path / "model"
    shutil.copytree(saved, target)
    return target


@pytest.mark.parametrize("damage", ["corrupted", "truncated", "empty"])
def test_unreadable_safetensors_name_the_file_and_the_fix(saved, tmp_path, damage: str) -> None:
    folder = copy_of(saved, tmp_path)
    weights = folder / "hf_contrast" / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(
        {"corrupted": b"\xff" * 8 + data[8:], "truncated": data[: len(data) // 2], "empty": b""}[damage]
    )
    with pytest.raises(OSError) as caught:
        ContrastiveEncoder.from_pretrained(folder)
    assert_message(caught, str(weights), "corrupted, truncated or empty", "Save or copy the model again")


def test_missing_encoder_config_names_the_file_and_the_fix(saved, tmp_path) -> None:
    folder = copy_of(saved, tmp_path)
    (folder / "hf_contrast" / "config.json").unlink()
    with pytest.raises(OSError) as caught:
        ContrastiveEncoder.from_pretrained(folder)
    assert_message(caught, str(folder / "hf_contrast" / "config.json"), "is missing", "from_backbone('local-dir:")


@pytest.mark.parametrize("path", ["/no/such/folder", "./no_such_model_dir/", "a/b/c"])
def test_missing_folder_is_named_not_taken_for_a_repo_id(tmp_path, monkeypatch, path: str) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError) as caught:
        ContrastiveEncoder.from_pretrained(path)
    assert_message(caught, repr(path), "not a folder", "save_pretrained")


def test_a_weights_file_instead_of_the_folder_names_the_fix(saved) -> None:
    with pytest.raises(FileNotFoundError) as caught:
        ContrastiveEncoder.from_pretrained(saved / "hf_contrast" / "model.safetensors")
    assert_message(caught, "is a file", "pass the folder")


def test_nan_weights_are_not_loaded(saved, tmp_path) -> None:
    folder = copy_of(saved, tmp_path)
    weights = folder / "hf_contrast" / "model.safetensors"
    state = load_file(weights)
    state["projection_head.layers.0.weight"] = torch.full_like(state["projection_head.layers.0.weight"], float("nan"))
    save_file(state, weights, metadata={"format": "pt"})
    with pytest.raises(ValueError) as caught:
        ContrastiveEncoder.from_pretrained(folder)
    assert_message(caught, str(weights), "NaN or infinite", "projection_head.layers.0.weight", "earlier checkpoint")


def test_weights_without_the_projection_head_are_not_loaded(saved, tmp_path) -> None:
    folder = copy_of(saved, tmp_path)
    weights = folder / "hf_contrast" / "model.safetensors"
    state = {k: v for k, v in load_file(weights).items() if not k.startswith("projection_head.")}
    save_file(state, weights, metadata={"format": "pt"})
    with pytest.raises(ValueError) as caught:
        ContrastiveEncoder.from_pretrained(folder)
    assert_message(caught, str(weights), "projection_head.layers.0.weight", "random values", "from_backbone")


def test_a_new_task_head_may_be_missing_and_loading_info_is_returned(saved) -> None:
    model, info = ContrastiveEncoder.from_pretrained(saved, num_labels=3, output_loading_info=True)
    assert model.classifier is not None and set(info["missing_keys"]) == {"classifier.weight", "classifier.bias"}
