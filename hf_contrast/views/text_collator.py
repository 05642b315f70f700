"""``TextViewCollator``: tokenise ``datasets.Dataset`` rows of text (and an optional positive pair).

Batch keys (what :class:`~hf_contrast.views.TextViews` reads): ``input_ids`` / ``attention_mask``
(/ ``token_type_ids``) of the text column, ``pair_input_ids`` / ``pair_attention_mask`` … of an optional
positive-pair column, and ``labels`` (``int64``) when the label column exists. Rows that already hold
``input_ids`` are padded with the tokenizer instead of re-tokenised.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from torch import Tensor

from hf_contrast.errors import InputError
from hf_contrast.tensor_checks import MAX_LENGTH, check_int, check_name

from .labels import collate_labels

__all__ = ["TextViewCollator"]


@dataclass
class TextViewCollator:
    """Tokenise a text column (and an optional positive-pair column) with the processing class.

    Args:
        tokenizer: The ``processing_class`` (a ``PreTrainedTokenizerBase``).
        text_column: Column holding the sentences (keys ``input_ids``, ``attention_mask``…).
        text_pair_column: Optional column with a positive sentence per row (keys
            ``pair_input_ids``, ``pair_attention_mask``…). ``None``: SimCSE, the trainer encodes
            the same sentence twice under dropout.
        label_column: Column holding integer labels, as in :class:`~hf_contrast.views.ImageViewCollator`.
        max_length: Truncation length.

    Raises:
        ValueError: if a row lacks the text column, a text is not a string (e.g. ``None``, naming
            the row), or a label is not an int.
    """

    tokenizer: Any
    text_column: str = "text"
    text_pair_column: str | None = None
    label_column: str | None = "label"
    max_length: int = 128

    def __post_init__(self) -> None:
        if not (callable(self.tokenizer) and callable(getattr(self.tokenizer, "pad", None))):
            raise InputError(
                "`tokenizer` must be a transformers tokenizer (the encoder's `processing_class`: called on texts, "
                f"`pad` for pre-tokenised rows), got {self.tokenizer!r}."
            )
        check_name("text_column", self.text_column)
        check_name("text_pair_column", self.text_pair_column, allow_none=True)
        check_name("label_column", self.label_column, allow_none=True)
        check_int("max_length", self.max_length, 1, MAX_LENGTH, allow_none=True)

    def _encode(self, features: Sequence[Mapping[str, Any]], column: str) -> dict[str, Tensor]:
        if column not in features[0]:
            raise InputError(
                f"{column!r} is not a column of the dataset (columns: {sorted(features[0])}); set "
                "`text_column` / `text_pair_column` in the training arguments."
            )
        texts = [f[column] for f in features]
        for row, text in enumerate(texts):
            if not isinstance(text, str):
                raise InputError(
                    f"Row {row} of the batch holds a {type(text).__name__} in the text column {column!r}, not a "
                    "string; remove or fill missing texts (e.g. `dataset.filter(lambda r: r[column] is not None)`)."
                )
        encoded = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt")
        return dict(encoded)

    def __call__(self, features: Sequence[Mapping[str, Any]]) -> dict[str, Tensor]:
        if len(features) == 0:
            raise InputError("Cannot collate an empty batch (0 rows).")
        if "input_ids" in features[0]:  # pre-tokenised rows
            keys = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in features[0]]
            batch = dict(self.tokenizer.pad([{k: f[k] for k in keys} for f in features], return_tensors="pt"))
        else:
            batch = self._encode(features, self.text_column)
        if self.text_pair_column is not None:
            batch.update({f"pair_{k}": v for k, v in self._encode(features, self.text_pair_column).items()})
        labels = collate_labels(features, self.label_column)
        if labels is not None:
            batch["labels"] = labels
        return batch
