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
:attr:`Objective.batch_multiple`). A batch that lost unreadable images (``on_bad_image="skip"``) keeps the
largest whole ``n_splits`` chunks of its readable rows; the rest are counted as ``dropped_rows``
(:class:`~hf_contrast.views.WholeChunks`; ``n_splits`` never changes). Evaluation batches are cut into
chunks of their own (:meth:`_ChunkedObjective.eval_chunks`), so ``eval_loss`` exists at any evaluation batch
size of 2 or more, the Trainer's default 8 included.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor, nn

import hf_contrast.distributed as distributed
from hf_contrast.errors import InputError

from ..losses import CARELoss, CAREMoCoLoss
from ..tensor_checks import check_bool, check_int, check_unit_interval
from ..views import ViewBuilder, WholeChunks
from .base import Objective
from .config import ObjectiveConfig, loss_config
from .moco import MoCoState, MomentumUpdateCallback
from .registry import register_objective

__all__ = ["CAREConfig", "CAREObjective", "CAREMoCoConfig", "CAREMoCoObjective"]


@dataclass
class CAREConfig(loss_config(CARELoss)):  # temperature, care_weight, n_splits: declared by CARELoss
    share_views: bool = field(
        default=False,
        metadata={"help": "CARE: InfoNCE on the chunk-shared views (two forward passes fewer, weaker invariance)."},
    )

    def validate(self) -> None:
        super().validate()  # temperature, care_weight, n_splits
        check_bool("share_views", self.share_views)


