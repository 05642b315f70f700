"""Image files the tests generate: :func:`png_bytes`, the PNG file of an array or a PIL image."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image


def png_bytes(image: np.ndarray | Image.Image) -> bytes:
    """The bytes of a PNG file of ``image``: a PIL image, or a ``uint8`` array ``(H, W)`` or ``(H, W, C)``."""
    buffer = io.BytesIO()
    (image if isinstance(image, Image.Image) else Image.fromarray(image)).save(buffer, format="PNG")
    return buffer.getvalue()
