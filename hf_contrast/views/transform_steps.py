"""The steps every image transform is built from (shared by the image and paired transforms and the
equivariance evaluator): the image size type, the mean/std check, interpolation names, the channel fix and
the decode-to-tensor steps; scalar argument checks are :mod:`hf_contrast.tensor_checks`'."""

from __future__ import annotations

from collections.abc import Sequence

from torchvision.transforms import InterpolationMode, v2

from hf_contrast.data.decode import ConvertImageMode
from hf_contrast.errors import InputError

__all__ = [
    "ImageSize",
    "check_mean_std",
    "interpolation_mode",
    "channel_step",
    "to_image_steps",
]

ImageSize = int | tuple[int, int]


def check_mean_std(mean: Sequence[float], std: Sequence[float]) -> tuple[list[float], list[float]]:
    """Check one positive ``std`` per ``mean`` value; return both as float lists."""
    mean_list, std_list = [float(m) for m in mean], [float(s) for s in std]
    if len(mean_list) == 0 or len(mean_list) != len(std_list):
        raise InputError(
            f"`mean` and `std` must have one value per channel and the same length, got {len(mean_list)} and "
            f"{len(std_list)} values."
        )
    if min(std_list) <= 0:
        raise InputError(f"`std` must be positive, got {tuple(std_list)}.")
    return mean_list, std_list


def interpolation_mode(value: str | InterpolationMode) -> InterpolationMode:
    """Parse an interpolation name such as ``"bicubic"`` (timm data configs use names)."""
    if isinstance(value, InterpolationMode):
        return value
    try:
        return InterpolationMode(value)
    except ValueError:
        allowed = ", ".join(repr(m.value) for m in InterpolationMode)
        raise InputError(f"`interpolation` must be one of {allowed}, got {value!r}.") from None


def channel_step(n_channels: int) -> list[v2.Transform]:
    """Bring grayscale or RGB inputs to the channel count the normalisation expects."""
    if n_channels == 3:
        return [v2.RGB()]
    if n_channels == 1:
        return [v2.Grayscale(num_output_channels=1)]
    return []


def to_image_steps(n_channels: int) -> list[object]:
    """First steps of every image transform: decode + convert any PIL mode, ``ToImage``, channel fix.

    :class:`~hf_contrast.data.decode.ConvertImageMode` turns PIL images of any mode (RGBA,
    palette, 16-bit, CMYK...) into ``RGB`` / ``L``; :func:`channel_step` then fixes tensors.
    """
    return [ConvertImageMode(n_channels if n_channels in (1, 3) else None), v2.ToImage(), *channel_step(n_channels)]
