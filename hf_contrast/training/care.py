"""``CARETrainer``: InfoNCE + λ · rotational-equivariance loss on chunk-shared views (docs/methods.md §4)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from torch import Tensor, nn

from .. import distributed
from ..losses import CARELoss
from .collators import ImageViewCollator
from .moco import CAREMoCoLoss, MoCoState, MomentumUpdateCallback
from .trainer import ContrastiveTrainer

__all__ = ["CARETrainer"]

_CARE_METHODS = ("care", "moco")


class CARETrainer(ContrastiveTrainer):
    """CARE (https://arxiv.org/abs/2306.13924): InfoNCE on per-sample views + λ·L_equi on
    chunk-shared views.

    Per batch: two per-sample SimCLR views (invariance, built by the CPU collator) and two
    equivariance views: the collator passes the resized un-normalised images
    (``pixel_values_eq``) and :class:`hf_contrast.augment.ChunkedAugmentation` draws one
    augmentation pair per chunk of ``args.n_splits`` on the training device. Text uses
    SimCSE dropout views (or ``text_pair_column``) for invariance and
    :class:`hf_contrast.augment.ChunkedTextAugmentation` for equivariance. All views share one
    forward pass. ``args.share_views=True`` computes InfoNCE on the equivariance views (two
    forward passes fewer, weaker invariance views).

    Args:
        method: ``"care"`` (CARE-SimCLR, InfoNCE τ = ``args.temperature`` or 0.5) or ``"moco"``
            (CARE-MoCo: MoCo-v2 key encoder with momentum ``args.moco_momentum``, queue
            ``args.moco_queue_size``, τ = ``args.moco_temperature``; key encoder and queue are
            checkpointed).
        equivariance_augmentation: Replaces the default chunked augmentation. Images: a callable
            ``(B, C, H, W) uint8/[0, 1] → (view1, view2)`` normalised; text: ``batch dict →
            (view1 dict, view2 dict)``.
        *args, **kwargs: As :class:`ContrastiveTrainer`.

    Raises:
        ValueError: on an unknown ``method``.
    """

    method: ClassVar[str] = "care"
    default_temperature: ClassVar[float] = 0.5

    def __init__(
        self,
        *args: Any,
        method: str = "care",
        equivariance_augmentation: Callable[..., tuple[Any, Any]] | None = None,
        **kwargs: Any,
    ) -> None:
        if method not in _CARE_METHODS:
            raise ValueError(f"`method` must be one of {_CARE_METHODS}, got {method!r}.")
        self.care_method = method
        self.equivariance_augmentation = equivariance_augmentation
        super().__init__(*args, **kwargs)
        if self.equivariance_augmentation is None:
            self.equivariance_augmentation = self.build_equivariance_augmentation()
        self.moco: MoCoState | None = None
        if method == "moco":
            self.method = "care_moco"
            self.moco = MoCoState(
                self.model, queue_size=self.args.moco_queue_size, momentum=self.args.moco_momentum, seed=self.args.seed
            ).to(self.args.device)
            self.add_callback(MomentumUpdateCallback(self.moco))

    def build_loss(self) -> nn.Module:
        """:class:`CARELoss` (or :class:`CAREMoCoLoss`) from ``temperature``, ``care_weight``, ``n_splits``."""
        if self.care_method == "moco":
            return CAREMoCoLoss(self.args.moco_temperature, self.args.care_weight, self.args.n_splits)
        return CARELoss(
            temperature=self.temperature,
            care_weight=self.args.care_weight,
            n_splits=self.args.n_splits,
            gather_distributed=self.args.gather_distributed,
        )

    def build_data_collator(self) -> Callable[[list[dict[str, Any]]], dict[str, Any]]:
        """Images: per-sample views (none with ``share_views``) + the raw batch for chunked views."""
        if self.is_text:
            return self._text_collator()
        return ImageViewCollator(
            transform=self.view_transform(),
            n_views=0 if self.args.share_views else 2,
            image_column=self.args.image_column,
            label_column=self.args.label_column,
            raw_transform=self.raw_transform(),
            seed=self.views_seed,
        )

    def build_equivariance_augmentation(self) -> Callable[..., tuple[Any, Any]]:
        """Chunk-shared SimCLR augmentation (images) or token edits (text), ``args.n_splits`` chunks."""
        if self.is_text:
            from ..augment.text import ChunkedTextAugmentation

            return ChunkedTextAugmentation.from_tokenizer(self.processing_class, self.args.n_splits)
        from ..augment.chunked import ChunkedAugmentation

        return ChunkedAugmentation.from_data_config(self.args.n_splits, self.image_data_config())

    def equivariance_views(self, inputs: Mapping[str, Any]) -> list[dict[str, Tensor]]:
        """The two chunk-shared views of the batch, built on its device."""
        augment = self.equivariance_augmentation
        if self.is_text:
            view1, view2 = augment(self.view_inputs(inputs, ""))  # type: ignore[misc]
            return [dict(view1), dict(view2)]
        if "pixel_values_eq" not in inputs:
            raise ValueError(
                f"The batch has no `pixel_values_eq` (keys: {sorted(inputs)}): CARE's collator must pass the "
                "resized un-normalised images (ImageViewCollator(raw_transform=...))."
            )
        view1, view2 = augment(inputs["pixel_values_eq"])  # type: ignore[misc]
        return [{"pixel_values": view1}, {"pixel_values": view2}]

    def compute_contrastive_loss(self, model: nn.Module, inputs: dict[str, Any]) -> Mapping[str, Tensor]:
        """``{"invariance", "equivariance", "loss"}`` of the batch."""
        eq1, eq2 = self.equivariance_views(inputs)
        if self.moco is not None:
            return self._moco_loss(self.moco, model, inputs, eq1, eq2)
        if self.args.share_views:
            z1, z2 = self.projections(model, [eq1, eq2])
            return self.loss(z1, z2)
        z1, z2, e1, e2 = self.projections(model, [*self.positive_pair_views(inputs), eq1, eq2])
        return self.loss(z1, z2, e1, e2)

    def _moco_loss(
        self,
        moco: MoCoState,
        model: nn.Module,
        inputs: Mapping[str, Any],
        eq1: dict[str, Tensor],
        eq2: dict[str, Tensor],
    ) -> Mapping[str, Tensor]:
        if self.args.share_views:
            e1, e2 = self.projections(model, [eq1, eq2])
            q, key_view = e1, eq2
        else:
            view1, key_view = self.positive_pair_views(inputs)
            q, e1, e2 = self.projections(model, [view1, eq1, eq2])
        moco.key_encoder.train(model.training)
        k = moco.keys(**key_view)
        queue = moco.queue_for(k.shape[1], k.device)
        terms = self.loss(q, k, queue, e1, e2)
        if model.training:  # MoCo enqueues the keys of all processes
            moco.enqueue(distributed.gather(k))
        return terms

    def contrastive_state_dict(self) -> dict[str, Any]:
        state = super().contrastive_state_dict()
        if self.moco is not None:
            state["moco"] = self.moco.state()
        return state

    def load_contrastive_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_contrastive_state_dict(state)
        if self.moco is not None and "moco" in state:
            self.moco.load_state(state["moco"])
