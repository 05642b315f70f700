"""Frozen-feature probes (``docs/methods.md`` §7): weighted kNN and a linear (logistic) probe.

kNN runs in torch on the device of the features; the linear probe is scikit-learn's
``LogisticRegression``; macro-F1 is scikit-learn's ``f1_score``. ``*_predict`` return the predicted
classes, ``*_accuracy`` the top-1 accuracy as a Python float, and :func:`probe_scores` the four
numbers of a probe fitted on one split and scored on another, under the names
:data:`PROBE_METRICS` (the names the evaluators, the examples and the model card use).
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor
from transformers.utils import logging

from hf_contrast.errors import InputError

from ..tensor_checks import MAX_SKLEARN_SEED, check_bool, check_int, check_positive, check_temperature, l2_normalize
from .inputs import as_embeddings, as_labels

__all__ = [
    "PROBE_METRICS",
    "UnseenClassWarning",
    "knn_accuracy",
    "knn_predict",
    "linear_probe_accuracy",
    "linear_probe_predict",
    "macro_f1",
    "probe_scores",
    "unseen_classes",
]

logger = logging.get_logger(__name__)  # follows the Trainer's log level (hf_contrast.progress)

#: The names of :func:`probe_scores`: probes fitted on one split and scored on another. (Scores
#: estimated within one split are named apart: ``knn_loo_accuracy``, ``linear_probe_holdout_accuracy``
#: of :class:`~hf_contrast.evaluation.EmbeddingMetrics`.)
PROBE_METRICS = ("linear_probe_accuracy", "linear_probe_macro_f1", "knn_accuracy", "knn_macro_f1")


class UnseenClassWarning(UserWarning):
    """The scored labels hold classes the probes never saw when fitted: those rows are always wrong, so the
    accuracy is at most the share of the other rows (:func:`unseen_classes`)."""


def unseen_classes(train_y: object, test_y: object) -> dict[int, int]:
    """The classes of ``test_y`` absent from ``train_y``, with their row counts in ``test_y``.

    A probe fitted on ``train_y`` can only predict its classes, so every row of these classes is an
    error: accuracy is at most ``1 - sum(counts) / len(test_y)``.

    Args:
        train_y: Integer labels the probe is fitted on. Shape: ``(N,)``.
        test_y: Integer labels it is scored on. Shape: ``(M,)``.

    Returns:
        ``{class: rows in test_y}``, sorted by class; empty when every class was seen.

    >>> unseen_classes([0, 0, 1], [0, 2, 2, 3])
    {2: 2, 3: 1}
    """
    ytr = torch.as_tensor(train_y).reshape(-1).cpu()
    yte = torch.as_tensor(test_y).reshape(-1).cpu()
    missing = yte[~torch.isin(yte, ytr)]
    classes, counts = torch.unique(missing, return_counts=True)
    return {int(c): int(n) for c, n in zip(classes.tolist(), counts.tolist())}


def unseen_message(unseen: dict[int, int], total: int, fit: str, score: str, names: list[str] | None = None) -> str:
    """The :class:`UnseenClassWarning` text for :func:`unseen_classes`' result (``names``: class names)."""
    listed = ", ".join(
        f"{names[c]!r} ({n} rows)" if names is not None and 0 <= c < len(names) else f"{c} ({n} rows)"
        for c, n in unseen.items()
    )
    ceiling = 1.0 - sum(unseen.values()) / total
    return (
        f"{score} holds {len(unseen)} class(es) absent from {fit}: {listed}. The probes cannot predict a class they "
        f"were not fitted on, so these rows are always wrong: accuracy is at most {ceiling:.4f}. Fit on a split that "
        "holds every class (e.g. a stratified split: hf_contrast.evaluation.balanced_split)."
    )


