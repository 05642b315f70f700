"""``DecodedImageCache``: a training set's images decoded and resized once, gathered per batch with one index op.

With ``views_on_device`` the training collator only decodes each row and resizes it to the view size
(``pixel_values_eq``, ``uint8``); the random views are made on the device. Doing that decode at every step of
every epoch, row by row in Python, is what bound the step on a GPU (about 70 % of a 32-px SimCLR step). The
cache does it once, at the start of training: every row through the same ``raw_transform`` as the collator,
stacked into one ``uint8`` tensor ``(N, C, H, W)`` (with the labels, ``(N,)``), held on the training device
when it fits there (as airbench and cifar10-loader keep CIFAR on the GPU), else in (pinned) host memory.
A batch is then ``images.index_select(0, rows)``: the same bytes the collator would have produced, without
touching a file.

The trainer builds it (:meth:`~hf_contrast.training.ContrastiveTrainer.train`) when the run makes its views
on the device, the training set is a map-style ``datasets.Dataset`` whose images the objective's collator
decodes, and the decoded images fit in ``image_cache_max_gb``; otherwise it says why and keeps the collator.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import DataLoader

from ..data.decode import BadImageError, ConvertImageMode, image_source
from ..progress import progress_enabled
from .image_collators import ImageViewCollator
from .labels import collate_labels

__all__ = ["DecodedImageCache", "CachedRows", "cache_refusal", "cache_bytes"]

logger = logging.getLogger(__name__)

_DECODE_CHUNK = 256  # rows per decode task (one DataLoader batch while building)


def cache_refusal(collator: Any, dataset: Any, views_on_device: bool) -> str | None:
    """Why the training set cannot be served from a :class:`DecodedImageCache`, or ``None`` if it can.

    The cache serves exactly what the objective's collator would: rows to ``pixel_values_eq`` (+ ``labels``)
    and nothing random. Collators that make views per sample, an evaluation view or pairs, a user's own
    collator and streaming datasets keep the DataLoader.
    """
    if not views_on_device:
        return "the views are made per sample in the DataLoader (`views_on_device=False`)"
    try:
        import datasets
    except ImportError:  # without `datasets` a training set cannot be a `datasets.Dataset`
        datasets = None
    if datasets is None or not isinstance(dataset, datasets.Dataset):
        return f"the training set is a {type(dataset).__name__}, not a map-style `datasets.Dataset`"
    if not isinstance(collator, ImageViewCollator) or collator.raw_transform is None:
        return "the training collator is not the objective's image collator"
    if collator.transform is not None or collator.n_views or collator.eval_transform is not None:
        return "the training collator makes more than the resized uint8 images"
    if collator.image_column not in dataset.column_names:
        return f"the training set has no {collator.image_column!r} column"
    return None


def cache_bytes(n_rows: int, image_shape: Sequence[int]) -> int:
    """Bytes of ``n_rows`` ``uint8`` images of ``image_shape`` ``(C, H, W)``."""
    return int(n_rows) * math.prod(int(s) for s in image_shape)


class _IndexedRows(torch.utils.data.Dataset):
    """``(row index, row)`` pairs of a dataset (the builder keeps the index of every decoded row)."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitems__(self, indices: list[int]) -> list[tuple[int, Any]]:
        rows = self.dataset[indices]  # one columnar read
        return [(i, {key: column[j] for key, column in rows.items()}) for j, i in enumerate(indices)]


@dataclass
class _Decode:
    """The collate function of the build: decode and resize a chunk of rows, keeping the bad ones aside."""

    collator: ImageViewCollator

    def __call__(self, rows: list[tuple[int, Any]]) -> tuple[Tensor, list[int], Tensor | None, list[str]]:
        convert = ConvertImageMode(self.collator.n_channels)
        column, images, kept, features, bad = self.collator.image_column, [], [], [], []
        for index, row in rows:
            try:
                images.append(self.collator.raw_transform(convert(row[column])))  # type: ignore[misc]
            except BadImageError as error:
                source = image_source(row[column])
                bad.append(f"{source!r} (row {index})" if source else f"row {index}: {error}")
                continue
            kept.append(index)
            features.append(row)
        stacked = torch.stack(images) if images else torch.empty(0, dtype=torch.uint8)
        labels = collate_labels(features, self.collator.label_column) if features else None
        return stacked, kept, labels, bad


