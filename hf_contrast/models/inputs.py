"""What a ``ContrastiveEncoder`` accepts: checks of ``pixel_values`` and token inputs before the backbone.

Without them a wrong input fails deep inside torch (``expected input to have 3 channels``,
``expected scalar type Byte``, ``index out of range in self``, ``Expected more than 1 value per
channel``) or, worse, gives an embedding: a 2×2 image, NaN pixels, a row whose attention mask is
all 0. Each check raises ``ValueError`` naming the argument, the value and the fix.

Shape and dtype checks are free (among them a token sequence longer than the backbone's position
embeddings, :func:`position_limit`: torch said "The size of tensor a (702) must match the size of tensor b
(512)"). Checks that read tensor *values* (NaN pixels, token ids, empty masks) follow
:func:`~hf_contrast.tensor_checks.value_checks_enabled`: CPU tensors only (no device sync), and not inside
the trainer's training loss; NaN pixels are checked in eval mode only.

Deliberate behaviours:

- floating-point ``pixel_values`` of another dtype than the encoder (fp16 images for a float32
  model) are cast to the encoder's dtype when no autocast is active (a lossless or the model's
  own precision; under autocast the backbone casts as usual);
- integer (``uint8``) images are an error, not converted: the encoder cannot know whether they
  are already normalised; the collators and transforms of :mod:`hf_contrast.views` do it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from hf_contrast.errors import InputError, InputTypeError

from ..tensor_checks import check_finite_values, check_index_range, value_checks_enabled

__all__ = [
    "accepted_channels",
    "check_image_array",
    "check_pixel_values",
    "check_token_inputs",
    "check_training_batch",
    "position_limit",
]

_BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm)

_PREPROCESS = "the encoder's preprocessing, e.g. `hf_contrast.views.eval_transform_from_data_config(enc.data_config)`"


def accepted_channels(channels: int) -> tuple[int, ...]:
    """The channel counts ``encode`` converts to ``channels``: grey and RGB both ways (the transforms'
    ``v2.RGB`` / ``v2.Grayscale``), otherwise ``channels`` itself."""
    return tuple(sorted({channels, 1, 3})) if channels in (1, 3) else (channels,)


def check_image_array(name: str, image: Any, *, channels: int) -> Any:
    """Check one tensor / NumPy image that ``encode`` is given, before any preprocessing.

    Accepted: a tensor ``(C, H, W)`` or ``(H, W)`` (grey, given its channel axis here), a NumPy array
    ``(H, W, C)`` or ``(H, W)``; ``C`` in :func:`accepted_channels`; ``H, W >= 1``; dtype ``uint8``
    (``[0, 255]``) or floating (``[0, 1]``). Other integer, ``bool`` and complex dtypes are refused: their
    scale is unknown (an ``int64`` image would be divided by ``2**63 - 1``, i.e. silently black).

    Args:
        name: The argument in the messages (``"inputs"``, ``"inputs[2]"``).
        image: A ``torch.Tensor`` or ``np.ndarray``.
        channels: ``C`` of the encoder's preprocessing (``len(data_config["mean"])``).

    Returns:
        The image, a 2-D tensor given its channel axis: ``(1, H, W)``.

    Raises:
        InputTypeError: on a dtype other than ``uint8`` or floating.
        InputError: on a rank other than 2 or 3, a channel count not in :func:`accepted_channels`, or an empty side.
    """
    import numpy as np

    is_tensor = isinstance(image, Tensor)
    layout = "(C, H, W) or (H, W) tensor" if is_tensor else "(H, W, C) or (H, W) NumPy array"
    shape = tuple(image.shape)
    dtype = image.dtype
    if is_tensor:
        ok_dtype = dtype == torch.uint8 or dtype.is_floating_point
    else:
        ok_dtype = dtype == np.uint8 or np.issubdtype(dtype, np.floating)
    if not ok_dtype:
        raise InputTypeError(
            f"`{name}` is an image of dtype {dtype} (shape {shape}); `encode` takes uint8 images in [0, 255] or float "
            "images in [0, 1]: convert it, e.g. `x.to(torch.uint8)` / `x.float() / 255` (NumPy: `x.astype(np.uint8)`)."
        )
    if image.ndim not in (2, 3):
        raise InputError(
            f"`{name}` has shape {shape} (rank {image.ndim}); one image is a {layout}"
            + (", and a batch a (N, C, H, W) tensor." if is_tensor else ", and a batch an (N, H, W, C) array.")
        )
    if image.ndim == 2:
        h, w, c = shape[0], shape[1], 1
    else:
        (c, h, w) = shape if is_tensor else (shape[2], shape[0], shape[1])
    accepted = accepted_channels(channels)
    if c not in accepted:
        hint = (
            " NumPy images are channels-last (H, W, C): transpose a (C, H, W) array with `x.transpose(1, 2, 0)`, or "
            "pass `torch.from_numpy(x)`."
            if not is_tensor and image.ndim == 3 and shape[0] in accepted
            else ""
        )
        raise InputError(
            f"`{name}` has {c} channel(s) (shape {shape}, a {layout}) but the encoder takes {channels} (it converts "
            f"{' or '.join(map(str, accepted))}): convert the image to {channels} channel(s), or build the encoder "
            f"with `backbone_kwargs={{'in_chans': {c}}}`.{hint}"
        )
    if h < 1 or w < 1:
        raise InputError(
            f"`{name}` has shape {shape}: an image of {h}×{w} pixels has nothing to encode; pass images of 1×1 pixels "
            "or more."
        )
    if is_tensor and image.ndim == 2:
        return image.unsqueeze(0)
    return image


def check_pixel_values(
    pixel_values: Tensor,
    *,
    channels: int,
    min_size: int,
    dtype: torch.dtype,
    training: bool,
    backbone: str,
) -> Tensor:
    """Check images for a timm backbone and return them in the encoder's dtype.

    Args:
        pixel_values: Normalised float images. Shape: ``(B, C, H, W)`` (rank checked by the caller).
        channels: ``C`` the backbone takes (``data_config["input_size"][0]``).
        min_size: The backbone's total stride (timm ``feature_info[-1]["reduction"]``); images with a side
            under half of it are refused (28×28 on a ResNet's 32 is fine: its last map is 1×1 of real pixels).
        dtype: The encoder's parameter dtype.
        training: Whether the encoder is in training mode.
        backbone: The backbone's name, for the messages.

    Returns:
        ``pixel_values``, cast to ``dtype`` if it was another floating dtype and no autocast is on.

    Raises:
        ValueError: on integer pixels, a wrong channel count, images under half of ``min_size``,
            or NaN/inf pixels in eval mode (CPU).
    """
    if not pixel_values.is_floating_point():
        raise InputError(
            f"`pixel_values` must be normalised float images, got dtype {pixel_values.dtype}: the encoder does not "
            f"know how these were scaled. Convert images with {_PREPROCESS} (or the trainer's collators), or by hand: "
            "`(pixel_values / 255 - mean) / std` with `enc.data_config['mean']` and `['std']`."
        )
    b, c, h, w = pixel_values.shape
    if c != channels:
        fix = (
            "repeat the grey channel (`pixel_values.expand(-1, 3, -1, -1)`) or convert images to RGB"
            if c == 1 and channels == 3
            else f"convert the images to {channels} channel(s)"
        )
        raise InputError(
            f"`pixel_values` has {c} channel(s) (shape {tuple(pixel_values.shape)}) but `{backbone}` takes "
            f"{channels}: {fix} ({_PREPROCESS} does it), or build the encoder with "
            f"`backbone_kwargs={{'in_chans': {c}}}`."
        )
    if 2 * min(h, w) < min_size:
        raise InputError(
            f"`pixel_values` of {h}×{w} pixels are smaller than half the {min_size}-pixel total stride of "
            f"`{backbone}`: its last stages would see a single padded pixel. Resize the images to at least "
            f"{min_size}×{min_size} (e.g. with {_PREPROCESS})."
        )
    if not training:
        check_finite_values(
            "pixel_values",
            pixel_values,
            fix="they would give NaN embeddings. Check how the images were made: decoded files through "
            f"{_PREPROCESS}, and float images kept in [0, 1] before colour transforms.",
        )
    if pixel_values.dtype != dtype and not torch.is_autocast_enabled(pixel_values.device.type):
        pixel_values = pixel_values.to(dtype)
    return pixel_values


def position_limit(backbone: nn.Module) -> int | None:
    """The longest token sequence a BERT-style backbone takes: the rows of its absolute position embeddings
    (``embeddings.position_embeddings``), less the ``padding_idx + 1`` positions that RoBERTa-style models skip
    (514 rows: 512 tokens). ``None`` for a backbone without such a table (relative or rotary positions)."""
    table = getattr(getattr(backbone, "embeddings", None), "position_embeddings", None)
    if not isinstance(table, nn.Embedding):
        return None
    return table.num_embeddings - (table.padding_idx + 1 if table.padding_idx is not None else 0)


def check_token_inputs(
    input_ids: Tensor,
    attention_mask: Tensor | None,
    *,
    vocab_size: int,
    backbone: str,
    max_tokens: int | None = None,
) -> None:
    """Check the token inputs of a text backbone (shapes are checked by the caller).

    Args:
        input_ids: Token ids. Shape: ``(B, L)``.
        attention_mask: 1 for tokens, 0 for padding, or ``None``. Shape: ``(B, L)``.
        vocab_size: Rows of the backbone's input embedding.
        backbone: The backbone's name, for the messages.
        max_tokens: The longest sequence the backbone's position embeddings take (``None``: no limit known).

    Raises:
        ValueError: on non-integer ids, sequences longer than ``max_tokens``, an id outside the vocabulary or a
            row whose attention mask is all 0 (values: CPU, outside the training loss).
    """
    if max_tokens is not None and input_ids.shape[1] > max_tokens:
        raise InputError(
            f"`input_ids` holds sequences of {input_ids.shape[1]} tokens, but `{backbone}` has position embeddings "
            f"for {max_tokens}: tokenize with `truncation=True, max_length={max_tokens}` or less (the trainer's and "
            f"the evaluators' `max_length`, the encoder's `max_seq_length`)."
        )
    if input_ids.is_floating_point() or input_ids.is_complex() or input_ids.dtype == torch.bool:
        raise InputError(
            f"`input_ids` must hold integer token ids (torch.long), got dtype {input_ids.dtype}: pass the tokenizer's "
            "output, `enc(**enc.tokenizer(texts, padding=True, return_tensors='pt'))`, or convert with `.long()`."
        )
    check_index_range(
        "input_ids",
        input_ids,
        vocab_size,
        kind=f"token ids in the vocabulary of `{backbone}`",
        fix="tokenize with the encoder's own tokenizer (`enc.tokenizer`); after adding tokens to a tokenizer, "
        "call `enc.backbone.resize_token_embeddings(len(tokenizer))`.",
    )
    if attention_mask is not None and value_checks_enabled(attention_mask):
        empty = (attention_mask == 0).all(dim=1).nonzero().flatten().tolist()
        if empty:
            raise InputError(
                f"`attention_mask` is all 0 in row(s) {empty[:5]}: those sequences have no token to pool, so their "
                "embedding would be meaningless. Pass the tokenizer's `attention_mask` (it always keeps the special "
                "tokens) and drop empty texts before encoding."
            )


def check_training_batch(name: str, model: nn.Module, batch_size: int) -> None:
    """Reject a batch of one sample in training mode for a model with BatchNorm layers.

    BatchNorm in training mode normalises with batch statistics: one sample has none (torch fails
    with ``Expected more than 1 value per channel`` where a feature map is 1×1, and the projection
    head's ``BatchNorm1d`` always is), and contrastive losses need other samples as negatives.

    Args:
        name: The input argument, for the message (``"pixel_values"``, ``"input_ids"``).
        model: The encoder (its modules are only looked at for a batch of one).
        batch_size: ``B``.

    Raises:
        ValueError: if ``model.training``, ``batch_size == 1`` and ``model`` has a BatchNorm layer.
    """
    if not model.training or batch_size != 1:
        return
    if any(isinstance(m, _BATCH_NORMS) for m in model.modules()):
        raise InputError(
            f"`{name}` holds 1 sample in training mode, but the encoder's BatchNorm layers need 2 or more samples "
            "per batch (batch statistics): use batches of 2+ samples, or call `enc.eval()` to encode single inputs."
        )
