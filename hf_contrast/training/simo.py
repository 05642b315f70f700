"""``SimOTrainer``: SimO's anchor-free contrastive learning on class-major batches (docs/methods.md §5)."""

from __future__ import annotations

import warnings
from typing import Any, ClassVar

import torch
from torch import Tensor, nn
from torch.utils.data import Sampler

from ..losses import AFCLLoss
from .samplers import AFCLBatchSampler
from .trainer import ContrastiveTrainer

__all__ = ["SimOTrainer"]


class SimOTrainer(ContrastiveTrainer):
    """SimO / AFCL (https://arxiv.org/abs/2410.05233): similarity–orthogonality over class groups.

    Training batches come from :class:`AFCLBatchSampler`: ``C = args.classes_per_batch`` classes ×
    ``k = args.samples_per_class`` samples, class-major, ``2C <`` number of classes;
    ``per_device_train_batch_size`` must equal ``C·k``. The raw projections (SimO does not
    normalise) of ``n_views`` views (default 1; with 2 the views of a class form a group of
    ``2k``) go to :class:`AFCLLoss`, which logs ``same``, ``mean`` and ``diff``.
    ``gather_distributed`` does not apply: each process's AFCL batch is its own set of groups.

    Raises:
        ValueError: if ``classes_per_batch`` / ``samples_per_class`` are unset or ``C·k`` differs
            from ``per_device_train_batch_size``.
    """

    method: ClassVar[str] = "simo"
    default_n_views: ClassVar[int] = 1

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        c, k = self.args.classes_per_batch, self.args.samples_per_class
        if c * k != self.args.per_device_train_batch_size:
            raise ValueError(
                f"`per_device_train_batch_size`={self.args.per_device_train_batch_size} must equal "
                f"`classes_per_batch` × `samples_per_class` = {c} × {k} = {c * k} (AFCL batches are class-major)."
            )
        if self.args.gather_distributed:
            warnings.warn(
                "SimOTrainer ignores `gather_distributed`: AFCL groups are formed per process.", UserWarning, stacklevel=2
            )

    def build_loss(self) -> nn.Module:
        """:class:`AFCLLoss` with ``n_classes = classes_per_batch`` and ``olean``."""
        c, k = self.args.classes_per_batch, self.args.samples_per_class
        if c is None or k is None:
            raise ValueError(
                "SimOTrainer needs `classes_per_batch` and `samples_per_class` in the training arguments "
                f"(got {c!r} and {k!r})."
            )
        return AFCLLoss(n_classes=c, olean=self.args.olean)

    def train_batch_sampler(self) -> Sampler[list[int]]:
        """Class-major ``C × k`` batches, epoch-aware; Accelerate shards them over processes."""
        column = self.args.label_column
        if not hasattr(self.train_dataset, "column_names"):
            raise ValueError(
                "SimOTrainer builds class-major batches from the labels of a `datasets.Dataset` (it reads "
                f"`train_dataset[label_column]`); got a {type(self.train_dataset).__name__}. Wrap your data with "
                "`datasets.Dataset.from_dict(...)` or pass a `datasets.Dataset`."
            )
        if column not in self.train_dataset.column_names:
            raise ValueError(f"SimOTrainer needs class labels: the training dataset has no `label_column`={column!r}.")
        seed = self.args.data_seed if self.args.data_seed is not None else self.args.seed
        return AFCLBatchSampler(
            list(self.train_dataset[column]),
            classes_per_batch=self.args.classes_per_batch,
            samples_per_class=self.args.samples_per_class,
            shuffle=True,
            seed=seed,
            drop_last=True,
            num_replicas=1,
            rank=0,
        )

    def compute_contrastive_loss(self, model: nn.Module, inputs: dict[str, Any]) -> dict[str, Tensor]:
        """AFCL terms of the class-major batch (views of a class grouped together)."""
        z_views = self.projections(model, self.augmented_views(inputs, self.num_views))
        c = self.args.classes_per_batch
        if len(z_views) == 1:
            e = z_views[0]
        else:  # (V, C·k, D) -> (C, V·k, D): each class's group holds all its views
            stacked = torch.stack(z_views)
            v, n, d = stacked.shape
            e = stacked.reshape(v, c, n // c, d).transpose(0, 1).reshape(n * v, d)
        return self.loss(e)
