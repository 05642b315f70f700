"""SimO / AFCL: anchor-free similarity–orthogonality over class-major batches (docs/methods.md §5).

Training batches come from :class:`~hf_contrast.training.AFCLBatchSampler`: ``C = classes_per_batch``
classes × ``k = samples_per_class`` samples, class-major, ``2C <`` the number of classes;
``per_device_train_batch_size`` must equal ``C·k``; a batch that lost unreadable images
(``on_bad_image="skip"``) keeps ``C`` groups of its smallest group's size (``dropped_rows`` counts the rest).
The raw projections (SimO does not normalise) of
``n_views`` views (default 1; with 2 the views of a class form a group of ``2k``) go to
:class:`~hf_contrast.losses.AFCLLoss`, which logs ``same``, ``mean`` and ``diff``. Each process scores its own
AFCL batch; with ``gather_distributed=True`` the ``R`` processes' batches of a step hold ``R·C`` distinct classes
(:class:`~hf_contrast.views.AFCLBatchSampler`'s ``distinct_across``) and every process scores them as one batch
(docs/methods.md §5), so ``2·R·C`` must be fewer than the classes. Training logs carry
``class_mean_abs_cos``, the mean ``|cos|`` between the class means of the training batches (0: orthogonal
classes, what AFCL aims at; :mod:`hf_contrast.objectives.geometry`). There is no ``eval_loss`` (evaluation
batches are not class-major): choose the best checkpoint with a metric (``metric_for_best_model``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from hf_contrast.errors import InputError

from ..losses import AFCLLoss
from ..tensor_checks import check_bool, check_choice, check_int
from ..views import AFCLBatchSampler, ViewBuilder, WholeClassGroups
from .base import Objective
from .config import ObjectiveConfig, loss_config
from .geometry import GeometryMonitor, class_mean_abs_cosine
from .registry import register_objective

__all__ = ["SimOConfig", "SimOObjective"]


@dataclass
class SimOConfig(loss_config(AFCLLoss)):  # olean: declared by AFCLLoss
    classes_per_batch: int = field(
        default=4, metadata={"help": "SimO/AFCL: classes C per batch (fewer than half the classes)."}
    )
    samples_per_class: int = field(default=8, metadata={"help": "SimO/AFCL: samples k per class in a batch (>= 2)."})
    n_views: int = field(default=1, metadata={"help": "SimO: augmented views per sample (1 or 2)."})
    replacement: bool = field(
        default=False,
        metadata={
            "help": "SimO/AFCL: draw a class's k samples with replacement (allows classes with fewer than k samples)."
        },
    )

    def validate(self) -> None:
        check_int("classes_per_batch", self.classes_per_batch, 2)
        check_int("samples_per_class", self.samples_per_class, 2)
        super().validate()  # olean
        check_choice("n_views", self.n_views, (1, 2))
        check_bool("replacement", self.replacement)


@register_objective("simo")
class SimOObjective(Objective):
    """SimO / AFCL (https://arxiv.org/abs/2410.05233) on class-major ``C × k`` batches."""

    config_class = SimOConfig
    config: SimOConfig
    needs_labels = True
    has_eval_loss = False

    def __init__(self, config: ObjectiveConfig | None = None, **hyperparameters: Any) -> None:
        super().__init__(config, **hyperparameters)
        self.geometry = GeometryMonitor()

    @property
    def needs_full_batches(self) -> bool:
        return True

    def log_statistics(self) -> dict[str, float]:
        """``class_mean_abs_cos``: the mean ``|cos|`` between the class means of a training batch, averaged over
        the batches since the last log (0 when the classes are orthogonal)."""
        return self.geometry.drain()

    @property
    def batch_size(self) -> int:
        """``C · k``: the per-device training batch size it needs."""
        return self.config.classes_per_batch * self.config.samples_per_class

    def setup(self, views: ViewBuilder, train_dataset: Any) -> None:
        super().setup(views, train_dataset)
        per_device = views.args.per_device_train_batch_size
        if per_device != self.batch_size:
            c, k = self.config.classes_per_batch, self.config.samples_per_class
            raise InputError(
                f"`per_device_train_batch_size`={per_device} must equal `classes_per_batch` × `samples_per_class` = "
                f"{c} × {k} = {self.batch_size} (AFCL batches are class-major); set `per_device_train_batch_size`="
                f"{self.batch_size}, or `classes_per_batch` / `samples_per_class` whose product is {per_device}."
            )
        if self.gathered_batches(views) > 1 and views.args.on_bad_image == "skip":
            raise InputError(
                "`gather_distributed=True` makes the processes' class groups one AFCL batch, whose groups need one "
                "size; `on_bad_image='skip'` would shrink the groups of a process whose batch held an unreadable "
                "image. Use `on_bad_image='raise'` (the start-up scan names every bad file), or "
                "`gather_distributed=False`."
            )
        if train_dataset is not None and hasattr(train_dataset, "column_names"):
            self.train_batch_sampler(train_dataset, views)  # its checks (classes, class sizes) before any work
        self.loss = AFCLLoss(
            n_classes=self.config.classes_per_batch,
            olean=self.config.olean,
            gather_distributed=views.gather_distributed,
        )

    @staticmethod
    def gathered_batches(views: ViewBuilder) -> int:
        """``R``, the batches scored as one: every process's with ``gather_distributed=True``, else 1."""
        return views.args.world_size if views.gather_distributed else 1

    def train_collator(self, views: ViewBuilder) -> Any:
        """``n_views`` views per sample; a batch that lost unreadable rows (``on_bad_image="skip"``) keeps ``C``
        equal class groups (:class:`~hf_contrast.views.WholeClassGroups`, the rest counted in ``dropped_rows``)."""
        return views.collator(n_views=self.config.n_views, whole_rows=WholeClassGroups(self.config.classes_per_batch))

    def train_batch_sampler(self, dataset: Any, views: ViewBuilder) -> AFCLBatchSampler:
        """Class-major ``C × k`` batches, epoch-aware; Accelerate shards them over processes.

        Raises:
            InputError: if the dataset is streamed, or not a ``datasets.Dataset`` with the label column.
        """
        column = views.args.label_column
        if isinstance(dataset, torch.utils.data.IterableDataset):  # its rows come in their order, none drawn by index
            raise InputError(
                "SimO trains on class-major batches (`classes_per_batch` classes × `samples_per_class` rows of each), "
                "drawn by class from the training set's rows; a streaming training set gives its rows in its own "
                "order, which cannot be drawn by class: its batches' groups would not be classes. Load the training "
                "set as a `datasets.Dataset` (without `streaming=True`, or `datasets.Dataset.from_list(list(stream))` "
                "for one that fits in memory)."
            )
        if not hasattr(dataset, "column_names"):
            raise InputError(
                "SimO builds class-major batches from the labels of a `datasets.Dataset` (it reads "
                f"`train_dataset[label_column]`); got a {type(dataset).__name__}. Wrap your data with "
                "`datasets.Dataset.from_dict(...)` or pass a `datasets.Dataset`."
            )
        if column not in dataset.column_names:
            raise InputError(f"SimO needs class labels: the training dataset has no `label_column`={column!r}.")
        gathered = self.gathered_batches(views)
        try:
            return AFCLBatchSampler(
                list(dataset[column]),
                classes_per_batch=self.config.classes_per_batch,
                samples_per_class=self.config.samples_per_class,
                shuffle=True,
                seed=views.seed,
                drop_last=True,
                replacement=self.config.replacement,
                num_replicas=1,
                rank=0,
                distinct_across=gathered,  # Accelerate deals a step's R batches to R processes
            )
        except InputError as error:  # name SimO's own options (the sampler's are not passed by the user)
            across = (
                f" `distinct_across`={gathered}: `gather_distributed=True` on {gathered} processes scores their "
                f"batches as one (or set it to False)."
                if gathered > 1
                else ""
            )
            raise InputError(
                f"SimO's class-major batches of the training set (`label_column`={column!r}): {error}{across} These "
                "are SimOObjective's options: `SimOObjective(classes_per_batch=..., samples_per_class=..., "
                "replacement=True)`, or the flags `--classes_per_batch`, `--samples_per_class`, `--replacement` of "
                "examples/run_simo.py."
            ) from error

    def forward(self, model: nn.Module, inputs: Mapping[str, Any], views: ViewBuilder) -> dict[str, Tensor]:
        z_views = views.projections(model, views.augmented(inputs, self.config.n_views))
        c = self.config.classes_per_batch
        if len(z_views) == 1:
            e = z_views[0]
        else:  # (V, C·k, D) -> (C, V·k, D): each class's group holds all its views
            stacked = torch.stack(z_views)
            v, n, d = stacked.shape
            e = stacked.reshape(v, c, n // c, d).transpose(0, 1).reshape(n * v, d)
        if model.training:
            self.geometry.add("class_mean_abs_cos", class_mean_abs_cosine(e, c))
            self.geometry.count_step()
        return self.loss(e)
