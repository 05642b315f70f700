"""LOCAL: the paired-input framework (docs/methods.md §3a) — ``α·(OCL(z) + β·OCL(l)) + (1 − α)·WCE``.

Rows hold a pair of images (``image_pre``, ``image_post``) and the class of the pair (e.g. the kind of
change between them). Both images go through the shared encoder in one forward pass with their stage
feature maps; :class:`hf_contrast.losses.LOCALLoss` combines OCL on the projection difference, β · OCL on
the latent feature-correlation embedding, and the class-weighted cross-entropy of its pair classifier,
weighted by α (``alpha_schedule``: ``"inverse_epoch"`` α = alpha / (1 + e) at the integer epoch e, or
``"constant"``). ``contrastive="supcon"`` gives the paper's L-SCL baseline. Class weights are
1/frequency over the training set. The pair classifier is part of this objective (trained,
checkpointed, used by :meth:`classify`), not of the saved encoder.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn
from transformers import EvalPrediction

from hf_contrast.errors import InputError

from ..losses.local import LOCALLoss, local_alpha, pair_difference
from ..metrics.probes import macro_f1
from ..tensor_checks import check_choice, check_int, check_name, check_unit_interval
from ..views import ViewBuilder
from .base import Objective
from .config import loss_config
from .registry import register_objective

__all__ = ["LOCALConfig", "LOCALObjective"]

_ALPHA_SCHEDULES = ("inverse_epoch", "constant")


@dataclass
class LOCALConfig(loss_config(LOCALLoss)):  # beta, temperature, contrastive: declared by LOCALLoss
    alpha: float = field(default=1.0, metadata={"help": "LOCAL: initial / constant α in [0, 1]."})
    alpha_schedule: str = field(
        default="inverse_epoch", metadata={"help": "LOCAL: schedule of α, 'inverse_epoch' or 'constant'."}
    )
    num_labels: int | None = field(
        default=None, metadata={"help": "LOCAL: pair classes; default from the training set's ClassLabel or max+1."}
    )
    pre_column: str = field(default="image_pre", metadata={"help": "LOCAL: column of the first image of a pair."})
    post_column: str = field(default="image_post", metadata={"help": "LOCAL: column of the second image of a pair."})

    def validate(self) -> None:
        super().validate()  # beta, temperature, contrastive
        check_unit_interval("alpha", self.alpha)
        check_choice("alpha_schedule", self.alpha_schedule, _ALPHA_SCHEDULES)
        check_int("num_labels", self.num_labels, 2, allow_none=True)
        for name in ("pre_column", "post_column"):
            check_name(name, getattr(self, name))


class PairClassifierMetrics:
    """``compute_metrics`` for LOCAL's ``(z, logits)`` predictions: ``embedding_metrics(z)`` plus the
    classifier's ``accuracy`` and ``macro_f1`` (with labels)."""

    def __init__(self, embedding_metrics: Callable[[Any], dict[str, float]]) -> None:
        self.embedding_metrics = embedding_metrics

    def possible_metrics(self, labels: bool = True) -> tuple[str, ...] | None:
        """The embedding metrics' names (``None`` when not known) and, with ``labels``, ``accuracy``, ``macro_f1``."""
        names = getattr(self.embedding_metrics, "possible_metrics", None)
        known = names(views=False, labels=labels) if names is not None else None
        return None if known is None else (*known, *(("accuracy", "macro_f1") if labels else ()))

    def __call__(self, eval_pred: Any) -> dict[str, float]:
        z, logits = eval_pred.predictions
        labels = eval_pred.label_ids
        metrics = self.embedding_metrics(EvalPrediction(predictions=(z,), label_ids=labels))
        labels_t = torch.as_tensor(labels)
        if labels_t.numel() and bool((labels_t >= 0).all()):
            predicted = torch.as_tensor(logits).argmax(dim=1)
            metrics["accuracy"] = float((predicted == labels_t).float().mean())
            metrics["macro_f1"] = macro_f1(predicted, labels_t, num_classes=int(torch.as_tensor(logits).shape[1]))
        return metrics


