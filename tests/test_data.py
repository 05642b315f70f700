"""Embedded offline data: digits, long-tailed subsets, change pairs, sentence pairs."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from hf_contrast.data import (
    CHANGE_NAMES,
    load_digits_dataset,
    load_sentence_pairs,
    long_tailed_counts,
    make_change_pairs,
    make_long_tailed,
)


@pytest.fixture(scope="module")
def digits():
    return load_digits_dataset(image_size=16, test_size=0.2, seed=0)


def test_digits_are_real_stratified_images(digits) -> None:
    train, test = digits["train"], digits["test"]
    assert len(train) + len(test) == 1797
    assert train.features["label"].num_classes == 10
    image = train[0]["image"]
    assert image.size == (16, 16) and image.mode == "RGB"
    assert np.asarray(image).std() > 0  # not blank
    counts = Counter(test["label"])
    assert set(counts) == set(range(10)) and all(30 <= n <= 42 for n in counts.values())
    with pytest.raises(ValueError, match="`image_size`"):
        load_digits_dataset(image_size=4)
    with pytest.raises(ValueError, match="`test_size`"):
        load_digits_dataset(test_size=1.0)


def test_long_tailed_profile_and_subset(digits) -> None:
    assert long_tailed_counts(100, 3, 10.0) == [100, 32, 10]
    assert long_tailed_counts(100, 4, 1.0) == [100] * 4
    lt = make_long_tailed(digits["train"], imbalance_ratio=10.0)
    counts = [Counter(lt["label"])[c] for c in range(10)]
    n_min = min(Counter(digits["train"]["label"]).values())
    assert counts == long_tailed_counts(n_min, 10, 10.0)
    with pytest.raises(ValueError, match="`imbalance_ratio`"):
        make_long_tailed(digits["train"], imbalance_ratio=0.5)
    with pytest.raises(ValueError, match="`label_column`"):
        make_long_tailed(digits["train"], 2.0, label_column="y")


def test_change_pairs_follow_their_kind(digits) -> None:
    pairs = make_change_pairs(digits["train"], num_pairs=400, seed=1)
    assert pairs.features["label"].names == list(CHANGE_NAMES)
    counts = Counter(pairs["label"])
    assert counts[0] > counts[1] > counts[2] > counts[3] > 0  # skewed as documented
    for row in pairs.select(range(60)):
        pre, post = np.asarray(row["image_pre"], dtype=np.int16), np.asarray(row["image_post"], dtype=np.int16)
        diff = np.abs(pre - post)
        if row["label"] == 0:
            assert diff.mean() < 12
        elif row["label"] == 1:
            assert (post == 0).sum() > (pre == 0).sum()  # a patch was blacked out
    again = make_change_pairs(digits["train"], num_pairs=400, seed=1)
    assert again["label"] == pairs["label"]
    with pytest.raises(ValueError, match="`frequencies`"):
        make_change_pairs(digits["train"], frequencies=(0.5, 0.5))
    with pytest.raises(ValueError, match="`num_pairs`"):
        make_change_pairs(digits["train"], num_pairs=0)


def test_sentence_pairs() -> None:
    ds = load_sentence_pairs(test_size=0.25)
    assert len(ds["train"]) + len(ds["test"]) == 240
    row = ds["train"][0]
    assert isinstance(row["sentence1"], str) and 0.0 <= row["score"] <= 5.0
    assert ds["train"].features["label"].num_classes == 4
    scores = set(ds["train"]["score"]) | set(ds["test"]["score"])
    assert {0.0, 5.0} <= scores
