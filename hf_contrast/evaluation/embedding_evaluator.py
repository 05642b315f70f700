"""``EmbeddingEvaluator``: :class:`EmbeddingMetrics` of a labelled dataset encoded by the model."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from torch import Tensor, nn

from hf_contrast.errors import InputError

from ..encoding import check_encode_options, encode_dataset
from ..metrics.embedding_metrics import EmbeddingMetrics
from .evaluator import Evaluator
from .labelled import dataset_labels

__all__ = ["EmbeddingEvaluator"]


class EmbeddingEvaluator(Evaluator):
    """Encode ``dataset`` with :func:`encode_dataset` and return its :class:`EmbeddingMetrics`.

    Keys: ``<name>_uniformity``, ``<name>_mean_cosine``, ``<name>_effective_rank`` and, with
    labels, ``<name>_knn_loo_accuracy`` (the primary metric), ``<name>_linear_probe_holdout_accuracy``,
    ``<name>_class_orthogonality`` (definitions: :class:`EmbeddingMetrics`; all within ``dataset``.
    A probe fitted on one split and scored on another is :class:`ProbeEvaluator`).

    Args:
        dataset: Labelled rows (a ``datasets.Dataset``, a torch dataset or a list), read in order.
        metrics: The :class:`EmbeddingMetrics` to compute (default: ``EmbeddingMetrics()``).
        name: Metric-key prefix.
        primary: Unprefixed key of the primary metric (``"knn_loo_accuracy"``; ``"uniformity"`` is
            a lower-is-better choice for unlabelled data, set ``greater_is_better=False``).
        greater_is_better: Whether a larger primary metric is better.
        collate_fn: As in :func:`encode_dataset`.
        transform: As in :func:`encode_dataset`.
        input_column: As in :func:`encode_dataset`.
        label_column: As in :func:`encode_dataset`.
        batch_size: As in :func:`encode_dataset`.
        output: As in :func:`encode_dataset`.
        max_length: As in :func:`encode_dataset`.
        progress: As in :func:`encode_dataset`.

    Example:
        >>> evaluator = EmbeddingEvaluator(data["test"], metrics=EmbeddingMetrics(knn_k=20))  # doctest: +SKIP
        >>> evaluator(encoder)  # doctest: +SKIP
        {'embedding_uniformity': -3.1, ..., 'embedding_knn_loo_accuracy': 0.93, ...}
    """

    def __init__(
        self,
        dataset: Any,
        *,
        metrics: EmbeddingMetrics | None = None,
        name: str = "embedding",
        primary: str = "knn_loo_accuracy",
        greater_is_better: bool = True,
        collate_fn: Callable[[list[Any]], Mapping[str, Any]] | None = None,
        transform: Callable[[Any], Tensor] | None = None,
        input_column: str | None = None,
        label_column: str | None = "label",
        batch_size: int = 64,
        output: str = "embeddings",
        max_length: int | None = None,
        progress: bool = True,
    ) -> None:
        super().__init__(name, primary, greater_is_better)
        if metrics is not None and not isinstance(metrics, EmbeddingMetrics):
            raise InputError(f"`metrics` must be an EmbeddingMetrics instance, got {type(metrics).__name__}.")
        self.dataset = dataset
        self.metrics = metrics if metrics is not None else EmbeddingMetrics(progress=progress)
        self.encode_kwargs: dict[str, Any] = check_encode_options(
            collate_fn=collate_fn,
            transform=transform,
            input_column=input_column,
            label_column=label_column,
            batch_size=batch_size,
            output=output,
            max_length=max_length,
            progress=progress,
        )
        if label_column is not None:
            dataset_labels(dataset, label_column, "dataset")  # class names rather than indices: said before training

    def possible_metrics(self) -> tuple[str, ...]:
        """:meth:`EmbeddingMetrics.possible_metrics` of one encoding (no ``alignment``), prefixed."""
        labels = self.encode_kwargs["label_column"] is not None
        return tuple(self.prefixed(name) for name in self.metrics.possible_metrics(views=False, labels=labels))

    def compute(self, model: nn.Module) -> dict[str, float]:
        embeddings, labels = encode_dataset(model, self.dataset, **self.encode_kwargs)
        return self.metrics.compute(embeddings, labels)
