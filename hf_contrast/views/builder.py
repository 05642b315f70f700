"""``ViewBuilder``: the one interface through which objectives and the trainer get their views.

An objective never asks what the encoder reads: it asks its ``ViewBuilder`` for collators, for the
named views of a batch, for CARE's chunk-shared views or LOCAL's pairs, and encodes several views in
one forward pass. Two implementations answer: :class:`~hf_contrast.views.ImageViews` (timm encoders,
``pixel_values*`` batch keys) and :class:`~hf_contrast.views.TextViews` (text encoders, ``input_ids``
… keys); :func:`~hf_contrast.views.views_for` picks one, once, from the model.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from hf_contrast.errors import InputError

from .whole_rows import WholeRows

__all__ = ["ViewBuilder", "split_output"]

Collator = Callable[[list[dict[str, Any]]], dict[str, Any]]


def split_output(output: Mapping[str, Any], sizes: list[int]) -> list[dict[str, Any]]:
    """Split every batched tensor of a model output (and tuples of them) back into views."""
    total = sum(sizes)
    parts: list[dict[str, Any]] = [{} for _ in sizes]
    for key, value in output.items():
        if isinstance(value, Tensor) and value.ndim > 0 and value.shape[0] == total:
            for part, chunk in zip(parts, value.split(sizes)):
                part[key] = chunk
        elif (
            isinstance(value, (tuple, list))
            and value
            and all(isinstance(v, Tensor) and v.ndim > 0 and v.shape[0] == total for v in value)
        ):
            chunks = [v.split(sizes) for v in value]
            for i, part in enumerate(parts):
                part[key] = tuple(c[i] for c in chunks)
    return parts


class ViewBuilder(ABC):
    """Views of a batch for one encoder and one set of training arguments.

    Args:
        model: The ``ContrastiveEncoder`` (image views read its ``data_config``: the size was decided before).
        args: :class:`~hf_contrast.training.ContrastiveTrainingArguments` (columns, ``max_length``,
            ``gather_distributed``, seeds).
        processing_class: The tokenizer of a text encoder.
        epoch: A callable giving the current (fractional) epoch, for epoch-dependent objectives.

    Raises:
        ValueError: if ``args.views_on_device`` is set and these views cannot be made on the device.
    """

    #: Whether this modality can make its random views on the device (``args.views_on_device``).
    supports_views_on_device: ClassVar[bool] = False

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
        if self.views_on_device and not self.supports_views_on_device:
            raise InputError(
                "`views_on_device=True` makes image views (crop, flip, colour jitter, grayscale, blur) on the "
                f"device, but this model's views ({type(self).__name__}) are not images (a text encoder's random "
                "views are dropout or a pair column, its tokens made by the collator): set `views_on_device=False`."
            )

    # ---- facts ----------------------------------------------------------------------------------

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

    @property
    def views_on_device(self) -> bool:
        """``args.views_on_device``: random views made per batch on its device, not per sample by the collator."""
        return bool(getattr(self.args, "views_on_device", False))

    def start_batch(self, batch_index: int, training: bool) -> None:
        """Called by the trainer before a batch reaches the objective, with the batch's index in its stream
        (training batches since the start of the run, checkpointed; evaluation batches since the start of the
        evaluation): views made here, on the device, draw from that batch's generator. Default: nothing (the
        collators made the views)."""

    # ---- collators (per modality) -----------------------------------------------------------------

    @abstractmethod
    def collator(
        self, n_views: int = 2, deterministic: bool = False, raw: bool = False, whole_rows: WholeRows | None = None
    ) -> Collator:
        """Rows to a batch holding ``n_views`` random views (``deterministic``: + the evaluation view;
        ``raw``: + the input of :meth:`chunked_augmentation`). Views without randomness ignore the counts.
        ``whole_rows``: the rule that keeps a batch that lost unreadable rows (``on_bad_image="skip"``) whole
        (chunks, class groups; :mod:`hf_contrast.views.whole_rows`); views whose rows are never left out
        (text) ignore it."""

    @abstractmethod
    def check_pairs(self, pre_column: str, post_column: str) -> None:
        """Check, before training, that these views can make ``(pre, post)`` pairs (LOCAL).

        Raises:
            ValueError: if they cannot.
        """

    @abstractmethod
    def paired_collator(self, pre_column: str, post_column: str, train: bool) -> Collator:
        """Rows of ``(pre, post)`` pairs to a batch with the views ``"pre"`` and ``"post"`` (LOCAL):
        ``train`` draws one shared random geometry per pair, else the evaluation view of each.

        Raises:
            ValueError: if these views have no pairs.
        """

    @abstractmethod
    def input_columns(self) -> tuple[str, ...]:
        """The dataset columns any one of which can feed the encoder (raw or pre-computed inputs)."""

    # ---- views of a batch (per modality) -----------------------------------------------------------

    @abstractmethod
    def view(self, inputs: Mapping[str, Any], name: str) -> dict[str, Tensor]:
        """The model inputs of one named view (``name=""``: the batch's main view).

        Raises:
            ValueError: if the batch lacks the view (names the missing key and the keys present).
        """

    @abstractmethod
    def augmented(self, inputs: Mapping[str, Any], n_views: int) -> list[dict[str, Tensor]]:
        """``n_views`` random views of each sample."""

    @abstractmethod
    def eval_views(self, inputs: Mapping[str, Any]) -> list[dict[str, Tensor]]:
        """``[deterministic view(, random view 1, random view 2)]`` of an evaluation batch."""

    @abstractmethod
    def chunked_augmentation(self, n_splits: int) -> Callable[..., tuple[Any, Any]]:
        """CARE's default equivariance augmentation: one random draw per chunk of ``n_splits``."""

    @abstractmethod
    def chunked_views(
        self, augment: Callable[..., tuple[Any, Any]], inputs: Mapping[str, Any]
    ) -> list[dict[str, Tensor]]:
        """The two chunk-shared views ``augment`` makes of the batch, on its device.

        Raises:
            ValueError: if the batch lacks the input ``augment`` takes.
        """

    def chunked_and_augmented(
        self, augment: Callable[..., tuple[Any, Any]], inputs: Mapping[str, Any], n_views: int
    ) -> tuple[list[dict[str, Tensor]], list[dict[str, Tensor]]]:
        """CARE's views of a batch: :meth:`chunked_views` of ``augment``, then :meth:`augmented`'s ``n_views`` (in
        that order). Views made on the device override it to make all of them in one batched pass."""
        return self.chunked_views(augment, inputs), self.augmented(inputs, n_views)

    @abstractmethod
    def chunked_batch_size(self, inputs: Mapping[str, Any]) -> int | None:
        """Rows of the input of :meth:`chunked_views` (``None`` if the batch has none)."""

    @abstractmethod
    def merge(self, views: Sequence[Mapping[str, Tensor]]) -> dict[str, Tensor]:
        """Several views as one model input, concatenated along the batch (dim 0)."""

    # ---- shared -----------------------------------------------------------------------------------

    def labels(self, inputs: Mapping[str, Any]) -> Tensor:
        """The batch's ``labels``.

        Raises:
            ValueError: naming ``label_column`` when the batch has none.
        """
        if "labels" not in inputs:
            raise InputError(
                f"This objective needs class labels: the dataset has no `label_column`={self.args.label_column!r} "
                f"column (batch keys: {sorted(inputs)}); set `label_column` in the training arguments."
            )
        return inputs["labels"]

    def encode(
        self, model: nn.Module, views: Sequence[Mapping[str, Tensor]], **forward_kwargs: Any
    ) -> list[dict[str, Any]]:
        """Encode several views in ONE forward pass and split the outputs back per view.

        With BatchNorm the statistics are those of all views together, as in SimCLR.
        """
        sizes = [next(iter(v.values())).shape[0] for v in views]
        merged = dict(views[0]) if len(views) == 1 else self.merge(views)
        if self.gradient_cache is not None and torch.is_grad_enabled():
            return split_output(self.gradient_cache.encode(model, merged, **forward_kwargs), sizes)
        return split_output(model(**merged, **forward_kwargs), sizes)

    def projections(self, model: nn.Module, views: Sequence[Mapping[str, Tensor]]) -> list[Tensor]:
        """The ``projections`` (what the losses use) of each view, one forward pass."""
        return [out["projections"] for out in self.encode(model, views)]

    def eval_representations(self, model: nn.Module, inputs: Mapping[str, Any]) -> tuple[Tensor, ...]:
        """:meth:`eval_views` encoded in one pass, each as ``args.eval_representation`` ``(B, D)`` float."""
        key = self.args.eval_representation
        return tuple(out[key].float() for out in self.encode(model, self.eval_views(inputs)))
