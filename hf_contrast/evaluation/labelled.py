"""An evaluation split and its labels, read before training: a ``DatasetDict`` where one split belongs, a split that
visibly lacks its label column, or holds class names rather than indices, is refused when the evaluator is built
(:class:`~hf_contrast.evaluation.ProbeEvaluator`, :class:`~hf_contrast.evaluation.EmbeddingEvaluator`,
:class:`~hf_contrast.evaluation.TaskHeadEvaluator`, :meth:`~hf_contrast.evaluation.STSEvaluator.from_dataset`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hf_contrast.errors import InputError, InputTypeError

from ..views.labels import class_labels

__all__ = ["check_labelled", "check_one_split", "dataset_labels"]


def check_one_split(argument: str, dataset: Any) -> None:
    """Refuse a ``DatasetDict`` passed as ``argument`` where one split belongs (its ``column_names`` are a dict by
    split, which a column check would read as the split names)."""
    columns = getattr(dataset, "column_names", None)
    if isinstance(columns, dict):
        raise InputTypeError(
            f"`{argument}` must be one split (e.g. dataset['test']), got a DatasetDict of the splits "
            f"{sorted(columns)}."
        )


def check_labelled(argument: str, dataset: Any, label_column: str) -> None:
    """Fail at construction (before training) when ``dataset`` is a ``DatasetDict`` (:func:`check_one_split`) or
    visibly lacks ``label_column``: a dataset's ``column_names``, or the keys of a list of dict rows. Other datasets
    are checked when encoded."""
    check_one_split(argument, dataset)
    columns = getattr(dataset, "column_names", None)
    if columns is None and isinstance(dataset, (list, tuple)):
        unlabelled = [i for i, row in enumerate(dataset) if isinstance(row, Mapping) and label_column not in row]
        if unlabelled:
            raise InputError(
                f"`{argument}` has no labels in `label_column`={label_column!r} (row {unlabelled[0]} and "
                f"{len(unlabelled) - 1} more): the probes need a label on every row (pass `label_column=` the column "
                "that holds them)."
            )
    elif columns is not None and label_column not in columns:
        raise InputError(
            f"`{argument}` has no labels in `label_column`={label_column!r} (its columns: {list(columns)}): the "
            "probes need a label on every row (pass `label_column=` the column that holds them)."
        )


def dataset_labels(dataset: Any, label_column: str, argument: str) -> list[int] | None:
    """The integer labels of ``dataset`` when they can be read without encoding (a ``datasets.Dataset``'s
    column, a list of dict rows), else ``None`` (checked when encoded).

    Raises:
        InputError: on a label that is not an integer (a class name), naming ``argument``, the row and the fix.
    """
    try:
        columns = getattr(dataset, "column_names", None)
        if isinstance(columns, list):
            if label_column not in columns:
                return None
            labels = list(dataset[label_column])
        elif isinstance(dataset, (list, tuple)) and all(isinstance(row, Mapping) for row in dataset):
            labels = [row[label_column] for row in dataset]
        else:
            return None
    except (KeyError, TypeError, IndexError):
        return None
    try:
        return class_labels(labels, label_column, first_row=0).tolist()
    except InputError as error:
        raise InputError(f"`{argument}`: {error}") from None
