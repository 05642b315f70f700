"""Views for contrastive training: per-sample, chunk-shared and paired augmentations.

* :mod:`~hf_contrast.augment.image` -- SimCLR augmentation, evaluation transform and
  :class:`TwoViewTransform` (per-sample views), sized from a timm data config.
* :mod:`~hf_contrast.augment.chunked` -- :class:`ChunkedAugmentation`, CARE's equivariance
  views (one augmentation pair per chunk, batched on the batch's device).
* :mod:`~hf_contrast.augment.text` -- :func:`simcse_views` and
  :class:`ChunkedTextAugmentation` (chunk-shared delete/insert/mask on tokenized batches).
* :mod:`~hf_contrast.augment.paired` -- :class:`PairedTransform` for LOCAL's (pre, post) pairs.
"""

from hf_contrast.augment.chunked import ChunkedAugmentation
from hf_contrast.augment.image import (
    TwoViewTransform,
    default_blur_kernel,
    eval_transform,
    eval_transform_from_data_config,
    simclr_transform,
    simclr_transform_from_data_config,
)
from hf_contrast.augment.paired import PairedTransform, paired_transform
from hf_contrast.augment.text import ChunkedTextAugmentation, simcse_views

__all__ = [
    "ChunkedAugmentation",
    "ChunkedTextAugmentation",
    "PairedTransform",
    "TwoViewTransform",
    "default_blur_kernel",
    "eval_transform",
    "eval_transform_from_data_config",
    "paired_transform",
    "simclr_transform",
    "simclr_transform_from_data_config",
    "simcse_views",
]
