"""Quirks of a user's image folder said at load time (issue 29: ``Cat/`` and ``cat/`` silently became two
classes)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from hf_contrast.data import load_image_dataset
from hf_contrast.data.images import case_twin_class_folders


def _folder(root: Path, classes: list[str]) -> Path:
    for name in classes:
        (root / name).mkdir(parents=True)
        for i in range(2):
            Image.fromarray(np.full((8, 8, 3), i * 40, np.uint8)).save(root / name / f"{i}.png")
    return root


@pytest.mark.parametrize(
    ("classes", "twins"),
    [
        (["Cat", "cat", "dog"], [["Cat", "cat"]]),
        (["train/Cat", "train/cat", "test/Cat", "test/cat"], [["test/Cat", "test/cat"], ["train/Cat", "train/cat"]]),
        (["DOG", "Dog", "dog", "cat"], [["DOG", "Dog", "dog"]]),
        (["cat", "dog"], []),
    ],
)
def test_class_folders_equal_but_for_case_are_found_and_said(tmp_path: Path, classes: list[str], twins) -> None:
    root = _folder(tmp_path / "images", classes)
    assert case_twin_class_folders(root) == twins
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_image_dataset(root, split="train")
    said = [str(w.message) for w in caught if "differ only in case" in str(w.message)]
    assert len(said) == (1 if twins else 0)
    if twins:
        assert all(repr(name) in said[0] for group in twins for name in group)


@pytest.mark.parametrize(
    ("sizes", "single"),
    [({"cat": 1, "dog": 4, "owl": 1}, ["cat", "owl"]), ({"cat": 2, "dog": 4}, [])],
)
def test_a_one_image_class_without_a_test_split_is_said(tmp_path: Path, sizes: dict[str, int], single) -> None:
    from hf_contrast.data import load_image_splits

    root = tmp_path / "images"
    for name, count in sizes.items():
        (root / name).mkdir(parents=True)
        for i in range(count):
            Image.fromarray(np.full((8, 8, 3), i * 40, np.uint8)).save(root / name / f"{i}.png")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        data = load_image_splits(str(root))
    said = [str(w.message) for w in caught if "hold a single image" in str(w.message)]
    assert len(said) == (1 if single else 0)
    if single:
        assert f"{len(single)} class(es) hold a single image: {single}" in said[0]
    test_classes = {data["test"].features["label"].names[i] for i in data["test"]["label"]}
    assert test_classes == set(sizes) - set(single)  # the one-image classes are in training only
