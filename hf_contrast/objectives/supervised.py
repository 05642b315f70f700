"""SupCon and OCL: supervised contrastive losses over ``n_views`` labelled views (docs/methods.md §2–3).

The views of a batch are flattened view-major with their labels repeated, so with ``n_views=2``
(default) every anchor has a positive (its other view). With ``n_views=1`` a batch whose labels all
differ has no positive pair: it is skipped (zero loss connected to the graph, counted in the logged
``skipped_batches``), never a crash.

Geometry: training logs carry ``negative_cos_below_zero``, the fraction of pairs of different classes in
the training batches (within each process's batch, all views) whose cosine similarity is negative
(:mod:`hf_contrast.objectives.geometry`). OCL's loss equals SupCon's on a batch where it is 0, so OCL
warns once when no such pair has been seen in its first :attr:`OCLObjective.identical_warning_steps`
training steps (or by the end of a shorter run): the run is then training exactly as SupCon would.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import Tensor, nn
from transformers import TrainerCallback

import hf_contrast.distributed as distributed
from hf_contrast.errors import InputError

from ..data.checks import dataset_classes
from ..losses import OCLoss, SupConLoss
from ..tensor_checks import check_choice
from ..views import ViewBuilder
from .base import Objective
from .config import ObjectiveConfig, loss_config
from .geometry import GeometryMonitor, negative_cosine_counts
from .registry import register_objective

__all__ = ["SupConConfig", "SupConObjective", "OCLObjective"]


@dataclass
class SupConConfig(loss_config(SupConLoss)):  # temperature: declared by SupConLoss (OCL shares it)
    n_views: int = field(default=2, metadata={"help": "SupCon/OCL: augmented views per sample (1 or 2)."})

    def validate(self) -> None:
        super().validate()  # temperature
        check_choice("n_views", self.n_views, (1, 2))


_ONE_CLASS = "one_class_batches"  # a GeometryMonitor entry read with the others, not logged


@register_objective("supcon")
class SupConObjective(Objective):
    """SupCon (https://arxiv.org/abs/2004.11362) on the flattened views; needs ``label_column``."""

    config_class = SupConConfig
    config: SupConConfig
    needs_labels = True
    loss_class: type[nn.Module] = SupConLoss

    def __init__(self, config: ObjectiveConfig | None = None, **hyperparameters: Any) -> None:
        super().__init__(config, **hyperparameters)
        self.skipped_batches = 0
        self.geometry = GeometryMonitor()

    def setup(self, views: ViewBuilder, train_dataset: Any) -> None:
        """Build the loss; reject, before training, a training set whose labels hold one class.

        Raises:
            ValueError: if the per-device batch is 1 sample, or the label column of ``train_dataset``
                (when it can be read cheaply, :func:`~hf_contrast.data.checks.dataset_classes`) holds
                fewer than 2 classes.
        """
        super().setup(views, train_dataset)
        classes = dataset_classes(train_dataset, views.args.label_column) if train_dataset is not None else None
        if classes is not None:
            self.check_classes(classes, views)
        self.loss = self.loss_class(temperature=self.config.temperature, gather_distributed=views.gather_distributed)
        # two views of each sample: every anchor has a positive, so the loss need not read the batch on the host;
        # one-class batches are counted on the device and said at the next log (`log_statistics`)
        self.loss.check_batch = self.config.n_views < 2

    def check_classes(self, classes: list[Any], views: ViewBuilder) -> None:
        """Raise ``ValueError`` if the training labels ``classes`` (distinct values) cannot train this objective."""
        column = views.args.label_column
        if len(classes) < 2:
            raise InputError(
                f"`train_dataset` holds a single class ({classes[0]!r}) in `label_column`={column!r}: "
                f"{type(self).__name__} learns by contrasting classes, with one class it has no negatives and only "
                "collapses the embeddings. Use a dataset with 2 or more classes, check `label_column`, or train "
                "without labels (e.g. objective='simclr')."
            )

    def train_collator(self, views: ViewBuilder) -> Any:
        return views.collator(n_views=self.config.n_views)

    def eval_collator(self, views: ViewBuilder) -> Any:
        return views.collator(n_views=max(2, self.config.n_views), deterministic=True)

    def has_positive_pair(self, labels: Tensor, views: ViewBuilder) -> bool:
        """Whether some label occurs twice (over all processes when gathering: every process agrees)."""
        if views.gather_distributed and distributed.world_size() > 1:
            labels = distributed.gather(labels)
        return bool(torch.unique(labels).numel() < labels.numel())

    def forward(self, model: nn.Module, inputs: Mapping[str, Any], views: ViewBuilder) -> dict[str, Tensor]:
        labels = views.labels(inputs)
        z_views = views.projections(model, views.augmented(inputs, self.config.n_views))
        z = torch.cat(z_views)
        y = labels.repeat(len(z_views))
        # With two views every anchor has a positive (its other view): no check, no host sync.
        if len(z_views) == 1 and not self.has_positive_pair(y, views):
            self.skipped_batches += 1
            warnings.warn(
                f"{type(self).__name__}: skipped a batch with no positive pair ({y.numel()} samples, all of different "
                "classes); use larger batches or two views per sample (`n_views=2`). Training continues; the count "
                "is logged as `skipped_batches`.",
                RuntimeWarning,
                stacklevel=2,
            )
            return {"loss": z.sum() * 0.0, "skipped": torch.ones((), device=z.device)}
        if model.training:
            below, negatives = negative_cosine_counts(z, y)
            self.geometry.add("negative_cos_below_zero", below, negatives)
            self.geometry.add(_ONE_CLASS, negatives == 0)
            self.geometry.count_step()
        return {"loss": self.loss(z, y)}

    def log_statistics(self) -> dict[str, float]:
        """``negative_cos_below_zero``: of the pairs of different classes in the training batches since the
        last log, the fraction with a negative cosine similarity (pairs within each process's batch). Warns when
        some of those batches held a single class (no negatives: the loss only pulled them together)."""
        statistics = self.geometry.drain()
        one_class = statistics.pop(_ONE_CLASS, 0.0)
        if one_class > 0 and not self.loss.check_batch:  # else the loss warned at the batch itself
            warnings.warn(
                f"{type(self).__name__}: {one_class:.0%} of the training batches since the last log held one class, "
                "so they had no negatives: the loss only pulled them together. Batches need 2 or more classes "
                "(shuffle the data, use larger batches or a class-balanced sampler).",
                RuntimeWarning,
                stacklevel=2,
            )
        return statistics


@register_objective("ocl")
class OCLObjective(SupConObjective):
    """OCL, the orthonormal contrastive loss of LOCAL (docs/methods.md §3): SupCon with every negative
    entering the denominator through ``|cos|``."""

    loss_class = OCLoss
    #: Training steps after which, at a log, OCL warns if no pair of different classes had a negative cosine.
    identical_warning_steps: ClassVar[int] = 10

    def __init__(self, config: ObjectiveConfig | None = None, **hyperparameters: Any) -> None:
        super().__init__(config, **hyperparameters)
        self.warned_identical_to_supcon = False

    def callbacks(self) -> list[TrainerCallback]:
        return [_IdenticalToSupConCheck(self)]

    def log_statistics(self) -> dict[str, float]:
        statistics = super().log_statistics()
        self.warn_if_identical_to_supcon()
        return statistics

    def warn_if_identical_to_supcon(self, end_of_training: bool = False) -> bool:
        """Warn (once) if no pair of different classes has had a negative cosine in the training steps so far,
        once :attr:`identical_warning_steps` steps were recorded or at ``end_of_training``: OCL's ``|cos|``
        then equalled SupCon's ``cos`` on every batch, so OCL trained exactly as SupCon would. One read of the
        device. Returns whether it warned now."""
        if self.warned_identical_to_supcon or self.geometry.steps == 0:
            return False
        if self.geometry.steps < self.identical_warning_steps and not end_of_training:
            return False
        below, negatives = self.geometry.totals().get("negative_cos_below_zero", (0.0, 0.0))
        if negatives == 0 or below > 0:
            return False
        self.warned_identical_to_supcon = True
        warnings.warn(
            f"{type(self).__name__}: in the first {self.geometry.steps} training steps no pair of different classes "
            "had a negative cosine similarity (logged `negative_cos_below_zero` = 0), so OCL's |cos| of the negatives "
            "equalled SupCon's cos: so far this run trains exactly as objective='supcon' would. OCL differs once "
            "classes are pushed past orthogonality. Try larger batches (more negatives per step), a lower "
            "`temperature`, longer training, and check that the encoder's `projection_dim` is at least the number "
            "of classes.",
            UserWarning,
            stacklevel=2,
        )
        return True

    def check_classes(self, classes: list[Any], views: ViewBuilder) -> None:
        """Also reject more classes than projection dimensions: OCL's minimum (orthogonal classes) needs ``P >= K``."""
        super().check_classes(classes, views)
        dim = getattr(getattr(views.model, "config", None), "projection_dim", None)
        if isinstance(dim, int) and len(classes) > dim:
            raise InputError(
                f"OCL makes the {len(classes)} classes of `train_dataset` mutually orthogonal, which needs at least "
                f"{len(classes)} projection dimensions, but the encoder's `projection_dim` is {dim}. Build the "
                f"encoder with `projection_dim` >= {len(classes)}, or use SupCon (objective='supcon'), which has no "
                "such bound."
            )


class _IdenticalToSupConCheck(TrainerCallback):
    """At the end of training, :meth:`OCLObjective.warn_if_identical_to_supcon` for runs shorter than its
    step threshold."""

    def __init__(self, objective: OCLObjective) -> None:
        self.objective = objective

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.objective.warn_if_identical_to_supcon(end_of_training=True)
