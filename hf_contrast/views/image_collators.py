"""Image data collators: ``datasets.Dataset`` rows into per-sample random views on the CPU workers.

Batch keys (what :class:`~hf_contrast.views.ImageViews` reads):

- ``pixel_values_1`` … ``pixel_values_V`` — ``V`` independent per-sample random views;
  ``pixel_values`` — one deterministic (evaluation) view; ``pixel_values_eq`` — the images resized
  to one size, un-normalised ``uint8``, for CARE's chunk-shared views built on the device;
  ``pixel_values_pre`` / ``pixel_values_post`` — LOCAL's pairs (:class:`PairedImageCollator`);
- ``labels``: ``int64`` class labels when the label column exists;
- ``view_batch_index``: ``int64`` ``(B,)``, the index of the collator batch that drew each row's
  random views (seeded collators only, see :class:`ImageViewCollator`); read it with
  :func:`pop_view_batch_index`;
- ``skipped_images``: ``int64`` ``(B,)`` (``on_bad_image="skip"`` only), the rows this batch left
  out, on its first row (zeros elsewhere: the sum stays right when accelerate concatenates or
  slices batches, and the count travels from ``DataLoader`` workers); read it with
  :func:`pop_skipped_images` (the trainers report ``train_skipped_images`` / ``eval_skipped_images``);
- ``dropped_rows``: ``int64`` ``(B,)`` (collators with a ``whole_rows`` rule, ``on_bad_image="skip"``), laid
  out the same way: the readable rows a batch that lost rows also left out to keep its chunks or class
  groups whole (:mod:`hf_contrast.views.whole_rows`); read it with :func:`pop_dropped_rows` (reported as
  ``train_dropped_rows`` / ``eval_dropped_rows``).

Text rows are collated by :class:`~hf_contrast.views.TextViewCollator`.

Every value of a batch is a tensor whose first dimension is the batch, so accelerate can
concatenate, broadcast and slice batches (its ``DataLoaderDispatcher``, used for
``IterableDataset`` s, does all three); rows of a streaming ``datasets.IterableDataset`` collate
like map-style rows.

Images: each image value (a PIL image of any mode, a ``{"path", "bytes"}`` dict from
``datasets.Image(decode=False)``, a path) is decoded and converted to the encoder's channels
(:mod:`hf_contrast.data.decode`). A ``None`` image or an unreadable / truncated file raises a
``ValueError`` naming the row of the batch and the file, or, with ``on_bad_image="skip"``, the row
is left out of the batch, counted in ``collator.skipped_images`` and reported with a warning.

Pre-computed inputs pass through: a row that already holds ``pixel_values*`` tensors is stacked
as is.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from hf_contrast.errors import InputError

from ..data.decode import BadImageError, ConvertImageMode, image_source
from ..seeding import seeded_cpu_rng
from ..tensor_checks import check_choice, check_int, check_name
from .labels import collate_labels
from .whole_rows import WholeRows

__all__ = [
    "ImageViewCollator",
    "PairedImageCollator",
    "pop_dropped_rows",
    "pop_skipped_images",
    "pop_view_batch_index",
]

ON_BAD_IMAGE = ("raise", "skip")


def _as_tensor(value: Any) -> Tensor:
    if isinstance(value, Tensor):
        return value
    return torch.as_tensor(np.asarray(value))


def _stack(values: Sequence[Any]) -> Tensor:
    return torch.stack([_as_tensor(v) for v in values])


def pop_view_batch_index(inputs: MutableMapping[str, Any]) -> Tensor | None:
    """Remove ``view_batch_index`` from a batch and return the newest collator batch index in it.

    The index is returned as a 0-d tensor on the batch's device without reading it on the host
    (no device sync per step); convert it with ``int(...)`` only when needed (e.g. when a
    checkpoint is written: the next batch to draw is ``int(index) + 1``).

    Args:
        inputs: A batch of :class:`ImageViewCollator` / :class:`PairedImageCollator`.

    Returns:
        ``view_batch_index.max()`` (a 0-d int64 tensor), or ``None`` if the batch has no index.
    """
    index = inputs.pop("view_batch_index", None)
    if index is None:
        return None
    return torch.as_tensor(index).reshape(-1).max()


def pop_skipped_images(inputs: MutableMapping[str, Any]) -> Tensor | None:
    """Remove ``skipped_images`` from a batch and return how many rows it left out, as a 0-d ``int64``
    tensor on the batch's device (not read on the host: no device sync per step); ``None`` if the batch
    has no such key (its collator does not skip, or ``on_bad_image="raise"``)."""
    skipped = inputs.pop("skipped_images", None)
    if skipped is None:
        return None
    return torch.as_tensor(skipped).sum()


def pop_dropped_rows(inputs: MutableMapping[str, Any]) -> Tensor | None:
    """Remove ``dropped_rows`` from a batch and return how many readable rows it left out to keep its chunks or
    class groups whole, as :func:`pop_skipped_images` does; ``None`` if the batch has no such key."""
    dropped = inputs.pop("dropped_rows", None)
    if dropped is None:
        return None
    return torch.as_tensor(dropped).sum()


#: The most random views :class:`ImageViewCollator` makes of one image (multi-crop recipes use up to ~10).
MAX_VIEWS = 64


class _SeededViews:
    """Per-batch seeded randomness and bad-image handling shared by the image collators.

    Mixed into dataclasses that define ``seed``, ``next_index``, ``on_bad_image``,
    ``n_channels``, ``skipped_images`` and ``label_column``.
    """

    seed: int | None
    next_index: int
    on_bad_image: str
    n_channels: int | None
    skipped_images: int
    _skipped_in_batch: int = 0  # rows the batch being collated left out (a class attribute, not a field)
    _dropped_in_batch: int = 0  # readable rows left out to keep the batch's structure whole
    whole_rows: WholeRows | None = None
    dropped_rows: int = 0
    _warned_dropped: bool = False

    def _check_fields(self, transforms: Sequence[str], columns: Sequence[str]) -> None:
        """Refuse, when the collator is built, what its first batch would trip on: a transform that is not callable,
        a column that is no name, a negative seed or batch index, an unknown ``on_bad_image``, bad ``n_channels``."""
        for name in transforms:
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise InputError(f"`{name}` must be callable (a transform of one image) or None, got {value!r}.")
        for name in columns:
            check_name(name, getattr(self, name))
        check_name("label_column", self.label_column, allow_none=True)  # type: ignore[attr-defined]
        check_int("seed", self.seed, 0, allow_none=True)
        check_int("next_index", self.next_index, 0)
        check_choice("on_bad_image", self.on_bad_image, ON_BAD_IMAGE)
        ConvertImageMode(self.n_channels)  # validates n_channels

    def _batch_rng(self) -> tuple[AbstractContextManager[Any], int | None]:
        """The context the batch's random views are drawn under, and the batch index (or ``None``)."""
        if self.seed is None or torch.utils.data.get_worker_info() is not None:
            return nullcontext(), None
        index = self.next_index
        self.next_index += 1
        batch_seed = (
            int(np.random.SeedSequence([self.seed, index]).generate_state(1, dtype=np.uint64)[0]) >> 2
        )  # a Python int: NumPy 1.x cannot shift a uint64 by an int
        return seeded_cpu_rng(batch_seed), index

    def _finish(
        self, batch: dict[str, Any], features: Sequence[Mapping[str, Any]], index: int | None
    ) -> dict[str, Any]:
        """Add ``labels`` (from ``label_column``), ``view_batch_index`` (seeded batches) and ``skipped_images``
        (``on_bad_image="skip"``) to ``batch``."""
        labels = collate_labels(features, self.label_column)  # type: ignore[attr-defined]
        if labels is not None:
            batch["labels"] = labels
        if index is not None:
            batch["view_batch_index"] = torch.full((len(features),), index, dtype=torch.long)
        if self.on_bad_image == "skip":
            skipped = torch.zeros(len(features), dtype=torch.long)
            skipped[0] = self._skipped_in_batch
            batch["skipped_images"] = skipped
            if self.whole_rows is not None:
                dropped = torch.zeros(len(features), dtype=torch.long)
                dropped[0] = self._dropped_in_batch
                batch["dropped_rows"] = dropped
        self._skipped_in_batch = 0
        self._dropped_in_batch = 0
        return batch

    def _decode_rows(
        self, features: Sequence[Mapping[str, Any]], columns: Sequence[str]
    ) -> tuple[list[Mapping[str, Any]], list[dict[str, Any]]]:
        """Decode ``columns`` of every row; return the kept rows and their decoded images.

        Raises:
            ValueError: on a bad image (``on_bad_image="raise"``), naming the row and the file;
                or when every row of the batch was skipped.
        """
        convert = ConvertImageMode(self.n_channels)
        kept: list[Mapping[str, Any]] = []
        images: list[dict[str, Any]] = []
        for row, feature in enumerate(features):
            decoded: dict[str, Any] = {}
            for column in columns:
                try:
                    decoded[column] = convert(feature[column])
                except BadImageError as error:
                    source = image_source(feature[column])
                    where = f", file {source!r}" if source and source not in str(error) else ""
                    message = f"Bad image in row {row} of the batch (column {column!r}{where}): {error}."
                    if self.on_bad_image == "raise":
                        raise BadImageError(
                            f"{message} Fix or remove the image, or pass `on_bad_image='skip'` to the collator to "
                            "leave bad images out of their batch (counted in `collator.skipped_images`)."
                        ) from error
                    self.skipped_images += 1
                    warnings.warn(f"Skipped: {message} ({self.skipped_images} skipped so far)", stacklevel=3)
                    decoded = {}
                    break
            if not decoded:
                continue
            kept.append(feature)
            images.append(decoded)
        self._skipped_in_batch = len(features) - len(kept)
        if not kept:
            raise InputError(
                f"Every image of this batch of {len(features)} rows is bad ({self.skipped_images} skipped so far); "
                "check the image column of the dataset."
            )
        if self._skipped_in_batch and self.whole_rows is not None:
            kept, images = self._keep_whole(kept, images)
        return kept, images

    def _keep_whole(
        self, kept: list[Mapping[str, Any]], images: list[dict[str, Any]]
    ) -> tuple[list[Mapping[str, Any]], list[dict[str, Any]]]:
        """The rows ``whole_rows`` keeps of a batch that lost rows; the others are counted in ``dropped_rows``."""
        labels = collate_labels(kept, self.label_column)  # type: ignore[attr-defined]
        rows = self.whole_rows.keep(len(kept), None if labels is None else labels.tolist())  # type: ignore[union-attr]
        self._dropped_in_batch = len(kept) - len(rows)
        if self._dropped_in_batch:
            self.dropped_rows += self._dropped_in_batch
            if not self._warned_dropped:
                self._warned_dropped = True
                warnings.warn(
                    f"A batch that lost {self._skipped_in_batch} bad image(s) also left out {self._dropped_in_batch} "
                    f"readable row(s) to keep {self.whole_rows.what} ({self.whole_rows!r}; the number of chunks or "
                    "classes is unchanged). Such rows are counted in `dropped_rows` (reported as "
                    "`train_dropped_rows` / `eval_dropped_rows`); this warning is shown once.",
                    stacklevel=4,
                )
        return [kept[i] for i in rows], [images[i] for i in rows]


