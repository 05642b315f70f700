"""``TextViews``: the :class:`~hf_contrast.views.ViewBuilder` of text encoders.

Batch keys (see :mod:`hf_contrast.views.text_collator`): ``input_ids`` / ``attention_mask``
(/ ``token_type_ids``) of the text column, ``pair_input_ids`` … of an optional positive-pair
column, ``labels``. Random views are SimCSE's: the same sentence encoded again under dropout
(or the pair column as the second view); CARE's chunk-shared views edit tokens on the device.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from hf_contrast.errors import InputError

from .builder import Collator, ViewBuilder
from .chunked_text import ChunkedTextAugmentation
from .text_collator import TextViewCollator
from .whole_rows import WholeRows

__all__ = ["TextViews", "pad_and_concat"]

TEXT_KEYS = ("input_ids", "attention_mask", "token_type_ids")


def pad_and_concat(tensors: Sequence[Tensor], pad_value: int = 0) -> Tensor:
    """Concatenate ``(B_i, L_i)`` token tensors along dim 0, right-padding to the longest ``L``.

    Right padding (with mask 0) changes neither mean pooling over the attention mask nor the CLS
    token, so several text views can share one forward pass.
    """
    length = max(t.shape[1] for t in tensors)
    padded = [torch.nn.functional.pad(t, (0, length - t.shape[1]), value=pad_value) for t in tensors]
    return torch.cat(padded, dim=0)


class TextViews(ViewBuilder):
    """Text views: tokens from the collator, dropout (SimCSE) or a pair column for invariance."""

    def max_length(self) -> int:
        """Text truncation: ``args.max_length``, else the encoder's ``max_seq_length``, else the tokenizer's
        ``model_max_length`` (when it is a real limit), else 128."""
        return self.max_length_choice()[0]

    def max_length_choice(self) -> tuple[int, str]:
        """:meth:`max_length` and why, in words (the run set-up says it)."""
        if self.args.max_length is not None:
            return int(self.args.max_length), "the training arguments' `max_length`"  # the user's, or a script's
        configured = getattr(getattr(self.model, "config", None), "max_seq_length", None)
        if configured:
            return int(configured), "the encoder's `max_seq_length`"
        limit = getattr(self.processing_class, "model_max_length", None)
        if isinstance(limit, int) and 2 <= limit <= 100_000:
            return int(limit), "the tokenizer's `model_max_length`"
        return 128, "the default: neither the encoder nor the tokenizer sets a length"

    def collator(
        self, n_views: int = 2, deterministic: bool = False, raw: bool = False, whole_rows: WholeRows | None = None
    ) -> TextViewCollator:
        """Tokenise the text (and pair) column with the processing class; the view counts do not apply
        (random views are made by dropout, chunk-shared ones from the tokens), nor ``whole_rows`` (text rows are
        never left out).

        Raises:
            ValueError: without a tokenizer.
        """
        if self.processing_class is None:
            raise InputError(
                "A text encoder needs a tokenizer: pass `processing_class=tokenizer` (or build the encoder with one)."
            )
        return TextViewCollator(
            tokenizer=self.processing_class,
            text_column=self.args.text_column,
            text_pair_column=self.args.text_pair_column,
            label_column=self.args.label_column,
            max_length=self.max_length(),
        )

    @staticmethod
    def _no_pairs(pre_column: str, post_column: str) -> ValueError:
        return ValueError(
            f"Paired views (`{pre_column}`, `{post_column}`) are image pairs: they need a timm image encoder (stage "
            "feature maps); got a text encoder."
        )

    def check_pairs(self, pre_column: str, post_column: str) -> None:
        """Always raises: ``(pre, post)`` pairs are image pairs."""
        raise self._no_pairs(pre_column, post_column)

    def paired_collator(self, pre_column: str, post_column: str, train: bool) -> Collator:
        """Always raises: ``(pre, post)`` pairs are image pairs."""
        raise self._no_pairs(pre_column, post_column)

    def input_columns(self) -> tuple[str, ...]:
        return (self.args.text_column, "input_ids")

    # ---- views of a batch -------------------------------------------------------------------------

    def view(self, inputs: Mapping[str, Any], name: str) -> dict[str, Tensor]:
        """``input_ids``… (``name=""``) or ``{name}_input_ids``….

        Raises:
            ValueError: if the batch lacks ``{name}_input_ids``.
        """
        prefix = f"{name}_" if name else ""
        view = {key: inputs[prefix + key] for key in TEXT_KEYS if prefix + key in inputs}
        if not view:
            raise InputError(
                f"The batch has no `{prefix}input_ids` (keys: {sorted(inputs)}): the data collator does not build "
                "the views this objective needs."
            )
        return view

    def augmented(self, inputs: Mapping[str, Any], n_views: int) -> list[dict[str, Tensor]]:
        """The sentence ``n_views`` times (a repeated sentence gets fresh dropout: SimCSE), with the pair
        column as the second view when present."""
        names = [""] * n_views
        if n_views >= 2 and "pair_input_ids" in inputs:
            names[1] = "pair"
        return [self.view(inputs, name) for name in names]

    def eval_views(self, inputs: Mapping[str, Any]) -> list[dict[str, Tensor]]:
        """The sentence, plus (sentence, pair sentence) when a pair column exists."""
        views = [self.view(inputs, "")]
        if "pair_input_ids" in inputs:
            views += [self.view(inputs, ""), self.view(inputs, "pair")]
        return views

    def chunked_augmentation(self, n_splits: int) -> ChunkedTextAugmentation:
        """Token delete / insert / mask drawn once per chunk, with the tokenizer's special ids."""
        return ChunkedTextAugmentation.from_tokenizer(self.processing_class, n_splits)

    def chunked_views(
        self, augment: Callable[..., tuple[Any, Any]], inputs: Mapping[str, Any]
    ) -> list[dict[str, Tensor]]:
        """``augment`` of the sentence's tokens (a dict of ``(B, L)`` tensors) to two token views."""
        view1, view2 = augment(self.view(inputs, ""))
        return [dict(view1), dict(view2)]

    def chunked_batch_size(self, inputs: Mapping[str, Any]) -> int | None:
        return int(next(iter(self.view(inputs, "").values())).shape[0])

    def merge(self, views: Sequence[Mapping[str, Tensor]]) -> dict[str, Tensor]:
        """Right-pad to a common length and concatenate (padding changes neither mean nor CLS pooling)."""
        pad_id = getattr(self.processing_class, "pad_token_id", None) or 0
        return {
            key: pad_and_concat([v[key] for v in views], pad_value=pad_id if key == "input_ids" else 0)
            for key in views[0]
        }
