"""Views: everything that turns dataset rows into what an objective encodes.

* :class:`ViewBuilder` -- the one interface objectives and the trainer use; :class:`ImageViews`
  (timm encoders) and :class:`TextViews` (text encoders) implement it, and :func:`views_for`
  picks one from the model (:func:`input_modality_of`: what the model reads).
* Per-sample transforms: :mod:`~hf_contrast.views.image_transforms` (SimCLR augmentation,
  evaluation transform, :class:`TwoViewTransform`, :func:`raw_image_transform`, sized from a timm
  data config); decoding is :mod:`~hf_contrast.data.decode` (any PIL mode / path / bytes to the encoder's
  channels; its :class:`BadImageError` is re-exported here).
* Chunk-shared views (CARE's equivariance views, one augmentation pair per chunk, on the batch's
  device): :class:`ChunkedAugmentation` (images), :class:`ChunkedTextAugmentation` and
  :func:`simcse_views` (text).
* Paired views: :class:`PairedTransform` for LOCAL's (pre, post) pairs.
* Collators: :class:`ImageViewCollator`, :class:`PairedImageCollator`, :class:`TextViewCollator`,
  :func:`pop_view_batch_index`, :func:`pop_skipped_images`, :func:`pop_dropped_rows`; :func:`scan_images` (the
  start-up scan of image files); the rules that keep a batch that lost bad rows whole: :class:`WholeChunks`,
  :class:`WholeClassGroups`.
* Batches: :class:`AFCLBatchSampler`, SimO's class-grouped ``C x k`` batches.
* Views made on the device: :class:`BatchedSimCLRViews` — the SimCLR/BYOL recipe with per-sample
  parameters (:class:`ViewParams`, drawn like torchvision's) applied to a whole ``uint8`` batch in a few
  batched tensor operations on its device (:mod:`~hf_contrast.views.batched_ops`), seeded per batch;
  :class:`DeviceViews` makes a training run's views with it (``views_on_device=True``), CARE's
  chunk-shared ones included (:class:`ChunkSharedDeviceViews`).
* :class:`SimCLRRecipe`: the recipe's parameters, defined once for both pipelines.
"""

from ..data.decode import BadImageError
from .afcl_sampler import AFCLBatchSampler
from .batched_params import ViewParams
from .batched_simclr import BatchedSimCLRViews
from .builder import ViewBuilder, split_output
from .chunked_image import ChunkedAugmentation
from .chunked_text import ChunkedTextAugmentation, simcse_views
from .device_views import ChunkSharedDeviceViews, DeviceViews
from .for_model import input_modality_of, views_for
from .image_collators import (
    ImageViewCollator,
    PairedImageCollator,
    pop_dropped_rows,
    pop_skipped_images,
    pop_view_batch_index,
)
from .image_scan import BadImageFile, scan_images
from .image_transforms import (
    TwoViewTransform,
    eval_transform,
    eval_transform_from_data_config,
    raw_image_transform,
    simclr_transform,
    simclr_transform_from_data_config,
)
from .image_views import ImageViews
from .paired_transform import PairedTransform, paired_transform
from .simclr_recipe import SimCLRRecipe, default_blur_kernel
from .text_collator import TextViewCollator
from .text_views import TextViews, pad_and_concat
from .whole_rows import WholeChunks, WholeClassGroups, WholeRows

__all__ = [
    "AFCLBatchSampler",
    "BadImageError",
    "BadImageFile",
    "BatchedSimCLRViews",
    "ChunkSharedDeviceViews",
    "ChunkedAugmentation",
    "ChunkedTextAugmentation",
    "DeviceViews",
    "ImageViewCollator",
    "ImageViews",
    "PairedImageCollator",
    "PairedTransform",
    "SimCLRRecipe",
    "TextViewCollator",
    "TextViews",
    "TwoViewTransform",
    "ViewBuilder",
    "ViewParams",
    "WholeChunks",
    "WholeClassGroups",
    "WholeRows",
    "default_blur_kernel",
    "eval_transform",
    "eval_transform_from_data_config",
    "paired_transform",
    "pad_and_concat",
    "input_modality_of",
    "pop_dropped_rows",
    "pop_skipped_images",
    "pop_view_batch_index",
    "raw_image_transform",
    "scan_images",
    "simclr_transform",
    "simclr_transform_from_data_config",
    "simcse_views",
    "split_output",
    "views_for",
]
