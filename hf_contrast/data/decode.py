"""Turn what an image column holds into a decoded image of the encoder's channel count.

Users bring images in every PIL mode (``RGBA`` screenshots, ``P`` palette PNGs, ``LA``, ``L``,
16-bit ``I;16`` scans, ``CMYK`` JPEGs), as decoded PIL images or, with
``datasets.Image(decode=False)``, as ``{"path", "bytes"}`` dicts; torchvision's ``ToImage``
keeps the file's channels (4 for RGBA, palette *indices* for ``P``), so every image transform of
this package first converts the image here:

- ``None`` or an undecodable / truncated file raises :class:`BadImageError` (a ``ValueError``)
  naming the file when it is known;
- modes with transparency (``RGBA``, ``LA``, ``PA``, ``P`` with a transparency key) are
  composited over white, as ``transformers.image_transforms.convert_to_rgb`` does;
- 16-bit modes (``I;16``, ``I;16B``, ``I;16L``, ``I;16N``) are scaled to 8 bits (``v / 257``);
  ``I`` and ``F`` are converted by PIL, which clips to ``[0, 255]``;
- the result is ``RGB`` for 3 channels and ``L`` for 1 channel.

Tensors and NumPy arrays pass through unchanged (the transforms' ``v2.RGB`` /
``v2.Grayscale`` steps handle 1 ↔ 3 channels).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from hf_contrast.errors import InputError

__all__ = ["BadImageError", "ConvertImageMode", "convert_image_mode", "decode_image", "image_source"]

_SIXTEEN_BIT = ("I;16", "I;16B", "I;16L", "I;16N")


class BadImageError(InputError):
    """An image that is missing or cannot be decoded (``None``, truncated or unreadable file)."""


def image_source(value: Any) -> str | None:
    """The file an image came from, when known: a ``{"path"}`` dict's path or a PIL ``.filename``."""
    if isinstance(value, Mapping):
        path = value.get("path")
        return str(path) if path else None
    if isinstance(value, str):
        return value
    filename = getattr(value, "filename", None)
    return str(filename) if filename else None


def decode_image(value: Any) -> Any:
    """Decode one image value; raise :class:`BadImageError` if there is none or it cannot be read.

    Args:
        value: A PIL image (fully loaded here, so a truncated file fails now and not inside a
            transform), a ``{"path", "bytes"}`` dict or a path string (decoded with
            ``datasets.Image().decode_example``: EXIF orientation applied, remote paths read),
            or a tensor / NumPy array (returned as is).

    Returns:
        The decoded image (a PIL image unless a tensor or array was given).

    Raises:
        BadImageError: if ``value`` is ``None``, or decoding fails (the message names the file
            when it is known; the original error is chained).
    """
    if value is None:
        raise BadImageError("the image is None (a missing value in the image column)")
    from PIL import Image

    source = image_source(value)
    where = f" file {source!r}" if source else ""
    if not source and isinstance(value, Mapping) and isinstance(value.get("bytes"), (bytes, bytearray)):
        where = f" (embedded bytes, {len(value['bytes'])} bytes, no file name)"
    try:
        if isinstance(value, Image.Image):
            value.load()
            return value
        if isinstance(value, (Mapping, str)):
            import datasets

            if isinstance(value, Mapping) and value.get("path") is None and value.get("bytes") is None:
                raise BadImageError("the image dict has neither 'path' nor 'bytes'")
            return datasets.Image().decode_example(
                {"path": value, "bytes": None} if isinstance(value, str) else dict(value)
            )
    except BadImageError:
        raise
    except Exception as error:  # PIL raises OSError, SyntaxError, ValueError, struct.error...
        raise BadImageError(f"cannot decode the image{where}: {type(error).__name__}: {error}") from error
    return value


def convert_image_mode(image: Any, n_channels: int | None) -> Any:
    """Convert a PIL image of any mode to ``RGB`` (3 channels) or ``L`` (1 channel).

    Args:
        image: A PIL image (anything else is returned as is).
        n_channels: The encoder's channel count; ``None`` or another count: returned as is.

    Returns:
        The converted PIL image.
    """
    from PIL import Image

    if not isinstance(image, Image.Image) or n_channels not in (1, 3):
        return image
    target = "RGB" if n_channels == 3 else "L"
    mode = image.mode
    if mode == target:
        return image
    if mode in _SIXTEEN_BIT:
        array = np.asarray(image, dtype=np.uint16)
        image = Image.fromarray((array.astype(np.uint32) // 257).astype(np.uint8), mode="L")
        return image if target == "L" else image.convert("RGB")
    if mode == "P":
        image = image.convert("RGBA" if "transparency" in image.info else "RGB")
    elif mode == "PA":
        image = image.convert("RGBA")
    if image.mode in ("RGBA", "LA", "La", "RGBa"):
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        image = Image.alpha_composite(background, rgba).convert("RGB")
    if image.mode == target:
        return image
    if target == "L" and image.mode not in ("1", "I", "F"):
        image = image.convert("RGB")  # CMYK, YCbCr, LAB, HSV: through RGB to luminance
    return image.convert(target)


class ConvertImageMode:
    """Decode an image value and convert it to the encoder's channels (first step of every transform).

    Args:
        n_channels: 3 (→ ``RGB``), 1 (→ ``L``) or ``None`` (decode only).

    Raises:
        ValueError: if ``n_channels`` is not 1, 3 or ``None``.

    >>> from PIL import Image
    >>> ConvertImageMode(3)(Image.new("RGBA", (4, 4))).mode
    'RGB'
    """

    def __init__(self, n_channels: int | None) -> None:
        if n_channels not in (1, 3, None):
            raise InputError(f"`n_channels` must be 1, 3 or None, got {n_channels!r}.")
        self.n_channels = n_channels

    def __call__(self, value: Any) -> Any:
        """Return :func:`convert_image_mode` of :func:`decode_image` of ``value``."""
        return convert_image_mode(decode_image(value), self.n_channels)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n_channels={self.n_channels})"
