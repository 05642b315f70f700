"""Paired (pre, post) views for LOCAL: one geometric draw shared by both images of a pair.

LOCAL (docs/methods.md §3a) encodes a pair ``(x_pre, x_post)`` and compares their feature maps
position by position (``Enc'_i(x_pre) - Enc'_i(x_post)``), so both images must be cropped,
flipped and rotated identically or the difference measures the augmentation instead of the
change. ``torchvision.transforms.v2`` transforms called on several images at once draw one set
of parameters for all of them; :class:`PairedTransform` relies on that for the geometric part
and calls an optional photometric transform on each image separately.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor
from torchvision import tv_tensors
from torchvision.transforms import InterpolationMode, v2

from hf_contrast.data.decode import ConvertImageMode
from hf_contrast.errors import InputError
from hf_contrast.tensor_checks import check_non_negative, check_range, check_size, check_unit_interval
from hf_contrast.views.simclr_recipe import check_jitter_strength
from hf_contrast.views.transform_steps import (
    ImageSize,
    Normalize,
    channel_step,
    check_mean_std,
    interpolation_mode,
)

__all__ = ["PairedTransform", "paired_transform"]

Transform = Callable[..., Any]


class PairedTransform:
    """Apply the same geometric augmentation to both images of a pair.

    Each input is first converted to a ``tv_tensors.Image`` (PIL, NumPy ``(H, W, C)`` and tensors
    ``(C, H, W)`` are accepted), so that v2 transforms both images rather than only the first
    plain tensor. Then ``geometric(pre, post)`` runs once on the pair (shared crop, flip, rotation
    parameters), ``photometric`` runs on each image independently, and ``finalize`` (e.g. dtype
    conversion and normalisation) runs on each image.

    Args:
        geometric: A v2 transform whose random parameters are shared by the pair.
        photometric: Optional transform called separately on each image (independent draws).
        finalize: Optional deterministic transform applied to each image last; default converts
            to a plain float32 tensor in ``[0, 1]``.
        n_channels: Convert PIL images of any mode to ``RGB`` (3) or ``L`` (1) first
            (:class:`~hf_contrast.data.decode.ConvertImageMode`); ``None``: decode only.

    Raises:
        ValueError: if a given transform is not callable.

    >>> t = PairedTransform(v2.RandomResizedCrop(8, antialias=True))
    >>> x = torch.rand(3, 16, 16)
    >>> a, b = t(x, x)
    >>> bool(torch.equal(a, b))
    True
    """

    def __init__(
        self,
        geometric: Transform,
        photometric: Transform | None = None,
        *,
        finalize: Transform | None = None,
        n_channels: int | None = None,
    ) -> None:
        for name, value in (("geometric", geometric), ("photometric", photometric), ("finalize", finalize)):
            if value is not None and not callable(value):
                raise InputError(f"`{name}` must be callable, got {type(value).__name__}.")
        self.geometric = geometric
        self.photometric = photometric
        self.finalize = (
            finalize
            if finalize is not None
            else v2.Compose([v2.ToDtype(torch.float32, scale=True), v2.ToPureTensor()])
        )
        self.n_channels = n_channels
        self._to_image = v2.Compose([ConvertImageMode(n_channels), v2.ToImage()])

    def __call__(self, pre: Any, post: Any) -> tuple[Tensor, Tensor]:
        """Return the augmented pair.

        Args:
            pre: The "before" image (PIL, NumPy ``(H, W, C)`` or tensor). Shape: ``(C, H, W)``.
            post: The "after" image, same size as ``pre``. Shape: ``(C, H, W)``.

        Returns:
            ``(pre', post')`` tensors. Shape: ``(C', H', W')`` each.

        Raises:
            ValueError: if the two images have different spatial sizes.
        """
        pre_img, post_img = self._to_image(pre), self._to_image(post)
        if pre_img.shape[-2:] != post_img.shape[-2:]:
            raise InputError(
                f"`pre` and `post` must have the same size (H, W), got {tuple(pre_img.shape[-2:])} and "
                f"{tuple(post_img.shape[-2:])}."
            )
        pre_img, post_img = self.geometric(pre_img, post_img)
        if self.photometric is not None:
            pre_img, post_img = self.photometric(pre_img), self.photometric(post_img)
        return self._plain(self.finalize(pre_img)), self._plain(self.finalize(post_img))

    @staticmethod
    def _plain(x: Tensor) -> Tensor:
        return x.as_subclass(Tensor) if isinstance(x, tv_tensors.TVTensor) else x

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(geometric={self.geometric!r}, photometric={self.photometric!r}, "
            f"finalize={self.finalize!r})"
        )


def paired_transform(
    image_size: ImageSize,
    mean: Sequence[float],
    std: Sequence[float],
    *,
    scale: tuple[float, float] = (0.5, 1.0),
    hflip_p: float = 0.5,
    vflip_p: float = 0.0,
    degrees: float = 0.0,
    jitter_strength: float = 0.0,
    jitter_p: float = 0.8,
    interpolation: str | InterpolationMode = InterpolationMode.BILINEAR,
) -> PairedTransform:
    """A ready :class:`PairedTransform` for LOCAL: shared crop/flips/rotation, per-image jitter.

    Args:
        image_size: Output side ``S`` or ``(H, W)``.
        mean: Per-channel normalisation mean (its length sets the channel count).
        std: Per-channel normalisation standard deviation, positive.
        scale: Area fraction range of the shared ``RandomResizedCrop``.
        hflip_p: Probability of a shared horizontal flip.
        vflip_p: Probability of a shared vertical flip (aerial imagery: 0.5 is natural).
        degrees: Shared random rotation range ``[-degrees, degrees]`` (0 disables it).
        jitter_strength: Per-image colour jitter strength ``s`` (``ColorJitter(0.8s, 0.8s,
            0.8s, 0.2s)``); 0 (default) disables the photometric step.
        jitter_p: Probability of the per-image jitter.
        interpolation: Resize/rotation interpolation.

    Returns:
        The paired transform; its outputs are normalised float32 tensors ``(C, H, W)``.

    Raises:
        ValueError: on an invalid size, range, probability or mean/std pair.
    """
    size = check_size("image_size", image_size)
    mean_list, std_list = check_mean_std(mean, std)
    scale = check_range("scale", scale, 0.0, 1.0)
    degrees = check_non_negative("degrees", degrees)
    if degrees > 180:
        raise InputError(f"`degrees` must be at most 180 (the range [-180, 180] holds every angle), got {degrees:g}.")
    jitter_strength = check_jitter_strength(jitter_strength)
    mode = interpolation_mode(interpolation)
    geometric: list[v2.Transform] = [*channel_step(len(mean_list))]
    geometric.append(v2.RandomResizedCrop(size, scale=scale, interpolation=mode, antialias=True))
    if check_unit_interval("hflip_p", hflip_p) > 0:
        geometric.append(v2.RandomHorizontalFlip(p=hflip_p))
    if check_unit_interval("vflip_p", vflip_p) > 0:
        geometric.append(v2.RandomVerticalFlip(p=vflip_p))
    if degrees > 0:
        geometric.append(v2.RandomRotation(degrees, interpolation=mode))
    photometric = None
    s = float(jitter_strength)
    if check_unit_interval("jitter_p", jitter_p) > 0 and s > 0:
        jitter = v2.ColorJitter(brightness=0.8 * s, contrast=0.8 * s, saturation=0.8 * s, hue=min(0.2 * s, 0.5))
        photometric = v2.RandomApply([jitter], p=jitter_p)
    finalize = v2.Compose([v2.ToDtype(torch.float32, scale=True), Normalize(mean_list, std_list), v2.ToPureTensor()])
    n_channels = len(mean_list) if len(mean_list) in (1, 3) else None
    return PairedTransform(v2.Compose(geometric), photometric, finalize=finalize, n_channels=n_channels)
