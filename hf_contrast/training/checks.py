"""What a trainer checks before any work, each failure naming the argument and the fix: the door, the set-up checks and
the distributed engine.

Formerly also the modules ``doors``, ``setup_checks``, ``engine_checks`` of ``hf_contrast.training`` (their import
paths still work, with a ``FutureWarning``). Their parts follow.

The trainers' door: what ``ContrastiveTrainer(...)`` checks before any work (model built, objective set up).

:func:`check_trainer_arguments` runs first in ``__init__``: ``model`` must be a model object (like
``transformers.Trainer``, a trainer does not load a name), ``train_dataset`` / ``eval_dataset`` must be
datasets (not a path, a list of strings, a dict of columns, a ``DatasetDict`` split dict or a pandas frame).
:func:`check_trainer_columns` runs once the views exist and before the objective reads the data: the
columns the objective needs are present, and the image / text / label columns hold the right kind of data
(read from the dataset's ``features``, nothing decoded). Each raises an
:class:`~hf_contrast.errors.InputTypeError` (or :class:`~hf_contrast.errors.InputError`) naming the
argument, the value and the fix.

What a trainer checks before it trains, each failure naming the argument and the fix.

At ``__init__`` (:func:`check_objective_fits`, :func:`check_evaluation_fits`): the batch sizes and the
evaluation sets fit the objective. At the start of ``train()`` (:func:`check_best_metric`,
:func:`check_datasets`, :func:`check_image_files`): ``metric_for_best_model`` is a metric the evaluations report, the
datasets are large enough and have the columns the objective reads, and the image files can be read
(:func:`hf_contrast.views.image_scan.scan_images`).

Start-up checks of the distributed engine that Accelerate actually started against the one the launch asked for.

Accelerate (1.3 to at least 1.15) shards with FSDP or DeepSpeed only on GPU-like devices. On CPU processes it
does not say so:

- with ``use_cpu=True`` (the examples' default on a machine without an accelerator) it runs DDP over gloo, and
  every process holds the whole model, although the launch asked for FSDP or DeepSpeed;
- with ``use_cpu=False`` on a machine without an accelerator it starts no process group at all: each launched
  process trains alone on the whole data set and writes to the same folder.

:func:`check_distributed_engine` logs the first (the run is correct, only not sharded) and refuses the second
before any step.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from torch import nn
from torch.utils.data import IterableDataset as TorchIterableDataset
from transformers.utils import logging

from hf_contrast.data.checks import (
    check_column_kinds,
    check_columns,
    check_dataset,
    check_dataset_type,
    dataset_classes,
    dataset_columns,
)
from hf_contrast.data.columns import CANONICAL_COLUMNS
from hf_contrast.errors import InputError, InputTypeError
from hf_contrast.models.inputs import position_limit
from hf_contrast.objectives import Objective
from hf_contrast.views import BadImageError, input_modality_of, scan_images
from hf_contrast.views.image_scan import image_columns, scan_depth
from hf_contrast.views.labels import collate_labels

__all__ = [
    "EVALUATION_RUN_METRICS",
    "BatchClassCheck",
    "batch_class_check",
    "check_best_metric",
    "check_classifier_classes",
    "check_datasets",
    "check_default_metrics_fit",
    "check_distributed_engine",
    "check_evaluation_columns",
    "check_evaluation_fits",
    "check_evaluation_set",
    "check_image_files",
    "check_label_values",
    "check_objective_fits",
    "check_sampling_strategy",
    "check_streamed_batches",
    "check_task_classes",
    "check_text_length",
    "check_trainer_arguments",
    "check_trainer_columns",
    "check_training_classes",
    "column_kinds",
    "needed_columns",
    "requested_engine",
    "sampling_strategy",
    "trainer_column_kinds",
    "visibly_unlabelled",
]


# ==================== doors ===========================================================================


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


def trainer_column_kinds(trainer: Any) -> list[tuple[str, str, str]]:
    """:func:`column_kinds` of a trainer: its arguments' columns and, for images, the objective's own image columns
    (e.g. LOCAL's pair)."""
    args, objective, views = trainer.args, trainer.objective, trainer.views
    text = input_modality_of(trainer.model) == "text"
    inputs = set(views.input_columns())
    label_options = {args.label_column, "labels"}
    extra = tuple(
        entry
        for entry in objective.required_columns(views)
        if isinstance(entry, str) and entry not in inputs and entry not in label_options
    )
    return column_kinds(args, text, extra if not text else ())


def needed_columns(trainer: Any, *, evaluation: bool = False) -> list[str | tuple[str, ...]]:
    """The columns (a tuple: any one of them) a training set, or an evaluation set (``evaluation=True``), must have:
    the objective's :meth:`~hf_contrast.objectives.Objective.required_columns` and ``text_pair_column`` when one is
    set (the text collator tokenises it in every batch). An evaluation set needs the label column only when the
    objective's ``eval_loss`` reads it (SupCon, OCL, LOCAL: :attr:`~hf_contrast.objectives.Objective.has_eval_loss`
    and labels required); otherwise its embedding metrics run without labels."""
    args, objective = trainer.args, trainer.objective
    columns = list(objective.required_columns(trainer.views))
    if evaluation and not objective.has_eval_loss:
        columns = [entry for entry in columns if entry != (args.label_column, "labels")]
    if input_modality_of(trainer.model) == "text" and args.text_pair_column is not None:
        columns.append(args.text_pair_column)
    return columns


def check_evaluation_columns(trainer: Any, dataset: Any, name: str, caller: str | None = None) -> None:
    """An evaluation set has the columns its evaluation reads (:func:`needed_columns`); the labels' absence is said
    with the reason (the objective's ``eval_loss``), the others as :func:`~hf_contrast.data.checks.check_columns`
    says them. ``caller``: the call the set was given to (``"evaluate"``, ``"predict"``); ``None`` for the trainer's
    own evaluation sets.

    Raises:
        InputError: naming the set, the column, its columns and the fix.
    """
    labels = (trainer.args.label_column, "labels")
    columns = needed_columns(trainer, evaluation=True)
    check_columns(dataset, [entry for entry in columns if entry != labels], name=name)
    known = dataset_columns(dataset)
    if labels in columns and known is not None and not set(labels) & set(known):
        raise InputError(
            f"`{name}` has no `label_column`={labels[0]!r} (its columns: {known}): "
            f"{type(trainer.objective).__name__}'s `eval_loss` compares the samples of a batch by class, and "
            f"{_consequence(caller)}. "
            "Add the labels (or set `label_column` to the column that holds them), or evaluate a labelled set"
            + (
                "; for the embeddings of unlabelled rows, `trainer.model.encode(images or texts)` or "
                "`hf_contrast.evaluation.encode_dataset(trainer.model, dataset)`."
                if caller == "predict"
                else "."
            )
        )


def check_trainer_columns(trainer: Any) -> None:
    """The training set has the columns the objective needs, every evaluation set those its evaluation reads
    (:func:`needed_columns`); every dataset's named columns hold the right kind of data. Called by
    ``ContrastiveTrainer.__init__`` before the objective's ``setup`` reads the data."""
    kinds = trainer_column_kinds(trainer)
    if trainer.train_dataset is not None:
        check_columns(trainer.train_dataset, needed_columns(trainer), name="train_dataset")
        check_column_kinds(trainer.train_dataset, kinds, name="train_dataset")
    for name, dataset in _eval_sets(trainer.eval_dataset).items():
        if dataset is not None:
            check_evaluation_columns(trainer, dataset, name)
        check_column_kinds(dataset, kinds, name=name)


def check_evaluation_set(trainer: Any, dataset: Any, name: str, caller: str) -> None:
    """What the trainer checked of its own evaluation sets when it was built, for a set given later to ``evaluate``
    (``name="eval_dataset"``) or ``predict`` (``"test_dataset"``), before its first batch: a dataset of rows, large
    enough for the ``eval_loss``, with the columns its evaluation reads and of their kinds, labels on every row or on
    none, and of the classes of the encoder's task head and of the objective's classifier. ``caller`` (``"evaluate"``,
    ``"predict"``) is named in the errors. ``None``, a name of the trainer's ``eval_dataset`` dict and one of its own
    sets were checked when it was built: nothing to do.

    Raises:
        InputError, InputTypeError: naming ``name``, the value and the fix.
    """
    own = trainer.eval_dataset.values() if isinstance(trainer.eval_dataset, dict) else (trainer.eval_dataset,)
    if dataset is None or isinstance(dataset, str) or any(dataset is checked for checked in own):
        return
    objective, column = trainer.objective, trainer.args.label_column
    check_dataset_type(dataset, name=name)
    scored = objective.has_eval_loss
    check_dataset(
        dataset,
        name=name,
        min_rows=objective.min_eval_batch_size if scored else 1,
        why=f"{type(objective).__name__}'s `eval_loss` compares the samples of an evaluation batch"
        if scored
        else None,
    )
    check_evaluation_columns(trainer, dataset, name, caller)
    check_column_kinds(dataset, trainer_column_kinds(trainer), name=name)
    classes = _evaluation_classes(dataset, name, column, _task_head_width(trainer), caller)
    check_classifier_classes(objective, {name: classes}, column, caller=caller)


def check_default_metrics_fit(args: Any) -> None:
    """The trainer's default ``compute_metrics`` (the objective's embedding metrics) scores the whole evaluation set
    at once: ``eval_do_concat_batches=False`` would hand it one array per batch, refused at the first evaluation;
    ``batch_eval_metrics=True`` would call it after every batch (transformers refused it as "your ``compute_metrics``
    function must take a ``compute_result`` argument", of a function the user never passed).

    Raises:
        InputError: naming ``eval_do_concat_batches`` or ``batch_eval_metrics`` and the fix.
    """
    if getattr(args, "batch_eval_metrics", False):
        raise InputError(
            "`batch_eval_metrics=True` scores each evaluation batch alone, but the default embedding metrics compare "
            "the whole evaluation set (kNN, probe, uniformity). Leave it False (the default), or pass a "
            "`compute_metrics(eval_prediction, compute_result)` of yours."
        )
    if not args.eval_do_concat_batches:
        raise InputError(
            "`eval_do_concat_batches=False` hands `compute_metrics` one array per evaluation batch, but the default "
            "embedding metrics compare the whole evaluation set (kNN, probe, uniformity), and the first evaluation "
            "would stop training. Leave it True (the default), or pass a `compute_metrics` of yours that takes "
            "per-batch predictions."
        )


def check_label_values(trainer: Any) -> dict[str, list[int]]:
    """The label values each dataset's use needs, said when the trainer is built (read with
    :func:`~hf_contrast.data.checks.dataset_classes`, arrow). Negative labels mark unlabelled rows (-1, as a
    ``ClassLabel`` writes a missing label, or -100; how the embedding metrics read them): a method that learns from
    classes needs a class on every training row (it would make the unlabelled rows one class), and an evaluation set
    has labels on all its rows or on none (the metrics refuse a mix at the first evaluation). A task head the method
    trains (align/uniform with ``num_labels`` > 0) has a logit for every label of every set
    (:func:`check_task_classes`).

    Returns:
        ``{name: classes}``: each evaluation set's distinct integer labels, by the name the errors give it (for
        :func:`check_classifier_classes`, once the objective is set up).

    Raises:
        InputError: naming the dataset, ``label_column``, the values and the fix.
    """
    column, objective = trainer.args.label_column, trainer.objective
    head = _task_head_width(trainer)
    if trainer.train_dataset is not None and (objective.needs_labels or head):
        learner = type(objective).__name__ if objective.needs_labels else None
        check_training_classes(_integer_classes(trainer.train_dataset, column), column, learner, head)
    return {
        name: _evaluation_classes(dataset, name, column, head)
        for name, dataset in _eval_sets(trainer.eval_dataset).items()
        if dataset is not None
    }


def check_training_classes(
    classes: Sequence[int], column: str, learner: str | None, head: int, where: str = ""
) -> None:
    """The training set's class labels ``classes`` (distinct integers) fit the run: no negative label (an unlabelled
    row) where the objective ``learner`` (its class name; ``None``: it learns no classes) learns from classes, and
    every label a class of a task head of ``head`` classes (0: none) that the objective trains
    (:func:`check_task_classes`). ``where`` says where the labels were read (a streamed batch).

    Raises:
        InputError: naming ``train_dataset``, ``label_column``, the labels and the fix.
    """
    negative = sorted(c for c in classes if c < 0)
    if learner is not None and negative:
        raise InputError(
            f"`train_dataset`'s `label_column`={column!r} holds the negative labels {negative}{where}, which mark "
            f"unlabelled rows: {learner} learns from classes and would train those rows as one class. Keep the "
            f"labelled rows ({_keep_labelled(column)}), or train without labels (e.g. objective='simclr')."
        )
    if head:
        check_task_classes(list(classes), column, head, "train_dataset", where)


@dataclasses.dataclass
class BatchClassCheck:
    """A training collator that first checks each batch's class labels as :func:`check_label_values` checks a training
    set whose labels can be read before training (:func:`check_training_classes`): for a set whose labels cannot (a
    streaming ``IterableDataset``, a torch ``Dataset``), a negative label where classes are learned, or a label
    outside a task head, stops training at its batch with the start-up check's error instead of being trained (as
    one class; or, for ``-100``, ignored by the task head's cross-entropy). The labels are the rows' own values, read
    on the host before collation: nothing is read back from a device.

    Args:
        collate: The training collator.
        column: ``label_column``.
        learner: The objective's class name when it learns from classes, else ``None``.
        head: Classes of the task head the objective trains (0: none).
    """

    collate: Callable[[list[Any]], Any]
    column: str
    learner: str | None
    head: int

    def __call__(self, features: list[Any]) -> Any:
        labels = collate_labels(features, self.column)  # as the collators read them (None: no label column)
        if labels is not None:
            check_training_classes(
                sorted(set(labels.tolist())),
                self.column,
                self.learner,
                self.head,
                " (in a training batch: the set's labels could not be read before training)",
            )
        return self.collate(features)


def batch_class_check(trainer: Any, collate: Callable[[list[Any]], Any]) -> Callable[[list[Any]], Any]:
    """``collate`` wrapped in a :class:`BatchClassCheck` where the objective learns from classes or trains a task head
    and the training set's labels could not be read when the trainer was built (:func:`check_label_values`);
    ``collate`` itself otherwise."""
    column, objective = trainer.args.label_column, trainer.objective
    head = _task_head_width(trainer)
    if not (objective.needs_labels or head) or dataset_classes(trainer.train_dataset, column) is not None:
        return collate
    return BatchClassCheck(collate, column, type(objective).__name__ if objective.needs_labels else None, head)


def _task_head_width(trainer: Any) -> int:
    """The classes of the encoder's task head that the objective trains (its cross-entropy, in training and in
    ``eval_loss``); 0 when it trains none."""
    num_labels = int(getattr(getattr(trainer.model, "config", None), "num_labels", 0) or 0)
    return num_labels if trainer.objective.trains_task_head else 0


def _integer_classes(dataset: Any, column: str) -> list[int]:
    """A dataset's distinct integer labels (:func:`~hf_contrast.data.checks.dataset_classes`), read once."""
    return [c for c in dataset_classes(dataset, column) or () if isinstance(c, int)]


def _keep_labelled(column: str) -> str:
    return f"`dataset = dataset.filter(lambda row: row[{column!r}] >= 0)`"


def _consequence(caller: str | None) -> str:
    """What a bad evaluation set would have done: to the run (``caller=None``: the trainer's own sets), or to the call
    it was given to."""
    return "the first evaluation would stop training" if caller is None else f"`{caller}` would fail on it"


def _evaluation_classes(dataset: Any, name: str, column: str, head: int, caller: str | None = None) -> list[int]:
    """An evaluation set's distinct integer labels, checked: classes of a task head of ``head`` classes (when there
    is one), and labels on every row or on none.

    Raises:
        InputError: naming the set, ``label_column``, the labels and the fix.
    """
    classes = _integer_classes(dataset, column)
    if head:
        check_task_classes(classes, column, head, name)
    negative = sorted(c for c in classes if c < 0)
    if negative and len(negative) < len(classes):
        raise InputError(
            f"`{name}`'s `label_column`={column!r} mixes the negative labels {negative}, which mark unlabelled "
            "rows, with classes: its embedding metrics take labels on every row or on none, and "
            f"{_consequence(caller)}. Keep the labelled rows ({_keep_labelled(column)}), or drop the label column "
            f"(`dataset.remove_columns({column!r})`)."
        )
    return classes


def check_classifier_classes(
    objective: Any,
    eval_classes: dict[str, list[int]],
    column: str,
    *,
    caller: str | None = None,
) -> None:
    """The labels of every evaluation set are classes of the objective's own classifier
    (:meth:`~hf_contrast.objectives.Objective.classifier_classes`, e.g. LOCAL's pair classifier, as wide as its
    ``num_labels`` or the training set's classes): another label stopped training at the first evaluation (its
    ``eval_loss``). Called once the objective is set up, with :func:`check_label_values`' classes; and by
    :func:`check_evaluation_set` for a set given to ``caller`` (named in the error).

    Raises:
        InputError: naming the evaluation set, ``label_column``, the labels outside the classifier and the fix.
    """
    width = objective.classifier_classes()
    if width is None:
        return
    counted = getattr(objective.config, "num_labels", None) is None
    for name, classes in eval_classes.items():
        outside = sorted(c for c in classes if not 0 <= c < width)
        if outside:
            source = ", from `train_dataset`" if counted else ""
            owner = type(objective).__name__
            raise InputError(
                f"`{name}`'s `label_column`={column!r} holds the labels {outside[:8]}, which {owner}'s "
                f"classifier (`num_labels`={width}{source}: classes 0..{width - 1}) has no logit for; "
                f"{_consequence(caller)}. "
                "Add training rows of those classes (a classifier learns only the "
                "classes it trains on), or keep the evaluation rows of the training classes "
                f"(`dataset.filter(lambda row: 0 <= row[{column!r}] < {width})`)."
            )


def check_task_classes(
    classes: list[int], column: str, num_labels: int, name: str = "train_dataset", where: str = ""
) -> None:
    """The labels ``classes`` of a dataset (its distinct integer labels, :func:`~hf_contrast.data.checks.
    dataset_classes`) are classes of the encoder's task head (``0 .. num_labels - 1``): another label stopped training
    at its batch, or at the first evaluation (torch's "Target 2 is out of bounds"; on a GPU a device-side assert).

    Raises:
        InputError: naming the dataset ``name``, ``label_column``, the labels outside the head, ``num_labels`` and
            the fix.
    """
    outside = sorted(c for c in classes if not 0 <= c < num_labels)
    if outside:
        raise InputError(
            f"`{name}`'s `label_column`={column!r} holds the labels {outside[:8]}{where}, which the encoder's task "
            f"head (`num_labels`={num_labels}: classes 0..{num_labels - 1}) has no logit for. Build the encoder with "
            f"`num_labels={max(classes) + 1}` (the examples' `--task_head` counts the classes), or keep the rows of "
            f"its classes (`dataset.filter(lambda row: 0 <= row[{column!r}] < {num_labels})`)."
        )


def check_text_length(trainer: Any) -> None:
    """A text run truncates at no more tokens than the backbone's position embeddings take
    (:func:`~hf_contrast.models.inputs.position_limit`): a longer text would stop training at its batch.
    Called by ``ContrastiveTrainer.__init__`` once the views exist.

    Raises:
        InputError: naming ``max_length`` (or where its default came from), the value and the limit.
    """
    if input_modality_of(trainer.model) != "text":
        return
    limit = position_limit(getattr(trainer.model, "backbone", None))
    length = trainer.views.max_length()
    if limit is None or length <= limit:
        return
    given = trainer.args.max_length is not None
    what = (
        f"`max_length`={length}"
        if given
        else f"`max_length` is unset, so the texts are cut at {length} tokens (the encoder's `max_seq_length`, else "
        "the tokenizer's `model_max_length`, else 128), and this"
    )
    raise InputError(
        f"{what} is more than the {limit} tokens the position embeddings of `{trainer.model.config.backbone}` take: "
        f"a longer text would stop training at its batch. Set `max_length` to {limit} or less (`--max_length` in "
        "the examples)."
    )


# ==================== setup checks ====================================================================


_SCAN_DEPTHS = {"decode": "every image decoded", "header": "headers read", "size": "file sizes read"}

logger = logging.get_logger(__name__)  # follows the Trainer's log level (hf_contrast.progress)


def _eval_sets(eval_dataset: Any) -> dict[str, Any]:
    """``{name: dataset}`` of ``eval_dataset`` (one set or a dict of sets), named as the errors name them."""
    sets = eval_dataset if isinstance(eval_dataset, dict) else {"": eval_dataset}
    return {f"eval_dataset[{key!r}]" if key else "eval_dataset": dataset for key, dataset in sets.items()}


def sampling_strategy(args: Any) -> tuple[str, str]:
    """``(argument, strategy)``: the training order asked of the Trainer and the argument that asked for it
    (``train_sampling_strategy``; ``group_by_length=True`` before transformers 5.2 is ``"group_by_length"``)."""
    if getattr(args, "group_by_length", False):  # transformers < 5.2
        return "group_by_length", "group_by_length"
    return "train_sampling_strategy", getattr(args, "train_sampling_strategy", "random")


def check_sampling_strategy(trainer: Any) -> None:
    """The training order asked of the Trainer (:func:`sampling_strategy`) is one the run can follow:

    - an objective that draws its own batches (a :meth:`~hf_contrast.objectives.Objective.train_batch_sampler` of its
      own: SimO's class-major batches) follows no other order: anything but ``"random"`` was ignored;
    - grouping by length (``"group_by_length"``, ``"batch_rebalance"``) needs token lengths: image rows have none
      (a text run's are measured when the trainer is built: :func:`~hf_contrast.training.run_setup.
      measure_token_lengths`).

    Raises:
        InputError: naming the argument, its value and the fix.
    """
    name, strategy = sampling_strategy(trainer.args)
    if strategy == "random":
        return
    asked = f"`{name}`={True if name == 'group_by_length' else strategy!r}"
    objective = trainer.objective
    if type(objective).train_batch_sampler is not Objective.train_batch_sampler:
        raise InputError(
            f"{asked} would be ignored: {type(objective).__name__} draws its own training batches (its "
            "`train_batch_sampler`, e.g. SimO's class-major batches) and follows no other order. Leave "
            f"`{name}` at its default."
        )
    if strategy in ("group_by_length", "batch_rebalance") and input_modality_of(trainer.model) != "text":
        raise InputError(
            f"{asked} groups rows of similar token length; image rows have none (every view is `image_size`). Leave "
            f"`{name}` at its default."
        )


def check_objective_fits(args: Any, objective: Any) -> None:
    """The training batch holds whole chunks of the objective, and ``load_best_model_at_end`` has a metric.

    Raises:
        InputError: naming the argument and the value to use.
    """
    multiple = objective.batch_multiple
    if args.per_device_train_batch_size % multiple:
        raise InputError(
            f"`per_device_train_batch_size`={args.per_device_train_batch_size} must be a multiple of "
            f"{multiple} for {type(objective).__name__} (its chunks must be whole, e.g. `n_splits`={multiple}); "
            f"use {max(multiple, args.per_device_train_batch_size // multiple * multiple)}."
        )
    if (
        args.load_best_model_at_end
        and not objective.has_eval_loss
        and args.metric_for_best_model in (None, "loss", "eval_loss")
    ):
        raise InputError(
            f"`load_best_model_at_end=True` chooses by `eval_loss`, which {type(objective).__name__} does not "
            "report (its batches are not evaluation batches); set `metric_for_best_model`, e.g. "
            "'eval_knn_loo_accuracy'."
        )


def check_streamed_batches(trainer: Any) -> None:
    """A streaming training set (a torch ``IterableDataset``) with an objective that draws its training batches with a
    batch sampler (:meth:`~hf_contrast.objectives.Objective.train_batch_sampler`, e.g. SimO's class-major batches): a
    stream's rows come in its own order and cannot be drawn by index, and the Trainer's loader left the sampler out,
    so such an objective trained on batches it was not made for, silently. Called once the objective is set up.

    Raises:
        InputError: naming the objective and the fix (the objective's own error, where it refuses a stream itself).
    """
    dataset = trainer.train_dataset
    if not isinstance(dataset, TorchIterableDataset):
        return
    if trainer.objective.train_batch_sampler(dataset, trainer.views) is not None:
        raise InputError(
            f"{type(trainer.objective).__name__} draws its training batches with a batch sampler (its "
            "`train_batch_sampler`), which a streaming training set cannot serve: its rows come in its own order. "
            "Load the training set as a `datasets.Dataset` (without `streaming=True`)."
        )


def check_evaluation_fits(args: Any, objective: Any, eval_dataset: Any) -> None:
    """When the run evaluates (an ``eval_dataset`` or an ``eval_strategy``): evaluation batches and sets
    the objective can score, so ``eval_loss`` is always reported (or the error says what to set)."""
    if eval_dataset is None and args.eval_strategy == "no":
        return
    objective.check_eval_batch_size(args.per_device_eval_batch_size)
    if not objective.has_eval_loss:
        return
    for name, dataset in _eval_sets(eval_dataset).items():
        if dataset is not None:
            check_dataset(
                dataset,
                name=name,
                min_rows=objective.min_eval_batch_size,
                why=f"{type(objective).__name__}'s `eval_loss` compares the samples of an evaluation batch",
            )


def check_datasets(trainer: Any) -> None:
    """Fail before training, with the fix, on an empty or too small dataset or a missing column."""
    objective, args = trainer.objective, trainer.args
    if trainer.train_dataset is not None:
        full = objective.needs_full_batches
        check_dataset(
            trainer.train_dataset,
            name="train_dataset",
            min_rows=args.per_device_train_batch_size if full else 1,
            columns=objective.required_columns(trainer.views),
            why=f"{type(objective).__name__} trains on whole batches of {args.per_device_train_batch_size}"
            if full
            else None,
        )
        pair = CANONICAL_COLUMNS["text_pair_column"]
        if (
            input_modality_of(trainer.model) == "text"
            and args.text_pair_column is None
            and pair in (dataset_columns(trainer.train_dataset) or ())
        ):
            warnings.warn(
                f"train_dataset has a {pair!r} column (what `load_text_dataset(text_pair_column=...)` names the "
                f"paired sentences) but `text_pair_column` is None: training on {args.text_column!r} alone (SimCSE "
                f"views). Set `text_pair_column={pair!r}` in the training arguments to train on the pairs.",
                stacklevel=4,
            )
    for name, dataset in _eval_sets(trainer.eval_dataset).items():
        if dataset is not None:
            check_dataset(dataset, name=name, min_rows=1)


#: What ``Trainer.evaluate`` adds to every evaluation's metrics, and ``ContrastiveTrainer.evaluation_loop`` when rows
#: were left out (``on_bad_image="skip"``).
EVALUATION_RUN_METRICS = (
    "runtime",
    "samples_per_second",
    "steps_per_second",
    "tokens_per_second",
    "model_preparation_time",
    "jit_compilation_time",
    "skipped_images",
    "dropped_rows",
)


def visibly_unlabelled(dataset: Any, column: str) -> bool:
    """Whether an evaluation set has no labels its metrics could score, as far as it can be read cheaply: no
    ``column`` (nor ``labels``) among its columns, or only negative labels (unlabelled rows)."""
    columns = dataset_columns(dataset)
    if columns is not None and column not in columns and "labels" not in columns:
        return True
    classes = [c for c in dataset_classes(dataset, column) or () if isinstance(c, int)]
    return bool(classes) and all(c < 0 for c in classes)


def check_best_metric(trainer: Any) -> None:
    """``metric_for_best_model`` names a metric the run's evaluations can report, said before training:
    ``Trainer`` looks it up only after the first evaluation (a ``KeyError`` that ends the run there, before that
    step's checkpoint). Checked when every source of metrics says its names (the trainer's default
    ``compute_metrics`` and the package's evaluators do; a ``compute_metrics`` or evaluator of the user's
    that does not have ``possible_metrics`` leaves the name unchecked) and the run evaluates. ``compute_metrics``
    is asked for the names of each evaluation set, labelled or not (:func:`visibly_unlabelled`): an unlabelled set
    reports no kNN, probe or class metric.

    Raises:
        InputError: naming ``metric_for_best_model``, its value, the closest name and every name the run reports.
    """
    args = trainer.args
    if args.metric_for_best_model is None or args.eval_strategy == "no":
        return
    metric_names = getattr(trainer.compute_metrics, "possible_metrics", None)
    evaluator_names: tuple[str, ...] | None = ()
    if trainer.evaluator is not None:
        evaluator_names = (
            trainer.evaluator.possible_metrics() if hasattr(trainer.evaluator, "possible_metrics") else None
        )
    if metric_names is None or evaluator_names is None:
        return
    loss = ["loss"] if trainer.objective.has_eval_loss else []
    sets = trainer.eval_dataset if isinstance(trainer.eval_dataset, dict) else {None: trainer.eval_dataset}
    reported = []
    for set_name, dataset in sets.items():  # an unlabelled set reports no kNN or probe
        labelled = dataset is None or not visibly_unlabelled(dataset, args.label_column)
        names = [*loss, *metric_names(labels=labelled), *evaluator_names, *EVALUATION_RUN_METRICS]
        prefix = f"eval_{set_name}" if set_name is not None else "eval"
        reported += [f"{prefix}_{name}" for name in names]
    wanted = args.metric_for_best_model
    key = wanted if wanted.startswith("eval_") else f"eval_{wanted}"  # what the Trainer looks up
    if key in reported:
        return
    close = difflib.get_close_matches(key, reported, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    if wanted in ("loss", "eval_loss") and not trainer.objective.has_eval_loss:  # often transformers' default
        hint = (
            f" {type(trainer.objective).__name__} has no `eval_loss`; transformers sets 'loss' when "
            "`load_best_model_at_end=True` or `lr_scheduler_type='reduce_lr_on_plateau'` comes without a "
            "`metric_for_best_model`: set one."
        )
    raise InputError(
        f"`metric_for_best_model`={wanted!r}: the evaluations of this run report no {key!r}, so the first one "
        f"would end the run (transformers looks the name up only then).{hint} Its evaluations can report: "
        f"{', '.join(name for name in reported if not name.endswith(EVALUATION_RUN_METRICS))}."
    )


def check_image_files(args: Any, train_dataset: Any, eval_dataset: Any, whole_rows: Any = None) -> None:
    """Scan the training and (when the run evaluates) evaluation sets' image files before training
    (:func:`hf_contrast.views.image_scan.scan_images`: full decode up to 10,000 rows, headers up to 200,000, file
    sizes above).

    Args:
        args: The training arguments (``on_bad_image``, ``per_device_train_batch_size``, the evaluation schedule).
        train_dataset: The training set (``None``: not scanned).
        eval_dataset: The evaluation set(s), scanned when the run evaluates.
        whole_rows: The training collator's rule for a batch that lost rows
            (:class:`~hf_contrast.views.WholeRows`: CARE's whole chunks, SimO's class groups), if any.

    Raises:
        BadImageError: with ``on_bad_image="raise"``, naming the bad files and the fix; with ``"skip"`` they
            are logged (the collators leave them out when their batch is drawn, and count them).
        InputError: with ``"skip"``, when the training set holds bad images and a training batch that loses one
            cannot keep its method's structure (``whole_rows``): training would stop at the first such batch.
    """
    sets = {"train_dataset": train_dataset}
    if eval_dataset is not None and (args.eval_strategy != "no" or args.do_eval):
        sets.update(_eval_sets(eval_dataset))
    found = []
    for name, dataset in sets.items():
        if dataset is None or not image_columns(dataset):
            continue
        start = time.perf_counter()
        found += [(name, bad) for bad in scan_images(dataset)]
        logger.info(  # said: on a large folder this takes a while (about 1 ms per decoded 28-px PNG)
            "Checked the image files of %s before training (%d rows, %s) in %.1f s.",
            name, len(dataset), _SCAN_DEPTHS[scan_depth(len(dataset))], time.perf_counter() - start,
        )  # fmt: skip
    if not found:
        return
    listed = "\n".join(f"  {name}: {bad}" for name, bad in found[:10])
    more = f"\n  … and {len(found) - 10} more" if len(found) > 10 else ""
    if args.on_bad_image == "raise":
        raise BadImageError(
            f"{len(found)} unreadable image(s) found before training:\n{listed}{more}\nFix or remove them, or pass "
            "`on_bad_image='skip'` (`--on_bad_image skip`) to leave them out of their batches (counted as "
            "`train_skipped_images` / `eval_skipped_images`)."
        )
    in_training = sum(name == "train_dataset" for name, _ in found)
    batch_size = args.per_device_train_batch_size
    reason = whole_rows.loss_breaks(batch_size) if in_training and whole_rows is not None else None
    if reason:
        raise InputError(
            f"{in_training} unreadable training image(s) found before training:\n{listed}{more}\n"
            f"on_bad_image='skip' leaves each out of its batch, but {reason}: training would stop at the first batch "
            f"that draws one. Fix or remove the images, or use a larger `per_device_train_batch_size` "
            f"(now {batch_size})."
        )
    logger.warning(
        "%d unreadable image(s) found before training; on_bad_image='skip' leaves them out of their batches "
        "(counted as `*_skipped_images`):\n%s%s", len(found), listed, more,
    )  # fmt: skip


# ==================== engine checks ===================================================================


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "false").strip().lower() in ("1", "true", "yes")


def requested_engine(args: Any) -> str | None:
    """``"FSDP"`` / ``"DeepSpeed"`` when the launch (accelerate config, ``fsdp`` or ``deepspeed`` argument) asks for
    one, else ``None``."""
    if _env_flag("ACCELERATE_USE_FSDP") or getattr(args, "fsdp", None):
        return "FSDP"
    if _env_flag("ACCELERATE_USE_DEEPSPEED") or getattr(args, "deepspeed", None):
        return "DeepSpeed"
    return None


def check_distributed_engine(args: Any, accelerator: Any, is_fsdp_enabled: bool, is_deepspeed_enabled: bool) -> None:
    """Refuse a multi-process launch that started no process group; log a requested engine that was not started.

    Args:
        args: The ``TrainingArguments``.
        accelerator: The Trainer's ``accelerate.Accelerator``.
        is_fsdp_enabled: ``Trainer.is_fsdp_enabled``.
        is_deepspeed_enabled: ``Trainer.is_deepspeed_enabled``.

    Raises:
        InputError: If the launcher started several processes (``WORLD_SIZE`` > 1) and Accelerate runs each alone.
    """
    launched = int(os.environ.get("WORLD_SIZE", "1") or 1)
    if launched > 1 and accelerator.num_processes == 1:
        raise InputError(
            f"The launcher started {launched} processes (WORLD_SIZE={launched}) but Accelerate started no process "
            f"group with `use_cpu={args.use_cpu}` on device {args.device}: each process would train alone on the "
            "whole data and write to the same output_dir. On a machine without GPUs pass `use_cpu=True` "
            "(`--use_cpu`); the processes then run DDP over gloo (Accelerate has no FSDP or DeepSpeed for CPU "
            "processes)."
        )
    engine = requested_engine(args)
    started = (engine == "FSDP" and is_fsdp_enabled) or (engine == "DeepSpeed" and is_deepspeed_enabled)
    # said once, by the main process (every process would log the same line)
    if engine is not None and not started and accelerator.num_processes > 1 and accelerator.is_main_process:
        logger.warning(
            "%s was requested, but Accelerate runs %s on %s processes: it has no %s for CPU processes, so every "
            "process holds the whole model (DDP over gloo). The results equal the sharded run's; only the memory does "
            "not shrink.",
            engine,
            accelerator.distributed_type,
            args.device.type,
            engine,
        )
