"""The steps every image transform is built from (shared by the image and paired transforms, the device views and
the equivariance evaluator): the image size type, a timm data config read, the mean/std check and the normalisation,
interpolation names, the channel fix and the decode-to-tensor steps; scalar argument checks are
:mod:`hf_contrast.tensor_checks`'."""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from torch import Tensor
from torchvision.transforms import InterpolationMode, v2

from hf_contrast.data.decode import ConvertImageMode
from hf_contrast.errors import InputError
from hf_contrast.tensor_checks import check_number, check_size

__all__ = [
    "ImageSize",
    "check_mean_std",
    "Normalize",
    "read_data_config",
    "interpolation_mode",
    "channel_step",
    "to_image_steps",
]

ImageSize = int | tuple[int, int]


#: Bounds of the normalisation constants of pixels on the ``[0, 1]`` scale: within them a normalised pixel stays below
#: about 1e12 (a std of 1e-320 made it ``inf``); a timm or torchvision mean is 0 to 1, a std 0.01 to 1.
MAX_MEAN, MIN_STD = 1e6, 1e-6


def _channel_values(name: str, values: object) -> list[float]:
    """``values`` as a list of finite floats, one per channel (a sequence, a 1-D tensor or array)."""
    if isinstance(values, (Tensor, np.ndarray)) and values.ndim == 1:
        values = values.tolist()
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Sequence):
        raise InputError(
            f"`{name}` must be a sequence of numbers, one per channel (e.g. (0.5, 0.5, 0.5)), got {values!r}."
        )
    return [check_number(f"{name}[{index}]", value) for index, value in enumerate(values)]


def check_mean_std(mean: Sequence[float], std: Sequence[float]) -> tuple[list[float], list[float]]:
    """Check one finite ``mean`` and one positive ``std`` per channel (``|mean| <= MAX_MEAN``, ``std >= MIN_STD``:
    pixels on the ``[0, 1]`` scale stay finite); return both as float lists."""
    mean_list, std_list = _channel_values("mean", mean), _channel_values("std", std)
    if len(mean_list) == 0 or len(mean_list) != len(std_list):
        raise InputError(
            f"`mean` and `std` must have one value per channel and the same length, got {len(mean_list)} and "
            f"{len(std_list)} values."
        )
    if min(std_list) <= 0:
        raise InputError(f"`std` must be positive, got {tuple(std_list)}.")
    if min(std_list) < MIN_STD or max(abs(m) for m in mean_list) > MAX_MEAN:
        raise InputError(
            f"`mean` {tuple(mean_list)} and `std` {tuple(std_list)} are far from the [0, 1] scale of the pixels they "
            f"normalise (|mean| <= {MAX_MEAN:g} and std >= {MIN_STD:g} are accepted); give them on that scale "
            "(ImageNet's: mean (0.485, 0.456, 0.406), std (0.229, 0.224, 0.225))."
        )
    return mean_list, std_list


def read_data_config(data_config: Mapping[str, Any]) -> tuple[tuple[int, int], Any, Any, dict[str, Any]]:
    """A timm data config's ``(H, W)``, ``mean``, ``std`` (checked by the transform that takes them) and its other
    fields the transforms read (``interpolation``, ``crop_pct``, ``crop_mode``, when set).

    Raises:
        ValueError: if ``data_config`` is no mapping, lacks ``input_size`` / ``mean`` / ``std``, or its
            ``input_size`` is not ``(C, H, W)`` positive integers.
    """
    if not isinstance(data_config, Mapping):
        raise InputError(
            "`data_config` must be a mapping with 'input_size', 'mean' and 'std' (timm.data.resolve_data_config's "
            f"output, or `encoder.data_config`), got {type(data_config).__name__}."
        )
    missing = [k for k in ("input_size", "mean", "std") if k not in data_config]
    if missing:
        raise InputError(
            f"`data_config` must hold 'input_size', 'mean' and 'std' (timm.data.resolve_data_config output), "
            f"missing {missing}."
        )
    input_size = data_config["input_size"]
    try:
        _channels, height, width = (operator.index(side) for side in input_size)  # NumPy integers too, no floats
    except (TypeError, ValueError):
        raise InputError(f"`data_config['input_size']` must be (C, H, W) integers, got {input_size!r}.") from None
    size = check_size("data_config['input_size']", (height, width))
    extra = {k: data_config[k] for k in ("interpolation", "crop_pct", "crop_mode") if data_config.get(k) is not None}
    return size, data_config["mean"], data_config["std"], extra


class Normalize(v2.Normalize):
    """``v2.Normalize`` that names a channel mismatch: an image whose channels are not one per ``mean`` value (an RGB
    image under a 2-value mean) raises an ``InputError`` naming ``mean`` and ``std``, not torch's shape error."""

    def transform(self, inpt: Any, params: dict[str, Any]) -> Any:
        channels = inpt.shape[-3] if isinstance(inpt, Tensor) and inpt.ndim >= 3 else None
        if channels is not None and channels != len(self.mean):
            raise InputError(
                f"the image has {channels} channel(s) but `mean` and `std` have {len(self.mean)} value(s): give one "
                "value per channel of the images (3 for RGB, 1 for grayscale)."
            )
        return super().transform(inpt, params)


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
