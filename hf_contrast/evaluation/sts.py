"""``STSEvaluator``: Spearman correlation between the model's cosine similarities and gold scores.

The scoring is sentence-transformers' :class:`~sentence_transformers.evaluation.EmbeddingSimilarityEvaluator`
(cosine similarity, SciPy's Spearman and Pearson), so a number here is the number a sentence-transformers
user gets for the same embeddings; only the embedding step is ours (:func:`encode_texts`: any text
``ContrastiveEncoder``, its ``embeddings`` or ``projections``), through that evaluator's public
``embed_inputs`` hook.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from torch import nn

from hf_contrast.errors import InputError, InputTypeError

from ..encoding import check_encode_options, encode_texts
from ..hub.card_datasets import dataset_metadata
from ..tensor_checks import check_name
from .evaluator import Evaluator
from .labelled import check_one_split

__all__ = ["STSEvaluator"]


class STSEvaluator(Evaluator):
    """STS evaluation of a text encoder: ``{"<name>_spearman": ρ, "<name>_pearson": r}`` (``docs/methods.md`` §7).

    Embeds both sides of every pair with the model's ``embeddings`` (its ``tokenizer``, padding,
    truncation at ``max_length``) and returns Spearman's ρ (primary) and Pearson's r between
    ``cos(a_i, b_i)`` and the gold ``scores``, in ``[-1, 1]``, as computed by sentence-transformers'
    ``EmbeddingSimilarityEvaluator`` (its ``spearman_cosine`` / ``pearson_cosine``; equal to
    :func:`hf_contrast.metrics.sts_spearman` of the same embeddings). With a trainer,
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

    #: The scored pairs' name in model cards (``None``: the metric prefix, ``name``). :meth:`from_dataset` sets it
    #: to the dataset's name, without a split: pairs drawn from a file the encoder also trained on are not
    #: held-out rows of it, which a card would say of a training split's name and split.
    dataset_name: str | None = None
    #: What the pairs' loaders said of them (a seeded subset, renamed columns), printed in model cards beside their
    #: name: :meth:`from_dataset` sets it from the dataset's loader notes
    #: (:func:`hf_contrast.data.naming.add_loader_note`).
    dataset_notes: tuple[str, ...] = ()

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
        self.sentences1 = _as_list("sentences1", sentences1, "strings")
        self.sentences2 = _as_list("sentences2", sentences2, "strings")
        self.scores = [_as_score(i, s) for i, s in enumerate(_as_list("scores", scores, "numbers"))]
        n = len(self.scores)
        if not len(self.sentences1) == len(self.sentences2) == n:
            raise InputError(
                "`sentences1`, `sentences2` and `scores` must have the same length, got "
                f"{len(self.sentences1)}, {len(self.sentences2)} and {n}."
            )
        if n < 2:
            raise InputError(f"STSEvaluator needs at least 2 scored pairs, got {n}.")
        for field, values in (("sentences1", self.sentences1), ("sentences2", self.sentences2)):
            bad = next((i for i, s in enumerate(values) if not isinstance(s, str)), None)
            if bad is not None:
                raise InputError(f"`{field}[{bad}]` must be a string, got {type(values[bad]).__name__}.")
        bad = next((i for i, s in enumerate(self.scores) if not math.isfinite(s)), None)
        if bad is not None:
            raise InputError(f"`scores[{bad}]` must be finite, got {self.scores[bad]}.")
        check_encode_options(batch_size=batch_size, output=output, max_length=max_length, progress=progress)
        self.batch_size, self.output, self.max_length, self.progress = batch_size, output, max_length, progress
        self.metric_names = ("spearman", "pearson")

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
            ValueError: if ``dataset`` is neither, or a column is missing (the message lists the columns there are).
        """
        for argument, column in (
            ("sentence1_column", sentence1_column),
            ("sentence2_column", sentence2_column),
            ("score_column", score_column),
        ):
            check_name(argument, column)
        check_one_split("dataset", dataset)  # a DatasetDict: its "columns" are its splits
        columns = getattr(dataset, "column_names", None)
        if columns is None and isinstance(dataset, Mapping):
            columns = dataset.keys()
        if columns is None:
            raise InputTypeError(
                f"`dataset` must be a datasets.Dataset or a dict of columns, got {type(dataset).__name__}."
            )
        columns = list(columns)
        missing = [c for c in (sentence1_column, sentence2_column, score_column) if c not in columns]
        if missing:
            raise InputError(
                f"The STS dataset has no column(s) {missing} (columns: {columns}); pass `sentence1_column=`, "
                "`sentence2_column=` and `score_column=`."
            )
        evaluator = cls(
            list(dataset[sentence1_column]), list(dataset[sentence2_column]), list(dataset[score_column]), **kwargs
        )
        if hasattr(dataset, "info"):  # the model card names the pairs (not their split: see `dataset_name`)
            (entry,) = dataset_metadata(dataset)
            evaluator.dataset_name = entry.get("name") or entry.get("id")
            evaluator.dataset_notes = tuple(entry.get("notes", ()))
        return evaluator

    def compute(self, model: nn.Module) -> dict[str, float]:
        if getattr(self, "_scorer", None) is None:
            self._scorer = _cosine_similarity_scorer(self)
        metrics = self._scorer(model)
        return {"spearman": float(metrics["spearman_cosine"]), "pearson": float(metrics["pearson_cosine"])}


def _as_list(name: str, values: object, of: str) -> list[Any]:
    """``values`` (a list, tuple, array or other iterable of ``of``; not a string or mapping) as a list."""
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
        raise InputTypeError(
            f"`{name}` must be a sequence of {of} (one per pair), got {values!r} of type {type(values).__name__}."
        )
    return list(values)


def _as_score(i: int, score: object) -> float:
    """A gold score: a real number (a Python, NumPy or one-element torch number), as a float."""
    try:
        if isinstance(score, (bool, str, bytes)):
            raise TypeError
        return float(score)  # type: ignore[arg-type]
    except (TypeError, ValueError, RuntimeError):
        raise InputTypeError(
            f"`scores[{i}]` must be a number, got {score!r} of type {type(score).__name__}."
        ) from None


def _cosine_similarity_scorer(sts: STSEvaluator) -> Any:
    """sentence-transformers' ``EmbeddingSimilarityEvaluator`` on ``sts``'s pairs, embedding with
    :func:`encode_texts` (imported here: sentence-transformers is a heavy import the image path never needs).

    It overrides the evaluator's two public hooks: ``embed_inputs`` (a ``ContrastiveEncoder`` has no
    ``SentenceTransformer.encode``) and ``store_metrics_in_model_card_data`` (our trainer's card callback
    records the evaluation; a ``ContrastiveEncoder`` has no sentence-transformers card data).
    """
    from sentence_transformers.evaluation import EmbeddingSimilarityEvaluator

    class CosineSimilarityScorer(EmbeddingSimilarityEvaluator):
        def embed_inputs(self, model: nn.Module, sentences: Any, **kwargs: Any) -> np.ndarray:
            options = {"batch_size": sts.batch_size, "output": sts.output, "max_length": sts.max_length}
            return encode_texts(model, list(sentences), progress=sts.progress, **options).numpy()

        def store_metrics_in_model_card_data(self, model: Any, metrics: Any, epoch: int = 0, step: int = 0) -> None:
            pass

    return CosineSimilarityScorer(
        sts.sentences1,
        sts.sentences2,
        sts.scores,
        batch_size=sts.batch_size,
        main_similarity="cosine",
        show_progress_bar=sts.progress,
        write_csv=False,
    )
