"""Argument checks and small builders shared by the image and paired transforms."""

from __future__ import annotations

from collections.abc import Sequence

from torchvision.transforms import InterpolationMode, v2

from hf_contrast.views.decode import ConvertImageMode

__all__ = [
    "ImageSize",
    "check_size",
    "check_mean_std",
    "check_probability",
    "check_range",
    "interpolation_mode",
    "channel_step",
    "to_image_steps",
]

ImageSize = int | tuple[int, int]


def check_size(name: str, size: object) -> tuple[int, int]:
    """Return ``size`` as ``(H, W)``; an int means a square."""
    if isinstance(size, int) and not isinstance(size, bool):
        pair = (size, size)
    elif isinstance(size, Sequence) and len(size) == 2 and all(isinstance(s, int) for s in size):
        pair = (int(size[0]), int(size[1]))
    else:
        raise ValueError(f"`{name}` must be an int or a pair (H, W) of ints, got {size!r}.")
    if min(pair) <= 0:
        raise ValueError(f"`{name}` must be positive, got {size!r}.")
    return pair


def check_mean_std(mean: Sequence[float], std: Sequence[float]) -> tuple[list[float], list[float]]:
    """Check one positive ``std`` per ``mean`` value; return both as float lists."""
    mean_list, std_list = [float(m) for m in mean], [float(s) for s in std]
    if len(mean_list) == 0 or len(mean_list) != len(std_list):
        raise ValueError(
            f"`mean` and `std` must have one value per channel and the same length, got {len(mean_list)} and "
            f"{len(std_list)} values."
        )
    if min(std_list) <= 0:
        raise ValueError(f"`std` must be positive, got {tuple(std_list)}.")
    return mean_list, std_list


def check_probability(name: str, p: float) -> float:
    """Check that ``p`` is a number (not a string or bool) in ``[0, 1]``."""
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
        raise ValueError(f"`{name}` must be a probability in [0, 1] (a number, e.g. 0.5), got {p!r}.")
    return float(p)


def check_range(name: str, value: Sequence[float], low: float, high: float) -> tuple[float, float]:
    """Check an ordered pair ``(lo, hi)`` with ``low < lo <= hi <= high``."""
    if len(value) != 2 or not (low < value[0] <= value[1] <= high):
        raise ValueError(f"`{name}` must be a pair (lo, hi) with {low} < lo <= hi <= {high}, got {tuple(value)}.")
    return float(value[0]), float(value[1])


def interpolation_mode(value: str | InterpolationMode) -> InterpolationMode:
    """Parse an interpolation name such as ``"bicubic"`` (timm data configs use names)."""
    if isinstance(value, InterpolationMode):
        return value
    try:
        return InterpolationMode(value)
    except ValueError:
        allowed = ", ".join(repr(m.value) for m in InterpolationMode)
        raise ValueError(f"`interpolation` must be one of {allowed}, got {value!r}.") from None


def channel_step(n_channels: int) -> list[v2.Transform]:
    """Bring grayscale or RGB inputs to the channel count the normalisation expects."""
    if n_channels == 3:
        return [v2.RGB()]
    if n_channels == 1:
        return [v2.Grayscale(num_output_channels=1)]
    return []


def to_image_steps(n_channels: int) -> list[object]:
    """First steps of every image transform: decode + convert any PIL mode, ``ToImage``, channel fix.

    :class:`~hf_contrast.views.decode.ConvertImageMode` turns PIL images of any mode (RGBA,
    palette, 16-bit, CMYK...) into ``RGB`` / ``L``; :func:`channel_step` then fixes tensors.
    """
    return [ConvertImageMode(n_channels if n_channels in (1, 3) else None), v2.ToImage(), *channel_step(n_channels)]