class DecodedImageCache:
    """A training set decoded once: ``images`` ``(N, C, H, W)`` ``uint8`` and ``labels`` ``(N,)`` ``int64``.

    Build it with :meth:`build`; serve it with :attr:`rows` (a dataset of row numbers for the DataLoader's
    sampler) and :meth:`collate` (row numbers to the batch, one ``index_select`` per tensor).

    Args:
        images: The decoded, resized images, on their device. Shape: ``(N, C, H, W)``.
        labels: Class labels, on the images' device, or ``None``. Shape: ``(N,)``.
        kept: For each cached row, its row in the training set (rows with unreadable images are left out).
        skipped: The unreadable images left out (``on_bad_image="skip"``), named.
    """

    def __init__(self, images: Tensor, labels: Tensor | None, kept: list[int], skipped: list[str]) -> None:
        self.images = images
        self.labels = labels
        self.kept = kept
        self.skipped = skipped
        self.rows = CachedRows(len(kept))

    @property
    def device(self) -> torch.device:
        return self.images.device

    @property
    def nbytes(self) -> int:
        return self.images.numel() * self.images.element_size()

    @classmethod
    def build(
        cls,
        dataset: Any,
        collator: ImageViewCollator,
        device: torch.device,
        *,
        num_workers: int = 0,
        progress: bool = True,
        pin_memory: bool = False,
    ) -> DecodedImageCache:
        """Decode every row of ``dataset`` through ``collator``'s ``raw_transform`` once.

        Args:
            dataset: A map-style ``datasets.Dataset`` with the collator's image column.
            collator: The objective's training collator (:func:`cache_refusal` says ``None`` for it).
            device: Where the cache lives (the training device when it fits there, else the CPU).
            num_workers: DataLoader workers that decode (the run's ``dataloader_num_workers``).
            progress: Show a progress bar (when transformers' bars are on).
            pin_memory: Pin a CPU cache (a run on an accelerator whose device memory is too small).

        Raises:
            BadImageError: naming the files, when an image is unreadable and ``collator.on_bad_image="raise"``.
        """
        from tqdm.auto import tqdm

        loader = DataLoader(
            _IndexedRows(dataset),
            batch_size=_DECODE_CHUNK,
            num_workers=num_workers,
            collate_fn=_Decode(collator),
        )
        images, labels, kept, bad = [], [], [], []
        with tqdm(
            total=len(dataset), desc="Decoding images once", unit="img", disable=not progress_enabled(progress)
        ) as bar:
            for chunk, rows, chunk_labels, chunk_bad in loader:
                if len(rows):
                    images.append(chunk)
                    kept += rows
                    if chunk_labels is not None:
                        labels.append(chunk_labels)
                bad += chunk_bad
                bar.update(len(rows) + len(chunk_bad))
        if bad and collator.on_bad_image == "raise":
            listed = "\n".join(f"  {b}" for b in bad[:10]) + (
                f"\n  … and {len(bad) - 10} more" if len(bad) > 10 else ""
            )
            raise BadImageError(
                f"{len(bad)} unreadable image(s) in the training set:\n{listed}\nFix or remove them, or pass "
                "`on_bad_image='skip'` (`--on_bad_image skip`) to leave them out (counted as `train_skipped_images`)."
            )
        if not kept:
            raise BadImageError(f"Every image of the training set ({len(dataset)} rows) is unreadable.")
        if bad:
            warnings.warn(
                f"{len(bad)} unreadable training image(s) left out of the decoded cache (on_bad_image='skip'); "
                f"training draws its batches from the other {len(kept)} rows.",
                stacklevel=2,
            )
        stacked = torch.cat(images)
        target = torch.device(device)
        if target.type == "cpu" and pin_memory:
            stacked = stacked.pin_memory()
        stacked = stacked.to(target)
        label_tensor = torch.cat(labels).to(target) if len(labels) == len(images) and labels else None
        return cls(stacked, label_tensor, kept, bad)

    def collate(self, rows: Sequence[int]) -> dict[str, Tensor]:
        """The batch of cached rows ``rows``: ``pixel_values_eq`` ``(B, C, H, W)`` ``uint8`` (+ ``labels`` ``(B,)``),
        each one ``index_select`` on the cache's device; the row numbers reach an accelerator in one
        non-blocking copy from pinned memory (no host sync)."""
        index = torch.as_tensor(rows, dtype=torch.long)
        if self.images.device.type != "cpu":
            index = index.pin_memory().to(self.images.device, non_blocking=True)
        batch = {"pixel_values_eq": self.images.index_select(0, index)}
        if self.labels is not None:
            batch["labels"] = self.labels.index_select(0, index)
        return batch

    def describe(self) -> str:
        """One line for the run's set-up log and the model card."""
        channels, height, width = self.images.shape[1:]
        return (
            f"decoded once into a uint8 cache of {len(self.kept)} images ({channels}×{height}×{width}, "
            f"{self.nbytes / 2**20:.1f} MiB) on {self.device.type}; each batch is one index operation"
        )


class CachedRows(torch.utils.data.Dataset):
    """Row numbers ``0..N-1`` of a :class:`DecodedImageCache`: what the DataLoader's sampler draws from.

    ``__getitems__`` hands a batch's row numbers to the collate function in one call (no per-row work)."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> int:
        return int(index)

    def __getitems__(self, indices: list[int]) -> list[int]:
        return indices
