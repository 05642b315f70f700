"""One evaluation path: embedding metrics for the Trainer, evaluators, and dataset encoding.

- :class:`EmbeddingMetrics` — ``compute_metrics`` for ``transformers.Trainer``: alignment,
  uniformity, mean cosine, effective rank, leave-one-out kNN and held-out linear-probe accuracy
  within the evaluation set, class orthogonality (the functions of :mod:`hf_contrast.metrics`,
  ``docs/methods.md`` §6–7), class-balanced subsampling, a warning on collapse.
- Evaluators (sentence-transformers style, ``evaluator(model) -> {"<name>_<metric>": float}``):
  :class:`ProbeEvaluator` (linear probe and kNN fitted on a training split, scored on a test split:
  accuracy and macro-F1), :class:`STSEvaluator`, :class:`EmbeddingEvaluator`,
  :class:`EquivarianceEvaluator`, :class:`SequentialEvaluator`, base :class:`Evaluator`. A metric that
  cannot be computed is reported as NaN with an :class:`EvaluationFailedWarning` (once per cause): it
  never ends a training run.
- :func:`encode_dataset` — embed a dataset with a model; :func:`balanced_subset` /
  :func:`balanced_split` — seeded class-balanced rows (defined in :mod:`hf_contrast.data.sampling`).
"""

from __future__ import annotations

from ..data.sampling import balanced_split, balanced_subset
from .collapse import RepresentationCollapseWarning, collapse_message
from .embedding_evaluator import EmbeddingEvaluator
from .embedding_metrics import EmbeddingMetrics
from .encode import encode_dataset
from .equivariance import EquivarianceEvaluator
from .evaluator import Evaluator, SequentialEvaluator
from .failures import EvaluationFailedWarning
from .probe_evaluator import ProbeEvaluator
from .sts import STSEvaluator

__all__ = [
    "EmbeddingMetrics",
    "Evaluator",
    "SequentialEvaluator",
    "STSEvaluator",
    "ProbeEvaluator",
    "EmbeddingEvaluator",
    "EquivarianceEvaluator",
    "encode_dataset",
    "balanced_subset",
    "balanced_split",
    "RepresentationCollapseWarning",
    "EvaluationFailedWarning",
    "collapse_message",
]