@register_objective("local")
class LOCALObjective(Objective):
    """LOCAL on paired images (a timm encoder: its stage maps feed the latent correlation module)."""

    config_class = LOCALConfig
    config: LOCALConfig
    needs_labels = True
    paired_inputs = True
    gathers_negatives = False  # each process scores its own pairs

    def setup(self, views: ViewBuilder, train_dataset: Any) -> None:
        super().setup(views, train_dataset)
        views.check_pairs(self.config.pre_column, self.config.post_column)
        column = views.args.label_column
        if (
            train_dataset is None
            or not hasattr(train_dataset, "column_names")
            or column not in train_dataset.column_names
        ):
            raise InputError(
                f"LOCAL needs a training `datasets.Dataset` with the label column `label_column`={column!r} "
                "(the class weights are 1/frequency over it)."
            )
        labels = list(train_dataset[column])
        num_labels, source = self.config.num_labels, "`num_labels`"
        if num_labels is None:
            feature = getattr(train_dataset, "features", {}).get(column)
            num_labels = getattr(feature, "num_classes", None)
            source = "its `ClassLabel`"
            if not num_labels:
                num_labels, source = max(labels) + 1, "its largest label + 1"
        counts = torch.bincount(torch.tensor(labels, dtype=torch.long), minlength=num_labels)
        if counts.numel() != num_labels:
            raise InputError(f"`num_labels`={num_labels} is smaller than the largest training label {max(labels)}.")
        empty = (counts == 0).nonzero().flatten().tolist()
        if empty:  # LOCALLoss weights each class by 1/its training frequency
            raise InputError(
                f"`train_dataset`'s `label_column`={column!r} has no rows of the classes {empty[:8]} of "
                f"0..{num_labels - 1} ({source}); LOCAL weights each class by 1/its training frequency and its "
                "classifier learns only the classes it trains on. Add training pairs of those classes, or renumber "
                "the labels 0..K-1 without gaps."
            )
        c = self.config
        self.loss = LOCALLoss(
            embedding_dim=views.model.embedding_dim,
            num_classes=num_labels,
            class_counts=counts.tolist(),
            beta=c.beta,
            temperature=c.temperature,
            contrastive=c.contrastive,
        )

    def classifier_classes(self) -> int | None:
        """The pair classifier's classes: ``num_labels``, or counted from the training set (``None`` before
        :meth:`setup`)."""
        loss = getattr(self, "loss", None)
        return None if loss is None else loss.num_classes

    def required_columns(self, views: ViewBuilder) -> list[str | tuple[str, ...]]:
        return [self.config.pre_column, self.config.post_column, (views.args.label_column, "labels")]

    def train_collator(self, views: ViewBuilder) -> Callable[[list[dict[str, Any]]], dict[str, Any]]:
        """Training pairs: one shared random crop/flip per pair (:func:`~hf_contrast.views.paired_transform`)."""
        return views.paired_collator(self.config.pre_column, self.config.post_column, train=True)

    def eval_collator(self, views: ViewBuilder) -> Callable[[list[dict[str, Any]]], dict[str, Any]]:
        """Evaluation pairs: the deterministic resize / centre-crop / normalise of each image."""
        return views.paired_collator(self.config.pre_column, self.config.post_column, train=False)

    def alpha(self, views: ViewBuilder) -> float:
        """α at the current integer epoch."""
        return local_alpha(int(views.epoch), self.config.alpha_schedule, self.config.alpha)

    def _encode(
        self, model: nn.Module, inputs: Mapping[str, Any], views: ViewBuilder, maps: bool
    ) -> list[dict[str, Any]]:
        pair = [views.view(inputs, "pre"), views.view(inputs, "post")]
        return views.encode(model, pair, output_feature_maps=maps)

    def forward(self, model: nn.Module, inputs: Mapping[str, Any], views: ViewBuilder) -> dict[str, Tensor]:
        labels = views.labels(inputs)
        pre, post = self._encode(model, inputs, views, maps=self.config.beta > 0)
        return self.loss(
            pre["embeddings"],
            post["embeddings"],
            pre["projections"],
            post["projections"],
            labels,
            pre.get("feature_maps"),
            post.get("feature_maps"),
            alpha=self.alpha(views),
        )

    def eval_embeddings(self, model: nn.Module, inputs: Mapping[str, Any], views: ViewBuilder) -> tuple[Tensor, ...]:
        """``(z, logits)``: the pair representation ``z = n(n(e_pre) − n(e_post))`` OCL shapes, and the pair
        classifier's logits. Shapes: ``(B, P)``, ``(B, K)``."""
        pre, post = self._encode(model, inputs, views, maps=False)
        z = pair_difference(pre["projections"], post["projections"]).float()
        return z, self.loss.classify(pre["embeddings"], post["embeddings"]).float()

    def compute_metrics(self, args: Any) -> Callable[[Any], dict[str, float]]:
        """Embedding metrics of ``z`` plus the pair classifier's ``accuracy`` and ``macro_f1``."""
        return PairClassifierMetrics(super().compute_metrics(args))

    @torch.no_grad()
    def classify(self, model: nn.Module, inputs: Mapping[str, Any], views: ViewBuilder) -> Tensor:
        """Pair-classifier logits ``(B, K)`` of a batch."""
        pre, post = self._encode(model, inputs, views, maps=False)
        return self.loss.classify(pre["embeddings"], post["embeddings"]).float()
