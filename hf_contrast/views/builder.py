"""``ViewBuilder``: how an objective gets its views — collators, view extraction and one-pass encoding.

One instance per trainer, built from the encoder, the training arguments and the processing class.
Batch keys (see :mod:`hf_contrast.training.collators`): images ``pixel_values_1..V`` (random views),
``pixel_values`` (deterministic view), ``pixel_values_eq`` (resized ``uint8`` images for chunk-shared
views made on the device); text ``input_ids``/``attention_mask``(/``token_type_ids``) and the
``pair_*`` keys of an optional positive-pair column; ``labels``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from ..augment.image import eval_transform_from_data_config, simclr_transform_from_data_config
from ..training.collators import ImageViewCollator, TextViewCollator, pad_and_concat, raw_image_transform

__all__ = ["ViewBuilder", "split_output"]

TEXT_KEYS = ("input_ids", "attention_mask", "token_type_ids")


def split_output(output: Mapping[str, Any], sizes: list[int]) -> list[dict[str, Any]]:
    """Split every batched tensor of a model output (and tuples of them) back into views."""
    total = sum(sizes)
    parts: list[dict[str, Any]] = [{} for _ in sizes]
    for key, value in output.items():
        if isinstance(value, Tensor) and value.ndim > 0 and value.shape[0] == total:
            for part, chunk in zip(parts, value.split(sizes)):
                part[key] = chunk
        elif isinstance(value, (tuple, list)) and value and all(
            isinstance(v, Tensor) and v.ndim > 0 and v.shape[0] == total for v in value
        ):
            chunks = [v.split(sizes) for v in value]
            for i, part in enumerate(parts):
                part[key] = tuple(c[i] for c in chunks)
    return parts


class ViewBuilder:
    """Views of a batch for one encoder and one set of training arguments.

    Args:
        model: The ``ContrastiveEncoder`` (``config.backbone_type`` ``"timm"`` or ``"text"``).
        args: :class:`~hf_contrast.training.ContrastiveTrainingArguments` (columns, ``image_size``,
            ``max_length``, ``gather_distributed``, seeds).
        processing_class: The tokenizer of a text encoder.
        epoch: A callable giving the current (fractional) epoch, for epoch-dependent objectives.
    """

    def __init__(
        self, model: nn.Module, args: Any, processing_class: Any = None, epoch: Callable[[], float] | None = None
    ) -> None:
        self.model = model
        self.args = args
        self.processing_class = processing_class
        self._epoch = epoch or (lambda: 0.0)
        #: Set by the trainer during a cached-gradient step (``args.gradient_cache_size``): encoder calls
        #: then go through it (mini-batches without a graph, replayed with one after the loss's backward).
        self.gradient_cache: Any = None

    # ---- facts ----------------------------------------------------------------------------------

    @property
    def is_text(self) -> bool:
        """Whether the encoder is a text model."""
        return getattr(getattr(self.model, "config", None), "backbone_type", "timm") == "text"

    @property
    def epoch(self) -> float:
        """The trainer's current epoch (0 before training)."""
        return float(self._epoch() or 0.0)

    @property
    def seed(self) -> int:
        """Seed of the collators' random views: ``args.data_seed`` or ``args.seed``."""
        return self.args.data_seed if self.args.data_seed is not None else self.args.seed

    @property
    def gather_distributed(self) -> bool:
        """``args.gather_distributed``: losses compare with the candidates of all processes."""
        return bool(self.args.gather_distributed)

    def data_config(self) -> dict[str, Any]:
        """The encoder's timm data config (``input_size`` from ``args.image_size`` when set).

        Raises:
            ValueError: if the model has no data config (not a timm ``ContrastiveEncoder``).
        """
        data_config = getattr(self.model, "data_config", None)
        if not data_config:
            raise ValueError(
                "The model has no `data_config` (input_size, mean, std) to build image views from; use a "
                "ContrastiveEncoder with a timm backbone or pass `data_collator=`."
            )
        data_config = dict(data_config)
        if self.args.image_size is not None:
            channels = data_config["input_size"][0]
            data_config["input_size"] = (channels, self.args.image_size, self.args.image_size)
        return data_config

    # ---- collators --------------------------------------------------------------------------------

    def random_transform(self) -> Callable[[Any], Tensor]:
        """The per-sample random view: SimCLR's augmentation sized from the data config."""
        return simclr_transform_from_data_config(self.data_config())

    def deterministic_transform(self) -> Callable[[Any], Tensor]:
        """The evaluation view: resize, centre crop, normalise."""
        return eval_transform_from_data_config(self.data_config())

    def raw_transform(self) -> Callable[[Any], Tensor]:
        """Resize to the view size, un-normalised ``uint8``: input of on-device chunked augmentation."""
        channels, height, width = self.data_config()["input_size"]
        return raw_image_transform((height, width), n_channels=channels)

    def text_collator(self) -> TextViewCollator:
        """Tokenise the text (and pair) column with the processing class.

        Raises:
            ValueError: without a tokenizer.
        """
        if self.processing_class is None:
            raise ValueError(
                "A text encoder needs a tokenizer: pass `processing_class=tokenizer` (or build the encoder with one)."
            )
        return TextViewCollator(
            tokenizer=self.processing_class,
            text_column=self.args.text_column,
            text_pair_column=self.args.text_pair_column,
            label_column=self.args.label_column,
            max_length=self.max_length(),
        )

    def max_length(self) -> int:
        """Text truncation: ``args.max_length``, else the encoder's ``max_seq_length``, else the tokenizer's
        ``model_max_length`` (when it is a real limit), else 128."""
        if self.args.max_length is not None:
            return int(self.args.max_length)
        configured = getattr(getattr(self.model, "config", None), "max_seq_length", None)
        if configured:
            return int(configured)
        limit = getattr(self.processing_class, "model_max_length", None)
        return int(limit) if isinstance(limit, int) and 2 <= limit <= 100_000 else 128

    def collator(
        self, n_views: int = 2, deterministic: bool = False, raw: bool = False
    ) -> Callable[[list[dict[str, Any]]], dict[str, Any]]:
        """Images: ``n_views`` random views (+ the deterministic view, + the raw batch); text: tokens."""
        if self.is_text:
            return self.text_collator()
        return ImageViewCollator(
            transform=self.random_transform() if n_views > 0 else None,
            n_views=n_views,
            image_column=self.args.image_column,
            label_column=self.args.label_column,
            eval_transform=self.deterministic_transform() if deterministic else None,
            raw_transform=self.raw_transform() if raw else None,
            seed=self.seed,
            on_bad_image=self.args.on_bad_image,
            n_channels=self.data_config()["input_size"][0],
        )

    def input_columns(self) -> tuple[str, ...]:
        """The dataset columns any one of which can feed the encoder (raw or pre-computed inputs)."""
        if self.is_text:
            return (self.args.text_column, "input_ids")
        return (self.args.image_column, "pixel_values", "pixel_values_1")

    # ---- views of a batch -------------------------------------------------------------------------

    def view(self, inputs: Mapping[str, Any], name: str) -> dict[str, Tensor]:
        """The model inputs of one named view: image ``pixel_values`` (``name=""``) or
        ``pixel_values_{name}``; text ``input_ids``… (``name=""``) or ``{name}_input_ids``….

        Raises:
            ValueError: if the batch lacks the view (names the missing key and the keys present).
        """
        if self.is_text:
            prefix = f"{name}_" if name else ""
            view = {key: inputs[prefix + key] for key in TEXT_KEYS if prefix + key in inputs}
            missing = f"{prefix}input_ids"
        else:
            key = f"pixel_values_{name}" if name else "pixel_values"
            view = {"pixel_values": inputs[key]} if key in inputs else {}
            missing = key
        if not view:
            raise ValueError(
                f"The batch has no `{missing}` (keys: {sorted(inputs)}): the data collator does not build the "
                "views this objective needs."
            )
        return view

    def augmented(self, inputs: Mapping[str, Any], n_views: int) -> list[dict[str, Tensor]]:
        """``n_views`` random views of each sample: images ``pixel_values_1..n``; text the sentence (and
        the pair column as the second view when present) — a repeated sentence gets fresh dropout (SimCSE)."""
        if not self.is_text:
            return [self.view(inputs, str(v + 1)) for v in range(n_views)]
        names = [""] * n_views
        if n_views >= 2 and "pair_input_ids" in inputs:
            names[1] = "pair"
        return [self.view(inputs, name) for name in names]

    def labels(self, inputs: Mapping[str, Any]) -> Tensor:
        """The batch's ``labels``.

        Raises:
            ValueError: naming ``label_column`` when the batch has none.
        """
        if "labels" not in inputs:
            raise ValueError(
                f"This objective needs class labels: the dataset has no `label_column`={self.args.label_column!r} "
                f"column (batch keys: {sorted(inputs)}); set `label_column` in the training arguments."
            )
        return inputs["labels"]

    # ---- encoding -----------------------------------------------------------------------------------

    def encode(self, model: nn.Module, views: Sequence[Mapping[str, Tensor]], **forward_kwargs: Any) -> list[dict[str, Any]]:
        """Encode several views in ONE forward pass and split the outputs back per view.

        Text views are right-padded to a common length (padding changes neither mean nor CLS pooling).
        With BatchNorm the statistics are those of all views together, as in SimCLR.
        """
        sizes = [next(iter(v.values())).shape[0] for v in views]
        if len(views) == 1:
            merged = dict(views[0])
        elif self.is_text:
            pad_id = getattr(self.processing_class, "pad_token_id", None) or 0
            merged = {
                key: pad_and_concat([v[key] for v in views], pad_value=pad_id if key == "input_ids" else 0)
                for key in views[0]
            }
        else:
            merged = {key: torch.cat([v[key] for v in views]) for key in views[0]}
        if self.gradient_cache is not None and torch.is_grad_enabled():
            return split_output(self.gradient_cache.encode(model, merged, **forward_kwargs), sizes)
        return split_output(model(**merged, **forward_kwargs), sizes)

    def projections(self, model: nn.Module, views: Sequence[Mapping[str, Tensor]]) -> list[Tensor]:
        """The ``projections`` (what the losses use) of each view, one forward pass."""
        return [out["projections"] for out in self.encode(model, views)]

    def eval_representations(self, model: nn.Module, inputs: Mapping[str, Any]) -> tuple[Tensor, ...]:
        """``(deterministic view[, random view 1, random view 2])`` in ``args.eval_representation``.

        Text: the sentence, plus (sentence, pair sentence) when a pair column exists.
        """
        key = self.args.eval_representation
        if self.is_text:
            views = [self.view(inputs, "")]
            if "pair_input_ids" in inputs:
                views += [self.view(inputs, ""), self.view(inputs, "pair")]
        else:
            main = self.view(inputs, "") if "pixel_values" in inputs else self.view(inputs, "1")
            views = [main] + (self.augmented(inputs, 2) if "pixel_values_2" in inputs else [])
        return tuple(out[key].float() for out in self.encode(model, views))
