"""Class labels that are not class indices (a column of class names, floats, booleans): every door that reads labels
(:func:`hf_contrast.views.labels.class_labels`, the training collators, :func:`encode_dataset`, the evaluators when
built) refuses them naming the column, the row and the fix, and reads integer labels exactly, in any form a dataset
gives them (Python, NumPy, one-element tensors)."""

from __future__ import annotations

import datasets
import numpy as np
import pytest
import torch
from _tiny import tiny_text_encoder
from hypothesis import given
from hypothesis import strategies as st

from hf_contrast.errors import InputError
from hf_contrast.evaluation import (
    EmbeddingEvaluator,
    EmbeddingMetrics,
    EquivarianceEvaluator,
    ProbeEvaluator,
    TaskHeadEvaluator,
    encode_dataset,
)
from hf_contrast.views.labels import class_labels

_FORMS = (int, np.int64, np.int32, torch.tensor)  # how a dataset can hand out one integer label
_NOT_INDICES = st.one_of(
    st.text(max_size=8),
    st.floats(allow_nan=True),
    st.booleans(),
    st.none(),
    st.floats(-5, 5).map(lambda v: torch.tensor(v)),
    st.just(torch.tensor([1, 2])),
)
_SICK_LIKE = {
    "text": ["a man plays", "a dog runs", "nobody plays", "a cat sleeps", "a man is playing", "the dog is running"],
    "judgment": ["NEUTRAL", "ENTAILMENT", "CONTRADICTION", "NEUTRAL", "ENTAILMENT", "CONTRADICTION"],
}


@given(
    values=st.lists(st.tuples(st.integers(-(2**31), 2**31 - 1), st.sampled_from(_FORMS)), max_size=20),
    first_row=st.one_of(st.none(), st.integers(0, 10**6)),
)
def test_integer_labels_are_read_exactly_in_any_form(values, first_row) -> None:
    labels = class_labels([form(value) for value, form in values], "label", first_row)
    assert labels.dtype == torch.long and labels.tolist() == [value for value, _ in values]


@given(
    ints=st.lists(st.integers(0, 9), max_size=12),
    bad=_NOT_INDICES,
    data=st.data(),
    first_row=st.one_of(st.none(), st.integers(0, 10**6)),
)
def test_the_first_label_that_is_not_an_index_is_named_with_its_row(ints, bad, data, first_row) -> None:
    position = data.draw(st.integers(0, len(ints)))
    values = [*ints[:position], bad, *ints[position:]]
    row = f"row {position} of the batch" if first_row is None else f"row {first_row + position}"
    with pytest.raises(InputError) as error:
        class_labels(values, "judgment", first_row)
    message = str(error.value)
    assert message.startswith("`label_column`='judgment' must hold integer class labels, got ")
    assert f"(a {type(bad).__name__}) in {row};" in message
    assert "dataset.class_encode_column('judgment')" in message


def test_encode_dataset_names_the_row_of_a_class_name_and_reads_torch_formatted_labels() -> None:
    encoder = tiny_text_encoder()
    names = datasets.Dataset.from_dict(_SICK_LIKE)
    with pytest.raises(InputError, match=r"`label_column`='judgment' .* got 'NEUTRAL' \(a str\) in row 0;"):
        encode_dataset(encoder, names, label_column="judgment", batch_size=2, progress=False)
    # a class name in the second batch: the row is the dataset's, not the batch's
    rows = [{"text": "a", "judgment": 0}, {"text": "b", "judgment": 1}, {"text": "c", "judgment": "CONTRADICTION"}]
    with pytest.raises(InputError, match=r"got 'CONTRADICTION' \(a str\) in row 2;"):
        encode_dataset(encoder, rows, label_column="judgment", batch_size=2, progress=False)
    encoded = names.class_encode_column("judgment")  # the fix the message gives
    z, labels = encode_dataset(encoder, encoded, label_column="judgment", batch_size=4, progress=False)
    assert labels.tolist() == encoded["judgment"] and z.shape[0] == 6
    _, from_tensors = encode_dataset(
        encoder, encoded.with_format("torch"), label_column="judgment", batch_size=4, progress=False
    )
    assert torch.equal(from_tensors, labels)
    # a float label is refused, not truncated (1.5 was read as class 1)
    with pytest.raises(InputError, match=r"got 1\.5 \(a float\) in row 1;"):
        encode_dataset(encoder, [{"text": "a", "label": 0}, {"text": "b", "label": 1.5}], progress=False)

    def floats(rows: list) -> dict:
        inputs = dict(encoder.tokenizer([r["text"] for r in rows], padding=True, return_tensors="pt"))
        return {**inputs, "labels": torch.tensor([0.5] * len(rows))}

    with pytest.raises(InputError, match=r"`collate_fn` returned labels of dtype torch.float32"):
        encode_dataset(encoder, [{"text": "a"}], collate_fn=floats, progress=False)