@dataclass
class ImageViewCollator(_SeededViews):
    """Collate image rows into augmented views, an evaluation view and the CARE raw batch.

    Each sample gets ``n_views`` independent draws of ``transform`` (per-sample views: SimCLR,
    CARE's invariance views, SupCon).

    Randomness: ``torchvision`` draws from torch's global generator. With ``seed`` set and the
    collator running in the main process (``dataloader_num_workers=0``), batch number ``t`` (a
    counter, ``next_index``) runs under a forked global generator seeded from ``(seed, t)``
    instead, and the batch carries ``view_batch_index``, an ``int64`` tensor ``(B,)`` filled with
    ``t``: the views depend only on the seed and the batch's position in the run, so a resumed run
    (the trainers checkpoint the index after the last consumed batch, see
    :func:`pop_view_batch_index`) sees the same views. In ``DataLoader`` workers the
    (worker-seeded) global generator is used and no index is added.

    Args:
        transform: Random per-sample transform (PIL image / tensor → normalised ``(C, H, W)``),
            e.g. :func:`hf_contrast.views.simclr_transform`. ``None``: no augmented views.
        n_views: Number of augmented views ``V`` (keys ``pixel_values_1`` … ``pixel_values_V``).
        image_column: Column holding the images.
        label_column: Column holding integer labels (``labels`` in the batch); ``None`` or a
            missing column: no labels.
        eval_transform: Deterministic transform for the ``pixel_values`` key (evaluation).
        raw_transform: Transform for the ``pixel_values_eq`` key
            (:func:`~hf_contrast.views.raw_image_transform`).
        seed: Optional seed of the per-batch draws (see above).
        next_index: Index of the next batch (restored on resume).
        on_bad_image: ``"raise"`` (default): a ``None`` / unreadable image raises a ``ValueError``
            naming the row and file; ``"skip"``: the row is left out, counted in
            ``skipped_images`` and warned about.
        n_channels: Convert PIL images to ``RGB`` (3) / ``L`` (1) before the transforms;
            ``None``: decode only (the transforms of :mod:`hf_contrast.views` convert anyway).
        skipped_images: Count of rows skipped so far.
        whole_rows: With ``on_bad_image="skip"``, the rule that keeps a batch that lost rows whole
            (:class:`~hf_contrast.views.WholeChunks` for CARE's chunks,
            :class:`~hf_contrast.views.WholeClassGroups` for SimO's class groups); ``None``: keep every
            readable row.
        dropped_rows: Count of readable rows left out by ``whole_rows`` so far.

    Raises:
        ValueError: if ``n_views`` is negative, ``on_bad_image`` is unknown, a row lacks the image
            column, an image is bad (see ``on_bad_image``) or a label is not an int.
    """

    transform: Callable[[Any], Tensor] | None = None
    n_views: int = 2
    image_column: str = "image"
    label_column: str | None = "label"
    eval_transform: Callable[[Any], Tensor] | None = None
    raw_transform: Callable[[Any], Tensor] | None = None
    seed: int | None = None
    next_index: int = 0
    on_bad_image: str = "raise"
    n_channels: int | None = None
    skipped_images: int = 0
    whole_rows: WholeRows | None = None
    dropped_rows: int = 0

    def __post_init__(self) -> None:
        check_int("n_views", self.n_views, 0, maximum=MAX_VIEWS, fix="a method makes 1 to 4 views of an image.")
        self._check_fields(("transform", "eval_transform", "raw_transform"), ("image_column",))
        if self.n_views > 0 and self.transform is None:
            raise InputError(f"`transform` is required to build `n_views`={self.n_views} augmented views.")

    def __call__(self, features: Sequence[Mapping[str, Any]]) -> dict[str, Tensor]:
        if len(features) == 0:
            raise InputError("Cannot collate an empty batch (0 rows).")
        batch: dict[str, Tensor] = {}
        first = features[0]
        precomputed = [k for k in first if k.startswith("pixel_values")]
        wanted = [f"pixel_values_{v + 1}" for v in range(self.n_views) if f"pixel_values_{v + 1}" not in first]
        if self.eval_transform is not None and "pixel_values" not in first:
            wanted.append("pixel_values")
        if self.raw_transform is not None and "pixel_values_eq" not in first:
            wanted.append("pixel_values_eq")
        images: list[dict[str, Any]] = []
        if wanted:
            if self.image_column not in first:
                raise InputError(
                    f"`image_column`={self.image_column!r} is not a column of the dataset (columns: "
                    f"{sorted(first)}); set `image_column` in the training arguments."
                )
            features, images = self._decode_rows(features, [self.image_column])
        for key in precomputed:
            batch[key] = _stack([f[key] for f in features])
        transforms = {"pixel_values": self.eval_transform, "pixel_values_eq": self.raw_transform}
        index = None
        if wanted:
            rng, index = self._batch_rng()
            rows: dict[str, list[Tensor]] = {key: [] for key in wanted}
            with rng:
                for decoded in images:
                    image = decoded[self.image_column]
                    for key in wanted:
                        rows[key].append(transforms.get(key, self.transform)(image))  # type: ignore[misc]
            for key in wanted:
                batch[key] = torch.stack(rows[key])
        return self._finish(batch, features, index)


