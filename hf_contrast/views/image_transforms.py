"""SimCLR image views and evaluation transforms built on ``torchvision.transforms.v2``.

The SimCLR augmentation family (Chen et al. 2020, https://arxiv.org/abs/2002.05709, appendix A)
is the one CARE uses for both its invariance and its equivariance views
(https://arxiv.org/abs/2306.13924): random resized crop, horizontal flip, colour jitter
(p=0.8), grayscale (p=0.2) and Gaussian blur. Every transform here accepts a PIL image, a
NumPy ``(H, W, C)`` array, a ``uint8`` tensor or a float tensor in ``[0, 1]`` of shape
``(..., C, H, W)`` and returns a normalised float32 tensor. Sizes and normalisation can be
taken from a timm data config (``encoder.data_config``, i.e. the output of
``timm.data.resolve_data_config``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torchvision import tv_tensors
from torchvision.transforms import InterpolationMode, v2

from hf_contrast.data.decode import ConvertImageMode
from hf_contrast.errors import InputError
from hf_contrast.tensor_checks import MAX_IMAGE_SIDE, check_int, check_size
from hf_contrast.views.simclr_recipe import SimCLRRecipe, default_blur_kernel
from hf_contrast.views.transform_steps import (
    ImageSize,
    Normalize,
    channel_step,
    check_mean_std,
    interpolation_mode,
    read_data_config,
    to_image_steps,
)

__all__ = [
    "simclr_transform",
    "simclr_transform_from_data_config",
    "eval_transform",
    "eval_transform_from_data_config",
    "TwoViewTransform",
    "default_blur_kernel",
    "raw_image_transform",
]


def clamp_unit_range(image: Tensor) -> Tensor:
    """A float image clamped to ``[0, 1]`` (uint8 images unchanged); keeps the ``tv_tensors`` type.

    Bicubic (and antialiased bilinear) resampling of a float image overshoots ``[0, 1]`` near sharp
    edges; ``ColorJitter``'s hue and saturation steps then return NaN for some pixels. Resampling a
    ``uint8`` image saturates by itself, which is why views made from decoded images never hit this.
    """
    if not image.is_floating_point():
        return image
    clamped = image.clamp(0.0, 1.0)
    return tv_tensors.wrap(clamped, like=image) if isinstance(image, tv_tensors.TVTensor) else clamped


def simclr_transform(
    image_size: ImageSize,
    mean: Sequence[float],
    std: Sequence[float],
    *,
    interpolation: str | InterpolationMode = InterpolationMode.BILINEAR,
    **recipe: Any,
) -> v2.Compose:
    """The SimCLR augmentation as a ``v2.Compose``, ending in a normalised float32 tensor.

    SimCLR: https://arxiv.org/abs/2002.05709 (appendix A). The random parameters are those of
    :class:`~hf_contrast.views.SimCLRRecipe` (one definition shared with
    :class:`~hf_contrast.views.BatchedSimCLRViews`): colour jitter with strength ``s`` is
    ``ColorJitter(0.8s, 0.8s, 0.8s, 0.2s)``; the default ``s=0.5`` gives the
    ``ColorJitter(0.4, 0.4, 0.4, 0.1)`` used by CARE/MoCo-v2/lightly. Steps with probability 0
    are left out. Called on a batched tensor ``(B, C, H, W)`` the whole batch gets ONE draw of
    every random parameter (torchvision v2 semantics), which :class:`ChunkedAugmentation` uses.

    Args:
        image_size: Output side ``S`` or ``(H, W)``.
        mean: Per-channel normalisation mean; its length sets the channel count (3: grayscale
            inputs are converted to RGB; 1: RGB inputs are converted to grayscale).
        std: Per-channel normalisation standard deviation, positive.
        interpolation: Resize interpolation (``"bilinear"``, ``"bicubic"``, ...).
        **recipe: Fields of :class:`~hf_contrast.views.SimCLRRecipe` to change (``scale``,
            ``ratio``, ``hflip_p``, ``jitter_strength``, ``jitter_p``, ``grayscale_p``, ``blur_p``,
            ``blur_kernel``, ``blur_sigma``, ``solarize_p``, ``solarize_threshold``).

    Returns:
        A transform mapping an image to a float32 tensor. Shape: ``(C, H, W)`` (or
        ``(B, C, H, W)`` for a batched input).

    Raises:
        ValueError: if a size, probability, range, recipe name or the mean/std pair is invalid.

    >>> t = simclr_transform(32, mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))
    >>> t(torch.rand(3, 48, 48)).shape
    torch.Size([3, 32, 32])
    """
    size = check_size("image_size", image_size)
    mean_list, std_list = check_mean_std(mean, std)
    r = SimCLRRecipe.of(**recipe)
    steps: list[Any] = to_image_steps(len(mean_list))
    mode = interpolation_mode(interpolation)
    steps.append(v2.RandomResizedCrop(size, scale=r.scale, ratio=r.ratio, interpolation=mode, antialias=True))
    steps.append(v2.Lambda(clamp_unit_range, tv_tensors.Image))  # float inputs: see clamp_unit_range
    if r.hflip_p > 0:
        steps.append(v2.RandomHorizontalFlip(p=r.hflip_p))
    if r.jitter_applies:
        brightness, contrast, saturation, hue = r.jitter
        jitter = v2.ColorJitter(brightness=brightness, contrast=contrast, saturation=saturation, hue=hue)
        steps.append(v2.RandomApply([jitter], p=r.jitter_p))
    if r.grayscale_p > 0:
        steps.append(v2.RandomGrayscale(p=r.grayscale_p))
    if r.blur_p > 0:
        steps.append(v2.RandomApply([v2.GaussianBlur(kernel_size=r.kernel_for(size), sigma=r.blur_sigma)], p=r.blur_p))
    steps.append(v2.ToDtype(torch.float32, scale=True))
    if r.solarize_p > 0:  # on the [0, 1] scale, as the threshold
        steps.append(v2.RandomSolarize(threshold=r.solarize_threshold, p=r.solarize_p))
    steps += [Normalize(mean_list, std_list), v2.ToPureTensor()]
    return v2.Compose(steps)


def simclr_transform_from_data_config(data_config: Mapping[str, Any], **kwargs: Any) -> v2.Compose:
    """:func:`simclr_transform` sized and normalised from a timm data config.

    Args:
        data_config: ``timm.data.resolve_data_config`` output (``encoder.data_config``) with
            ``input_size`` ``(C, H, W)``, ``mean``, ``std`` and optionally ``interpolation``.
        **kwargs: Any other :func:`simclr_transform` keyword (they win over the config).

    Returns:
        The SimCLR transform.

    Raises:
        ValueError: if the config lacks ``input_size``, ``mean`` or ``std``.
    """
    size, mean, std, extra = read_data_config(data_config)
    if "interpolation" in extra:
        kwargs.setdefault("interpolation", extra["interpolation"])
    return simclr_transform(size, mean, std, **kwargs)


def eval_transform(
    image_size: ImageSize,
    mean: Sequence[float],
    std: Sequence[float],
    *,
    crop_pct: float = 0.875,
    interpolation: str | InterpolationMode = InterpolationMode.BILINEAR,
    crop_mode: str = "center",
) -> v2.Compose:
    """Deterministic evaluation transform: timm's own eval resize and crop, then normalise.

    The geometry is ``timm.data.create_transform(..., is_training=False)``'s (``crop_mode="center"``:
    the shorter side is resized to ``image_size / crop_pct`` and the centre ``image_size`` crop is
    kept; ``"squash"`` and ``"border"`` as timm). A PIL image is resized as a PIL image, as timm
    does, so the result equals timm's transform of the same image to float rounding (measured: at
    most 1.2e-6 on random images); tensors and NumPy arrays go through the same steps on tensors.
    Images of any PIL mode are first converted to the channels of ``mean`` (timm expects RGB).

    Args:
        image_size: Output side ``S`` or ``(H, W)``.
        mean: Per-channel normalisation mean (its length sets the channel count).
        std: Per-channel normalisation standard deviation, positive.
        crop_pct: Fraction of the resized image kept by the center crop, in ``(0, 1]``.
        interpolation: Resize interpolation.
        crop_mode: ``"center"``, ``"squash"`` or ``"border"`` (timm's ``crop_mode``).

    Returns:
        A transform mapping an image to a float32 tensor. Shape: ``(C, H, W)``.

    Raises:
        ValueError: on an invalid size, ``crop_pct``, ``crop_mode`` or mean/std pair.
    """
    import timm.data
    from torchvision.transforms.v2 import functional as TF

    size = check_size("image_size", image_size)
    mean_list, std_list = check_mean_std(mean, std)
    if isinstance(crop_pct, bool) or not isinstance(crop_pct, (int, float)) or not 0.0 < crop_pct <= 1.0:
        raise InputError(f"`crop_pct` must be in (0, 1], got {crop_pct!r}.")
    if max(size) / crop_pct > MAX_IMAGE_SIDE:  # the side resized to before the crop
        raise InputError(
            f"`crop_pct`={crop_pct!r} resizes the image to {max(size) / crop_pct:.3g} pixels before the "
            f"{max(size)}-pixel crop (image_size / crop_pct), more than {MAX_IMAGE_SIDE}; use a crop_pct near 1 "
            "(timm's are 0.8 to 1)."
        )
    if crop_mode not in _CROP_MODES:
        raise InputError(f"`crop_mode` must be one of {_CROP_MODES} (timm's), got {crop_mode!r}.")
    geometry = timm.data.create_transform(
        input_size=(len(mean_list), *size),
        is_training=False,
        interpolation=interpolation_mode(interpolation).value,
        crop_pct=float(crop_pct),
        crop_mode=crop_mode,
        mean=tuple(mean_list),
        std=tuple(std_list),
        normalize=False,  # resize + crop (+ PIL -> uint8 tensor); the normalisation is ours, below
    )
    return v2.Compose(
        [
            ConvertImageMode(len(mean_list) if len(mean_list) in (1, 3) else None),
            v2.Lambda(TF.to_image, np.ndarray),  # (H, W, C) arrays -> (C, H, W); PIL images stay PIL for the resize
            *channel_step(len(mean_list)),
            geometry,
            v2.ToImage(),
            v2.ToDtype(torch.float32, scale=True),
            Normalize(mean_list, std_list),
            v2.ToPureTensor(),
        ]
    )


_CROP_MODES = ("center", "squash", "border")


def eval_transform_from_data_config(data_config: Mapping[str, Any], **kwargs: Any) -> v2.Compose:
    """:func:`eval_transform` from a timm data config (uses its ``crop_pct`` and ``interpolation``).

    Args:
        data_config: ``timm.data.resolve_data_config`` output (``encoder.data_config``).
        **kwargs: Any other :func:`eval_transform` keyword (they win over the config).

    Returns:
        The evaluation transform.

    Raises:
        ValueError: if the config lacks ``input_size``, ``mean`` or ``std``.
    """
    size, mean, std, extra = read_data_config(data_config)
    for key, value in extra.items():
        kwargs.setdefault(key, value)
    return eval_transform(size, mean, std, **kwargs)


class TwoViewTransform:
    """Two independent draws of one random transform: the per-sample views of SimCLR/CARE.

    Each call applies ``transform`` twice, so each sample gets its own pair ``(a1(x), a2(x))``
    (CARE's invariance views, docs/methods.md §4). Use it inside a dataset transform.

    Args:
        transform: A random transform, e.g. :func:`simclr_transform`.

    >>> views = TwoViewTransform(simclr_transform(16, (0.5,) * 3, (0.5,) * 3))
    >>> v1, v2_ = views(torch.rand(3, 20, 20))
    >>> v1.shape == v2_.shape == (3, 16, 16)
    True
    """

    def __init__(self, transform: Callable[[Any], Tensor]) -> None:
        if not callable(transform):
            raise InputError(f"`transform` must be callable, got {type(transform).__name__}.")
        self.transform = transform

    def __call__(self, image: Any) -> tuple[Tensor, Tensor]:
        """Return ``(transform(image), transform(image))`` with independent random draws."""
        return self.transform(image), self.transform(image)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.transform!r})"


def raw_image_transform(image_size: int | tuple[int, int], n_channels: int = 3) -> v2.Compose:
    """Resize an image to ``image_size`` and return it un-normalised as ``uint8`` ``(C, H, W)``.

    The input of :class:`~hf_contrast.views.ChunkedAugmentation`, which augments and normalises
    the whole batch on the device. PIL images of any mode are converted to ``n_channels`` first.
    """
    size = check_size("image_size", image_size)
    check_int("n_channels", n_channels, 1)
    return v2.Compose(
        [
            *to_image_steps(n_channels),
            v2.Resize(size, antialias=True),
            v2.ToDtype(torch.uint8, scale=True),
            v2.ToPureTensor(),
        ]
    )
