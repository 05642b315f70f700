"""Pooling of token states into one sentence embedding: mean or max over the attention mask, or the CLS token."""

from __future__ import annotations

import torch  # noqa: F401  (used in the docstring example)
from torch import Tensor

from hf_contrast.errors import InputError

__all__ = ["mean_pool", "cls_pool", "max_pool", "pool_tokens"]


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
    return hidden_states[:, 0]


def max_pool(hidden_states: Tensor, attention_mask: Tensor | None) -> Tensor:
    """Element-wise maximum of the token states over the positions where ``attention_mask`` is 1.

    sentence-transformers' ``pooling_mode_max_tokens``: padding is set to -1e9 before the max, so it
    never wins.

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
    if attention_mask is None:
        return hidden_states.max(dim=1).values
    padding = attention_mask.unsqueeze(-1) == 0
    return hidden_states.masked_fill(padding, -1e9).max(dim=1).values


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
