"""``ProbeEvaluator``: linear probe and kNN of frozen features, fitted on one split and scored on another."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

from torch import Tensor, nn

from hf_contrast.errors import InputError

from ..encoding import check_encode_options, encode_dataset
from ..metrics.probes import (
    PROBE_METRICS,
    UnseenClassWarning,
    probe_scores,
    unseen_classes,
    unseen_message,
)
from ..tensor_checks import MAX_SKLEARN_SEED, check_int, check_positive
from .evaluator import Evaluator
from .labelled import check_labelled, dataset_labels

__all__ = ["ProbeEvaluator"]


def _class_names(dataset: Any, label_column: str) -> list[str] | None:
    feature = (getattr(dataset, "features", None) or {}).get(label_column) if hasattr(dataset, "features") else None
    names = getattr(feature, "names", None)
    return list(names) if isinstance(names, list) else None


class ProbeEvaluator(Evaluator):
    """Encode a *fit* split and a *score* split with the model; fit a linear probe and a kNN classifier
    on the first, score them on the second.

    The frozen-feature evaluation of a representation (``docs/methods.md`` §7): both splits go through
    :func:`encode_dataset` (eval mode, no gradient, the encoder's own deterministic preprocessing), then
    :func:`~hf_contrast.metrics.probe_scores` fits scikit-learn's standardised
    ``LogisticRegression`` (``C``, ``max_iter``, ``random_state=seed``) and the weighted cosine kNN
    (``knn_k``, ``knn_temperature``) on the fit split and reports, on the score split:

    - ``linear_probe_accuracy``, ``linear_probe_macro_f1``,
    - ``knn_accuracy`` (the primary metric), ``knn_macro_f1``

    (each prefixed with ``<name>_`` when ``name`` is not empty). These names always mean "fitted on
    one split, scored on another"; the scores :class:`EmbeddingMetrics` estimates within the
    evaluation set are ``knn_loo_accuracy`` and ``linear_probe_holdout_accuracy``. Every split is used
    whole, in order; for a quicker evaluation pass a seeded class-balanced part
    (``dataset.select(balanced_subset(labels, n, seed))``). The result is deterministic for a given
    model and ``seed``.

    As the trainer's ``evaluator=`` it runs at every evaluation and its keys are reported as
    ``eval_linear_probe_accuracy``, …; called at the end of a run it gives the same names in
    ``results.json``. Under several processes every process encodes both splits whole and computes
    the same numbers (nothing is gathered).

    Args:
        fit_dataset: Labelled rows the probes are fitted on (the training split).
        score_dataset: Labelled rows they are scored on (the test split).
        name: Metric-key prefix (default ``""``: the plain names above).
        knn_k: Neighbours of the kNN classifier (``min(knn_k, N_fit)``, with a warning, on a smaller fit split).
        knn_temperature: Vote temperature of the kNN classifier.
        C: Inverse regularisation strength of the logistic regression.
        max_iter: Maximum L-BFGS iterations of the logistic regression.
        standardize: Standardise the features with the fit split's mean and standard deviation first.
        seed: ``random_state`` of the logistic regression, an integer in ``[0, 2**32 - 1]``.
        primary: Unprefixed key of the primary metric (one of the four above).
        collate_fn: As in :func:`encode_dataset`.
        transform: As in :func:`encode_dataset`.
        input_column: As in :func:`encode_dataset`.
        label_column: As in :func:`encode_dataset`.
        batch_size: As in :func:`encode_dataset`.
        output: As in :func:`encode_dataset`.
        max_length: As in :func:`encode_dataset`.
        progress: As in :func:`encode_dataset`.
        on_bad_image: As in :func:`encode_dataset`.

    Warns:
        UnseenClassWarning: once (at construction when the labels can be read there, else at the first
            call) when ``score_dataset`` holds classes absent from ``fit_dataset``: the message names them
            with their row counts and the accuracy's ceiling (those rows are always wrong).

    Raises:
        InputError: (a ``ValueError``) on bad arguments, rows without labels or a fit split with fewer
            than two classes (here when the labels can be read without encoding, else at call).

    Example:
        >>> probe = ProbeEvaluator(data["train"], data["test"], input_column="image")  # doctest: +SKIP
        >>> probe(encoder)  # doctest: +SKIP
        {'linear_probe_accuracy': 0.93, 'linear_probe_macro_f1': 0.93, 'knn_accuracy': 0.91, 'knn_macro_f1': 0.91}
        >>> trainer = ContrastiveTrainer(..., evaluator=probe)  # eval_linear_probe_accuracy, ...  # doctest: +SKIP
    """

    def __init__(
        self,
        fit_dataset: Any,
        score_dataset: Any,
        *,
        name: str = "",
        knn_k: int = 20,
        knn_temperature: float = 0.07,
        C: float = 1.0,
        max_iter: int = 1000,
        standardize: bool = True,
        seed: int = 0,
        primary: str = "knn_accuracy",
        collate_fn: Callable[[list[Any]], Mapping[str, Any]] | None = None,
        transform: Callable[[Any], Tensor] | None = None,
        input_column: str | None = None,
        label_column: str | None = "label",
        batch_size: int = 64,
        output: str = "embeddings",
        max_length: int | None = None,
        progress: bool = True,
        on_bad_image: str = "raise",
    ) -> None:
        if primary not in PROBE_METRICS:
            raise InputError(f"`primary` must be one of {list(PROBE_METRICS)}, got {primary!r}.")
        super().__init__(name, primary, greater_is_better=True)
        self.metric_names = PROBE_METRICS
        if label_column is None:
            raise InputError("`label_column` must name the label column: the probes are fitted on labels.")
        for argument, dataset in (("fit_dataset", fit_dataset), ("score_dataset", score_dataset)):
            check_labelled(argument, dataset, label_column)
        self.fit_dataset = fit_dataset
        self.score_dataset = score_dataset
        self._warned_unseen = False
        self.probe_kwargs: dict[str, Any] = {
            "knn_k": check_int("knn_k", knn_k, 1),
            "knn_temperature": check_positive("knn_temperature", knn_temperature),
            "C": check_positive("C", C),
            "max_iter": check_int("max_iter", max_iter, 1),
            "standardize": bool(standardize),
            "seed": check_int("seed", seed, 0, MAX_SKLEARN_SEED),  # the linear probe's `random_state`
        }
        self.encode_kwargs: dict[str, Any] = check_encode_options(
            collate_fn=collate_fn,
            transform=transform,
            input_column=input_column,
            label_column=label_column,
            batch_size=batch_size,
            output=output,
            max_length=max_length,
            progress=progress,
            on_bad_image=on_bad_image,
        )
        fit_y = dataset_labels(fit_dataset, label_column, "fit_dataset")
        score_y = dataset_labels(score_dataset, label_column, "score_dataset")
        if fit_y is not None:  # before any encoding: a one-class fit split, unseen score classes
            names = _class_names(score_dataset, label_column) or _class_names(fit_dataset, label_column)
            self._check_classes(fit_y, score_y, names)

    def _check_classes(self, fit_y: Any, score_y: Any, names: list[str] | None = None) -> None:
        """A fit split of one class is an error; score classes absent from it are warned about once."""
        label_column = self.encode_kwargs["label_column"]
        fit_classes = sorted({int(y) for y in fit_y})
        if len(fit_classes) < 2:
            raise InputError(
                f"`fit_dataset` holds {len(fit_classes)} class(es) in `label_column`={label_column!r} "
                f"({[names[c] if names and 0 <= c < len(names) else c for c in fit_classes]}): the probes need at "
                "least two classes to tell apart; fit on a split that holds several classes."
            )
        if score_y is None or self._warned_unseen:
            return
        unseen = unseen_classes(list(fit_y), list(score_y))
        if unseen:
            self._warned_unseen = True
            message = unseen_message(unseen, len(score_y), "`fit_dataset`", "`score_dataset`", names)
            warnings.warn(f"ProbeEvaluator: {message}", UnseenClassWarning, stacklevel=3)

    def compute(self, model: nn.Module) -> dict[str, float]:
        return self.score(*self.encode(model))

    def encode(self, model: nn.Module) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``(fit_z, fit_y, score_z, score_y)``: both splits through :func:`encode_dataset` with this evaluator's
        options (eval mode, no gradient), e.g. to draw the score split's embeddings without encoding it again
        (``examples/run_linear_probe.py``). Shapes: ``(N, D)``, ``(N,)``, ``(M, D)``, ``(M,)``.

        Raises:
            InputError: when a split has no labels.
        """
        fit_z, fit_y = self._encode(model, self.fit_dataset, "fit_dataset")
        score_z, score_y = self._encode(model, self.score_dataset, "score_dataset")
        return fit_z, fit_y, score_z, score_y

    def score(self, fit_z: Tensor, fit_y: Tensor, score_z: Tensor, score_y: Tensor) -> dict[str, float]:
        """The unprefixed metrics of :meth:`encode`'s features (what :meth:`compute` returns): the probes fitted on
        the fit split, scored on the score split (:func:`~hf_contrast.metrics.probe_scores`).

        Raises:
            InputError: when the fit split holds fewer than two classes.
        """
        names = _class_names(self.score_dataset, self.encode_kwargs["label_column"])
        self._check_classes(fit_y.tolist(), score_y.tolist(), names)
        with warnings.catch_warnings():  # said once, by _check_classes, with the evaluator's argument names
            warnings.simplefilter("ignore", UnseenClassWarning)
            return probe_scores(fit_z, fit_y, score_z, score_y, **self.probe_kwargs)

    def _encode(self, model: nn.Module, dataset: Any, argument: str) -> tuple[Tensor, Tensor]:
        z, y = encode_dataset(model, dataset, **self.encode_kwargs)
        if y is None:
            raise InputError(
                f"`{argument}` has no labels in `label_column`={self.encode_kwargs['label_column']!r}: the probes "
                "need a label on every row (pass `label_column=` the column that holds them)."
            )
        return z, y