def _train_test(
    train_z: object, train_y: object, test_z: object | None, test_y: object | None, labelled: bool = True
) -> tuple[Tensor, Tensor, Tensor, Tensor | None, bool]:
    """Check the inputs; ``test_z is None`` selects leave-one-out on the training set; ``labelled=False``
    (predictions) takes no ``test_y``."""
    xtr = as_embeddings("train_z", train_z)
    ytr = as_labels("train_y", train_y, xtr.shape[0], xtr.device)
    if labelled and (test_z is None) != (test_y is None):
        raise InputError("`test_z` and `test_y` must be given together (or both omitted for leave-one-out).")
    if test_z is None:
        return xtr, ytr, xtr, ytr, True
    xte = as_embeddings("test_z", test_z)
    if xte.shape[1] != xtr.shape[1]:
        raise InputError(
            f"`test_z` must have the feature size of `train_z` ({xtr.shape[1]}), got shape {tuple(xte.shape)}."
        )
    if xte.device != xtr.device:
        raise InputError(f"`test_z` must be on the device of `train_z` ({xtr.device}), got {xte.device}.")
    yte = None if test_y is None else as_labels("test_y", test_y, xte.shape[0], xtr.device)
    return xtr, ytr, xte, yte, False


@torch.no_grad()
def knn_predict(
    train_z: object,
    train_y: object,
    test_z: object | None = None,
    k: int = 20,
    temperature: float = 0.07,
    batch_size: int = 1024,
) -> Tensor:
    """Predictions of a weighted k-nearest-neighbour classifier on cosine similarity.

    The InstDisc (https://arxiv.org/abs/1805.01978) / DINO kNN protocol: each test point takes
    the ``k`` training points of highest cosine similarity ``s``; each votes for its class with
    weight ``exp(s / temperature)``; the class with the largest total wins (ties: the smallest
    label; the weights are computed as ``exp((s − 1) / τ)``, a common factor that cannot
    overflow). With ``test_z=None`` it is leave-one-out on the training set (a point never votes
    for itself). scikit-learn's ``KNeighborsClassifier(k, metric="cosine",
    weights=lambda d: exp(-d / τ))`` gives the same predictions (up to ties in similarity).

    Args:
        train_z: Training (memory bank) features. Shape: ``(N, D)``.
        train_y: Integer training labels. Shape: ``(N,)``.
        test_z: Test features, or ``None`` for leave-one-out. Shape: ``(M, D)``.
        k: Number of neighbours, ``1 <= k <= N`` (``<= N - 1`` for leave-one-out).
        temperature: Vote temperature ``τ > 0``.
        batch_size: Test rows per similarity block (memory ``batch_size × N``).

    Returns:
        The predicted labels, int64 on the device of ``train_z``. Shape: ``(M,)`` (``(N,)`` for
        leave-one-out).

    Raises:
        ValueError: on bad shapes/dtypes, ``k`` out of range or ``temperature <= 0``.
    """
    xtr, ytr, xte, _, leave_one_out = _train_test(train_z, train_y, test_z, None, labelled=False)
    return _knn_predictions(xtr, ytr, xte, leave_one_out, k, temperature, batch_size)


def _knn_predictions(
    xtr: Tensor, ytr: Tensor, xte: Tensor, leave_one_out: bool, k: int, temperature: float, batch_size: int
) -> Tensor:
    temperature = check_temperature("temperature", temperature)
    batch_size = check_int("batch_size", batch_size, 1)
    available = xtr.shape[0] - int(leave_one_out)
    check_int("k", k, 1, maximum=available, fix="the number of candidate neighbours.")
    classes, ytr_idx = torch.unique(ytr, return_inverse=True)
    xtr, xte = l2_normalize(xtr), l2_normalize(xte)
    predicted = []
    for start in range(0, xte.shape[0], batch_size):
        sim = xte[start : start + batch_size] @ xtr.T
        if leave_one_out:
            rows = torch.arange(sim.shape[0], device=sim.device)
            sim[rows, rows + start] = -torch.inf
        top_sim, top_idx = sim.topk(k, dim=1)
        votes = torch.zeros(sim.shape[0], classes.numel(), dtype=sim.dtype, device=sim.device)
        votes.scatter_add_(1, ytr_idx[top_idx], torch.exp((top_sim - 1.0) / temperature))
        predicted.append(classes[votes.argmax(dim=1)])
    return torch.cat(predicted)


