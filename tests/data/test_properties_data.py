"""The doors of the data makers (:mod:`hf_contrast.data.long_tail`, :mod:`hf_contrast.data.change_pairs`, the shipped
digits and sentence pairs, ``check_dataset`` and ``defer_image_decoding``) under generated arguments: a result that
keeps its promise, or the package's error naming the argument. Their results are tested in
``tests/data/test_data.py``."""

from __future__ import annotations

import datasets
import numpy as np
import pytest
from _errors import assert_message
from _images import png_bytes
from _properties import assert_package_error_or_result, bad_names, bad_numbers, wrong_types
from hypothesis import given
from hypothesis import strategies as st

from hf_contrast.data import (
    check_dataset,
    defer_image_decoding,
    load_digits_dataset,
    load_sentence_pairs,
    long_tailed_counts,
    make_change_pairs,
    make_long_tailed,
)
from hf_contrast.errors import InputError

VALUES = st.one_of(wrong_types, bad_numbers, bad_names, st.floats(-1, 2), st.integers(-3, 5))
LABELLED = datasets.Dataset.from_dict({"x": list(range(12)), "label": [0, 1, 2] * 4})


@given(
    n_max=st.one_of(VALUES, st.integers(-1, 100)),
    num_classes=st.one_of(VALUES, st.integers(-1, 20), st.just(10**30)),
    imbalance_ratio=st.one_of(VALUES, st.floats(0, 1000)),
)
def test_long_tailed_counts(n_max, num_classes, imbalance_ratio) -> None:
    """`num_classes=None` / a float, `n_max=None` / 2.5 and `imbalance_ratio=None` raised TypeError; 10**30 classes
    built a list until memory ran out."""

    def profile(counts: list[int]) -> None:
        assert len(counts) == num_classes and counts[0] == max(2, n_max)
        assert all(isinstance(c, int) and c >= 2 for c in counts) and counts == sorted(counts, reverse=True)

    assert_package_error_or_result(
        lambda: long_tailed_counts(n_max, num_classes, imbalance_ratio),
        ("n_max", "num_classes", "imbalance_ratio"),
        profile,
    )


@given(
    imbalance_ratio=st.one_of(VALUES, st.floats(1, 1000), st.none()),
    label_column=st.one_of(st.just("label"), bad_names),
    seed=st.one_of(st.just(0), VALUES, st.integers(0, 2**64)),
)
def test_make_long_tailed(imbalance_ratio, label_column, seed) -> None:
    """A seed of -1, 0.1 or a list raised numpy's ValueError / TypeError."""

    def subset(result: datasets.Dataset) -> None:
        assert len(result) <= len(LABELLED) and set(result["label"]) == {0, 1, 2}

    assert_package_error_or_result(
        lambda: make_long_tailed(LABELLED, imbalance_ratio, label_column, seed),
        ("imbalance_ratio", "label_column", "seed"),
        subset,
    )


@pytest.fixture(scope="module")
def images() -> datasets.Dataset:
    rows = [{"bytes": png_bytes(np.full((8, 8, 3), i * 20, np.uint8)), "path": None} for i in range(6)]
    data = datasets.Dataset.from_dict({"image": rows, "label": [0, 1, 2, 0, 1, 2]})
    return data.cast_column("image", datasets.Image())


@given(
    argument=st.sampled_from(["num_pairs", "frequencies", "image_column", "label_column", "seed", "on_bad_image"]),
    value=st.one_of(VALUES, st.lists(st.floats(-1, 2), max_size=5), st.just(10**30)),
)
def test_make_change_pairs(images, argument, value) -> None:
    """`frequencies=None`, a seed that is no integer and 10**30 pairs raised TypeError, numpy's ValueError or an
    OverflowError."""
    options = {"num_pairs": 4, argument: value}

    def pairs(result: datasets.Dataset) -> None:
        assert len(result) == (options["num_pairs"] if options["num_pairs"] is not None else len(images))

    assert_package_error_or_result(lambda: make_change_pairs(images, **options), (argument, "dataset"), pairs)


@pytest.mark.parametrize(
    ("options", "pieces"),
    [
        ({"frequencies": None}, ["`frequencies`", "summing to 1"]),
        ({"frequencies": [0.5, 0.5, float("nan"), 0.0]}, ["`frequencies`", "nan"]),
        ({"seed": -1}, ["`seed`", "[0, 9223372036854775806]"]),
        ({"num_pairs": 10**30}, ["`num_pairs`", "[1, 10000000]"]),
    ],
)
def test_make_change_pairs_names_the_listed_cases(images, options, pieces) -> None:
    with pytest.raises(InputError) as caught:
        make_change_pairs(images, **options)
    assert_message(caught, *pieces)


def _two_splits(data: datasets.DatasetDict) -> None:
    assert (
        set(data) == {"train", "test"} and len(data["train"]) > 0 and len(data["test"]) > 0
    )  # test_size 0.5+: test >= train


_SMALL_OR_HUGE = st.one_of(VALUES, st.integers(-3, 64), st.integers(65537, 10**30))  # a valid large size is memory


@given(
    argument=st.sampled_from(["image_size", "test_size", "seed"]),
    value=st.one_of(_SMALL_OR_HUGE, st.floats(-1, 2), st.integers(0, 2**64)),
)
def test_shipped_data_loaders(argument, value) -> None:
    """`load_digits_dataset` / `load_sentence_pairs` with a seed of -1, 0.1 or a list raised numpy's ValueError /
    TypeError, an `image_size` of 10**30 an OverflowError in PIL."""
    if argument == "image_size" and isinstance(value, int) and not isinstance(value, bool) and 8 <= value <= 65536:
        value = 16  # every valid size is the same code; keep the examples fast (a valid 30,000 px is 1,797 × 2.7 GB)
    assert_package_error_or_result(lambda: load_digits_dataset(**{argument: value}), (argument,), _two_splits)
    if argument != "image_size":
        assert_package_error_or_result(lambda: load_sentence_pairs(**{argument: value}), (argument,), _two_splits)


@given(
    dataset=st.one_of(VALUES, st.just(LABELLED)),
    argument=st.sampled_from(["name", "min_rows", "columns", "why"]),
    value=st.one_of(VALUES, st.lists(st.one_of(bad_names, st.just("label")), max_size=3)),
)
def test_check_dataset(dataset, argument, value) -> None:
    """`columns=None`, `dataset=5` and a list as a column raised TypeError ('not iterable', 'unhashable type')."""
    assert_package_error_or_result(
        lambda: check_dataset(dataset, **{argument: value}), (argument, "train_dataset", "dataset", "name")
    )


@given(dataset=st.one_of(VALUES, st.just(LABELLED)), image_column=st.one_of(bad_names, st.just("x")))
def test_defer_image_decoding(images, dataset, image_column) -> None:
    """`image_column=None` / a list raised KeyError / TypeError from the features."""
    assert_package_error_or_result(lambda: defer_image_decoding(dataset, image_column), ("image_column",))
    assert_package_error_or_result(lambda: defer_image_decoding(images, image_column), ("image_column",))
