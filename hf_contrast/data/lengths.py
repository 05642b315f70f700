"""Token lengths of a text dataset's rows, for the Trainer's length-grouped sampling.

``train_sampling_strategy="group_by_length"`` / ``"batch_rebalance"`` (``group_by_length=True`` before transformers
5.2) order rows by the lengths in ``length_column_name``, or by a tokenized ``input_ids`` column; hf_contrast's rows
hold raw text, tokenized per batch, so the trainer measures them once with :func:`with_token_lengths`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["with_token_lengths"]


def with_token_lengths(
    dataset: Any,
    tokenizer: Any,
    columns: Sequence[str],
    max_length: int,
    length_column: str = "length",
    progress: bool = True,
) -> Any:
    """``dataset`` with ``length_column``: each row's token count under ``tokenizer``, the longest of its ``columns``
    (a sentence and its pair), truncated at ``max_length`` as the collator truncates. Shape: one ``int`` per row.

    Args:
        dataset: A ``datasets.Dataset`` holding the text ``columns``.
        tokenizer: The run's tokenizer (a ``transformers`` tokenizer: ``tokenizer(texts, truncation=True,
            max_length=...)["input_ids"]``).
        columns: The text columns the collator tokenizes.
        max_length: The run's truncation.
        length_column: The column written (the Trainer's ``length_column_name``).
        progress: Show the ``datasets`` "Token lengths" bar (``False``: ``datasets``' bars are off meanwhile).
    """
    from datasets.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    def measure(batch: dict[str, list[Any]]) -> dict[str, list[int]]:
        counts = [
            [len(ids) for ids in tokenizer(list(batch[c]), truncation=True, max_length=max_length)["input_ids"]]
            for c in columns
        ]
        return {length_column: [max(row) for row in zip(*counts, strict=True)]}

    if progress or are_progress_bars_disabled():
        return dataset.map(measure, batched=True, desc="Token lengths")
    disable_progress_bars()
    try:
        return dataset.map(measure, batched=True, desc="Token lengths")
    finally:
        enable_progress_bars()