def knn_accuracy(
    train_z: object,
    train_y: object,
    test_z: object | None = None,
    test_y: object | None = None,
    k: int = 20,
    temperature: float = 0.07,
    batch_size: int = 1024,
) -> float:
    """Top-1 accuracy of :func:`knn_predict` (the weighted cosine kNN classifier).

    Args:
        train_z: As in :func:`knn_predict`.
        train_y: As in :func:`knn_predict`.
        k: As in :func:`knn_predict`.
        temperature: As in :func:`knn_predict`.
        batch_size: As in :func:`knn_predict`.
        test_z: Test features, or ``None`` for leave-one-out on the training set. Shape: ``(M, D)``.
        test_y: Integer test labels, or ``None`` (with ``test_z``). Shape: ``(M,)``.

    Returns:
        The fraction of test points whose predicted label equals ``test_y``.

    Raises:
        ValueError: on bad shapes/dtypes, ``k`` out of range or ``temperature <= 0``.

    Example:
        >>> z = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
        >>> knn_accuracy(z, torch.tensor([0, 0, 1, 1]), k=1)
        1.0
    """
    xtr, ytr, xte, yte, leave_one_out = _train_test(train_z, train_y, test_z, test_y)
    predicted = _knn_predictions(xtr, ytr, xte, leave_one_out, k, temperature, batch_size)
    return float((predicted == yte).sum()) / xte.shape[0]


def linear_probe_predict(
    train_z: object,
    train_y: object,
    test_z: object,
    C: float = 1.0,
    max_iter: int = 1000,
    standardize: bool = True,
    seed: int = 0,
) -> Tensor:
    """Predictions of a multinomial logistic-regression probe fitted on frozen training features.

    scikit-learn's ``LogisticRegression(C=C, max_iter=max_iter, random_state=seed)`` (L-BFGS,
    minimising ``C · Σ_i CE(W x_i + b, y_i) + ½ ‖W‖²``) fitted in float64 on the training
    features, after a ``StandardScaler`` fitted on them (``standardize=True``). Labels may be any
    integers.

    Args:
        train_z: Training features. Shape: ``(N, D)``; at least two classes in ``train_y``.
        train_y: Integer training labels. Shape: ``(N,)``.
        test_z: Test features. Shape: ``(M, D)``.
        C: Inverse regularisation strength ``> 0`` (scikit-learn's ``C``).
        max_iter: Maximum L-BFGS iterations.
        standardize: Standardise the features with the training mean and standard deviation first.
        seed: ``random_state`` of the estimator, an integer in ``[0, 2**32 - 1]``.

    Returns:
        The predicted labels (classes of ``train_y``), int64 on the device of ``train_z``. Shape: ``(M,)``.

    Raises:
        ValueError: on bad shapes/dtypes, fewer than two training classes, ``C <= 0``,
            ``max_iter < 1``, a ``standardize`` that is not a bool or a ``seed`` out of range.
        ImportError: without scikit-learn (``pip install scikit-learn``).
    """
    xtr, ytr, xte, _, _ = _train_test(train_z, train_y, test_z, None, labelled=False)
    return _probe_predictions(xtr, ytr, xte, C, max_iter, standardize, seed)


