"""Geometry metrics, probes and STS evaluation of embedding spaces (``docs/methods.md`` §7).

Plain functions (torch or numpy in, Python floats out), each the one definition of its metric,
and offline ``evaluate`` modules over them (:mod:`.evaluate_modules`). What runs them on a model or
an evaluation set (``EmbeddingMetrics``, the evaluators) is :mod:`hf_contrast.evaluation`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .geometry import (
    WahbaResult,
    alignment,
    class_orthogonality,
    effective_rank,
    mean_cosine,
    relative_rotational_equivariance,
    uniformity,
    wahba_error,
)
from .probes import (
    PROBE_METRICS,
    knn_accuracy,
    knn_predict,
    linear_probe_accuracy,
    linear_probe_predict,
    macro_f1,
    probe_scores,
)
from .sts import ConstantInputWarning, spearman_correlation, sts_spearman

if TYPE_CHECKING:
    from .evaluate_modules import ClassOrthogonalityMetric, GeometryMetric, KNNAccuracyMetric, WahbaMetric

# `evaluate` takes seconds to import: the modules below load on first access only.
_LAZY = {
    "GeometryMetric": "evaluate_modules",
    "WahbaMetric": "evaluate_modules",
    "KNNAccuracyMetric": "evaluate_modules",
    "ClassOrthogonalityMetric": "evaluate_modules",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "WahbaResult",
    "wahba_error",
    "relative_rotational_equivariance",
    "alignment",
    "uniformity",
    "class_orthogonality",
    "effective_rank",
    "mean_cosine",
    "knn_accuracy",
    "knn_predict",
    "linear_probe_accuracy",
    "linear_probe_predict",
    "macro_f1",
    "probe_scores",
    "PROBE_METRICS",
    "ConstantInputWarning",
    "spearman_correlation",
    "sts_spearman",
    "GeometryMetric",
    "WahbaMetric",
    "KNNAccuracyMetric",
    "ClassOrthogonalityMetric",
]
