"""``ImageViews``: the :class:`~hf_contrast.views.ViewBuilder` of timm image encoders.

Batch keys (see :mod:`hf_contrast.views.image_collators`): ``pixel_values_1..V`` (random views),
``pixel_values`` (deterministic view), ``pixel_values_eq`` (resized ``uint8`` images for chunk-shared
views made on the device), ``pixel_values_pre`` / ``pixel_values_post`` (pairs), ``labels``. Sizes
and normalisation come from the encoder's timm data config.

With ``args.views_on_device`` the collators make no random view: they pass ``pixel_values_eq``
(``uint8``, resized to the view size) and every random view — per sample or chunk-shared — is made
from it on the batch's device by :class:`~hf_contrast.views.DeviceViews`, seeded per batch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from hf_contrast.errors import InputError

from .batched_simclr import BatchedSimCLRViews
from .builder import ViewBuilder
from .chunked_image import ChunkedAugmentation
from .device_views import ChunkSharedDeviceViews, DeviceViews
from .image_collators import ImageViewCollator, PairedImageCollator
from .image_transforms import eval_transform_from_data_config, raw_image_transform, simclr_transform_from_data_config
from .paired_transform import paired_transform
from .whole_rows import WholeRows

__all__ = ["ImageViews"]


class _EachImage:
    """Apply one deterministic transform to both images of a pair (evaluation)."""

    def __init__(self, transform: Callable[[Any], Tensor]) -> None:
        self.transform = transform

    def __call__(self, pre: Any, post: Any) -> tuple[Tensor, Tensor]:
        return self.transform(pre), self.transform(post)


class ImageViews(ViewBuilder):
    """Image views: per-sample SimCLR views made by the collator, chunk-shared views made on the device; with
    ``args.views_on_device``, every random view made on the device (:class:`~hf_contrast.views.DeviceViews`)."""

    supports_views_on_device = True
    _device_views: DeviceViews | None = None

    def data_config(self) -> dict[str, Any]:
        """The encoder's timm data config (``input_size``, ``mean``, ``std``, ``interpolation``): the size the run
        trains at was decided and stored there once, before the views were built
        (:func:`~hf_contrast.training.run_setup.resolve_image_size`); the views read it, never decide it.

        Raises:
            ValueError: if the model has no data config (not a timm ``ContrastiveEncoder``).
        """
        data_config = getattr(self.model, "data_config", None)
        if not data_config:
            raise InputError(
                "The model has no `data_config` (input_size, mean, std) to build image views from; use a "
                "ContrastiveEncoder with a timm backbone or pass `data_collator=`."
            )
        return dict(data_config)

    # ---- transforms and collators -------------------------------------------------------------------

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

    def device_views(self) -> DeviceViews:
        """The random views made on the device (``args.views_on_device``): SimCLR's recipe sized and normalised
        from the data config, seeded with :attr:`seed`, compiled with ``torch.compile`` when ``args.torch_compile``
        (its backend and mode); built once."""
        if self._device_views is None:
            compiled = None
            if self.args.torch_compile:  # the view pass compiled with the model's settings: a few fused kernels
                backend = self.args.torch_compile_backend or "inductor"
                compiled = {"backend": backend, "mode": self.args.torch_compile_mode}
            views = BatchedSimCLRViews.from_data_config(self.data_config(), seed=self.seed, compile=compiled)
            self._device_views = DeviceViews(views)
        return self._device_views

    def start_batch(self, batch_index: int, training: bool) -> None:
        """With ``args.views_on_device``: the next views draw from this batch's generator (see
        :class:`DeviceViews`)."""
        if self.views_on_device:
            self.device_views().start_batch(batch_index, training)

    def collator(
        self, n_views: int = 2, deterministic: bool = False, raw: bool = False, whole_rows: WholeRows | None = None
    ) -> ImageViewCollator:
        """``n_views`` random views (+ the deterministic view, + the raw batch ``pixel_values_eq``).

        With ``args.views_on_device`` the random views are left to the device: the batch holds
        ``pixel_values_eq`` (``uint8``) whenever ``n_views > 0`` or ``raw``, and no ``pixel_values_1..V``.
        ``whole_rows``: with ``on_bad_image="skip"``, what a batch that lost rows keeps (see the collator).
        """
        on_device = self.views_on_device
        return ImageViewCollator(
            transform=self.random_transform() if n_views > 0 and not on_device else None,
            n_views=0 if on_device else n_views,
            image_column=self.args.image_column,
            label_column=self.args.label_column,
            eval_transform=self.deterministic_transform() if deterministic else None,
            raw_transform=self.raw_transform() if raw or (on_device and n_views > 0) else None,
            seed=None if on_device else self.seed,  # nothing random left in the collator
            on_bad_image=self.args.on_bad_image,
            n_channels=self.data_config()["input_size"][0],
            whole_rows=whole_rows,
        )

    def check_pairs(self, pre_column: str, post_column: str) -> None:
        """Image views make pairs of any two image columns, in the collator.

        Raises:
            ValueError: with ``args.views_on_device`` (pairs share one geometric draw per pair, made per sample).
        """
        if self.views_on_device:
            raise InputError(
                f"`views_on_device=True` does not apply to ({pre_column!r}, {post_column!r}) pairs (LOCAL): each pair "
                "shares one random crop/flip, drawn per pair in the collator (`paired_transform`). Set "
                "`views_on_device=False`."
            )

    def paired_collator(self, pre_column: str, post_column: str, train: bool) -> PairedImageCollator:
        """Training: one shared random crop/flip per pair (:func:`~hf_contrast.views.paired_transform`);
        evaluation: the deterministic resize / centre-crop / normalise of each image."""
        config = self.data_config()
        if train:
            transform: Callable[[Any, Any], tuple[Tensor, Tensor]] = paired_transform(
                config["input_size"][1:], config["mean"], config["std"]
            )
        else:
            transform = _EachImage(self.deterministic_transform())
        return PairedImageCollator(
            transform=transform,
            pre_column=pre_column,
            post_column=post_column,
            label_column=self.args.label_column,
            seed=self.seed,
            on_bad_image=self.args.on_bad_image,
            n_channels=config["input_size"][0],
        )

    def input_columns(self) -> tuple[str, ...]:
        return (self.args.image_column, "pixel_values", "pixel_values_1")

    # ---- views of a batch -------------------------------------------------------------------------

    def view(self, inputs: Mapping[str, Any], name: str) -> dict[str, Tensor]:
        """``{"pixel_values": inputs["pixel_values_{name}"]}`` (``name=""``: ``pixel_values``).

        Raises:
            ValueError: if the batch lacks the key.
        """
        key = f"pixel_values_{name}" if name else "pixel_values"
        if key not in inputs:
            raise InputError(
                f"The batch has no `{key}` (keys: {sorted(inputs)}): the data collator does not build the "
                "views this objective needs."
            )
        return {"pixel_values": inputs[key]}

    def augmented(self, inputs: Mapping[str, Any], n_views: int) -> list[dict[str, Tensor]]:
        """The collator's random views ``pixel_values_1..n``; with ``args.views_on_device``, ``n`` views of every
        sample of ``pixel_values_eq`` made on its device, each with its own parameters."""
        if self.views_on_device:
            images = self._raw_images(inputs)
            return [{"pixel_values": v} for v in self.device_views().per_sample(images, n_views)]
        return [self.view(inputs, str(v + 1)) for v in range(n_views)]

    def eval_views(self, inputs: Mapping[str, Any]) -> list[dict[str, Tensor]]:
        """``pixel_values`` (else ``pixel_values_1``), plus two random views when the batch has them (views 1 and
        2, or ``pixel_values_eq`` with ``args.views_on_device``)."""
        if self.views_on_device:
            return [self.view(inputs, "")] + (self.augmented(inputs, 2) if "pixel_values_eq" in inputs else [])
        main = self.view(inputs, "") if "pixel_values" in inputs else self.view(inputs, "1")
        return [main] + (self.augmented(inputs, 2) if "pixel_values_2" in inputs else [])

    def chunked_augmentation(self, n_splits: int) -> ChunkedAugmentation | ChunkSharedDeviceViews:
        """SimCLR's augmentation drawn once per chunk, on ``uint8`` images sized from the data config (with
        ``args.views_on_device``: the same batched code as the per-sample views, one parameter set per chunk,
        from the batch's generator)."""
        if self.views_on_device:
            return ChunkSharedDeviceViews(self.device_views(), n_splits)
        return ChunkedAugmentation.from_data_config(n_splits, self.data_config())

    def _raw_images(self, inputs: Mapping[str, Any]) -> Tensor:
        if "pixel_values_eq" not in inputs:
            raise InputError(
                f"`views_on_device=True` makes the random views from the batch's `pixel_values_eq` (uint8 images "
                f"resized to the view size), but the batch has none (keys: {sorted(inputs)}): use the objective's "
                "collator (leave `data_collator` unset) or set `views_on_device=False`."
            )
        return inputs["pixel_values_eq"]

    def chunked_views(
        self, augment: Callable[..., tuple[Any, Any]], inputs: Mapping[str, Any]
    ) -> list[dict[str, Tensor]]:
        """``augment(pixel_values_eq)``: ``(B, C, H, W) uint8`` to two normalised views."""
        if "pixel_values_eq" not in inputs:
            raise InputError(
                f"The batch has no `pixel_values_eq` (keys: {sorted(inputs)}): CARE's collator must pass the "
                "resized un-normalised images (ImageViewCollator(raw_transform=...))."
            )
        view1, view2 = augment(inputs["pixel_values_eq"])
        return [{"pixel_values": view1}, {"pixel_values": view2}]

    def chunked_and_augmented(
        self, augment: Callable[..., tuple[Any, Any]], inputs: Mapping[str, Any], n_views: int
    ) -> tuple[list[dict[str, Tensor]], list[dict[str, Tensor]]]:
        """CARE's views; with ``args.views_on_device`` and the default chunked augmentation, all ``2 + n_views`` in
        one batched pass on the device (:meth:`DeviceViews.chunk_shared_and_per_sample`), laid out so that the
        encoder's input (the per-sample views, then the chunk-shared ones) is made without a copy."""
        if not (self.views_on_device and isinstance(augment, ChunkSharedDeviceViews)):
            return super().chunked_and_augmented(augment, inputs, n_views)
        (view1, view2), views = augment.views.chunk_shared_and_per_sample(
            self._raw_images(inputs), augment.n_splits, n_views
        )
        return [{"pixel_values": view1}, {"pixel_values": view2}], [{"pixel_values": v} for v in views]

    def chunked_batch_size(self, inputs: Mapping[str, Any]) -> int | None:
        raw = inputs.get("pixel_values_eq")
        return None if raw is None else int(raw.shape[0])

    def merge(self, views: Sequence[Mapping[str, Tensor]]) -> dict[str, Tensor]:
        """``torch.cat`` of each key along the batch; views that already lie one after the other in memory (made
        in one pass on the device) are joined without a copy."""
        return {key: _concatenated([v[key] for v in views]) for key in views[0]}


def _concatenated(tensors: Sequence[Tensor]) -> Tensor:
    """``torch.cat(tensors)``; a view of their memory instead when they are contiguous slices that follow each
    other there (same dtype, device and row shape, no gradient history between them)."""
    first = tensors[0]
    adjacent = all(t.is_contiguous() and t.dtype == first.dtype and t.device == first.device for t in tensors) and all(
        t.shape[1:] == first.shape[1:] for t in tensors
    )
    if adjacent and not any(t.requires_grad for t in tensors):
        offset = first.storage_offset()
        for t in tensors:
            if t.untyped_storage().data_ptr() != first.untyped_storage().data_ptr() or t.storage_offset() != offset:
                adjacent = False
                break
            offset += t.numel()
        if adjacent:
            rows = sum(t.shape[0] for t in tensors)
            return first.as_strided((rows, *first.shape[1:]), first.stride())
    return torch.cat(tensors)