def _probe_predictions(
    xtr: Tensor, ytr: Tensor, xte: Tensor, C: float, max_iter: int, standardize: bool, seed: int
) -> Tensor:
    C = check_positive("C", C)
    max_iter = check_int("max_iter", max_iter, 1)
    standardize = check_bool("standardize", standardize)
    seed = check_int("seed", seed, 0, MAX_SKLEARN_SEED, fix="scikit-learn's `random_state` takes 32-bit seeds.")
    classes = torch.unique(ytr)
    if classes.numel() < 2:
        raise InputError(f"`train_y` must contain at least two classes, got {classes.tolist()}.")
    try:
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler
    except ImportError as error:  # pragma: no cover - scikit-learn is a dependency
        raise ImportError("The linear probe needs scikit-learn: `pip install scikit-learn`.") from error
    steps = [StandardScaler()] if standardize else []
    probe = make_pipeline(*steps, LogisticRegression(C=C, max_iter=max_iter, random_state=seed))
    probe.fit(xtr.cpu().numpy(), ytr.cpu().numpy())
    return torch.from_numpy(probe.predict(xte.cpu().numpy())).long().to(xtr.device)


def linear_probe_accuracy(
    train_z: object,
    train_y: object,
    test_z: object,
    test_y: object,
    C: float = 1.0,
    max_iter: int = 1000,
    standardize: bool = True,
    seed: int = 0,
) -> float:
    """Top-1 accuracy of :func:`linear_probe_predict` (logistic regression on frozen features).

    A test label never seen in training counts as an error.

    Args:
        train_z: As in :func:`linear_probe_predict`.
        train_y: As in :func:`linear_probe_predict`.
        test_z: As in :func:`linear_probe_predict`.
        C: As in :func:`linear_probe_predict`.
        max_iter: As in :func:`linear_probe_predict`.
        standardize: As in :func:`linear_probe_predict`.
        seed: As in :func:`linear_probe_predict`.
        test_y: Integer test labels. Shape: ``(M,)``.

    Returns:
        The test accuracy in ``[0, 1]``.

    Raises:
        ValueError: on bad shapes/dtypes, fewer than two training classes, ``C <= 0`` or
            ``max_iter < 1``.
    """
    xtr, ytr, xte, yte, _ = _train_test(train_z, train_y, test_z, test_y)
    predicted = _probe_predictions(xtr, ytr, xte, C, max_iter, standardize, seed)
    return float((predicted == yte).double().mean())


def macro_f1(predicted: object, labels: object, num_classes: int | None = None) -> float:
    """Macro-averaged F1: the unweighted mean of the per-class F1 scores (scikit-learn's
    ``f1_score(labels, predicted, average="macro")``).

    Classes that occur in neither ``labels`` nor ``predicted`` are ignored.

    Args:
        predicted: Predicted classes. Shape: ``(N,)``, integer (torch or numpy).
        labels: True classes. Shape: ``(N,)``, integer.
        num_classes: Number of classes, checked against the inputs (``None``: not checked).

    Raises:
        ValueError: on empty or mismatched inputs, negative classes, or a class >= ``num_classes``.

    >>> macro_f1(torch.tensor([0, 1, 1]), torch.tensor([0, 1, 0]))
    0.6666666666666666
    """
    shape = getattr(labels, "shape", None)
    if shape is not None:  # a tensor or an array: a 0-d one has no length
        n = int(shape[0]) if len(shape) == 1 else -1
    else:
        n = len(labels) if hasattr(labels, "__len__") and not isinstance(labels, (str, bytes)) else -1
    if n < 1:
        shown = f"shape {tuple(shape)}" if shape is not None else f"{labels!r} of type {type(labels).__name__}"
        raise InputError(f"`labels` must be a non-empty sequence of class indices, shape (N,), got {shown}.")
    labels = as_labels("labels", labels, n, torch.device("cpu"))
    predicted = as_labels("predicted", predicted, n, torch.device("cpu"))
    largest = int(torch.maximum(predicted.max(), labels.max()))
    if int(torch.minimum(predicted.min(), labels.min())) < 0:
        raise InputError("`predicted` and `labels` must hold class indices >= 0.")
    if num_classes is not None and largest >= check_int("num_classes", num_classes, 1):
        raise InputError(f"`num_classes`={num_classes} is too small: the inputs hold class {largest}.")
    from sklearn.metrics import f1_score

    return float(f1_score(labels.numpy(), predicted.numpy(), average="macro"))


