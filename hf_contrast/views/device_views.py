"""``DeviceViews``: a run's random image views made per batch on the batch's device (``views_on_device=True``).

With ``ContrastiveTrainingArguments(views_on_device=True)`` the DataLoader only decodes and resizes
(``uint8`` ``pixel_values_eq``); :class:`~hf_contrast.views.ImageViews` hands every random view an
objective asks for (SimCLR's pair, SupCon/OCL/SimO's views, CARE's per-sample and chunk-shared views)
to this object, which makes them with :class:`~hf_contrast.views.BatchedSimCLRViews` on the device
the batch is on.

Randomness: before each batch reaches the objective, the trainer calls :meth:`DeviceViews.start_batch`
with a host-side batch counter (training batches since the start of the run, checkpointed in
``contrastive_state.pt``; evaluation batches since the start of the evaluation). The batch's
parameters come from a CPU ``torch.Generator`` seeded from ``(seed, stream, batch index, process)``
and reach the device in one non-blocking copy: no generator state lives on the device, nothing is
read back, and a resumed run draws the same views as the uninterrupted one.
"""

from __future__ import annotations

import torch
from torch import Tensor

import hf_contrast.distributed as distributed
from hf_contrast.errors import InputError
from hf_contrast.tensor_checks import check_int
from hf_contrast.views.batched_simclr import BatchedSimCLRViews

__all__ = ["DeviceViews", "ChunkSharedDeviceViews", "TRAINING_STREAM", "EVALUATION_STREAM"]

TRAINING_STREAM = 0
"""``stream`` of :meth:`BatchedSimCLRViews.generator` for training batches."""
EVALUATION_STREAM = 1
"""``stream`` for evaluation batches (restarted at every evaluation, never shifting the training views)."""


class DeviceViews:
    """Per-sample and chunk-shared random views of the current batch, drawn from that batch's generator.

    Args:
        views: The recipe, sizes and seed (``BatchedSimCLRViews(..., seed=...)``).

    Raises:
        ValueError: if ``views`` has no seed.
    """

    def __init__(self, views: BatchedSimCLRViews) -> None:
        if views.seed is None:
            raise InputError(
                "`views` must be seeded (BatchedSimCLRViews(..., seed=...)): the views of a batch follow its index."
            )
        self.views = views
        self._generator: torch.Generator | None = None

    def start_batch(self, batch_index: int, training: bool) -> None:
        """Draw the next views from the generator of batch ``batch_index`` of the training or evaluation stream.

        Every view of the batch is drawn from it in the order the objective asks for them (a fixed
        order), so the batch's views depend only on the seed, the stream, the index and the process.
        """
        check_int("batch_index", batch_index, 0)
        stream = TRAINING_STREAM if training else EVALUATION_STREAM
        self._generator = self.views.generator(batch_index, distributed.rank(), stream=stream)

    @property
    def generator(self) -> torch.Generator:
        """The current batch's generator.

        Raises:
            RuntimeError: before the first :meth:`start_batch`.
        """
        if self._generator is None:
            raise RuntimeError(
                "Device views need the batch's index first: call `views.start_batch(batch_index, training)` before "
                "the objective (the ContrastiveTrainer does it for every batch)."
            )
        return self._generator

    def per_sample(self, images: Tensor, n_views: int) -> list[Tensor]:
        """``n_views`` views of every row, each row with its own parameters.

        Args:
            images: ``uint8`` images on any device. Shape: ``(B, C, H, W)``.
            n_views: Views per row.

        Returns:
            ``n_views`` normalised float32 tensors on the images' device, made in one batched pass. Shape:
            ``(B, C, *image_size)`` each.
        """
        return self.views.many(images, self.generator, [None] * n_views)

    def chunk_shared(self, images: Tensor, n_splits: int) -> tuple[Tensor, Tensor]:
        """CARE's two equivariance views: rows ``c*m:(c+1)*m`` (``m = B / n_splits``) share one parameter
        set per view, every chunk and view its own (https://arxiv.org/abs/2306.13924, Algorithm 1).

        Raises:
            ValueError: if ``B`` is not a positive multiple of ``n_splits``.
        """
        _check_chunks(images, n_splits)
        batch = images.shape[0]
        chunk = batch // n_splits
        view1, view2 = self.views.many(images, self.generator, [chunk, chunk])
        return view1, view2

    def chunk_shared_and_per_sample(
        self, images: Tensor, n_splits: int, n_views: int
    ) -> tuple[tuple[Tensor, Tensor], list[Tensor]]:
        """CARE's views in one batched pass: :meth:`chunk_shared`'s two views, then :meth:`per_sample`'s ``n_views``
        (the parameters drawn in that order: the same views as the two calls).

        Returns:
            ``((view1, view2), [view, ...])``; the per-sample views come first in memory, consecutive slices of one
            tensor, then the chunk-shared ones (so ``torch.cat(per_sample + chunk_shared)`` is that tensor).
        """
        _check_chunks(images, n_splits)
        chunk = images.shape[0] // n_splits
        order = [*range(2, n_views + 2), 0, 1]
        view1, view2, *views = self.views.many(images, self.generator, [chunk, chunk] + [None] * n_views, order)
        return (view1, view2), views


def _check_chunks(images: Tensor, n_splits: int) -> None:
    """Raise unless ``images`` is a ``(B, C, H, W)`` batch with ``B`` a positive multiple of ``n_splits``."""
    batch = images.shape[0] if isinstance(images, Tensor) and images.ndim == 4 else 0
    if batch == 0 or batch % n_splits:
        got = tuple(images.shape) if isinstance(images, Tensor) else type(images).__name__
        raise InputError(
            f"`images` {got} must be a (B, C, H, W) batch with B a positive multiple of `n_splits`={n_splits} "
            "(each chunk shares one augmentation); change the batch size or `n_splits`."
        )


class ChunkSharedDeviceViews:
    """CARE's equivariance augmentation made on the device: ``(B, C, H, W) uint8 → (view1, view2)``.

    What :meth:`ImageViews.chunked_augmentation <hf_contrast.views.ImageViews.chunked_augmentation>`
    returns with ``views_on_device=True``; the parameters come from the current batch's generator
    of ``views`` (:meth:`DeviceViews.chunk_shared`).
    """

    def __init__(self, views: DeviceViews, n_splits: int) -> None:
        self.views = views
        self.n_splits = check_int("n_splits", n_splits, 1)

    def __call__(self, images: Tensor) -> tuple[Tensor, Tensor]:
        return self.views.chunk_shared(images, self.n_splits)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n_splits={self.n_splits}, views={self.views.views!r})"
