"""The geometry metrics as offline ``evaluate.Metric`` subclasses (accumulate with ``add_batch``).

Instantiate them directly — nothing is fetched from the Hub:

>>> from hf_contrast.metrics import GeometryMetric  # doctest: +SKIP
>>> metric = GeometryMetric(keep_in_memory=True)  # doctest: +SKIP
>>> for z1, z2 in batches:  # doctest: +SKIP
...     metric.add_batch(predictions=z1, references=z2)
>>> metric.compute()  # doctest: +SKIP
{'alignment': ..., 'uniformity': ..., 'mean_cosine': ..., 'effective_rank': ...}

Embeddings are stored as ``datasets.Sequence(datasets.Value("float32"))`` rows (pass numpy
arrays, lists, or CPU tensors); the metric is computed on all accumulated rows at ``compute()``,
in float64. The ``evaluate`` distributed mode (``num_process``/``process_id`` with a shared
``cache_dir``) works as for any ``evaluate`` metric.
"""

from __future__ import annotations

from typing import Any

import datasets
import evaluate
import numpy as np
import torch
from torch import Tensor

from hf_contrast.errors import InputError

from .geometry import (
    alignment,
    class_orthogonality,
    effective_rank,
    mean_cosine,
    relative_rotational_equivariance,
    uniformity,
    wahba_error,
)
from .probes import knn_accuracy

__all__ = ["GeometryMetric", "WahbaMetric", "KNNAccuracyMetric", "ClassOrthogonalityMetric"]

_CITATION = """\
@inproceedings{wang2020understanding,
  title     = {Understanding Contrastive Representation Learning through Alignment and Uniformity on the Hypersphere},
  author    = {Wang, Tongzhou and Isola, Phillip},
  booktitle = {International Conference on Machine Learning},
  year      = {2020},
  url       = {https://arxiv.org/abs/2005.10242}
}
@inproceedings{gupta2024structuring,
  title     = {Structuring Representation Geometry with Rotationally Equivariant Contrastive Learning},
  author    = {Gupta, Sharut and Robinson, Joshua and Lim, Derek and Villar, Soledad and Jegelka, Stefanie},
  booktitle = {International Conference on Learning Representations},
  year      = {2024},
  url       = {https://arxiv.org/abs/2306.13924}
}
"""
_EMBEDDING = datasets.Sequence(datasets.Value("float32"))
_HOMEPAGE = "https://arxiv.org/abs/2005.10242"


def _matrix(name: str, rows: Any) -> Tensor:
    """Stack the stored embedding rows into a float64 ``(n, D)`` tensor."""
    if len(rows) == 0:
        raise InputError(f"`{name}` is empty: call `add_batch` (or pass `{name}=`) before `compute()`.")
    try:
        return torch.as_tensor(np.asarray(rows, dtype=np.float64))
    except ValueError as error:  # ragged rows
        raise InputError(f"`{name}` rows must all have the same length: {error}") from None


def _labels(rows: Any) -> Tensor:
    return torch.as_tensor(np.asarray(rows, dtype=np.int64))


def _info(description: str, features: dict[str, Any], inputs: str, homepage: str = _HOMEPAGE) -> evaluate.MetricInfo:
    return evaluate.MetricInfo(
        description=description,
        citation=_CITATION,
        inputs_description=inputs,
        features=datasets.Features(features),
        homepage=homepage,
    )


class GeometryMetric(evaluate.Metric):
    """Alignment, uniformity, mean cosine and effective rank of two views (``docs/methods.md`` §6–§7).

    ``predictions`` are the embeddings of view 1, ``references`` those of view 2 (row ``i`` of
    both is the same sample). Returns ``alignment`` (``α = 2``) of the pairs and ``uniformity``
    (``t = 2``), ``mean_cosine`` and ``effective_rank`` of the view-1 embeddings: the functions and
    names of :class:`hf_contrast.evaluation.EmbeddingMetrics`, so both report the same values.
    ``compute(normalize=False)`` skips the L2 normalisation of alignment and uniformity.
    """

    def _info(self) -> evaluate.MetricInfo:
        return _info(
            "Alignment / uniformity on the hypersphere and effective rank of embeddings.",
            {"predictions": _EMBEDDING, "references": _EMBEDDING},
            """
    predictions: embeddings of view 1, one list of D floats per sample.
    references: embeddings of view 2 of the same samples.
    normalize (bool, compute kwarg, default True): L2-normalise before alignment/uniformity.
Returns: {"alignment": float, "uniformity": float, "mean_cosine": float, "effective_rank": float}
""",
        )

    def _compute(self, predictions: Any, references: Any, normalize: bool = True) -> dict[str, float]:
        z1, z2 = _matrix("predictions", predictions), _matrix("references", references)
        return {
            "alignment": alignment(z1, z2, normalize=normalize),
            "uniformity": uniformity(z1, normalize=normalize),
            "mean_cosine": mean_cosine(z1),
            "effective_rank": effective_rank(z1),
        }