def probe_scores(
    train_z: object,
    train_y: object,
    test_z: object,
    test_y: object,
    *,
    knn_k: int = 20,
    knn_temperature: float = 0.07,
    C: float = 1.0,
    max_iter: int = 1000,
    standardize: bool = True,
    seed: int = 0,
) -> dict[str, float]:
    """Linear probe and kNN fitted on ``train`` and scored on ``test``: accuracy and macro-F1 of each.

    The one block "fit on the training features, score on the test features" of every evaluation
    (:class:`~hf_contrast.evaluation.ProbeEvaluator`, the examples, the benchmarks):
    :func:`linear_probe_predict` (``C``, ``max_iter``, ``standardize``, ``seed``) and
    :func:`knn_predict` (``knn_k``, ``knn_temperature``; ``k = min(knn_k, N)`` with a warning when
    the training set has ``N < knn_k`` rows), scored with scikit-learn's ``accuracy_score`` and
    ``f1_score(average="macro")`` (macro-F1 weighs every class alike: the rare classes of a
    long-tailed split count).

    Args:
        train_z: Training features. Shape: ``(N, D)``; at least two classes in ``train_y``.
        train_y: Integer training labels. Shape: ``(N,)``.
        test_z: Test features. Shape: ``(M, D)``.
        test_y: Integer test labels. Shape: ``(M,)``.
        knn_k: Neighbours of the kNN classifier.
        knn_temperature: Vote temperature of the kNN classifier.
        C: The linear probe's ``C`` (:func:`linear_probe_predict`).
        max_iter: The linear probe's ``max_iter`` (:func:`linear_probe_predict`).
        standardize: The linear probe's ``standardize`` (:func:`linear_probe_predict`).
        seed: The linear probe's ``seed`` (:func:`linear_probe_predict`).

    Returns:
        ``{"linear_probe_accuracy", "linear_probe_macro_f1", "knn_accuracy", "knn_macro_f1"}``
        (:data:`PROBE_METRICS`), floats in ``[0, 1]``.

    Warns:
        UnseenClassWarning: if ``test_y`` holds classes absent from ``train_y`` (named with their counts, and
            the accuracy's ceiling they impose).

    Raises:
        ValueError: on bad shapes/dtypes or settings, or fewer than two training classes.
    """
    xtr, ytr, xte, yte, _ = _train_test(train_z, train_y, test_z, test_y)
    knn_k = check_int("knn_k", knn_k, 1)
    knn_temperature = check_temperature("knn_temperature", knn_temperature)
    if torch.unique(ytr).numel() < 2:
        raise InputError(
            f"`train_y` must contain at least two classes, got {torch.unique(ytr).tolist()}: a probe needs two "
            "classes to tell apart (fit on a split that holds several classes)."
        )
    unseen = unseen_classes(ytr, yte)
    if unseen:
        warnings.warn(unseen_message(unseen, yte.numel(), "`train_y`", "`test_y`"), UnseenClassWarning, stacklevel=2)
    if knn_k > xtr.shape[0]:
        message = f"probe_scores: knn_k={knn_k} exceeds the {xtr.shape[0]} training rows; using k={xtr.shape[0]}."
        logger.warning(message)
        warnings.warn(message, stacklevel=2)
        knn_k = xtr.shape[0]
    from sklearn.metrics import accuracy_score, f1_score

    truth = yte.cpu().numpy()
    scores: dict[str, float] = {}
    for name, predicted in (
        ("linear_probe", _probe_predictions(xtr, ytr, xte, C, max_iter, standardize, seed)),
        ("knn", _knn_predictions(xtr, ytr, xte, False, knn_k, knn_temperature, 1024)),
    ):
        predicted = predicted.cpu().numpy()
        scores[f"{name}_accuracy"] = float(accuracy_score(truth, predicted))
        scores[f"{name}_macro_f1"] = float(f1_score(truth, predicted, average="macro"))
    return scores
