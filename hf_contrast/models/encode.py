"""``ContrastiveEncoder.encode``: sentences or images in, embeddings out, as ``SentenceTransformer.encode``.

The batching and the forward pass are :func:`hf_contrast.encoding.encode_dataset`'s (eval mode, no
gradient, the model's own preprocessing); this module only decides what the user's inputs are (one
input or a batch), and shapes the result the way sentence-transformers does.

What each model takes:

- a text encoder: a string, or a list / tuple of strings; tokenised with ``encoder.tokenizer``
  (padding, truncation at ``config.max_seq_length``, else the tokenizer's ``model_max_length``);
- an image encoder: one image or a list / tuple of images, where an image is a PIL image, an existing
  file path (``str`` or ``os.PathLike``; a URL is read by ``datasets.Image``), a ``(C, H, W)`` or
  ``(H, W)`` tensor or an ``(H, W, C)`` or ``(H, W)`` NumPy array, of dtype ``uint8`` (``[0, 255]``) or
  float (``[0, 1]``), with ``C`` the encoder's channel count (1 and 3 convert to each other) and
  ``H, W >= 1``; an ``(N, C, H, W)`` tensor or ``(N, H, W, C)`` array is a batch. Anything else
  (a missing file, 4 channels for an RGB encoder, an ``int64`` or complex tensor, a 1-D array) is an
  :class:`~hf_contrast.errors.InputError` naming ``inputs`` / ``inputs[i]``, raised before any image is
  encoded (:func:`hf_contrast.models.inputs.check_image_array`). Each goes
  through the encoder's evaluation transform (resize, centre crop at ``crop_pct``, normalise with the
  ``data_config`` mean and std: timm's ``create_transform(**resolve_data_config(model=...))``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hf_contrast.errors import InputError, InputTypeError, MissingPathError
from hf_contrast.models.inputs import check_image_array
from hf_contrast.tensor_checks import check_device

__all__ = ["encode", "image_batch", "text_batch"]

logger = logging.getLogger("hf_contrast")

_OUTPUTS = ("embeddings", "projections")


_IMAGE_KINDS = "PIL images, image file paths, (C, H, W) tensors or (H, W, C) NumPy arrays"


def _is_single_image(value: Any) -> bool:
    from PIL import Image

    if isinstance(value, (Image.Image, str, os.PathLike)):
        return True
    if isinstance(value, (Tensor, np.ndarray)):
        return value.ndim in (2, 3)
    return False


def _checked_image(name: str, value: Any, channels: int) -> Any:
    """One image of the inputs, checked: a file path must exist (URLs are read by the decoder), an array
    must have an image's shape and dtype (:func:`~hf_contrast.models.inputs.check_image_array`)."""
    from PIL import Image

    if isinstance(value, (str, os.PathLike)):
        path = os.fspath(value)
        if not isinstance(path, str):
            raise InputTypeError(f"`{name}` is a bytes path {path!r}; pass image paths as `str` or `pathlib.Path`.")
        if "://" not in path and not os.path.isfile(os.path.expanduser(path)):
            state = "is a folder, not an image file" if os.path.isdir(os.path.expanduser(path)) else "does not exist"
            raise MissingPathError(
                f"`{name}`={path!r} {state} (the working directory is {os.getcwd()!r}); an image encoder reads "
                f"strings as image file paths: pass existing image files, or {_IMAGE_KINDS}."
            )
        return os.path.expanduser(path)
    if isinstance(value, (Tensor, np.ndarray)):
        return check_image_array(name, value, channels=channels)
    if isinstance(value, Image.Image):
        return value
    raise InputTypeError(
        f"`{name}` is a {type(value).__name__}; an image encoder takes {_IMAGE_KINDS} (got {value!r:.60})."
    )


def image_batch(inputs: Any, channels: int) -> tuple[list[Any], bool]:
    """``(images, single)``: the images as a list (each checked), and whether one image (not a batch) was given.

    A batch is a list / tuple of images, a ``(N, C, H, W)`` tensor or an ``(N, H, W, C)`` NumPy array.
    """
    if _is_single_image(inputs):
        return [_checked_image("inputs", inputs, channels)], True
    if isinstance(inputs, (Tensor, np.ndarray)) and inputs.ndim != 4:
        raise InputError(
            f"`inputs` is an array of shape {tuple(inputs.shape)}; an image encoder takes one image "
            f"(not rank {inputs.ndim}), a (C, H, W) / (H, W) tensor or an (H, W, C) / (H, W) NumPy array, or a "
            "batch: an (N, C, H, W) tensor, an (N, H, W, C) NumPy array, or a list of images."
        )
    if isinstance(inputs, (Tensor, np.ndarray, Sequence)) and not isinstance(inputs, (str, bytes)):
        return [_checked_image(f"inputs[{i}]", image, channels) for i, image in enumerate(inputs)], False
    raise InputTypeError(
        f"`inputs` is a {type(inputs).__name__}; an image encoder takes an image ({_IMAGE_KINDS}) or a list of them, "
        f"or an (N, C, H, W) tensor (got {inputs!r:.60})."
    )


