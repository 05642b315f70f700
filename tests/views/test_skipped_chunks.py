"""``on_bad_image="skip"`` for methods that cut batches into chunks, pairs or class groups, and the start-up scan.

A batch that lost unreadable rows keeps the largest whole structure of its readable rows (CARE's ``n_splits``
chunks, SimO's ``C`` class groups); the other readable rows are counted in ``dropped_rows`` and reported as
``train_dropped_rows``. ``n_splits`` never changes. With ``on_bad_image="raise"`` the trainer's start-up scan
names every bad file before the first step.
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
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_contrast.objectives import build_objective
from hf_contrast.training import ContrastiveTrainer
from hf_contrast.views import (
    BadImageError,
    ImageViewCollator,
    WholeChunks,
    WholeClassGroups,
    pop_dropped_rows,
    pop_skipped_images,
    raw_image_transform,
    scan_images,
    simclr_transform,
)

MEAN3, STD3 = (0.5, 0.5, 0.5), (0.25, 0.25, 0.25)
PNG = {}


def _png(seed: int, size: int = 16) -> bytes:
    if (seed, size) not in PNG:
        PNG[seed, size] = png_bytes(np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8))
    return PNG[seed, size]


BAD = {"empty": b"", "text": b"this is not an image\n", "truncated": _png(99, 32)[:60]}


def _image(i: int, bad: str | None) -> dict[str, object]:
    return {"bytes": _png(i % 7) if bad is None else BAD[bad], "path": f"img{i}.{'jpg' if bad == 'text' else 'png'}"}


def images(labels: list[int], bad_rows: dict[int, str]) -> datasets.Dataset:
    """Undecoded PNG rows with ``labels``; ``bad_rows``: row → ``"empty"`` / ``"text"`` / ``"truncated"``."""
    rows = [_image(i, bad_rows.get(i)) for i in range(len(labels))]
    dataset = datasets.Dataset.from_dict({"image": rows, "label": labels})
    return dataset.cast_column("image", datasets.Image(decode=False))


def pairs(labels: list[int], bad_rows: dict[int, str]) -> datasets.Dataset:
    """LOCAL's ``(image_pre, image_post)`` pairs; a bad row has a bad ``image_pre``."""
    pre = [_image(i, bad_rows.get(i)) for i in range(len(labels))]
    post = [_image(i + 1, None) for i in range(len(labels))]
    dataset = datasets.Dataset.from_dict({"image_pre": pre, "image_post": post, "label": labels})
    return dataset.cast_column("image_pre", datasets.Image(decode=False)).cast_column(
        "image_post", datasets.Image(decode=False)
    )


# ---- the rules ------------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(n_splits=st.integers(1, 8), n=st.integers(0, 64))
def test_whole_chunks_keeps_the_largest_whole_number_of_chunks(n_splits: int, n: int) -> None:
    rule = WholeChunks(n_splits)
    if n // n_splits < 2:
        with pytest.raises(ValueError, match="n_splits"):
            rule.keep(n, None)
        return
    kept = rule.keep(n, None)
    assert kept == list(range(len(kept))) and len(kept) % n_splits == 0
    assert n - len(kept) < n_splits  # the largest whole number: fewer than one more chunk was dropped


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(1, 6), min_size=1, max_size=5))
def test_whole_class_groups_keeps_equal_class_major_groups(sizes: list[int]) -> None:
    labels = [c for c, size in enumerate(sizes) for _ in range(size)]
    kept = WholeClassGroups(len(sizes)).keep(len(labels), labels)
    k = min(sizes)
    assert len(kept) == k * len(sizes)
    assert [labels[i] for i in kept] == [c for c in range(len(sizes)) for _ in range(k)]
    with pytest.raises(ValueError, match="class group"):
        WholeClassGroups(len(sizes) + 1).keep(len(labels), labels)


@settings(max_examples=40, deadline=None)
@given(n_splits=st.integers(1, 8), n_classes=st.integers(1, 8), batch_size=st.integers(1, 64))
def test_a_rule_says_whether_a_batch_survives_losing_one_row(n_splits: int, n_classes: int, batch_size: int) -> None:
    """``loss_breaks`` agrees with ``keep`` on a batch that lost one row (the trainer's start-up check reads it)."""
    chunks = WholeChunks(n_splits)
    try:
        chunks.keep(batch_size - 1, None)
        survives = True
    except ValueError:
        survives = False
    assert (chunks.loss_breaks(batch_size) is None) == survives
    if not survives:
        bigger = n_splits * 3  # the next batch whose chunks stay whole (a multiple of n_splits) after losing one
        assert f"(a batch of {bigger}, 3 rows per chunk, can lose one)" in chunks.loss_breaks(batch_size)
        assert chunks.loss_breaks(bigger) is None
    per_class = batch_size // n_classes
    if per_class >= 1:  # a class-major batch of equal groups, one row lost from the first group
        labels = [c for c in range(n_classes) for _ in range(per_class)][1:]
        groups = WholeClassGroups(n_classes)
        try:
            groups.keep(len(labels), labels)  # a group of one that loses its row is gone
            survives = True
        except ValueError:
            survives = False
        assert (groups.loss_breaks(n_classes * per_class) is None) == survives


