"""``ContrastiveEncoder.encode``: sentences or images in, embeddings out, as ``SentenceTransformer.encode``.

The batching and the forward pass are :func:`hf_contrast.evaluation.encode_dataset`'s (eval mode, no
gradient, the model's own preprocessing); this module only decides what the user's inputs are (one
input or a batch), and shapes the result the way sentence-transformers does.

What each model takes:

- a text encoder: a string, or a list / tuple of strings; tokenised with ``encoder.tokenizer``
  (padding, truncation at ``config.max_seq_length``, else the tokenizer's ``model_max_length``);
- an image encoder: one image or a list / tuple of images, where an image is a PIL image, a file path
  (``str`` or ``os.PathLike``), a ``(C, H, W)`` tensor (``uint8`` in ``[0, 255]`` or float in
  ``[0, 1]``) or an ``(H, W, C)`` NumPy array; a ``(B, C, H, W)`` tensor is a batch. Each goes
  through the encoder's evaluation transform (resize, centre crop at ``crop_pct``, normalise with the
  ``data_config`` mean and std: timm's ``create_transform(**resolve_data_config(model=...))``).
"""

from __future__ import annotations

from hf_contrast.errors import InputError

import logging
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["encode"]

logger = logging.getLogger("hf_contrast")

_OUTPUTS = ("embeddings", "projections")


def _is_single_image(value: Any) -> bool:
    from PIL import Image

    if isinstance(value, (Image.Image, str, os.PathLike)):
        return True
    if isinstance(value, (Tensor, np.ndarray)):
        return value.ndim in (2, 3)
    return False


def _image_batch(inputs: Any) -> tuple[list[Any], bool]:
    """``(images, single)``: the images as a list, and whether one image (not a batch) was given."""
    if _is_single_image(inputs):
        return [os.fspath(inputs) if isinstance(inputs, os.PathLike) else inputs], True
    if isinstance(inputs, (Tensor, np.ndarray)):
        if inputs.ndim != 4:
            raise InputError(
                f"`inputs` is an array of shape {tuple(inputs.shape)}; an image encoder takes one image (C, H, W) / "
                "(H, W, C) or a batch (B, C, H, W)."
            )
        return list(inputs), False
    if isinstance(inputs, Sequence) and not isinstance(inputs, (str, bytes)):
        images = list(inputs)
        bad = [(i, type(x).__name__) for i, x in enumerate(images) if not _is_single_image(x)]
        if bad:
            raise InputError(
                f"`inputs[{bad[0][0]}]` is a {bad[0][1]}; an image encoder takes PIL images, file paths, (C, H, W) "
                "tensors or (H, W, C) NumPy arrays."
            )
        return [os.fspath(x) if isinstance(x, os.PathLike) else x for x in images], False
    raise InputError(
        f"`inputs` is a {type(inputs).__name__}; an image encoder takes an image (PIL image, file path, (C, H, W) "
        "tensor, (H, W, C) NumPy array) or a list of them, or a (B, C, H, W) tensor."
    )


def _text_batch(inputs: Any) -> tuple[list[str], bool]:
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
    from hf_contrast.evaluation.encode import encode_dataset

    if output not in _OUTPUTS:
        raise InputError(f"`output` must be one of {_OUTPUTS}, got {output!r}.")
    config = encoder.config
    if config.backbone_type == "text":
        if getattr(encoder, "tokenizer", None) is None:
            raise InputError(
                "The text encoder has no tokenizer to encode sentences with: set `encoder.tokenizer` (e.g. "
                "`AutoTokenizer.from_pretrained(<the backbone's name>)`) or pass `tokenizer=` to `from_backbone`."
            )
        batch, single = _text_batch(inputs)
    else:
        batch, single = _image_batch(inputs)
    if not batch:
        raise InputError("`inputs` is empty: there is nothing to encode.")
    if device is not None:
        encoder.to(device)
    progress = _default_progress_bar() if show_progress_bar is None else bool(show_progress_bar)
    vectors, _ = encode_dataset(
        encoder, batch, label_column=None, batch_size=batch_size, output=output, progress=progress
    )
    if normalize_embeddings:
        vectors = F.normalize(vectors, p=2, dim=-1)
    if convert_to_tensor:
        return vectors[0] if single else vectors
    if convert_to_numpy:
        array = vectors.numpy()
        return array[0] if single else array
    return vectors[0] if single else list(vectors)
