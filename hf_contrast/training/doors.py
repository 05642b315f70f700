"""The trainers' door: what ``ContrastiveTrainer(...)`` checks before any work (model built, objective set up).

:func:`check_trainer_arguments` runs first in ``__init__``: ``model`` must be a model object (like
``transformers.Trainer``, a trainer does not load a name), ``train_dataset`` / ``eval_dataset`` must be
datasets (not a path, a list of strings, a dict of columns, a ``DatasetDict`` split dict or a pandas frame).
:func:`check_trainer_columns` runs once the views exist and before the objective reads the data: the
columns the objective needs are present, and the image / text / label columns hold the right kind of data
(read from the dataset's ``features``, nothing decoded). Each raises an
:class:`~hf_contrast.errors.InputTypeError` (or :class:`~hf_contrast.errors.InputError`) naming the
argument, the value and the fix.
"""

from __future__ import annotations

import os
from typing import Any

from torch import nn

from ..data.checks import check_column_kinds, check_columns, check_dataset_type
from ..errors import InputTypeError
from ..views import input_modality_of

__all__ = ["check_trainer_arguments", "check_trainer_columns", "column_kinds"]

_MODEL_FIX = (
    "a trainer takes a model object, as `transformers.Trainer` does: a ContrastiveEncoder "
    "(`ContrastiveEncoder.from_backbone(name)` for a timm name or a Hub id of a text model, "
    "`ContrastiveEncoder.from_pretrained(path)` for a saved encoder), a sentence_transformers.SentenceTransformer, "
    "a timm model (`timm.create_model(...)`) or a transformers PreTrainedModel with token inputs"
)


def check_trainer_arguments(model: Any, train_dataset: Any, eval_dataset: Any) -> None:
    """The types of a trainer's ``model``, ``train_dataset`` and ``eval_dataset``.

    Raises:
        InputTypeError: naming the argument, its value and what to pass instead.
    """
    if model is None:
        raise InputTypeError(f"`model` is None; {_MODEL_FIX}.")
    if not isinstance(model, nn.Module):
        if isinstance(model, (str, os.PathLike)):
            name = os.fspath(model)
            raise InputTypeError(
                f"`model` is the string {name!r}; {_MODEL_FIX}. Load it first, e.g. "
                f"`model=ContrastiveEncoder.from_backbone({name!r})` or "
                f"`ContrastiveEncoder.from_pretrained({name!r})`."
            )
        kind = type(model)
        raise InputTypeError(f"`model` is a {kind.__module__}.{kind.__qualname__}; {_MODEL_FIX}.")
    check_dataset_type(train_dataset, name="train_dataset")
    check_dataset_type(eval_dataset, name="eval_dataset", allow_dict=True)


def column_kinds(args: Any, text: bool, extra_images: tuple[str, ...] = ()) -> list[tuple[str, str, str]]:
    """``(column, kind, argument)`` for the columns the training arguments name: the image (or text and text
    pair) column, the label column (collated whenever present) and ``extra_images`` (e.g. LOCAL's pair)."""
    kinds: list[tuple[str, str, str]] = []
    if text:
        kinds.append((args.text_column, "text", "text_column"))
        if args.text_pair_column is not None:
            kinds.append((args.text_pair_column, "text", "text_pair_column"))
    else:
        kinds.append((args.image_column, "image", "image_column"))
        kinds += [(column, "image", "objective's image pair column") for column in extra_images]
    kinds.append((args.label_column, "label", "label_column"))
    return kinds


def check_trainer_columns(trainer: Any) -> None:
    """The training set has the columns the objective needs; every dataset's named columns hold the right kind
    of data. Called by ``ContrastiveTrainer.__init__`` before the objective's ``setup`` reads the data."""
    args, objective, views = trainer.args, trainer.objective, trainer.views
    text = input_modality_of(trainer.model) == "text"
    required = objective.required_columns(views)
    inputs = set(views.input_columns())
    label_options = {args.label_column, "labels"}
    extra = tuple(
        entry for entry in required if isinstance(entry, str) and entry not in inputs and entry not in label_options
    )
    kinds = column_kinds(args, text, extra if not text else ())
    if trainer.train_dataset is not None:
        check_columns(trainer.train_dataset, required, name="train_dataset")
        check_column_kinds(trainer.train_dataset, kinds, name="train_dataset")
    eval_sets = trainer.eval_dataset if isinstance(trainer.eval_dataset, dict) else {"": trainer.eval_dataset}
    for key, dataset in eval_sets.items():
        check_column_kinds(dataset, kinds, name=f"eval_dataset[{key!r}]" if key else "eval_dataset")
