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


def test_the_folder_quirks_said_at_load_time_are_in_the_model_card_too(tmp_path: Path) -> None:
    """Warned once when the folder is loaded, and kept on the splits (``info.description``) for the card, whose
    training-data lines carry them: a class folder without images, names equal but for case, one-image classes."""
    from distributed_scripts.trainer_utils import training_args, vit_encoder

    from hf_contrast.data import load_image_splits
    from hf_contrast.data.naming import loader_notes
    from hf_contrast.training import ContrastiveTrainer

    root = tmp_path / "images"
    for name, count in {"Cat": 4, "cat": 4, "owl": 1, "empty": 0}.items():
        (root / name).mkdir(parents=True)
        for i in range(count):
            Image.fromarray(np.full((16, 16, 3), i * 40, np.uint8)).save(root / name / f"{i}.png")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data = load_image_splits(str(root))
    folder = [
        "the class folder(s) ['empty'] hold no image and are left out of the classes",
        "the class folders 'Cat' and 'cat' differ only in case and are separate classes",
    ]
    single = "1 class(es) of a single image, in training only: ['owl']"
    notes = {  # and the held-out split, said beside each split
        "train": [
            *folder,
            "20% of each class held out for evaluation (no test split; `test_fraction`, seed 0)",
            single,
        ],
        "test": [
            *folder,
            "the 20% of each class held out of the training split (no test split; `test_fraction`, seed 0)",
            single,
        ],  # fmt: skip
    }
    assert {split: loader_notes(data[split]) for split in notes} == notes
    trainer = ContrastiveTrainer(
        model=vit_encoder(),
        args=training_args(tmp_path / "run", per_device_train_batch_size=4, max_steps=1),
        train_dataset=data["train"],
        eval_dataset=data["test"],
        objective="simclr",
    )
    trainer.train()
    trainer.create_model_card()
    card = (tmp_path / "run" / "README.md").read_text()
    lines = [line for line in card.splitlines() if line.startswith("- images, ")]  # training, evaluation
    assert len(lines) == 2, lines
    assert [line.endswith("; note: ".join(["", *notes[split]])) for line, split in zip(lines, notes)] == [True, True]
