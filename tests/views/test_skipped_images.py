"""Rows left out for bad images (``on_bad_image="skip"``) are counted per batch and reported by the trainer.

The collator marks each batch with ``skipped_images`` (``(B,)``, the count on the first row), so the count
reaches the trainer from ``DataLoader`` workers too; the trainer reports ``train_skipped_images`` for a
``train()`` call and ``eval_skipped_images`` for each evaluation (not a running total over evaluations).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch
from _images import png_bytes
from _tiny import tiny_timm_encoder
from distributed_scripts.trainer_utils import training_args
from PIL import Image

from hf_contrast.hub import ContrastiveModelCardData, generate_model_card
from hf_contrast.training import SimCLRTrainer
from hf_contrast.views import ImageViewCollator, pop_skipped_images, simclr_transform

MEAN3, STD3 = (0.5, 0.5, 0.5), (0.25, 0.25, 0.25)


def undecoded_images(n: int, bad_rows: set[int], seed: int = 0) -> datasets.Dataset:
    """``n`` undecoded PNG rows (``{"bytes", "path"}``), rows in ``bad_rows`` 0-byte files; labels ``i % 2``."""
    rng = np.random.default_rng(seed)
    images = [
        {
            "bytes": b"" if i in bad_rows else png_bytes(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)),
            "path": f"img{i}.png",
        }
        for i in range(n)
    ]
    dataset = datasets.Dataset.from_dict({"image": images, "label": [i % 2 for i in range(n)]})
    return dataset.cast_column("image", datasets.Image(decode=False))


def test_a_skipping_collator_marks_each_batch_with_its_own_count() -> None:
    rng = np.random.default_rng(0)
    good = {"image": Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)), "label": 0}
    collator = ImageViewCollator(simclr_transform(8, MEAN3, STD3), on_bad_image="skip")
    with pytest.warns(UserWarning, match="Skipped: Bad image"):
        first = collator([good, {"image": None, "label": 1}, {"image": None, "label": 1}, good])
    second = collator([good, good])
    assert first["skipped_images"].tolist() == [2, 0] and second["skipped_images"].tolist() == [0, 0]
    assert collator.skipped_images == 2  # the collator's running total is unchanged in meaning
    count = pop_skipped_images(first)
    assert count.ndim == 0 and int(count) == 2 and "skipped_images" not in first
    raising = ImageViewCollator(simclr_transform(8, MEAN3, STD3))
    batch = raising([good, good])
    assert "skipped_images" not in batch and pop_skipped_images(batch) is None


@pytest.mark.filterwarnings("ignore::hf_contrast.evaluation.RepresentationCollapseWarning")
@pytest.mark.parametrize("workers", [0, 2])
def test_trainer_reports_the_rows_it_left_out_in_training_and_in_each_evaluation(tmp_path: Path, workers: int) -> None:
    torch.manual_seed(0)
    train = undecoded_images(16, bad_rows={3, 11})
    evaluation = undecoded_images(12, bad_rows={5}, seed=1)
    args = training_args(
        tmp_path / "run", image_size=32, max_steps=-1, num_train_epochs=1, per_device_train_batch_size=8,
        per_device_eval_batch_size=12, on_bad_image="skip", dataloader_num_workers=workers, eval_strategy="epoch",
    )  # fmt: skip
    trainer = SimCLRTrainer(
        model=tiny_timm_encoder(projection_dim=8), args=args, train_dataset=train, eval_dataset=evaluation
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the collators name each file in a warning (tested in test_collators.py)
        result = trainer.train()
        first, second = trainer.evaluate(), trainer.evaluate()
    assert result.metrics["train_skipped_images"] == 2  # one epoch: each bad training row once
    assert first["eval_skipped_images"] == 1 and second["eval_skipped_images"] == 1  # per evaluation, not a total
    during = [entry for entry in trainer.state.log_history if "eval_loss" in entry]
    assert during and during[0]["eval_skipped_images"] == 1
    # the card says it beside the training data (it said "16 rows")
    left_out = "2 unreadable image row(s) left out of the training batches (`on_bad_image='skip'`)"
    assert f"16 rows, columns `image`, `label`; note: {left_out}\n" in generate_model_card(trainer.model)


def test_the_card_says_the_last_train_calls_left_out_rows_once() -> None:
    data = ContrastiveModelCardData(train_datasets=[{"name": "pets", "notes": ["a loader note"]}])
    data.note_left_out_rows(3, 5)
    data.note_left_out_rows(2, 0)  # a second `train()` call: what it left out replaces the first's
    assert data.train_datasets[0]["notes"] == [
        "a loader note",
        "2 unreadable image row(s) left out of the training batches (`on_bad_image='skip'`)",
    ]
    data.note_left_out_rows(1, 7)
    assert data.train_datasets[0]["notes"][1:] == [
        "1 unreadable image row(s) left out of the training batches (`on_bad_image='skip'`; 7 readable row(s) with "
        "them, to keep chunks or class groups whole)"
    ]
    data.note_left_out_rows(0, 0)
    assert data.train_datasets[0]["notes"] == ["a loader note"]


def test_nothing_skipped_adds_no_metric(tmp_path: Path) -> None:
    args = training_args(tmp_path / "run", image_size=32, max_steps=1, on_bad_image="skip")
    trainer = SimCLRTrainer(
        model=tiny_timm_encoder(projection_dim=8),
        args=args,
        train_dataset=undecoded_images(8, set()),
        eval_dataset=undecoded_images(8, set(), seed=1),
    )
    assert "train_skipped_images" not in trainer.train().metrics
    assert "left out of the training batches" not in generate_model_card(trainer.model)
    assert "eval_skipped_images" not in trainer.evaluate()