# ---- the collator ---------------------------------------------------------------------------------


@settings(max_examples=8, deadline=None)
@given(bad=st.sets(st.integers(0, 15), max_size=6), kind=st.sampled_from(sorted(BAD)))
def test_a_chunked_collator_returns_whole_chunks_and_counts_skipped_and_dropped_rows(bad: set[int], kind: str) -> None:
    rows = list(images([i % 3 for i in range(16)], {i: kind for i in bad}))
    collator = ImageViewCollator(
        simclr_transform(16, MEAN3, STD3), raw_transform=raw_image_transform((16, 16)), on_bad_image="skip",
        n_channels=3, whole_rows=WholeChunks(4), seed=0,
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        batch = collator(rows)
    readable = 16 - len(bad)
    kept = readable // 4 * 4 if bad else 16  # an intact batch is kept whole as it is
    assert batch["pixel_values_eq"].shape[0] == batch["pixel_values_1"].shape[0] == batch["labels"].shape[0] == kept
    assert batch["labels"].tolist() == [i % 3 for i in range(16) if i not in bad][:kept]
    assert int(pop_skipped_images(batch)) == len(bad) == collator.skipped_images
    assert int(pop_dropped_rows(batch)) == readable - kept == collator.dropped_rows


def test_dropped_rows_warn_once_naming_the_rule() -> None:
    rows = list(images([0] * 12, {1: "empty", 5: "empty"}))
    collator = ImageViewCollator(
        None, n_views=0, raw_transform=raw_image_transform((16, 16)), on_bad_image="skip", whole_rows=WholeChunks(4)
    )
    with pytest.warns(UserWarning) as caught:
        collator(rows)
        collator(rows)
    dropping = [w for w in caught if "dropped_rows" in str(w.message)]
    assert len(dropping) == 1 and "WholeChunks(n_splits=4" in str(dropping[0].message)
    assert collator.dropped_rows == 4  # 10 readable rows → 4 chunks of 2: 8 kept, 2 dropped per batch


# ---- every method trains through skipped rows -----------------------------------------------------

# (objective, its hyperparameters, the training rows' labels, bad rows) — one epoch: each bad row is drawn once.
METHODS = {
    "care": ({"n_splits": 4}, [i % 3 for i in range(32)], {2: "empty", 9: "text", 20: "truncated"}),
    "care_moco": ({"n_splits": 4, "moco_queue_size": 32}, [i % 3 for i in range(32)], {2: "empty", 17: "text"}),
    "simclr": ({}, [i % 3 for i in range(32)], {0: "empty", 31: "truncated"}),
    "supcon": ({}, [i % 3 for i in range(32)], {5: "text", 6: "empty"}),
    "ocl": ({}, [i % 3 for i in range(32)], {5: "truncated", 11: "empty"}),
}


def _train(tmp_path: Path, method: str, hyperparameters: dict, train: datasets.Dataset, **overrides: object):  # noqa: ANN202
    torch.manual_seed(0)
    options = {
        "image_size": 16, "max_steps": -1, "num_train_epochs": 1, "per_device_train_batch_size": 16,
        "per_device_eval_batch_size": 16, "on_bad_image": "skip",
    }  # fmt: skip
    args = training_args(tmp_path / method, **{**options, **overrides})
    objective = build_objective(method, **hyperparameters)
    trainer = ContrastiveTrainer(
        model=tiny_timm_encoder(projection_dim=8), args=args, train_dataset=train, objective=objective
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the collators name each file in a warning (tested above)
        return trainer, trainer.train()


@pytest.mark.parametrize("method", sorted(METHODS))
def test_each_method_trains_through_skipped_rows_and_counts_them(tmp_path: Path, method: str) -> None:
    hyperparameters, labels, bad = METHODS[method]
    trainer, result = _train(tmp_path, method, hyperparameters, images(labels, bad))
    assert result.metrics["train_skipped_images"] == len(bad)
    assert trainer.state.global_step == 2
    if method.startswith("care"):  # 16-row batches of 4 chunks: a batch that lost b rows drops (16 - b) % 4 more
        dropped = trainer.data_collator.dropped_rows
        assert result.metrics.get("train_dropped_rows", 0) == dropped and 0 < dropped <= 3 * len(bad)
    else:
        assert "train_dropped_rows" not in result.metrics


def test_a_batch_that_cannot_lose_a_bad_image_is_refused_before_training(tmp_path: Path) -> None:
    """CARE's 4 chunks of 2 in a batch of 8: a batch that lost one of the bad images stopped training at that step
    (after hours, on a large set); the start-up scan says so before the first step, with the batch size to use."""
    train = images([i % 3 for i in range(32)], {2: "empty", 20: "truncated"})
    with pytest.raises(ValueError) as error:
        _train(tmp_path, "care", {"n_splits": 4}, train, per_device_train_batch_size=8)
    message = str(error.value)
    assert message.startswith("2 unreadable training image(s) found before training:\n  train_dataset: 'img2.png'")
    reason = "a batch of 8 that loses one keeps 7 rows, fewer than `n_splits`=4 chunks of 2+ rows need (a batch of 12"
    assert f"leaves each out of its batch, but {reason}, 3 rows per chunk, can lose one)" in message
    assert message.endswith("or use a larger `per_device_train_batch_size` (now 8).")
    trainer, result = _train(tmp_path, "care", {"n_splits": 4}, train, per_device_train_batch_size=12)
    assert result.metrics["train_skipped_images"] == 2 and trainer.state.global_step == 2


def test_simo_trains_through_skipped_rows_keeping_equal_class_groups(tmp_path: Path) -> None:
    # 5 classes × 4 rows, one bad row in every class: every C × k = 2 × 4 batch loses exactly one row per group,
    # so its groups stay equal (k' = 3) and nothing else is dropped.
    labels = [c for c in range(5) for _ in range(4)]
    bad = {4 * c + 2: ("empty", "text", "truncated")[c % 3] for c in range(5)}
    trainer, result = _train(
        tmp_path, "simo", {"classes_per_batch": 2, "samples_per_class": 4}, images(labels, bad),
        per_device_train_batch_size=8,
        max_steps=3,
    )  # fmt: skip
    assert trainer.state.global_step == 3
    assert result.metrics["train_skipped_images"] == 2 * 3  # (the collator may have drawn a batch ahead)
    assert "train_dropped_rows" not in result.metrics and trainer.data_collator.dropped_rows == 0


def test_simo_drops_rows_to_keep_its_class_groups_equal(tmp_path: Path) -> None:
    # 5 classes of 4 rows, C × k = 2 × 4: class 0 has two bad rows, so its batch keeps 2 + 2 and drops 2
    labels = [c for c in range(5) for _ in range(4)]
    bad = {0: "empty", 1: "text"}
    trainer, result = _train(
        tmp_path, "simo", {"classes_per_batch": 2, "samples_per_class": 4}, images(labels, bad),
        per_device_train_batch_size=8,
    )  # fmt: skip
    skipped = result.metrics.get("train_skipped_images", 0)
    assert skipped in (0, 2)  # class 0 drawn or not
    assert result.metrics.get("train_dropped_rows", 0) == skipped  # its partner group keeps 2 of 4


def test_local_trains_through_skipped_pairs_and_counts_them(tmp_path: Path) -> None:
    from hf_contrast.objectives import LOCALObjective

    labels = [0, 0, 0, 0, 0, 1, 1, 2] * 4
    bad = {3: "empty", 12: "text", 30: "truncated"}
    torch.manual_seed(0)
    args = training_args(
        tmp_path, image_size=16, max_steps=-1, num_train_epochs=1, per_device_train_batch_size=16, on_bad_image="skip"
    )
    trainer = ContrastiveTrainer(
        model=tiny_timm_encoder(projection_dim=8),
        args=args,
        train_dataset=pairs(labels, bad),
        objective=LOCALObjective(beta=0.5),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = trainer.train()
    assert result.metrics["train_skipped_images"] == len(bad) and trainer.state.global_step == 2


# ---- raise: named before the first step -----------------------------------------------------------


@settings(max_examples=6, deadline=None)
@given(bad=st.dictionaries(st.integers(0, 31), st.sampled_from(sorted(BAD)), min_size=1, max_size=3))
def test_raise_names_every_bad_file_before_the_first_step(
    tmp_path_factory: pytest.TempPathFactory, bad: dict[int, str]
) -> None:
    tmp_path = tmp_path_factory.mktemp("raise")
    args = training_args(tmp_path, image_size=16, per_device_train_batch_size=16)
    trainer = ContrastiveTrainer(
        model=tiny_timm_encoder(projection_dim=8), args=args, train_dataset=images([i % 3 for i in range(32)], bad),
        objective=build_objective("care", n_splits=4),
    )  # fmt: skip
    called = []
    collator = trainer.data_collator
    trainer.data_collator = lambda rows: called.append(1) or collator(rows)  # noqa: PLW0108
    with pytest.raises(BadImageError) as caught:
        trainer.train()
    message = str(caught.value)
    assert f"{len(bad)} unreadable image(s)" in message and "on_bad_image='skip'" in message
    for row in bad:
        assert f"img{row}." in message
    assert not called and trainer.state.global_step == 0


def test_the_scan_finds_empty_text_and_truncated_files_in_row_order() -> None:
    bad = {4: "truncated", 1: "empty", 9: "text"}
    found = scan_images(images(list(range(12)), bad).shuffle(seed=0).sort("label"))
    assert [(b.row, b.column) for b in found] == [(1, "image"), (4, "image"), (9, "image")]
    assert [b.source for b in found] == ["img1.png", "img4.png", "img9.jpg"]
    assert "0 bytes" in found[0].reason or "empty" in found[0].reason
    assert scan_images(images(list(range(4)), {})) == [] and scan_images([{"image": None}]) == []