class _ChunkedObjective(Objective):
    """Shared machinery of the chunked methods: the equivariance augmentation and views, and the chunks of
    an evaluation batch (:meth:`eval_chunks`)."""

    config: CAREConfig

    def __init__(
        self,
        config: ObjectiveConfig | None = None,
        equivariance_augmentation: Callable[..., tuple[Any, Any]] | None = None,
        **hyperparameters: Any,
    ) -> None:
        super().__init__(config, **hyperparameters)
        self.equivariance_augmentation = equivariance_augmentation
        self.custom_augmentation = equivariance_augmentation is not None
        self.train_chunk_size = 2
        self._eval_parts: dict[int, tuple[Callable[..., tuple[Any, Any]], nn.Module]] = {}
        self._warned_unscored = False

    @property
    def batch_multiple(self) -> int:
        return self.config.n_splits

    def build_loss(self, n_splits: int, views: ViewBuilder) -> nn.Module:
        """The loss module for batches cut into ``n_splits`` chunks."""
        raise NotImplementedError

    def setup(self, views: ViewBuilder, train_dataset: Any) -> None:
        super().setup(views, train_dataset)
        batch, n = views.args.per_device_train_batch_size, self.config.n_splits
        if train_dataset is not None and batch // n < 2:  # the trainer checked it is a multiple of n
            raise InputError(
                f"`per_device_train_batch_size`={batch} gives chunks of {batch // n} sample(s) for `n_splits`={n}; "
                f"every chunk needs at least 2 samples: use a batch size of at least {2 * n} (a multiple of {n}) "
                "or a smaller `n_splits`."
            )
        self.train_chunk_size = max(2, batch // n)
        if self.equivariance_augmentation is None:
            self.equivariance_augmentation = views.chunked_augmentation(self.config.n_splits)
        self.loss = self.build_loss(n, views)
        self._eval_parts = {n: (self.equivariance_augmentation, self.loss)}

    def train_collator(self, views: ViewBuilder) -> Callable[[list[dict[str, Any]]], dict[str, Any]]:
        """Per-sample views and the raw batch; a batch that lost unreadable rows (``on_bad_image="skip"``) keeps
        ``n_splits`` whole chunks (:class:`~hf_contrast.views.WholeChunks`, the rest counted in ``dropped_rows``)."""
        n_views = 0 if self.config.share_views else 2
        return views.collator(n_views=n_views, raw=True, whole_rows=WholeChunks(self.config.n_splits))

    def eval_collator(self, views: ViewBuilder) -> Callable[[list[dict[str, Any]]], dict[str, Any]]:
        """As training plus the deterministic view; only a custom augmentation (which cuts every batch into
        ``n_splits`` chunks) needs whole chunks — the default cuts each evaluation batch by :meth:`eval_chunks`."""
        whole = WholeChunks(self.config.n_splits) if self.custom_augmentation else None
        return views.collator(n_views=2, deterministic=True, raw=True, whole_rows=whole)

    def equivariance_views(
        self, inputs: Mapping[str, Any], views: ViewBuilder, augmentation: Callable[..., tuple[Any, Any]] | None = None
    ) -> list[dict[str, Tensor]]:
        """The two chunk-shared views of the batch, built on its device (by ``augmentation``, default the
        training one)."""
        return views.chunked_views(augmentation or self.equivariance_augmentation, inputs)  # type: ignore[arg-type]

    # ---- evaluation ---------------------------------------------------------------------------

    def eval_chunks(self, batch_size: int) -> int | None:
        """``S'``, the number of chunks an evaluation batch of ``batch_size`` samples is cut into for
        ``eval_loss``; ``None`` when it cannot be scored.

        ``L_equi`` is a mean over chunks of samples that share one augmentation pair (docs/methods.md §4);
        ``n_splits`` organises *training* batches. With the default equivariance augmentation the
        evaluation chunks are drawn for the evaluation batch: the most equal chunks that each hold at least
        the training chunk size ``m = per_device_train_batch_size / n_splits`` — exactly ``m`` when the
        batch is a multiple of ``m``, so an evaluation batch of the training size is scored as in training —
        or the whole batch as one chunk when it holds fewer than ``m`` samples (e.g. the Trainer's default
        evaluation batch of 8). A chunk of ``m'`` samples scales ``L_equi`` by ``2(m' − 1)`` times its mean
        pair error, as in training, so ``eval_loss`` is comparable between evaluations of one run (like
        InfoNCE's ``log B``, its scale follows the evaluation batch). A batch of one sample has no pair.

        A custom ``equivariance_augmentation`` cuts every batch into ``n_splits`` chunks itself, so
        evaluation batches must then be a multiple of ``n_splits`` with 2+ samples per chunk.
        """
        n = self.config.n_splits
        if self.custom_augmentation:
            return n if batch_size % n == 0 and batch_size // n >= 2 else None
        if batch_size < 2:
            return None
        least = min(self.train_chunk_size, batch_size)
        return max(s for s in range(1, batch_size + 1) if batch_size % s == 0 and batch_size // s >= least)

    @property
    def min_eval_batch_size(self) -> int:
        return 2 * self.config.n_splits if self.custom_augmentation else 2

    def check_eval_batch_size(self, batch_size: int) -> None:
        """With a custom augmentation, evaluation batches must be whole ``n_splits`` chunks of 2+ samples."""
        if self.custom_augmentation and self.eval_chunks(batch_size) is None:
            n = self.config.n_splits
            fix = max(2 * n, batch_size // n * n)
            raise InputError(
                f"`per_device_eval_batch_size`={batch_size} cannot be cut into `n_splits`={n} chunks of 2+ samples, "
                f"which the custom `equivariance_augmentation` of {type(self).__name__} makes, so there would be no "
                f"`eval_loss`. Set `per_device_eval_batch_size` to a multiple of {n} of at least {2 * n} (e.g. {fix})."
            )
        super().check_eval_batch_size(batch_size)

    def _eval_parts_for(self, chunks: int, views: ViewBuilder) -> tuple[Callable[..., tuple[Any, Any]], nn.Module]:
        if chunks not in self._eval_parts:
            self._eval_parts[chunks] = (views.chunked_augmentation(chunks), self.build_loss(chunks, views))
        return self._eval_parts[chunks]

    def eval_loss(self, model: nn.Module, inputs: Mapping[str, Any], views: ViewBuilder) -> Tensor | None:
        """The loss with the evaluation batch cut into :meth:`eval_chunks` chunks; ``None`` (with a warning,
        once) for a batch that cannot be scored."""
        size = views.chunked_batch_size(inputs)
        chunks = None if size is None else self.eval_chunks(size)
        if chunks is None:
            if not self._warned_unscored:
                self._warned_unscored = True
                warnings.warn(
                    f"{type(self).__name__}: an evaluation batch of {size} sample(s) cannot be cut into chunks of 2+ "
                    "samples sharing an augmentation; it is not scored in `eval_loss` (the other batches are). Choose "
                    "`per_device_eval_batch_size` so that the evaluation set leaves no such batch, or set "
                    "`dataloader_drop_last=True`.",
                    RuntimeWarning,
                    stacklevel=2,
                )
            return None
        augmentation, loss = self._eval_parts_for(chunks, views)
        return self.terms(model, inputs, views, augmentation, loss)["loss"]

    def terms(
        self,
        model: nn.Module,
        inputs: Mapping[str, Any],
        views: ViewBuilder,
        augmentation: Callable[..., tuple[Any, Any]],
        loss: nn.Module,
    ) -> dict[str, Tensor]:
        """The named loss terms of a batch whose equivariance views ``augmentation`` makes, scored by ``loss``."""
        raise NotImplementedError

    def forward(self, model: nn.Module, inputs: Mapping[str, Any], views: ViewBuilder) -> dict[str, Tensor]:
        return self.terms(model, inputs, views, self.equivariance_augmentation, self.loss)  # type: ignore[arg-type]


@register_objective("care")
class CAREObjective(_ChunkedObjective):
    """CARE-SimCLR: ``InfoNCE(z1, z2) + care_weight · L_equi`` (terms ``invariance``, ``equivariance``).

    Args:
        equivariance_augmentation: Replaces the default chunked augmentation. Images: a callable
            ``(B, C, H, W) uint8 → (view1, view2)`` normalised; text: ``batch dict → (view1, view2)``.
        **hyperparameters: :class:`CAREConfig` fields.
    """

    config_class = CAREConfig

    def build_loss(self, n_splits: int, views: ViewBuilder) -> nn.Module:
        c = self.config
        return CARELoss(c.temperature, c.care_weight, n_splits, gather_distributed=views.gather_distributed)

    def terms(
        self,
        model: nn.Module,
        inputs: Mapping[str, Any],
        views: ViewBuilder,
        augmentation: Callable[..., tuple[Any, Any]],
        loss: nn.Module,
    ) -> dict[str, Tensor]:
        if self.config.share_views:
            eq1, eq2 = self.equivariance_views(inputs, views, augmentation)
            z1, z2 = views.projections(model, [eq1, eq2])
            return loss(z1, z2)
        (eq1, eq2), augmented = views.chunked_and_augmented(augmentation, inputs, 2)  # one pass on the device
        z1, z2, e1, e2 = views.projections(model, [*augmented, eq1, eq2])
        return loss(z1, z2, e1, e2)


@dataclass
class CAREMoCoConfig(loss_config(CAREMoCoLoss), CAREConfig):  # CAREMoCoLoss's temperature (0.2), care_weight, n_splits
    moco_momentum: float = field(default=0.99, metadata={"help": "CARE-MoCo: EMA momentum m in [0, 1)."})
    moco_queue_size: int = field(default=4096, metadata={"help": "CARE-MoCo: number of negative keys in the queue."})

    def validate(self) -> None:
        super().validate()  # temperature, care_weight, n_splits, share_views
        check_unit_interval("moco_momentum", self.moco_momentum, include_one=False)
        check_int("moco_queue_size", self.moco_queue_size, 1)


@register_objective("care_moco")
class CAREMoCoObjective(_ChunkedObjective):
    """CARE with a MoCo-v2 invariance term: a momentum key encoder and a queue of negatives (both part of
    this objective's ``state_dict``, so checkpointed). Terms ``invariance``, ``equivariance``."""

    config_class = CAREMoCoConfig
    config: CAREMoCoConfig
    gathers_negatives = False  # its negatives are the queue, filled with every process's keys

    def build_loss(self, n_splits: int, views: ViewBuilder) -> nn.Module:
        c = self.config
        return CAREMoCoLoss(c.temperature, c.care_weight, n_splits)

    def setup(self, views: ViewBuilder, train_dataset: Any) -> None:
        super().setup(views, train_dataset)
        c = self.config
        self.moco = MoCoState(views.model, queue_size=c.moco_queue_size, momentum=c.moco_momentum, seed=views.seed)

    def callbacks(self) -> list[Any]:
        return [MomentumUpdateCallback(self.moco)]

    def terms(
        self,
        model: nn.Module,
        inputs: Mapping[str, Any],
        views: ViewBuilder,
        augmentation: Callable[..., tuple[Any, Any]],
        loss: nn.Module,
    ) -> dict[str, Tensor]:
        eq1, eq2 = self.equivariance_views(inputs, views, augmentation)
        if self.config.share_views:
            e1, e2 = views.projections(model, [eq1, eq2])
            q, key_view = e1, eq2
        else:
            view1, key_view = views.augmented(inputs, 2)
            q, e1, e2 = views.projections(model, [view1, eq1, eq2])
        self.moco.key_encoder.train(model.training)
        k = self.moco.keys(**key_view)
        queue = self.moco.queue_for(k.shape[1], k.device)
        terms = loss(q, k, queue, e1, e2)
        if model.training:  # MoCo enqueues the keys of all processes
            self.moco.enqueue(distributed.gather(k))
        return terms
