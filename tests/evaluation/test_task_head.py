"""``TaskHeadEvaluator``: the encoder's own classifier scored on labelled rows, against scikit-learn."""

from __future__ import annotations

import pytest
import torch
from _tiny import tiny_text_encoder
from hypothesis import given
from hypothesis import strategies as st
from sklearn.metrics import accuracy_score, f1_score
from torch import nn

from hf_contrast.errors import InputError
from hf_contrast.evaluation import EvaluationFailedWarning, TaskHeadEvaluator

_ROWS = [
    {"text": text, "label": label}
    for text, label in [
        ("the cat sat", 0),
        ("a cat sat on a mat", 0),
        ("the dog ran far", 1),
        ("dogs ran", 1),
        ("hello world", 2),
        ("a new world", 2),
        ("the red dog", 1),
    ]
]


class _LogitsAreTheInputs(nn.Module):
    """Stand-in classifier: its logits are the rows it is given, so the predictions are known."""

    def forward(self, pixel_values: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"embeddings": pixel_values, "logits": pixel_values}


def _collate(rows: list[dict]) -> dict[str, torch.Tensor]:
    return {"pixel_values": torch.stack([r["x"] for r in rows]), "labels": torch.tensor([r["label"] for r in rows])}


def test_task_head_evaluator_equals_scikit_learn_on_the_encoders_own_logits() -> None:
    encoder = tiny_text_encoder(num_labels=3).train()
    evaluator = TaskHeadEvaluator(_ROWS, input_column="text", batch_size=3, progress=False)
    out = evaluator(encoder)
    assert encoder.training  # mode restored
    assert (
        list(out) == ["task_head_accuracy", "task_head_macro_f1"] and evaluator.primary_metric == "task_head_accuracy"
    )
    encoder.eval()
    batch = encoder.tokenizer([r["text"] for r in _ROWS], padding=True, return_tensors="pt")
    with torch.no_grad():
        predicted = encoder(**batch).logits.argmax(dim=1).numpy()
    labels = [r["label"] for r in _ROWS]
    assert out["task_head_accuracy"] == pytest.approx(accuracy_score(labels, predicted))
    assert out["task_head_macro_f1"] == pytest.approx(f1_score(labels, predicted, average="macro"))
    named = TaskHeadEvaluator(_ROWS, name="topics", input_column="text", progress=False)(encoder)
    assert named == pytest.approx(
        {"topics_accuracy": out["task_head_accuracy"], "topics_macro_f1": out["task_head_macro_f1"]}
    )


@given(
    st.integers(1, 12).flatmap(
        lambda n: st.tuples(
            st.lists(st.lists(st.floats(-5, 5, width=32), min_size=4, max_size=4), min_size=n, max_size=n),
            st.lists(st.integers(0, 3), min_size=n, max_size=n),
        )
    ),
    st.integers(1, 5),
)
def test_task_head_scores_are_the_arg_max_against_the_labels(data: tuple[list, list], batch_size: int) -> None:
    logits, labels = torch.tensor(data[0]), data[1]
    rows = [{"x": x, "label": y} for x, y in zip(logits, labels)]
    out = TaskHeadEvaluator(rows, collate_fn=_collate, batch_size=batch_size, progress=False)(
        _LogitsAreTheInputs(), on_error="raise"
    )
    predicted = logits.argmax(dim=1).numpy()  # ties: the first maximum, as torch's arg-max in the evaluator
    assert out["task_head_accuracy"] == pytest.approx(accuracy_score(labels, predicted))
    assert out["task_head_macro_f1"] == pytest.approx(f1_score(labels, predicted, average="macro"))


def test_task_head_evaluator_refuses_what_it_cannot_score() -> None:
    with pytest.raises(InputError, match="`label_column` must name the label column"):
        TaskHeadEvaluator(_ROWS, label_column=None)
    with pytest.raises(InputError, match="`dataset` has no labels in `label_column`='label'"):
        TaskHeadEvaluator([{"text": r["text"]} for r in _ROWS])  # when built, before any training
    with pytest.raises(InputError, match="`batch_size` must be an integer in"):
        TaskHeadEvaluator(_ROWS, batch_size=0)
    evaluator = TaskHeadEvaluator(_ROWS, input_column="text", progress=False)
    with pytest.raises(InputError, match="the model has no task head: build the encoder with `num_labels`"):
        evaluator(tiny_text_encoder(), on_error="raise")
    with pytest.raises(InputError, match=r"labels from 0 to 2 but the model's task head has 2 classes"):
        evaluator(tiny_text_encoder(num_labels=2), on_error="raise")
    # in a training run: NaN and one warning (its sentence ends once), never a crash
    with pytest.warns(EvaluationFailedWarning, match=r"one class per label\)\. Reported as NaN"):
        assert all(value != value for value in evaluator(tiny_text_encoder()).values())
