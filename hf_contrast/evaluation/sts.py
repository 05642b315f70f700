"""``STSEvaluator``: Spearman correlation between the model's cosine similarities and gold scores."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from ..metrics import sts_spearman
from .encode import encode_texts
from .evaluator import Evaluator
from ..tensor_checks import check_int

__all__ = ["STSEvaluator"]


class STSEvaluator(Evaluator):
    """STS evaluation of a text encoder: ``{"<name>_spearman": ρ}`` (``docs/methods.md`` §7).

    Embeds both sides of every pair with the model's ``embeddings`` (its ``tokenizer``, padding,
    truncation at ``max_length``) and returns Spearman's ρ between ``cos(a_i, b_i)`` and the
    gold ``scores`` (:func:`hf_contrast.metrics.sts_spearman`, in ``[-1, 1]``). With a trainer,
    ``metric_for_best_model="eval_sts_spearman"`` keeps the checkpoint of best ρ.

    Args:
        sentences1: First sentence of each pair. Length ``n >= 2``.
        sentences2: Second sentence of each pair. Length ``n``.
        scores: Gold similarity of each pair (any scale). Length ``n``.
        batch_size: Sentences per forward pass.
        name: Metric-key prefix.
        output: Model output compared: ``"embeddings"`` (the sentence embedding) or ``"projections"``.
        max_length: Token limit (default: the tokenizer's).
        progress: Show a progress bar while encoding.

    Raises:
        ValueError: on lists of different lengths, fewer than two pairs, non-string sentences or
            non-finite scores.

    Example:
        >>> sts = STSEvaluator(["a cat", "a man"], ["a dog", "a car"], [3.5, 0.5])  # doctest: +SKIP
        >>> sts(encoder)  # doctest: +SKIP
        {'sts_spearman': 1.0}
    """

    def __init__(
        self,
        sentences1: Sequence[str],
        sentences2: Sequence[str],
        scores: Sequence[float],
        batch_size: int = 32,
        name: str = "sts",
        output: str = "embeddings",
        max_length: int | None = None,
        progress: bool = False,
    ) -> None:
        super().__init__(name, "spearman", greater_is_better=True)
        self.sentences1, self.sentences2 = list(sentences1), list(sentences2)
        self.scores = [float(s) for s in scores]
        n = len(self.scores)
        if not len(self.sentences1) == len(self.sentences2) == n:
            raise ValueError(
                "`sentences1`, `sentences2` and `scores` must have the same length, got "
                f"{len(self.sentences1)}, {len(self.sentences2)} and {n}."
            )
        if n < 2:
            raise ValueError(f"STSEvaluator needs at least 2 scored pairs, got {n}.")
        for field, values in (("sentences1", self.sentences1), ("sentences2", self.sentences2)):
            bad = next((i for i, s in enumerate(values) if not isinstance(s, str)), None)
            if bad is not None:
                raise ValueError(f"`{field}[{bad}]` must be a string, got {type(values[bad]).__name__}.")
        bad = next((i for i, s in enumerate(self.scores) if not math.isfinite(s)), None)
        if bad is not None:
            raise ValueError(f"`scores[{bad}]` must be finite, got {self.scores[bad]}.")
        check_int("batch_size", batch_size, 1)
        self.batch_size, self.output, self.max_length, self.progress = batch_size, output, max_length, progress

    @classmethod
    def from_dataset(
        cls,
        dataset: Any,
        sentence1_column: str = "sentence1",
        sentence2_column: str = "sentence2",
        score_column: str = "score",
        **kwargs: Any,
    ) -> STSEvaluator:
        """An evaluator over the scored pairs of a ``datasets.Dataset`` (or a dict of columns).

        Raises:
            ValueError: if a column is missing (the message lists the columns there are).
        """
        columns = list(getattr(dataset, "column_names", None) or dataset.keys())
        missing = [c for c in (sentence1_column, sentence2_column, score_column) if c not in columns]
        if missing:
            raise ValueError(
                f"The STS dataset has no column(s) {missing} (columns: {columns}); pass `sentence1_column=`, "
                "`sentence2_column=` and `score_column=`."
            )
        return cls(list(dataset[sentence1_column]), list(dataset[sentence2_column]), list(dataset[score_column]), **kwargs)

    def compute(self, model: nn.Module) -> dict[str, float]:
        options = {"batch_size": self.batch_size, "output": self.output, "max_length": self.max_length, "progress": self.progress}
        a = encode_texts(model, self.sentences1, **options)
        b = encode_texts(model, self.sentences2, **options)
        return {"spearman": sts_spearman(a, b, torch.tensor(self.scores, dtype=torch.float64))}