@dataclass
class PairedImageCollator(_SeededViews):
    """Collate ``(pre, post)`` image rows into ``pixel_values_pre`` / ``pixel_values_post``.

    Randomness, ``view_batch_index``, bad images and channel conversion work as in
    :class:`ImageViewCollator` (a bad image leaves out its whole pair under ``"skip"``), so
    LOCAL's mid-epoch resume draws the same pairs.

    Args:
        transform: ``(pre, post) -> (pre', post')`` on one pair, e.g.
            :func:`hf_contrast.views.paired_transform` (shared geometric draw) for training.
        pre_column: Column holding the first image of the pair.
        post_column: Column holding the second image of the pair.
        label_column: Integer class of the pair (``labels`` in the batch).
        seed: Optional seed of the per-batch draws.
        next_index: Index of the next batch (restored on resume).
        on_bad_image: ``"raise"`` or ``"skip"`` (see :class:`ImageViewCollator`).
        n_channels: Convert PIL images to ``RGB`` (3) / ``L`` (1) before ``transform``.
        skipped_images: Count of pairs skipped so far.

    Raises:
        ValueError: if a row lacks an image column, an image is bad, or a label is not an int.
    """

    transform: Callable[[Any, Any], tuple[Tensor, Tensor]]
    pre_column: str = "image_pre"
    post_column: str = "image_post"
    label_column: str | None = "label"
    seed: int | None = None
    next_index: int = 0
    on_bad_image: str = "raise"
    n_channels: int | None = None
    skipped_images: int = 0

    def __post_init__(self) -> None:
        self._check_fields(("transform",), ("pre_column", "post_column"))
        if self.transform is None:
            raise InputError("`transform` is required: a paired transform `(pre, post) -> (view_pre, view_post)`.")

    def __call__(self, features: Sequence[Mapping[str, Any]]) -> dict[str, Tensor]:
        if len(features) == 0:
            raise InputError("Cannot collate an empty batch (0 rows).")
        for name, column in (("pre_column", self.pre_column), ("post_column", self.post_column)):
            if column not in features[0]:
                raise InputError(
                    f"`{name}`={column!r} is not a column of the dataset (columns: {sorted(features[0])})."
                )
        features, images = self._decode_rows(features, [self.pre_column, self.post_column])
        rng, index = self._batch_rng()
        with rng:
            pairs = [self.transform(d[self.pre_column], d[self.post_column]) for d in images]
        batch = {
            "pixel_values_pre": torch.stack([p[0] for p in pairs]),
            "pixel_values_post": torch.stack([p[1] for p in pairs]),
        }
        return self._finish(batch, features, index)
