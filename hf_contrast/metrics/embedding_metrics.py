"""``EmbeddingMetrics``: the embedding metrics of an evaluation set, as a Trainer ``compute_metrics``.

One definition per metric (``docs/methods.md`` §6–7, the functions of :mod:`hf_contrast.metrics`),
one name per metric, used by ``trainer.evaluate`` (as ``eval_<name>``), the evaluators, the
examples and the model card.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor
from tqdm.auto import tqdm
from transformers.utils import logging

from hf_contrast.errors import InputError

from ..data.sampling import balanced_split, sample_rows
from ..progress import progress_enabled
from ..tensor_checks import MAX_SKLEARN_SEED, check_bool, check_int, check_temperature
from .collapse import warn_if_collapsed
from .failures import metrics_or_nan
from .geometry import alignment, class_orthogonality, effective_rank, mean_cosine, uniformity
from .inputs import as_embeddings, as_labels, as_pair
from .probes import knn_accuracy, linear_probe_accuracy

__all__ = ["EmbeddingMetrics"]

logger = logging.get_logger(__name__)  # follows the Trainer's log level (hf_contrast.progress)


def _split_predictions(predictions: object) -> tuple[object, object | None, object | None]:
    """``(embeddings, view1, view2)`` from an ``(N, D)`` array or an ``(embeddings[, view1, view2])`` tuple."""
    if isinstance(predictions, (tuple, list)):
        if len(predictions) == 1:
            return predictions[0], None, None
        if len(predictions) == 3:
            return predictions[0], predictions[1], predictions[2]
        raise InputError(
            "`predictions` must be an (N, D) array of embeddings or a tuple (embeddings, view1, view2) of "
            f"three (N, D) arrays, got a {type(predictions).__name__} of {len(predictions)} items."
        )
    return predictions, None, None


def _value_or_nan(phase: Callable[[], float | None], name: str, source: object) -> float | None:
    """``phase()``, or NaN with a warning (once per metric) when it raises: one failing metric never ends a run."""
    return metrics_or_nan(lambda: {name: phase()}, [name], source)[name]


class EmbeddingMetrics:
    """Embedding metrics of an evaluation set: a ``compute_metrics`` for ``transformers.Trainer``.

    ``EmbeddingMetrics(...)(eval_pred)`` reads ``eval_pred.predictions`` and ``eval_pred.label_ids``
    (a ``transformers.EvalPrediction``, or any ``(predictions, label_ids)`` pair) and returns plain
    names (the Trainer adds the ``eval_`` prefix):

    - ``alignment`` — :func:`~hf_contrast.metrics.alignment` (``α = 2``, normalised) of two random
      views, only when ``predictions`` is a tuple ``(embeddings, view1, view2)``;
    - ``uniformity`` — :func:`~hf_contrast.metrics.uniformity` (``t = 2``, normalised) of the embeddings;
    - ``mean_cosine`` — :func:`~hf_contrast.metrics.mean_cosine`, mean pairwise cosine;
    - ``effective_rank`` — :func:`~hf_contrast.metrics.effective_rank`;
    - with labels: ``knn_loo_accuracy`` — leave-one-out :func:`~hf_contrast.metrics.knn_accuracy`
      on the evaluation set itself (``knn_k``, ``knn_temperature``); ``linear_probe_holdout_accuracy``
      — :func:`~hf_contrast.metrics.linear_probe_accuracy` (scikit-learn logistic regression)
      trained on a seeded class-balanced ``1 − probe_test_fraction`` of the evaluation rows and
      scored on the held-out rest (``probe=True``); ``class_orthogonality`` —
      :func:`~hf_contrast.metrics.class_orthogonality` (mean ``|cos|`` of distinct class means).

    The two probe scores are estimated *within* the evaluation set, hence their ``loo`` /
    ``holdout`` names: ``knn_accuracy`` and ``linear_probe_accuracy`` always mean a probe fitted
    on a training split and scored on the evaluation split
    (:class:`~hf_contrast.evaluation.ProbeEvaluator`, :func:`~hf_contrast.metrics.probe_scores`).

    Every metric is computed on the same rows: all ``N``, or — when ``N > max_samples`` — a
    seeded class-balanced subset of ``max_samples`` rows (random without labels), never "the
    first rows", so class-sorted test splits work. When the embeddings have collapsed (mean
    pairwise cosine > 0.95 or effective rank < 2) a warning is logged and a
    :class:`~hf_contrast.evaluation.RepresentationCollapseWarning` raised, naming likely causes.

    Args:
        knn_k: Neighbours of the leave-one-out kNN classifier (``min(knn_k, n − 1)`` is used, with a warning,
            on an evaluation set of ``n <= knn_k`` rows).
        knn_temperature: Vote temperature of the kNN classifier.
        probe: Fit the held-out linear probe (the slowest metric; ``False`` leaves it out).
        probe_test_fraction: Fraction of each class of the evaluation set held out to score the
            probe, in ``(0, 1)``.
        max_samples: Largest number of rows used (pairwise metrics cost ``O(n²)`` memory);
            ``None`` uses all rows.
        seed: Seed of the subsampling, the probe split and the probe, an integer in ``[0, 2**32 - 1]`` (scikit-learn's
            ``random_state``).
        warn_collapse: Warn when the representation has collapsed.
        progress: Show a progress bar over the metric phases (while transformers' progress-bar switch is on,
            see :mod:`hf_contrast.progress`).

    Raises:
        ValueError: on bad arguments (here) or bad predictions/labels (at call).

    Example:
        >>> metrics = EmbeddingMetrics(knn_k=20, probe=True, max_samples=2000, seed=0)  # doctest: +SKIP
        >>> trainer = ContrastiveTrainer(..., compute_metrics=metrics)  # doctest: +SKIP
        >>> metrics((embeddings, labels))  # doctest: +SKIP
        {'uniformity': -3.2, 'mean_cosine': 0.04, 'effective_rank': 41.3, 'knn_loo_accuracy': 0.91, ...}
    """

    def __init__(
        self,
        knn_k: int = 20,
        knn_temperature: float = 0.07,
        probe: bool = True,
        probe_test_fraction: float = 0.25,
        max_samples: int | None = 4096,
        seed: int = 0,
        warn_collapse: bool = True,
        progress: bool = True,
    ) -> None:
        self.knn_k = check_int("knn_k", knn_k, 1)
        self.knn_temperature = check_temperature("knn_temperature", knn_temperature)
        self.probe = check_bool("probe", probe)
        if not isinstance(probe_test_fraction, (int, float)) or not 0 < probe_test_fraction < 1:
            raise InputError(f"`probe_test_fraction` must be a number in (0, 1), got {probe_test_fraction!r}.")
        self.probe_test_fraction = float(probe_test_fraction)
        self.max_samples = None if max_samples is None else check_int("max_samples", max_samples, 2)
        self.seed = check_int("seed", seed, 0, MAX_SKLEARN_SEED)  # the linear probe's `random_state`
        self.warn_collapse = check_bool("warn_collapse", warn_collapse)
        self.progress = check_bool("progress", progress)

    def possible_metrics(self, views: bool = True, labels: bool = True) -> tuple[str, ...]:
        """The names a call returns, in order: ``alignment`` with ``views``, the labelled data's three (two with
        ``probe=False``) with ``labels``. A metric that cannot apply (``class_orthogonality`` of one class) is
        left out of the result, with a warning."""
        labelled = (
            "knn_loo_accuracy",
            *(("linear_probe_holdout_accuracy",) if self.probe else ()),
            "class_orthogonality",
        )
        return (
            *(("alignment",) if views else ()),
            "uniformity",
            "mean_cosine",
            "effective_rank",
            *(labelled if labels else ()),
        )

    def __repr__(self) -> str:
        return (
            f"EmbeddingMetrics(knn_k={self.knn_k}, knn_temperature={self.knn_temperature}, probe={self.probe}, "
            f"probe_test_fraction={self.probe_test_fraction}, max_samples={self.max_samples}, seed={self.seed})"
        )

    def __call__(self, eval_pred: Any) -> dict[str, float]:
        """Metrics of ``eval_pred`` (``EvalPrediction`` or ``(predictions, label_ids)``), see the class docstring."""
        if hasattr(eval_pred, "predictions"):
            predictions, label_ids = eval_pred.predictions, getattr(eval_pred, "label_ids", None)
        elif isinstance(eval_pred, (tuple, list)) and len(eval_pred) == 2:
            predictions, label_ids = eval_pred
        else:
            raise InputError(
                "`eval_pred` must be a transformers.EvalPrediction or a (predictions, label_ids) pair, "
                f"got {type(eval_pred).__name__}."
            )
        embeddings, view1, view2 = _split_predictions(predictions)
        views = None if view1 is None and view2 is None else (view1, view2)
        return self._compute(embeddings, label_ids, views, ("predictions", "label_ids"))

    def compute(
        self, embeddings: object, labels: object | None = None, views: Sequence[object] | None = None
    ) -> dict[str, float]:
        """The metrics of ``embeddings`` (and ``labels``, ``views``) directly.

        Args:
            embeddings: Embeddings of a deterministic view. Shape: ``(N, D)``, ``N >= 2``.
            labels: Integer classes, or ``None``. Shape: ``(N,)``. All-negative labels (the
                trainer's ``-1`` placeholder for unlabelled data) count as ``None``.
            views: ``(view1, view2)``, embeddings of two random views of the same rows, or ``None``.
                Shape: ``(N, D')`` each.

        Returns:
            ``{name: value}`` (plain names, see the class docstring).
        """
        return self._compute(embeddings, labels, views, ("embeddings", "labels"))

    def _compute(
        self, embeddings: object, labels: object | None, views: Sequence[object] | None, names: tuple[str, str]
    ) -> dict[str, float]:
        """:meth:`compute`, with errors naming the caller's arguments (``predictions`` / ``label_ids`` from
        ``__call__``)."""
        z = as_embeddings(names[0], embeddings, min_rows=2)
        y = None if labels is None else as_labels(names[1], labels, z.shape[0], z.device)
        if y is not None and bool((y < 0).any()):
            if not bool((y < 0).all()):
                raise InputError(
                    f"`{names[1]}` mixes negative ({int((y < 0).sum())} rows) and class labels: negative labels "
                    "(-1, -100) mean 'unlabelled' and must cover every row, or none."
                )
            y = None  # every row unlabelled (the trainer's -1 placeholder)
        pair = None
        if views is not None:
            if len(views) != 2 or views[0] is None or views[1] is None:
                raise InputError("`views` must be a pair (view1, view2) of (N, D) embeddings.")
            pair = as_pair("view1", views[0], "view2", views[1])
            if pair[0].shape[0] != z.shape[0]:
                raise InputError(
                    f"`view1`/`view2` must have one row per embedding ({z.shape[0]}), got {tuple(pair[0].shape)}."
                )
        rows = self._rows(z.shape[0], y)
        if rows is not None:
            z, y = z[rows], None if y is None else y[rows]
            pair = None if pair is None else (pair[0][rows], pair[1][rows])

        phase: dict[str, Callable[[], float | None]] = {
            "alignment": lambda: alignment(*pair),
            "uniformity": lambda: uniformity(z),
            "mean_cosine": lambda: mean_cosine(z),
            "effective_rank": lambda: effective_rank(z),
            "knn_loo_accuracy": lambda: self._knn(z, y),
            "linear_probe_holdout_accuracy": lambda: self._probe(z, y),
            "class_orthogonality": lambda: self._class_orthogonality(z, y),
        }
        phases = [(name, phase[name]) for name in self.possible_metrics(pair is not None, y is not None)]
        metrics: dict[str, float] = {}
        with tqdm(
            total=len(phases), desc="Embedding metrics", disable=not progress_enabled(self.progress), leave=False
        ) as bar:
            for name, phase in phases:
                bar.set_postfix_str(name)
                value = _value_or_nan(phase, name, self)
                if value is not None:
                    metrics[name] = value
                bar.update()
        if self.warn_collapse and math.isfinite(metrics["mean_cosine"]) and math.isfinite(metrics["effective_rank"]):
            warn_if_collapsed(metrics["mean_cosine"], metrics["effective_rank"], z.shape[1])
        return metrics

    def _rows(self, n: int, labels: Tensor | None) -> Tensor | None:
        """Rows to keep: ``None`` (all) or a seeded (class-balanced) subset of ``max_samples``."""
        if self.max_samples is None or n <= self.max_samples:
            return None
        return sample_rows(n, self.max_samples, self.seed, None if labels is None else labels.cpu())

    def _knn(self, z: Tensor, y: Tensor) -> float:
        k = self.knn_k
        if k > z.shape[0] - 1:
            k = z.shape[0] - 1
            message = f"EmbeddingMetrics: knn_k={self.knn_k} exceeds the {z.shape[0] - 1} other rows; using k={k}."
            logger.warning(message)
            warnings.warn(message, stacklevel=4)
        return knn_accuracy(z, y, k=k, temperature=self.knn_temperature)

    def _probe(self, z: Tensor, y: Tensor) -> float | None:
        train, test = balanced_split(y.cpu(), self.probe_test_fraction, self.seed)
        train_classes = torch.unique(y[train.to(y.device)]).numel()
        if test.numel() == 0 or train_classes < 2:
            message = (
                "EmbeddingMetrics: linear_probe_holdout_accuracy left out: the evaluation set needs at least two "
                f"classes with two rows each (got {torch.unique(y).numel()} class(es), {y.numel()} rows)."
            )
            logger.warning(message)
            warnings.warn(message, stacklevel=4)
            return None
        train, test = train.to(z.device), test.to(z.device)
        return linear_probe_accuracy(z[train], y[train], z[test], y[test], seed=self.seed)

    @staticmethod
    def _class_orthogonality(z: Tensor, y: Tensor) -> float | None:
        if torch.unique(y).numel() < 2:
            message = "EmbeddingMetrics: class_orthogonality left out: the labels hold a single class."
            logger.warning(message)
            warnings.warn(message, stacklevel=4)
            return None
        return class_orthogonality(z, y)
