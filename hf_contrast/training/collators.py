"""Data collators that turn ``datasets.Dataset`` rows into contrastive views on the CPU workers.

Batch keys (what the trainers read):

- images: ``pixel_values_1`` … ``pixel_values_V`` — ``V`` independent per-sample random views;
  ``pixel_values`` — one deterministic (evaluation) view; ``pixel_values_eq`` — the images resized
  to one size, un-normalised ``uint8``, for CARE's chunk-shared views built on the device;
- text: ``input_ids`` / ``attention_mask`` (/ ``token_type_ids``) of the text column and
  ``pair_input_ids`` / ``pair_attention_mask`` of an optional positive-pair column;
- ``labels``: ``int64`` class labels when the label column exists.

Pre-computed inputs pass through: a row that already holds ``pixel_values*`` tensors is stacked
as is, and rows holding ``input_ids`` are padded with the tokenizer instead of re-tokenised.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torchvision.transforms import v2

__all__ = ["ImageViewCollator", "TextViewCollator", "raw_image_transform", "pad_and_concat"]


def _as_tensor(value: Any) -> Tensor:
    if isinstance(value, Tensor):
        return value
    return torch.as_tensor(np.asarray(value))


def _stack(values: Sequence[Any]) -> Tensor:
    return torch.stack([_as_tensor(v) for v in values])


def _collate_labels(features: Sequence[Mapping[str, Any]], label_column: str | None) -> Tensor | None:
    if label_column is None or label_column not in features[0]:
        return None
    labels = [f[label_column] for f in features]
    if any(isinstance(y, bool) or not isinstance(y, (int, np.integer)) for y in labels):
        got = next(type(y).__name__ for y in labels if isinstance(y, bool) or not isinstance(y, (int, np.integer)))
        raise ValueError(f"`{label_column}` (the label column) must hold integer class labels, got a {got}.")
    return torch.tensor(labels, dtype=torch.long)


@contextmanager
def _seeded_global_rng(seed: int) -> Iterator[None]:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def raw_image_transform(image_size: int | tuple[int, int], n_channels: int = 3) -> v2.Compose:
    """Resize an image to ``image_size`` and return it un-normalised as ``uint8`` ``(C, H, W)``.

    The input of :class:`hf_contrast.augment.ChunkedAugmentation`, which augments and normalises
    the whole batch on the device.
    """
    size = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
    channels = [v2.RGB()] if n_channels == 3 else [v2.Grayscale(num_output_channels=n_channels)]
    return v2.Compose(
        [v2.ToImage(), *channels, v2.Resize(size, antialias=True), v2.ToDtype(torch.uint8, scale=True), v2.ToPureTensor()]
    )


@dataclass
class ImageViewCollator:
    """Collate image rows into augmented views, an evaluation view and the CARE raw batch.

    Each sample gets ``n_views`` independent draws of ``transform`` (per-sample views: SimCLR,
    CARE's invariance views, SupCon).

    Randomness: ``torchvision`` draws from torch's global generator. With ``seed`` set and the
    collator running in the main process (``dataloader_num_workers=0``), batch number ``t`` (a
    counter, ``next_index``) runs under a forked global generator seeded from ``(seed, t)``
    instead, and the batch carries ``view_batch_index = t``: the views depend only on the seed and
    the batch's position in the run, so a resumed run (the trainers checkpoint the index after
    the last consumed batch) sees the same views. In ``DataLoader`` workers the (worker-seeded)
    global generator is used and no index is added.

    Args:
        transform: Random per-sample transform (PIL image / tensor → normalised ``(C, H, W)``),
            e.g. :func:`hf_contrast.augment.simclr_transform`. ``None``: no augmented views.
        n_views: Number of augmented views ``V`` (keys ``pixel_values_1`` … ``pixel_values_V``).
        image_column: Column holding the images.
        label_column: Column holding integer labels (``labels`` in the batch); ``None`` or a
            missing column: no labels.
        eval_transform: Deterministic transform for the ``pixel_values`` key (evaluation).
        raw_transform: Transform for the ``pixel_values_eq`` key (:func:`raw_image_transform`).
        seed: Optional seed of the per-batch draws (see above).

    Raises:
        ValueError: if ``n_views`` is negative, a row lacks the image column, or a label is not an int.
    """

    transform: Callable[[Any], Tensor] | None = None
    n_views: int = 2
    image_column: str = "image"
    label_column: str | None = "label"
    eval_transform: Callable[[Any], Tensor] | None = None
    raw_transform: Callable[[Any], Tensor] | None = None
    seed: int | None = None
    next_index: int = 0

    def _rng(self, batch: dict[str, Any]) -> Any:
        if self.seed is None or torch.utils.data.get_worker_info() is not None:
            return nullcontext()
        index = self.next_index
        self.next_index += 1
        batch["view_batch_index"] = index
        batch_seed = int(np.random.SeedSequence([self.seed, index]).generate_state(1, dtype=np.uint64)[0] >> 2)
        return _seeded_global_rng(batch_seed)

    def __post_init__(self) -> None:
        if not isinstance(self.n_views, int) or self.n_views < 0:
            raise ValueError(f"`n_views` must be an int >= 0, got {self.n_views!r}.")
        if self.n_views > 0 and self.transform is None:
            raise ValueError(f"`transform` is required to build `n_views`={self.n_views} augmented views.")

    def __call__(self, features: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        batch: dict[str, Any] = {}
        precomputed = [k for k in features[0] if k.startswith("pixel_values")]
        for key in precomputed:
            batch[key] = _stack([f[key] for f in features])
        wanted = [f"pixel_values_{v + 1}" for v in range(self.n_views) if f"pixel_values_{v + 1}" not in batch]
        if self.eval_transform is not None and "pixel_values" not in batch:
            wanted.append("pixel_values")
        if self.raw_transform is not None and "pixel_values_eq" not in batch:
            wanted.append("pixel_values_eq")
        if wanted:
            if self.image_column not in features[0]:
                raise ValueError(
                    f"`image_column`={self.image_column!r} is not a column of the dataset (columns: "
                    f"{sorted(features[0])}); set `image_column` in the training arguments."
                )
            rows: dict[str, list[Tensor]] = {key: [] for key in wanted}
            with self._rng(batch):
                for feature in features:
                    image = feature[self.image_column]
                    for key in wanted:
                        if key == "pixel_values":
                            rows[key].append(self.eval_transform(image))  # type: ignore[misc]
                        elif key == "pixel_values_eq":
                            rows[key].append(self.raw_transform(image))  # type: ignore[misc]
                        else:
                            rows[key].append(self.transform(image))  # type: ignore[misc]
            for key in wanted:
                batch[key] = torch.stack(rows[key])
        labels = _collate_labels(features, self.label_column)
        if labels is not None:
            batch["labels"] = labels
        return batch


@dataclass
class TextViewCollator:
    """Tokenise a text column (and an optional positive-pair column) with the processing class.

    Args:
        tokenizer: The ``processing_class`` (a ``PreTrainedTokenizerBase``).
        text_column: Column holding the sentences (keys ``input_ids``, ``attention_mask``…).
        text_pair_column: Optional column with a positive sentence per row (keys
            ``pair_input_ids``, ``pair_attention_mask``…). ``None``: SimCSE, the trainer encodes
            the same sentence twice under dropout.
        label_column: Column holding integer labels, as in :class:`ImageViewCollator`.
        max_length: Truncation length.

    Raises:
        ValueError: if a row lacks the text column, or a label is not an int.
    """

    tokenizer: Any
    text_column: str = "text"
    text_pair_column: str | None = None
    label_column: str | None = "label"
    max_length: int = 128

    def _encode(self, features: Sequence[Mapping[str, Any]], column: str) -> dict[str, Tensor]:
        if column not in features[0]:
            raise ValueError(
                f"{column!r} is not a column of the dataset (columns: {sorted(features[0])}); set "
                "`text_column` / `text_pair_column` in the training arguments."
            )
        texts = [f[column] for f in features]
        encoded = self.tokenizer(
            texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
        )
        return dict(encoded)

    def __call__(self, features: Sequence[Mapping[str, Any]]) -> dict[str, Tensor]:
        if "input_ids" in features[0]:  # pre-tokenised rows
            keys = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in features[0]]
            batch = dict(self.tokenizer.pad([{k: f[k] for k in keys} for f in features], return_tensors="pt"))
        else:
            batch = self._encode(features, self.text_column)
        if self.text_pair_column is not None:
            batch.update({f"pair_{k}": v for k, v in self._encode(features, self.text_pair_column).items()})
        labels = _collate_labels(features, self.label_column)
        if labels is not None:
            batch["labels"] = labels
        return batch


def pad_and_concat(tensors: Sequence[Tensor], pad_value: int = 0) -> Tensor:
    """Concatenate ``(B_i, L_i)`` token tensors along dim 0, right-padding to the longest ``L``.

    Right padding (with mask 0) changes neither mean pooling over the attention mask nor the CLS
    token, so several text views can share one forward pass.
    """
    length = max(t.shape[1] for t in tensors)
    padded = [torch.nn.functional.pad(t, (0, length - t.shape[1]), value=pad_value) for t in tensors]
    return torch.cat(padded, dim=0)