def test_a_skipped_image_does_not_move_the_row_named(timm_encoder, tmp_path) -> None:  # noqa: ANN001
    image = np.zeros((16, 16, 3), np.uint8)
    rows = [
        {"image": image, "label": 0},
        {"image": str(tmp_path / "missing.png"), "label": 1},
        {"image": image, "label": "cat"},
    ]
    with pytest.raises(InputError, match=r"got 'cat' \(a str\) in row 2;"):  # the labels are read first
        encode_dataset(timm_encoder, rows, on_bad_image="skip", progress=False)
    rows[2]["label"] = 2
    with pytest.warns(UserWarning, match=r"Skipped: encode_dataset: row 1\b"):
        z, labels = encode_dataset(timm_encoder, rows, on_bad_image="skip", progress=False)
    assert labels.tolist() == [0, 2] and z.shape[0] == 2


def test_the_evaluators_refuse_class_names_when_built() -> None:
    """Before any training step: the evaluators read the label column (a Dataset's, a list of rows') when built."""
    names = datasets.Dataset.from_dict(_SICK_LIKE)
    as_rows = names.to_list()
    message = r"`{}`: `label_column`='judgment' must hold integer class labels, got 'NEUTRAL' \(a str\) in row 0;"
    with pytest.raises(InputError, match=message.format("fit_dataset")):
        ProbeEvaluator(names, names, label_column="judgment", knn_k=2)
    encoded = names.class_encode_column("judgment")
    with pytest.raises(InputError, match=message.format("score_dataset")):
        ProbeEvaluator(encoded, as_rows, label_column="judgment", knn_k=2)
    with pytest.raises(InputError, match=message.format("dataset")):
        TaskHeadEvaluator(names, label_column="judgment")
    with pytest.raises(InputError, match=message.format("dataset")):
        EmbeddingEvaluator(as_rows, label_column="judgment")
    encoder = tiny_text_encoder(num_labels=3)
    for built in (  # the encoded column (the fix) is taken and scored
        ProbeEvaluator(encoded, encoded, label_column="judgment", knn_k=2, progress=False),
        TaskHeadEvaluator(encoded, label_column="judgment", progress=False),
        EmbeddingEvaluator(encoded, label_column="judgment", metrics=EmbeddingMetrics(knn_k=2, progress=False)),
    ):
        scores = built(encoder, on_error="raise")
        assert scores and all(np.isfinite(value) for value in scores.values()), scores
    rows = [{"image": np.zeros((8, 8, 3), np.uint8), "label": name} for name in ("cat", "dog", "cat", "dog")]
    config = {"input_size": (3, 8, 8), "mean": (0.5, 0.5, 0.5), "std": (0.25, 0.25, 0.25)}
    with pytest.raises(InputError, match=r"`label_column`='label' .* got 'cat' \(a str\) in row 0;"):
        EquivarianceEvaluator.from_image_dataset(rows, config, num_samples=2)
