"""``ImageViews``: the :class:`~hf_contrast.views.ViewBuilder` of timm image encoders.

Batch keys (see :mod:`hf_contrast.views.image_collators`): ``pixel_values_1..V`` (random views),
``pixel_values`` (deterministic view), ``pixel_values_eq`` (resized ``uint8`` images for chunk-shared
views made on the device), ``pixel_values_pre`` / ``pixel_values_post`` (pairs), ``labels``. Sizes
and normalisation come from the encoder's timm data config.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from .builder import ViewBuilder
from .chunked_image import ChunkedAugmentation
from .image_collators import ImageViewCollator, PairedImageCollator
from .image_transforms import eval_transform_from_data_config, raw_image_transform, simclr_transform_from_data_config
from .paired_transform import paired_transform

__all__ = ["ImageViews"]


class _EachImage:
    """Apply one deterministic transform to both images of a pair (evaluation)."""

    def __init__(self, transform: Callable[[Any], Tensor]) -> None:
        self.transform = transform

    def __call__(self, pre: Any, post: Any) -> tuple[Tensor, Tensor]:
        return self.transform(pre), self.transform(post)


class ImageViews(ViewBuilder):
    """Image views: per-sample SimCLR views made by the collator, chunk-shared views made on the device."""

    def data_config(self) -> dict[str, Any]:
        """The encoder's timm data config (``input_size`` from ``args.image_size`` when set).

        Raises:
            ValueError: if the model has no data config (not a timm ``ContrastiveEncoder``).
        """
        data_config = getattr(self.model, "data_config", None)
        if not data_config:
            raise ValueError(
                "The model has no `data_config` (input_size, mean, std) to build image views from; use a "
                "ContrastiveEncoder with a timm backbone or pass `data_collator=`."
            )
        data_config = dict(data_config)
        if self.args.image_size is not None:
            channels = data_config["input_size"][0]
            data_config["input_size"] = (channels, self.args.image_size, self.args.image_size)
        return data_config

    def prepare_model(self) -> None:
        """``model.set_image_size(args.image_size)`` when set: the saved data config says the trained size."""
        if self.args.image_size is not None and hasattr(self.model, "set_image_size"):
            self.model.set_image_size(self.args.image_size)

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

    def collator(self, n_views: int = 2, deterministic: bool = False, raw: bool = False) -> ImageViewCollator:
        """``n_views`` random views (+ the deterministic view, + the raw batch ``pixel_values_eq``)."""
        return ImageViewCollator(
            transform=self.random_transform() if n_views > 0 else None,
            n_views=n_views,
            image_column=self.args.image_column,
            label_column=self.args.label_column,
            eval_transform=self.deterministic_transform() if deterministic else None,
            raw_transform=self.raw_transform() if raw else None,
            seed=self.seed,
            on_bad_image=self.args.on_bad_image,
            n_channels=self.data_config()["input_size"][0],
        )

    def check_pairs(self, pre_column: str, post_column: str) -> None:
        """Image views make pairs of any two image columns."""

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
            raise ValueError(
                f"The batch has no `{key}` (keys: {sorted(inputs)}): the data collator does not build the "
                "views this objective needs."
            )
        return {"pixel_values": inputs[key]}

    def augmented(self, inputs: Mapping[str, Any], n_views: int) -> list[dict[str, Tensor]]:
        """The collator's random views ``pixel_values_1..n``."""
        return [self.view(inputs, str(v + 1)) for v in range(n_views)]

    def eval_views(self, inputs: Mapping[str, Any]) -> list[dict[str, Tensor]]:
        """``pixel_values`` (else ``pixel_values_1``), plus views 1 and 2 when the batch has them."""
        main = self.view(inputs, "") if "pixel_values" in inputs else self.view(inputs, "1")
        return [main] + (self.augmented(inputs, 2) if "pixel_values_2" in inputs else [])

    def chunked_augmentation(self, n_splits: int) -> ChunkedAugmentation:
        """SimCLR's augmentation drawn once per chunk, on ``uint8`` images sized from the data config."""
        return ChunkedAugmentation.from_data_config(n_splits, self.data_config())

    def chunked_views(self, augment: Callable[..., tuple[Any, Any]], inputs: Mapping[str, Any]) -> list[dict[str, Tensor]]:
        """``augment(pixel_values_eq)``: ``(B, C, H, W) uint8`` to two normalised views."""
        if "pixel_values_eq" not in inputs:
            raise ValueError(
                f"The batch has no `pixel_values_eq` (keys: {sorted(inputs)}): CARE's collator must pass the "
                "resized un-normalised images (ImageViewCollator(raw_transform=...))."
            )
        view1, view2 = augment(inputs["pixel_values_eq"])
        return [{"pixel_values": view1}, {"pixel_values": view2}]

    def chunked_batch_size(self, inputs: Mapping[str, Any]) -> int | None:
        raw = inputs.get("pixel_values_eq")
        return None if raw is None else int(raw.shape[0])

    def merge(self, views: Sequence[Mapping[str, Tensor]]) -> dict[str, Tensor]:
        """``torch.cat`` of each key along the batch."""
        return {key: torch.cat([v[key] for v in views]) for key in views[0]}
