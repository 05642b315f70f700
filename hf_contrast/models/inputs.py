"""What a ``ContrastiveEncoder`` accepts: checks of ``pixel_values`` and token inputs before the backbone.

Without them a wrong input fails deep inside torch (``expected input to have 3 channels``,
``expected scalar type Byte``, ``index out of range in self``, ``Expected more than 1 value per
channel``) or, worse, gives an embedding: a 2×2 image, NaN pixels, a row whose attention mask is
all 0. Each check raises ``ValueError`` naming the argument, the value and the fix.

Shape and dtype checks are free. Checks that read tensor *values* (NaN pixels, token ids, empty
masks) follow :func:`~hf_contrast.tensor_checks.value_checks_enabled`: CPU tensors only (no device
sync), and not inside the trainer's training loss; NaN pixels are checked in eval mode only.

Deliberate behaviours:

- floating-point ``pixel_values`` of another dtype than the encoder (fp16 images for a float32
  model) are cast to the encoder's dtype when no autocast is active (a lossless or the model's
  own precision; under autocast the backbone casts as usual);
- integer (``uint8``) images are an error, not converted: the encoder cannot know whether they
  are already normalised; the collators and transforms of :mod:`hf_contrast.views` do it.
"""

from __future__ import annotations

from hf_contrast.errors import InputError

import torch
from torch import Tensor, nn

from ..tensor_checks import check_finite_values, check_index_range, value_checks_enabled

__all__ = ["check_pixel_values", "check_token_inputs", "check_training_batch"]

_BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm)

_PREPROCESS = "the encoder's preprocessing, e.g. `hf_contrast.views.eval_transform_from_data_config(enc.data_config)`"


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
            f"`pixel_values` has {c} channel(s) (shape {tuple(pixel_values.shape)}) but `{backbone}` takes {channels}: "
            f"{fix} ({_PREPROCESS} does it), or build the encoder with `backbone_kwargs={{'in_chans': {c}}}`."
        )
    if 2 * min(h, w) < min_size:
        raise InputError(
            f"`pixel_values` of {h}×{w} pixels are smaller than half the {min_size}-pixel total stride of `{backbone}`: "
            f"its last stages would see a single padded pixel. Resize the images to at least {min_size}×{min_size} "
            f"(e.g. with {_PREPROCESS})."
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


def check_token_inputs(
    input_ids: Tensor,
    attention_mask: Tensor | None,
    *,
    vocab_size: int,
    backbone: str,
) -> None:
    """Check the token inputs of a text backbone (shapes are checked by the caller).

    Args:
        input_ids: Token ids. Shape: ``(B, L)``.
        attention_mask: 1 for tokens, 0 for padding, or ``None``. Shape: ``(B, L)``.
        vocab_size: Rows of the backbone's input embedding.
        backbone: The backbone's name, for the messages.

    Raises:
        ValueError: on non-integer ids, an id outside the vocabulary or a row whose attention mask
            is all 0 (values: CPU, outside the training loss).
    """
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