def text_batch(inputs: Any) -> tuple[list[str], bool]:
    """``(texts, single)``: the sentences as a list, and whether one string (not a batch) was given."""
    if isinstance(inputs, str):
        return [inputs], True
    if isinstance(inputs, Sequence) and not isinstance(inputs, bytes):
        texts = list(inputs)
        bad = [(i, type(x).__name__) for i, x in enumerate(texts) if not isinstance(x, str)]
        if bad:
            raise InputError(f"`inputs[{bad[0][0]}]` is a {bad[0][1]}; a text encoder takes strings.")
        return texts, False
    raise InputError(f"`inputs` is a {type(inputs).__name__}; a text encoder takes a string or a list of strings.")


def _default_progress_bar() -> bool:
    """sentence-transformers' default: a bar when the package logs at INFO or DEBUG."""
    return logger.getEffectiveLevel() in (logging.INFO, logging.DEBUG)


def encode(
    encoder: nn.Module,
    inputs: Any,
    *,
    batch_size: int = 32,
    output: str = "embeddings",
    normalize_embeddings: bool = False,
    convert_to_numpy: bool = True,
    convert_to_tensor: bool = False,
    device: str | torch.device | None = None,
    show_progress_bar: bool | None = None,
) -> np.ndarray | Tensor | list[Tensor]:
    """Embed sentences (text encoder) or images (image encoder), as ``SentenceTransformer.encode`` does.

    The encoder runs in eval mode without gradient (its mode is restored after). One input (a string,
    one image) gives one vector; a list gives one row per input, in order.

    Args:
        encoder: A ``ContrastiveEncoder``.
        inputs: Sentences or images (see the module docstring for what each encoder takes).
        batch_size: Inputs per forward pass.
        output: ``"embeddings"`` (the backbone features, what sentence-transformers and timm give) or
            ``"projections"`` (the projection head's outputs, what the contrastive losses saw).
        normalize_embeddings: L2-normalise each vector (then a dot product is the cosine).
        convert_to_numpy: Return a float32 NumPy array (the default, as sentence-transformers).
        convert_to_tensor: Return one float32 CPU tensor (wins over ``convert_to_numpy``). With both
            ``False``: a list of 1-D tensors.
        device: Move the encoder to this device first (it stays there, as with sentence-transformers);
            default: where it is.
        show_progress_bar: Show a progress bar; default: when the ``hf_contrast`` logger is at INFO or DEBUG.

    Returns:
        Shape ``(n, D)`` for a list of ``n`` inputs, ``(D,)`` for a single input (``D``: the embedding
        or projection width).

    Raises:
        ValueError: if ``inputs`` are not what the encoder takes (text for a text encoder, images for
            an image encoder), are empty, a text encoder has no tokenizer, or ``output`` / ``batch_size``
            are invalid.
    """
    from hf_contrast.data.decode import BadImageError
    from hf_contrast.encoding import encode_dataset

    if output not in _OUTPUTS:
        raise InputError(f"`output` must be one of {_OUTPUTS}, got {output!r}.")
    batch, single = encoder.adapter.encode_inputs(encoder, inputs)  # sentences or images, as the backbone reads
    if not batch:
        raise InputError("`inputs` is empty: there is nothing to encode.")
    if device is not None:
        encoder.to(check_device("device", device))
    progress = _default_progress_bar() if show_progress_bar is None else bool(show_progress_bar)
    try:
        vectors, _ = encode_dataset(
            encoder, batch, label_column=None, batch_size=batch_size, output=output, progress=progress
        )
    except BadImageError as error:  # a file that exists but is not an image: name the argument
        raise BadImageError(f"`inputs`: {error}") from error
    if normalize_embeddings:
        vectors = F.normalize(vectors, p=2, dim=-1)
    if convert_to_tensor:
        return vectors[0] if single else vectors
    if convert_to_numpy:
        array = vectors.numpy()
        return array[0] if single else array
    return vectors[0] if single else list(vectors)
