"""The doors of :mod:`hf_contrast.data.sampling` (``balanced_subset``, ``balanced_split``, ``sample_rows``): labels
that are not integer classes and seeds that are not integers are named, for any input (the properties) and for the
inputs that escaped as torch's or Python's errors (listed). Their results are tested in
``tests/evaluation/test_evaluation.py``, where they are also exported."""

from __future__ import annotations

import math

import pytest
import torch
from _properties import assert_package_error_or_result, bad_numbers, tensors, wrong_types
from hypothesis import given
from hypothesis import strategies as st

from hf_contrast.data.sampling import balanced_split, balanced_subset, sample_rows
from hf_contrast.errors import InputError

LABELS = st.one_of(
    wrong_types,
    tensors(max_rank=2, max_side=8),
    st.lists(st.one_of(st.integers(-2, 3), st.text(max_size=2), st.none(), st.floats()), max_size=12),
)
SEEDS = st.one_of(st.integers(0, 2**64), wrong_types, bad_numbers)


def _rows(result: torch.Tensor, n_rows: int) -> None:
    assert result.dtype == torch.long and result.ndim == 1 and torch.all(result[1:] > result[:-1])
    assert result.numel() == 0 or 0 <= int(result.min()) <= int(result.max()) < n_rows


@given(labels=LABELS, n=st.one_of(wrong_types, bad_numbers, st.integers(-2, 20)), seed=SEEDS)
def test_balanced_subset_returns_rows_or_names_the_argument(labels, n, seed) -> None:
    result = assert_package_error_or_result(lambda: balanced_subset(labels, n, seed), ("labels", "n", "seed"))
    if result is not None:
        assert result.numel() == n
        _rows(result, len(labels))


@given(labels=LABELS, fraction=st.one_of(wrong_types, bad_numbers, st.floats(-1, 2)), seed=SEEDS)
def test_balanced_split_returns_a_partition_or_names_the_argument(labels, fraction, seed) -> None:
    result = assert_package_error_or_result(
        lambda: balanced_split(labels, fraction, seed), ("labels", "test_fraction", "seed")
    )
    if result is not None:
        train, test = result
        _rows(train, len(labels))
        _rows(test, len(labels))
        assert torch.equal(torch.sort(torch.cat([train, test])).values, torch.arange(len(labels)))


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: balanced_subset([None, 1], 1), "`labels` must be integer classes.*NoneType"),  # RuntimeError
        (lambda: balanced_split(["cat", "dog"]), "`labels` must be integer classes.*map class names"),
        (lambda: balanced_subset([0, 1], 1, seed=None), "`seed` must be an integer in \\[0, "),  # TypeError from int()
        (lambda: balanced_split([0, 1], 0.5, seed=math.inf), "`seed` must be an integer"),  # OverflowError
        (lambda: balanced_split([0, 1], 0.5, seed=1.5), "`seed` must be an integer"),  # was read as seed 1
        (lambda: sample_rows(4, 2, seed="0"), "`seed` must be an integer"),  # ValueError from int()
    ],
)
def test_bad_labels_and_seeds_are_named(call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()


def test_hold_out_divides_every_row_once_and_says_so(caplog) -> None:
    """The evaluation split of data without one: stratified by the label column (or not), each row in one part,
    logged once and noted beside each part for the model card; a label column the data lacks is named."""
    import datasets

    from hf_contrast.data import hold_out
    from hf_contrast.data.naming import loader_notes

    data = datasets.Dataset.from_dict({"text": [str(i) for i in range(20)], "label": [0] * 10 + [1] * 6 + [2] * 4})
    with caplog.at_level("INFO", logger="hf_contrast.data.sampling"):
        train, held = hold_out(data, 0.5, argument="eval_fraction", seed=3, label_column="label", name="toy")
    assert sorted([*train["text"], *held["text"]]) == sorted(data["text"])
    assert sorted(held["label"]) == [0] * 5 + [1] * 3 + [2] * 2  # half of each class
    assert "toy has no test split: 50% of each class is held out for evaluation (`eval_fraction`, seed 3): 10 " in (
        caplog.text
    )
    assert loader_notes(train) == [
        "50% of each class held out for evaluation (no test split; `eval_fraction`, seed 3)"
    ]
    assert loader_notes(held)[0].startswith("the 50% of each class held out of the training split")
    train, held = hold_out(data, 0.25, argument="eval_fraction")  # no classes: a share of the rows
    assert len(held) == 5 and loader_notes(train)[0].startswith("25% of the rows held out")
    with pytest.raises(InputError, match=r"`label_column`='labels' is not a column of the dataset"):
        hold_out(data, 0.5, argument="eval_fraction", label_column="labels")
    # the share is named as the option that set it (run_bert.py's --eval_fraction 1.5 was called `test_fraction`)
    with pytest.raises(InputError, match=r"^`eval_fraction` must be in \[0, 1\), got 1.5"):
        hold_out(data, 1.5, argument="eval_fraction", label_column="label")
