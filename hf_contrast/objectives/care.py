"""CARE and CARE-MoCo: InfoNCE (or MoCo's queue InfoNCE) + λ · rotational equivariance on chunk-shared views.

CARE (https://arxiv.org/abs/2306.13924, docs/methods.md §4). Per batch: two per-sample SimCLR views
(invariance, built by the CPU collator) and two equivariance views: the collator passes the resized
un-normalised images (``pixel_values_eq``) and :class:`hf_contrast.views.ChunkedAugmentation` draws one
augmentation pair per chunk of ``n_splits`` on the training device. Text uses SimCSE dropout views (or
``text_pair_column``) for invariance and :class:`hf_contrast.views.ChunkedTextAugmentation` for
equivariance. All views share one forward pass. ``share_views=True`` computes InfoNCE on the equivariance
views (two forward passes fewer, weaker invariance views).

Ragged batches: chunks must be whole, so training batches must be a multiple of ``n_splits`` — the trainer
checks ``per_device_train_batch_size`` before training and drops a ragged last batch of an epoch (see
:attr:`Objective.batch_multiple`); a ragged evaluation batch is not scored (:meth:`eval_loss` returns None).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor, nn

from .. import distributed
from ..losses import CARELoss, CAREMoCoLoss
from ..views import ViewBuilder
from ..tensor_checks import check_bool, check_int, check_unit_interval
from .base import Objective, ObjectiveConfig
from .moco import MoCoState, MomentumUpdateCallback
from .registry import register_objective

__all__ = ["CAREConfig", "CAREObjective", "CAREMoCoConfig", "CAREMoCoObjective"]


@dataclass
class CAREConfig(ObjectiveConfig):
    temperature: float = field(default=0.5, metadata={"help": "CARE: InfoNCE temperature τ > 0."})
    care_weight: float = field(default=0.01, metadata={"help": "CARE: weight λ >= 0 of the equivariance term."})
    n_splits: int = field(
        default=8,
        metadata={"help": "CARE: chunks S sharing one augmentation pair; must divide the per-device batch size."},
    )
    share_views: bool = field(
        default=False,
        metadata={"help": "CARE: InfoNCE on the chunk-shared views (two forward passes fewer, weaker invariance)."},
    )

    def validate(self) -> None:
        CARELoss.hyperparameters_class.check_fields_of(self)  # temperature, care_weight, n_splits
        check_bool("share_views", self.share_views)


class _ChunkedObjective(Objective):
    """Shared machinery of the chunked methods: the equivariance augmentation and views."""

    config: CAREConfig

    def __init__(
        self,
        config: ObjectiveConfig | None = None,
        equivariance_augmentation: Callable[..., tuple[Any, Any]] | None = None,
        **hyperparameters: Any,
    ) -> None:
        super().__init__(config, **hyperparameters)
        self.equivariance_augmentation = equivariance_augmentation

    @property
    def batch_multiple(self) -> int:
        return self.config.n_splits

    def setup(self, views: ViewBuilder, train_dataset: Any) -> None:
        super().setup(views, train_dataset)
        batch, n = views.args.per_device_train_batch_size, self.config.n_splits
        if train_dataset is not None and batch // n < 2:  # the trainer checked it is a multiple of n
            raise ValueError(
                f"`per_device_train_batch_size`={batch} gives chunks of {batch // n} sample(s) for `n_splits`={n}; "
                f"every chunk needs at least 2 samples: use a batch size of at least {2 * n} (a multiple of {n}) "
                "or a smaller `n_splits`."
            )
        if self.equivariance_augmentation is None:
            self.equivariance_augmentation = views.chunked_augmentation(self.config.n_splits)

    def train_collator(self, views: ViewBuilder) -> Callable[[list[dict[str, Any]]], dict[str, Any]]:
        return views.collator(n_views=0 if self.config.share_views else 2, raw=True)

    def eval_collator(self, views: ViewBuilder) -> Callable[[list[dict[str, Any]]], dict[str, Any]]:
        return views.collator(n_views=2, deterministic=True, raw=True)

    def equivariance_views(self, inputs: Mapping[str, Any], views: ViewBuilder) -> list[dict[str, Tensor]]:
        """The two chunk-shared views of the batch, built on its device."""
        return views.chunked_views(self.equivariance_augmentation, inputs)  # type: ignore[arg-type]

    def eval_loss(self, model: nn.Module, inputs: Mapping[str, Any], views: ViewBuilder) -> Tensor | None:
        size = views.chunked_batch_size(inputs)
        if size is None or size % self.config.n_splits or size // self.config.n_splits < 2:
            return None  # a ragged evaluation batch has no whole chunks
        return super().eval_loss(model, inputs, views)


@register_objective("care")
class CAREObjective(_ChunkedObjective):
    """CARE-SimCLR: ``InfoNCE(z1, z2) + care_weight · L_equi`` (terms ``invariance``, ``equivariance``).

    Args:
        equivariance_augmentation: Replaces the default chunked augmentation. Images: a callable
            ``(B, C, H, W) uint8 → (view1, view2)`` normalised; text: ``batch dict → (view1, view2)``.
        **hyperparameters: :class:`CAREConfig` fields.
    """

    config_class = CAREConfig

    def setup(self, views: ViewBuilder, train_dataset: Any) -> None:
        super().setup(views, train_dataset)
        c = self.config
        self.loss = CARELoss(c.temperature, c.care_weight, c.n_splits, gather_distributed=views.gather_distributed)

    def forward(self, model: nn.Module, inputs: Mapping[str, Any], views: ViewBuilder) -> dict[str, Tensor]:
        eq1, eq2 = self.equivariance_views(inputs, views)
        if self.config.share_views:
            z1, z2 = views.projections(model, [eq1, eq2])
            return self.loss(z1, z2)
        z1, z2, e1, e2 = views.projections(model, [*views.augmented(inputs, 2), eq1, eq2])
        return self.loss(z1, z2, e1, e2)


@dataclass
class CAREMoCoConfig(CAREConfig):
    temperature: float = field(default=0.2, metadata={"help": "CARE-MoCo: temperature of the queue InfoNCE."})
    moco_momentum: float = field(default=0.99, metadata={"help": "CARE-MoCo: EMA momentum m in [0, 1)."})
    moco_queue_size: int = field(default=4096, metadata={"help": "CARE-MoCo: number of negative keys in the queue."})

    def validate(self) -> None:
        CAREMoCoLoss.hyperparameters_class.check_fields_of(self)  # temperature, care_weight, n_splits
        check_bool("share_views", self.share_views)
        check_unit_interval("moco_momentum", self.moco_momentum, include_one=False)
        check_int("moco_queue_size", self.moco_queue_size, 1)


@register_objective("care_moco")
class CAREMoCoObjective(_ChunkedObjective):
    """CARE with a MoCo-v2 invariance term: a momentum key encoder and a queue of negatives (both part of
    this objective's ``state_dict``, so checkpointed). Terms ``invariance``, ``equivariance``."""

    config_class = CAREMoCoConfig
    config: CAREMoCoConfig

    def setup(self, views: ViewBuilder, train_dataset: Any) -> None:
        super().setup(views, train_dataset)
        c = self.config
        self.loss = CAREMoCoLoss(c.temperature, c.care_weight, c.n_splits)
        self.moco = MoCoState(views.model, queue_size=c.moco_queue_size, momentum=c.moco_momentum, seed=views.seed)

    def callbacks(self) -> list[Any]:
        return [MomentumUpdateCallback(self.moco)]

    def forward(self, model: nn.Module, inputs: Mapping[str, Any], views: ViewBuilder) -> dict[str, Tensor]:
        eq1, eq2 = self.equivariance_views(inputs, views)
        if self.config.share_views:
            e1, e2 = views.projections(model, [eq1, eq2])
            q, key_view = e1, eq2
        else:
            view1, key_view = views.augmented(inputs, 2)
            q, e1, e2 = views.projections(model, [view1, eq1, eq2])
        self.moco.key_encoder.train(model.training)
        k = self.moco.keys(**key_view)
        queue = self.moco.queue_for(k.shape[1], k.device)
        terms = self.loss(q, k, queue, e1, e2)
        if model.training:  # MoCo enqueues the keys of all processes
            self.moco.enqueue(distributed.gather(k))
        return terms
