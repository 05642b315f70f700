"""``TaskHeadEvaluator``: accuracy and macro-F1 of the encoder's own classifier (its ``num_labels`` task head)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from torch import Tensor, nn

from hf_contrast.errors import InputError

from ..encoding import check_encode_options, encode_dataset
from ..metrics.probes import macro_f1
from .evaluator import Evaluator
from .labelled import check_labelled, dataset_labels

__all__ = ["TaskHeadEvaluator"]


class TaskHeadEvaluator(Evaluator):
    """Score the classifier an encoder was trained with on a labelled dataset: the arg-max of ``outputs.logits``
    (the linear task head of ``ContrastiveEncoder(num_labels=C)``, trained by e.g. align/uniform's
    ``task_loss_weight`` term: EquiBERT) against the labels.

    Keys: ``<name>_accuracy`` (the primary metric) and ``<name>_macro_f1`` (scikit-learn's
    ``f1_score(average="macro")`` over the classes present). Unlike :class:`ProbeEvaluator`, nothing is
    fitted: this is the model's own prediction, so ``metric_for_best_model="eval_task_head_accuracy"`` keeps
    the checkpoint whose head classifies best.

    Args:
        dataset: Labelled rows (a ``datasets.Dataset``, a torch dataset or a list), read in order; labels are
            class indices of the head (``0 <= label < num_labels``).
        name: Metric-key prefix.
        collate_fn: As in :func:`encode_dataset`.
        transform: As in :func:`encode_dataset`.
        input_column: As in :func:`encode_dataset`.
        label_column: As in :func:`encode_dataset`.
        batch_size: As in :func:`encode_dataset`.
        max_length: As in :func:`encode_dataset`.
        progress: As in :func:`encode_dataset`.
        on_bad_image: As in :func:`encode_dataset`.

    Raises:
        ValueError: when built, on a dataset visibly without ``label_column`` or a bad encoding option; when
            called, on a model without a task head or a label the head has no class for.

    Example:
        >>> head = TaskHeadEvaluator(data["test"])  # doctest: +SKIP
        >>> head(encoder)  # doctest: +SKIP
        {'task_head_accuracy': 0.91, 'task_head_macro_f1': 0.90}
    """

    def __init__(
        self,
        dataset: Any,
        *,
        name: str = "task_head",
        collate_fn: Callable[[list[Any]], Mapping[str, Any]] | None = None,
        transform: Callable[[Any], Tensor] | None = None,
        input_column: str | None = None,
        label_column: str | None = "label",
        batch_size: int = 64,
        max_length: int | None = None,
        progress: bool = True,
        on_bad_image: str = "raise",
    ) -> None:
        super().__init__(name, "accuracy", greater_is_better=True)
        self.metric_names = ("accuracy", "macro_f1")
        if label_column is None:
            raise InputError("`label_column` must name the label column: the head's predictions are scored on labels.")
        check_labelled("dataset", dataset, label_column)
        self.dataset = dataset
        self.encode_kwargs: dict[str, Any] = check_encode_options(
            collate_fn=collate_fn,
            transform=transform,
            input_column=input_column,
            label_column=label_column,
            batch_size=batch_size,
            output="logits",
            max_length=max_length,
            progress=progress,
            on_bad_image=on_bad_image,
        )
        dataset_labels(dataset, label_column, "dataset")  # class names rather than indices: said before training

    def compute(self, model: nn.Module) -> dict[str, float]:
        logits, labels = encode_dataset(model, self.dataset, **self.encode_kwargs)
        if labels is None:
            raise InputError(
                f"`dataset` has no labels in `label_column`={self.encode_kwargs['label_column']!r}: the head's "
                "predictions are scored on labels (pass `label_column=` the column that holds them)."
            )
        num_classes = logits.shape[1]
        if labels.numel() and not 0 <= int(labels.min()) <= int(labels.max()) < num_classes:
            raise InputError(
                f"`dataset` holds labels from {int(labels.min())} to {int(labels.max())} but the model's task head "
                f"has {num_classes} classes (`num_labels`={num_classes}): build the encoder with one class per label."
            )
        predicted = logits.argmax(dim=1)
        return {"accuracy": float((predicted == labels).float().mean()), "macro_f1": macro_f1(predicted, labels)}
