"""One evaluation path: embedding metrics for the Trainer, evaluators, and dataset encoding.

- :class:`EmbeddingMetrics` — ``compute_metrics`` for ``transformers.Trainer``: alignment,
  uniformity, mean cosine, effective rank, leave-one-out kNN and held-out linear-probe accuracy
  within the evaluation set, class orthogonality (the functions of :mod:`hf_contrast.metrics`,
  ``docs/methods.md`` §6–7), class-balanced subsampling, a warning on collapse.
- Evaluators (sentence-transformers style, ``evaluator(model) -> {"<name>_<metric>": float}``):
  :class:`ProbeEvaluator` (linear probe and kNN fitted on a training split, scored on a test split:
  accuracy and macro-F1), :class:`STSEvaluator`, :class:`EmbeddingEvaluator`,
  :class:`EquivarianceEvaluator`, :class:`TaskHeadEvaluator` (the encoder's own classifier: accuracy and
  macro-F1 of its task head), :class:`SequentialEvaluator`, base :class:`Evaluator`. A metric that cannot be
  computed is reported as NaN with an :class:`EvaluationFailedWarning` (once per cause): it never ends a
  training run.
- :func:`encode_dataset` — embed a dataset with a model (defined in :mod:`hf_contrast.encoding`, below the models,
  which ``ContrastiveEncoder.encode`` uses); :func:`balanced_subset` / :func:`balanced_split` — seeded
  class-balanced rows (defined in :mod:`hf_contrast.data.sampling`).

``EmbeddingMetrics`` and the two warnings are defined in :mod:`hf_contrast.metrics` (the trainer's default
``compute_metrics``: below the objectives that choose it); this package is above the training layer, where the data
ends up. Their old modules (``hf_contrast.evaluation.encode``, ``.model_access``, ``.embedding_metrics``,
``.collapse``, ``.failures``) still import, with a ``FutureWarning`` naming the new place.
"""

from __future__ import annotations

from ..data.sampling import balanced_split, balanced_subset
from ..encoding import encode as _encode
from ..encoding import encode_dataset
from ..encoding import model_access as _model_access
from ..metrics import collapse as _collapse
from ..metrics import embedding_metrics as _embedding_metrics
from ..metrics import failures as _failures
from ..metrics.collapse import RepresentationCollapseWarning, collapse_message
from ..metrics.embedding_metrics import EmbeddingMetrics
from ..metrics.failures import EvaluationFailedWarning
from ..moved_modules import register_moved_modules
from .embedding_evaluator import EmbeddingEvaluator
from .equivariance import EquivarianceEvaluator
from .evaluator import Evaluator, SequentialEvaluator
from .probe_evaluator import ProbeEvaluator
from .sts import STSEvaluator
from .task_head import TaskHeadEvaluator

__all__ = [
    "EmbeddingMetrics",
    "Evaluator",
    "SequentialEvaluator",
    "STSEvaluator",
    "ProbeEvaluator",
    "EmbeddingEvaluator",
    "EquivarianceEvaluator",
    "TaskHeadEvaluator",
    "encode_dataset",
    "balanced_subset",
    "balanced_split",
    "RepresentationCollapseWarning",
    "EvaluationFailedWarning",
    "collapse_message",
]


# ---- modules that moved below the models and the objectives: their old paths import, with a FutureWarning ----

_MOVED_MODULES = {
    "encode": _encode,
    "model_access": _model_access,
    "embedding_metrics": _embedding_metrics,
    "collapse": _collapse,
    "failures": _failures,
}
register_moved_modules(__name__, _MOVED_MODULES, also=__name__)
del _encode, _model_access, _embedding_metrics, _collapse, _failures  # the old names are the warning proxies
