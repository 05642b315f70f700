"""``Evaluator``: the base class of the evaluators (in the sentence-transformers sense) and ``SequentialEvaluator``.

An evaluator takes the model and returns ``{"<name>_<metric>": float}``. The trainer runs it at each
evaluation and reports its keys as ``eval_<name>_<metric>``, so ``metric_for_best_model`` can pick
the best checkpoint by any of them (``"eval_sts_spearman"``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence

from torch import nn

from hf_contrast.errors import InputError, InputTypeError

from ..encoding.model_access import eval_mode
from ..metrics.failures import metrics_or_nan

__all__ = ["Evaluator", "SequentialEvaluator"]


class Evaluator(ABC):
    """Evaluate a model; subclasses implement :meth:`compute` (unprefixed metric names).

    Calling the evaluator puts the model in eval mode under ``torch.no_grad()``, calls
    :meth:`compute` and restores the model's previous mode (also when ``compute`` raises), then
    prefixes every key with ``name`` (``"sts"`` → ``sts_spearman``).

    Attributes:
        name: Prefix of the metric keys (``""``: none).
        primary_metric: The prefixed key that summarises the evaluation (``"sts_spearman"``).
        greater_is_better: Whether a larger :attr:`primary_metric` is better.
    """

    name: str = ""
    greater_is_better: bool = True
    #: The unprefixed metric names :meth:`compute` returns (reported as NaN when it fails); subclasses
    #: with a fixed set list them, others report the names of their last successful call.
    metric_names: tuple[str, ...] = ()
    _primary: str = ""

    def __init__(self, name: str, primary: str, greater_is_better: bool) -> None:
        if not isinstance(name, str):
            raise InputError(f"`name` must be a string (the metric-key prefix), got {name!r}.")
        self.name = name
        self._primary = primary
        self.greater_is_better = greater_is_better

    @property
    def primary_metric(self) -> str:
        """The prefixed key of the primary metric, e.g. ``"sts_spearman"``."""
        return self.prefixed(self._primary)

    def possible_metrics(self) -> tuple[str, ...] | None:
        """The prefixed keys a call can return (``None``: not known before a call, no fixed ``metric_names``);
        the trainer checks ``metric_for_best_model`` against them before training."""
        return tuple(self.prefixed(name) for name in self.metric_names) or None

    def prefixed(self, key: str) -> str:
        """``"<name>_<key>"`` (``key`` unchanged when ``name`` is empty)."""
        return f"{self.name}_{key}" if self.name else key

    @abstractmethod
    def compute(self, model: nn.Module) -> dict[str, float]:
        """Unprefixed metrics of ``model`` (called in eval mode, without gradient)."""

    def __call__(self, model: nn.Module, *, on_error: str = "warn") -> dict[str, float]:
        """Prefixed metrics of ``model``; its train/eval mode is restored afterwards.

        Args:
            model: The model to evaluate.
            on_error: When :meth:`compute` raises: ``"warn"`` (default) reports every metric as NaN with an
                :class:`~hf_contrast.evaluation.EvaluationFailedWarning` (once per cause), so a failing
                metric never ends a training run; ``"raise"`` re-raises the error.
        """
        names = self.metric_names or getattr(self, "_last_names", ()) or (self._primary,)
        with eval_mode(model):
            metrics = metrics_or_nan(lambda: self.compute(model), names, self, on_error=on_error)
        if not all(value != value for value in metrics.values()):  # not the NaN fallback
            self._last_names = tuple(metrics)
        return {self.prefixed(key): value for key, value in metrics.items()}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, primary_metric={self.primary_metric!r})"


class SequentialEvaluator(Evaluator):
    """Run several evaluators one after the other and merge their metrics.

    Args:
        evaluators: The evaluators (at least one); their keys must not clash.
        primary: Index of the evaluator whose primary metric is this one's.

    Raises:
        ValueError: on an empty list, a non-evaluator, duplicate names or a bad ``primary``;
            at call, when two evaluators return the same key.
    """

    def __init__(self, evaluators: Sequence[Evaluator], primary: int = 0) -> None:
        if isinstance(evaluators, Evaluator):
            raise InputTypeError(
                f"`evaluators` must be a list of Evaluator instances, got one {type(evaluators).__name__}: "
                "wrap it in a list."
            )
        if isinstance(evaluators, (str, bytes, Mapping)) or not isinstance(evaluators, Iterable):
            raise InputTypeError(
                f"`evaluators` must be a non-empty list of Evaluator instances, got {evaluators!r} of type "
                f"{type(evaluators).__name__}."
            )
        evaluators = list(evaluators)
        if not evaluators or not all(isinstance(e, Evaluator) for e in evaluators):
            raise InputError(f"`evaluators` must be a non-empty list of Evaluator instances, got {evaluators!r}.")
        names = [e.name for e in evaluators]
        if len(set(names)) != len(names):
            raise InputError(f"`evaluators` must have distinct names (their metric-key prefixes), got {names}.")
        if isinstance(primary, bool) or not isinstance(primary, int) or not 0 <= primary < len(evaluators):
            raise InputError(f"`primary` must be an index in [0, {len(evaluators) - 1}], got {primary!r}.")
        super().__init__("", evaluators[primary].primary_metric, evaluators[primary].greater_is_better)
        self.evaluators = evaluators

    def __call__(self, model: nn.Module, *, on_error: str = "warn") -> dict[str, float]:
        """The merged metrics of every evaluator; with ``on_error="warn"`` each one fails alone (its metrics
        NaN), the others' are still reported."""
        return self._merge(model, on_error)

    def compute(self, model: nn.Module) -> dict[str, float]:
        return self._merge(model, "raise")

    def possible_metrics(self) -> tuple[str, ...] | None:
        """Every evaluator's keys (``None`` when one evaluator's are not known before a call)."""
        members = [evaluator.possible_metrics() for evaluator in self.evaluators]
        return None if None in members else tuple(key for keys in members for key in keys)  # type: ignore[union-attr]

    def _merge(self, model: nn.Module, on_error: str) -> dict[str, float]:
        metrics: dict[str, float] = {}
        for evaluator in self.evaluators:
            values = evaluator(model, on_error=on_error)
            clash = sorted(set(values) & set(metrics))
            if clash:
                raise InputError(f"{evaluator!r} returned keys already reported by another evaluator: {clash}.")
            metrics.update(values)
        return metrics
