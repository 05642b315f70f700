"""Pooling of token states into one sentence embedding: mean or max over the attention mask, or the CLS token."""

from __future__ import annotations

import torch
from torch import Tensor

from hf_contrast.errors import InputError

__all__ = ["mean_pool", "cls_pool", "max_pool", "pool_tokens"]

#: What padding is set to before :func:`max_pool`'s maximum, so that it never wins (sentence-transformers' value),
#: or the lowest value of the states' dtype where that is higher (float16's -65,504).
_PADDING_FILL = -1e9


def _check_states(hidden_states: object, attention_mask: object) -> None:
    """``hidden_states`` a floating ``(B, L, F)`` tensor with ``L >= 1``; ``attention_mask`` ``None`` or ``(B, L)``."""
    if not isinstance(hidden_states, Tensor) or hidden_states.ndim != 3 or not hidden_states.is_floating_point():
        shown = (
            f"a {hidden_states.dtype} tensor of shape {tuple(hidden_states.shape)}"
            if isinstance(hidden_states, Tensor)
            else f"{type(hidden_states).__name__}"
        )
        raise InputError(f"`hidden_states` must be a floating tensor of shape (B, L, F), got {shown}.")
    if hidden_states.shape[1] == 0:
        raise InputError(f"`hidden_states` holds no token (shape {tuple(hidden_states.shape)}): nothing to pool.")
    if attention_mask is None:
        return
    if not isinstance(attention_mask, Tensor) or tuple(attention_mask.shape) != tuple(hidden_states.shape[:2]):
        shown = (
            f"shape {tuple(attention_mask.shape)}"
            if isinstance(attention_mask, Tensor)
            else type(attention_mask).__name__
        )
        raise InputError(
            f"`attention_mask` must be None or a tensor of shape (B, L) = {tuple(hidden_states.shape[:2])}, the "
            f"first two sides of `hidden_states`; got {shown}."
        )
    if attention_mask.is_complex():
        raise InputError(f"`attention_mask` must hold 0 and 1, got a {attention_mask.dtype} tensor.")


def mean_pool(hidden_states: Tensor, attention_mask: Tensor | None) -> Tensor:
    """Average the token states over the positions where ``attention_mask`` is 1.

    Padding positions do not contribute, so appending padding never changes the result (the
    sentence-transformers ``"mean"`` pooling, https://arxiv.org/abs/1908.10084).

    Args:
        hidden_states: The backbone's last hidden states.
            Shape: ``(B, L, F)``.
        attention_mask: 1 for real tokens, 0 for padding; ``None`` averages all positions.
            Shape: ``(B, L)``.

    Returns:
        The pooled embeddings. Shape: ``(B, F)``. A row whose mask is all zeros gives zeros.

    Example:
        >>> h = torch.ones(1, 3, 2); m = torch.tensor([[1, 1, 0]])
        >>> mean_pool(h, m)
        tensor([[1., 1.]])
    """
    _check_states(hidden_states, attention_mask)
    if attention_mask is None:
        return hidden_states.mean(dim=1)
    mask = attention_mask.unsqueeze(-1).to(hidden_states.dtype)
    summed = (hidden_states * mask).sum(dim=1)
    counts = mask.sum(dim=1).clamp_min(1e-9)
    return summed / counts


def cls_pool(hidden_states: Tensor, attention_mask: Tensor | None = None) -> Tensor:
    """Take the first token's state (BERT's ``[CLS]``).

    Args:
        hidden_states: The backbone's last hidden states.
            Shape: ``(B, L, F)``.
        attention_mask: Unused; accepted so both poolings share a signature.
            Shape: ``(B, L)``.

    Returns:
        The ``[CLS]`` states. Shape: ``(B, F)``.
    """
    _check_states(hidden_states, attention_mask)
    return hidden_states[:, 0]


def max_pool(hidden_states: Tensor, attention_mask: Tensor | None) -> Tensor:
    """Element-wise maximum of the token states over the positions where ``attention_mask`` is 1.

    sentence-transformers' ``pooling_mode_max_tokens``: padding is set to -1e9 before the max (float16 states: their
    lowest value, -65,504), so it never wins.

    Args:
        hidden_states: Shape: ``(B, L, F)``.
        attention_mask: 1 for real tokens, 0 for padding; ``None`` uses all positions. Shape: ``(B, L)``.

    Returns:
        The pooled embeddings. Shape: ``(B, F)``.

    Example:
        >>> h = torch.tensor([[[1.0, 5.0], [3.0, 2.0], [9.0, 9.0]]]); m = torch.tensor([[1, 1, 0]])
        >>> max_pool(h, m)
        tensor([[3., 5.]])
    """
    _check_states(hidden_states, attention_mask)
    if attention_mask is None:
        return hidden_states.max(dim=1).values
    padding = attention_mask.unsqueeze(-1) == 0
    fill = max(_PADDING_FILL, torch.finfo(hidden_states.dtype).min)  # -1e9 overflows float16
    return hidden_states.masked_fill(padding, fill).max(dim=1).values


def pool_tokens(hidden_states: Tensor, attention_mask: Tensor | None, pooling: str) -> Tensor:
    """Pool token states with ``pooling`` (``"mean"``, ``"cls"`` or ``"max"``).

    Args:
        hidden_states: Shape: ``(B, L, F)``.
        attention_mask: Shape: ``(B, L)``, or ``None``.
        pooling: ``"mean"``, ``"cls"`` or ``"max"``.

    Returns:
        Shape: ``(B, F)``.

    Raises:
        ValueError: If ``pooling`` is unknown.
    """
    if pooling == "mean":
        return mean_pool(hidden_states, attention_mask)
    if pooling == "cls":
        return cls_pool(hidden_states, attention_mask)
    if pooling == "max":
        return max_pool(hidden_states, attention_mask)
    raise InputError(f"`pooling` must be 'mean', 'cls' or 'max', got {pooling!r}.")
