"""The small-image stem: a timm ResNet's first layers as the small-image papers train 32-px images.

CARE's CIFAR model, SimCLR on CIFAR, SupCon, solo-learn's and lightly's CIFAR benchmarks replace ResNet's
ImageNet stem (a 7x7 stride-2 convolution, then a stride-2 max-pool: a 32-px image is 8x8 after it) by one
``Conv2d(in_chans, C, kernel_size=3, stride=1, padding=1, bias=False)`` and no max-pool, so the first stage
sees the full 32x32 image. :func:`apply_small_image_stem` makes that change on a timm ``ResNet`` (resnet*,
resnext*, wide_resnet*, seresnet*, ecaresnet*, the deep-stem ``*d`` variants…: every model of timm's
``ResNet`` class), keeping the stem's input and output channels; ``ContrastiveEncoder.from_backbone(...,
small_image_stem=True)`` and ``ContrastiveEncoderConfig.small_image_stem`` use it, so a saved encoder is
rebuilt with it. No other timm family has this stem: they are refused.

Outside hf_contrast the change is three lines on the timm model (:func:`outside_stem_code`), which the model
card and docs/encoders.md show.
"""

from __future__ import annotations

import math
from typing import Any

from torch import nn

from hf_contrast.errors import InputError

__all__ = [
    "SMALL_IMAGE_STEM",
    "apply_small_image_stem",
    "has_small_image_stem",
    "outside_stem_code",
    "stem_channels",
    "supports_small_image_stem",
]

#: How the model card and the logs name the stem.
SMALL_IMAGE_STEM = "small-image stem (3x3 stride-1 conv, no max-pool)"


def _is_timm_resnet(model: Any) -> bool:
    from timm.models.resnet import ResNet

    return isinstance(model, ResNet)


def _first_conv(stem: nn.Module) -> nn.Conv2d | None:
    """The stem's first convolution: ``stem`` itself, or the first ``Conv2d`` of a deep stem (``Sequential``)."""
    if isinstance(stem, nn.Conv2d):
        return stem
    return next((module for module in stem.modules() if isinstance(module, nn.Conv2d)), None)


def supports_small_image_stem(model: Any) -> bool:
    """Whether ``model`` is a timm ResNet-family model whose stem :func:`apply_small_image_stem` can replace:
    timm's ``ResNet`` class, with ``conv1`` (a ``Conv2d`` or a deep stem holding one), ``bn1`` and ``maxpool``."""
    return (
        _is_timm_resnet(model)
        and isinstance(getattr(model, "conv1", None), nn.Module)
        and _first_conv(model.conv1) is not None
        and isinstance(getattr(model, "bn1", None), nn.Module)
        and isinstance(getattr(model, "maxpool", None), nn.Module)
    )


def has_small_image_stem(model: Any) -> bool:
    """Whether ``model`` already has the small-image stem: ``conv1`` a 3x3 stride-1 ``Conv2d``, ``maxpool``
    an ``Identity``."""
    conv = getattr(model, "conv1", None)
    return (
        _is_timm_resnet(model)
        and isinstance(conv, nn.Conv2d)
        and tuple(conv.kernel_size) == (3, 3)
        and tuple(conv.stride) == (1, 1)
        and isinstance(getattr(model, "maxpool", None), nn.Identity)
    )


def stem_channels(model: nn.Module) -> tuple[int, int]:
    """``(in_chans, out_channels)`` of a ResNet's stem: the image channels its first convolution reads and the
    channels ``bn1`` normalises (the stem's output, which the new convolution keeps)."""
    first = _first_conv(model.conv1)
    if first is None:
        raise InputError(f"The timm model ({type(model).__name__}) has no convolution in `conv1`.")
    return int(first.in_channels), int(model.bn1.num_features)


def _refusal(model: Any, name: str | None) -> InputError:
    what = f"`{name}` ({type(model).__name__})" if name else type(model).__name__
    return InputError(
        f"`small_image_stem=True` does not fit the timm model {what}: the small-image stem replaces a ResNet's "
        "first convolution and max-pool by a 3x3 stride-1 convolution, and is supported on timm's ResNet family "
        "(resnet*, resnext*, wide_resnet*, seresnet*, ecaresnet*, resnet*d... : timm's `ResNet` class) only. Drop "
        "`small_image_stem` (`--small_image_stem false`), or pick a ResNet-family backbone such as 'resnet18'."
    )


def apply_small_image_stem(model: nn.Module, name: str | None = None) -> nn.Module:
    """Give a timm ResNet the small-image stem, in place: ``conv1`` becomes a fresh
    ``Conv2d(in_chans, C, kernel_size=3, stride=1, padding=1, bias=False)`` (timm's ResNet initialisation:
    Kaiming normal, fan-out) and ``maxpool`` an ``Identity``; ``feature_info`` reductions are divided by the
    stem's 4. A model that already has it is returned unchanged.

    A ``(B, C, 32, 32)`` image is ``(B, C, 32, 32)`` after the stem (8x8 with the ImageNet stem). Pretrained
    ``conv1`` weights (7x7, or a deep stem's) are dropped: the new convolution starts from random values.

    Args:
        model: A timm ``ResNet`` (built with ``timm.create_model``, any ``num_classes``).
        name: The backbone's name, for the error.

    Returns:
        ``model``.

    Raises:
        InputError: If ``model`` is not a timm ResNet-family model (:func:`supports_small_image_stem`).
    """
    if has_small_image_stem(model):
        return model
    if not supports_small_image_stem(model):
        raise _refusal(model, name)
    in_chans, channels = stem_channels(model)
    conv = nn.Conv2d(in_chans, channels, kernel_size=3, stride=1, padding=1, bias=False)
    first = _first_conv(model.conv1)
    conv.to(device=first.weight.device, dtype=first.weight.dtype)
    if conv.weight.device.type != "meta":
        nn.init.kaiming_normal_(conv.weight, mode="fan_out", nonlinearity="relu")
    model.conv1 = conv
    model.maxpool = nn.Identity()
    info = getattr(model, "feature_info", None)
    if isinstance(info, list) and info and all(isinstance(entry, dict) for entry in info):
        stem_stride = next((int(e["reduction"]) for e in info if e.get("module") == "layer1"), 4)
        for entry in info:
            entry["reduction"] = max(1, math.ceil(int(entry["reduction"]) / stem_stride))
    return model


def outside_stem_code(in_chans: int, channels: int, model: str = "model") -> str:
    """The two lines that give a plain ``timm.create_model(...)`` ResNet the small-image stem (what the model card
    and docs/encoders.md show; the channels are the saved model's :func:`stem_channels`)."""
    return (
        f"{model}.conv1 = torch.nn.Conv2d({in_chans}, {channels}, kernel_size=3, stride=1, padding=1, bias=False)\n"
        f"{model}.maxpool = torch.nn.Identity()"
    )