class WahbaMetric(evaluate.Metric):
    """Wahba error and relative rotational equivariance ``γ_f`` for ONE sampled augmentation.

    CARE (https://arxiv.org/abs/2306.13924), Figure 2c and Appendix F.2.1. ``predictions`` are
    ``f(a(x_i))``, ``references`` are ``f(x_i)``; every row must use the same augmentation ``a``
    (start a new ``compute()`` per augmentation). Returns ``wahba_error`` (``W``),
    ``wahba_error_per_sample`` (``W/√n``) and ``relative_rotational_equivariance``.
    ``compute(normalize=True)`` L2-normalises the rows first.
    """

    def _info(self) -> evaluate.MetricInfo:
        return _info(
            "Rotational equivariance of an embedding under one augmentation (CARE).",
            {"predictions": _EMBEDDING, "references": _EMBEDDING},
            """
    predictions: f(a(x_i)), embeddings of the augmented inputs (one augmentation a for all rows).
    references: f(x_i), embeddings of the original inputs.
    normalize (bool, compute kwarg, default False): L2-normalise the rows first.
Returns: {"wahba_error": float, "wahba_error_per_sample": float,
          "relative_rotational_equivariance": float}
""",
            homepage="https://arxiv.org/abs/2306.13924",
        )

    def _compute(self, predictions: Any, references: Any, normalize: bool = False) -> dict[str, float]:
        f_a, f = _matrix("predictions", predictions), _matrix("references", references)
        result = wahba_error(f, f_a, normalize=normalize)
        return {
            "wahba_error": result.error,
            "wahba_error_per_sample": result.error_per_sample,
            "relative_rotational_equivariance": relative_rotational_equivariance(f, f_a, normalize=normalize),
        }


class KNNAccuracyMetric(evaluate.Metric):
    """Weighted kNN top-1 accuracy (cosine, ``exp(s/τ)`` votes) of labelled embeddings.

    ``predictions`` are test embeddings, ``references`` their integer labels. Pass the memory
    bank at ``compute(train_embeddings=..., train_labels=...)``; without it the accumulated rows
    are scored leave-one-out. ``k`` (default 20) and ``temperature`` (0.07) are compute kwargs.
    """

    def _info(self) -> evaluate.MetricInfo:
        return _info(
            "Weighted k-nearest-neighbour accuracy on cosine similarity (InstDisc/DINO protocol).",
            {"predictions": _EMBEDDING, "references": datasets.Value("int64")},
            """
    predictions: test embeddings, one list of D floats per sample.
    references: integer class labels.
    train_embeddings ((N, D) array, compute kwarg, optional): memory bank; default leave-one-out.
    train_labels ((N,) int array, compute kwarg, optional): labels of the memory bank.
    k (int, default 20), temperature (float, default 0.07): compute kwargs.
Returns: {"knn_accuracy": float} with a memory bank, {"knn_loo_accuracy": float} leave-one-out (the
names of hf_contrast.evaluation: a score within one split is named apart).
""",
        )

    def _compute(
        self,
        predictions: Any,
        references: Any,
        train_embeddings: Any = None,
        train_labels: Any = None,
        k: int = 20,
        temperature: float = 0.07,
    ) -> dict[str, float]:
        z, y = _matrix("predictions", predictions), _labels(references)
        if (train_embeddings is None) != (train_labels is None):
            raise InputError("`train_embeddings` and `train_labels` must be given together.")
        if train_embeddings is None:
            return {"knn_loo_accuracy": knn_accuracy(z, y, k=k, temperature=temperature)}
        bank = _matrix("train_embeddings", train_embeddings)
        return {"knn_accuracy": knn_accuracy(bank, _labels(train_labels), z, y, k=k, temperature=temperature)}


class ClassOrthogonalityMetric(evaluate.Metric):
    """Mean ``|cos|`` between distinct class means of labelled embeddings (0 = orthogonal).

    ``predictions`` are embeddings, ``references`` their integer labels.
    ``compute(normalize=True)`` L2-normalises each embedding before averaging per class.
    """

    def _info(self) -> evaluate.MetricInfo:
        return _info(
            "Mean absolute cosine between class-mean embeddings.",
            {"predictions": _EMBEDDING, "references": datasets.Value("int64")},
            """
    predictions: embeddings, one list of D floats per sample.
    references: integer class labels (at least two distinct).
    normalize (bool, compute kwarg, default False): L2-normalise rows before the class means.
Returns: {"class_orthogonality": float}
""",
        )

    def _compute(self, predictions: Any, references: Any, normalize: bool = False) -> dict[str, float]:
        z, y = _matrix("predictions", predictions), _labels(references)
        return {"class_orthogonality": class_orthogonality(z, y, normalize=normalize)}
