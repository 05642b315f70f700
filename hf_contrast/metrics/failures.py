"""What an evaluation does when a metric cannot be computed: warn once, report NaN, never end the run.

A metric that fails during training (non-finite embeddings of an augmented batch, a degenerate split, a
solver that does not converge) must not throw away the run that produced the model: the trainer logs
``nan`` for it and goes on to the next evaluation, checkpoint and save. The first failure of each
(source, metric) pair is reported once as an :class:`EvaluationFailedWarning` naming the metric, the
evaluator and the cause; later failures of the same pair are silent (the ``nan`` in the logs remains).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable
from typing import TypeVar

from hf_contrast.errors import InputError

__all__ = ["EvaluationFailedWarning", "metrics_or_nan"]

T = TypeVar("T")


def _reported_by(source: object) -> set[tuple[str, str]]:
    """The (metrics, error type) pairs already reported for ``source``, kept on the object itself (an id-keyed
    global set would confuse a new evaluator with a collected one that had the same id)."""
    try:
        return vars(source).setdefault("_reported_evaluation_failures", set())
    except TypeError:  # no __dict__ (slots): report every time
        return set()


class EvaluationFailedWarning(RuntimeWarning):
    """An evaluation metric could not be computed and was reported as NaN."""


def metrics_or_nan(
    compute: Callable[[], T], names: Iterable[str], source: object, *, on_error: str = "warn"
) -> T | dict[str, float]:
    """``compute()``, or ``{name: nan for name in names}`` with a warning when it raises.

    Args:
        compute: Computes the metric(s).
        names: The metric names it reports, used for the NaN result and the warning.
        source: The evaluator (or metric suite) computing them; named in the warning, and the warning is
            given once per (source, metric names, error type).
        on_error: ``"warn"`` (the default, what training uses) or ``"raise"`` (re-raise the error).

    Returns:
        What ``compute`` returned, or the NaN dict.

    Raises:
        ValueError: if ``on_error`` is neither ``"warn"`` nor ``"raise"``.
        Exception: whatever ``compute`` raised, with ``on_error="raise"``.
    """
    if on_error not in ("warn", "raise"):
        raise InputError(f"`on_error` must be 'warn' or 'raise', got {on_error!r}.")
    names = list(names)
    try:
        return compute()
    except Exception as error:
        if on_error == "raise":
            raise
        key = (",".join(names), type(error).__name__)
        reported = _reported_by(source)
        if key not in reported:
            reported.add(key)
            name = getattr(source, "name", "")
            label = f"{type(source).__name__} ({name!r})" if name else type(source).__name__
            warnings.warn(
                f"{label} could not compute {', '.join(names) or 'its metrics'}: "
                f"{type(error).__name__}: {str(error).rstrip('.')}. Reported as NaN; training goes on (given once per "
                "metric). Call the evaluator with on_error='raise' to see the traceback.",
                EvaluationFailedWarning,
                stacklevel=3,
            )
        return {name: math.nan for name in names}
