"""The projection head: an MLP from backbone embeddings to the space the contrastive losses see."""

from __future__ import annotations

import torch  # noqa: F401  (used in the docstring example)
from torch import Tensor, nn

from hf_contrast.errors import InputError

from ..tensor_checks import check_int

__all__ = ["ProjectionHead", "MAX_HEAD_WIDTH", "MAX_HEAD_LAYERS"]

#: The widest layer a head (or a task head's number of classes) may have: 2**20 units. The widest embeddings in
#: use are about 16k wide and SimCLR's heads 2k to 8k; one 2**20-wide layer after a 2,048-wide backbone already
#: holds 8 GB of float32 weights, and torch cannot allocate a layer of 10**30 (an ``OverflowError`` in ``empty``).
MAX_HEAD_WIDTH = 2**20
#: The most linear layers a head may have (SimCLR uses 2 or 3): a larger number built layers for ever.
MAX_HEAD_LAYERS = 64


class ProjectionHead(nn.Module):
    """``projection_layers`` linear layers, each hidden one followed by a norm and ReLU (SimCLR's head).

    SimCLR (https://arxiv.org/abs/2002.05709) showed that a non-linear head between the representation
    and the loss improves the representation; the losses use the head's output, linear probes the
    backbone's. With ``num_layers=1`` the head is a single linear map. Linear layers followed by a
    norm have no bias (the norm's shift makes it redundant).

    Args:
        input_dim: The backbone width F.
        hidden_dim: The width of the hidden layers.
        output_dim: The output width P.
        num_layers: The number of linear layers (>= 1).
        norm: ``"batchnorm"``, ``"layernorm"`` or ``None`` after each hidden linear layer.

    Shape:
        - Input: ``(B, F)``.
        - Output: ``(B, P)``.

    Raises:
        ValueError: If a width is not an int in [1, :data:`MAX_HEAD_WIDTH`], ``num_layers`` not one in
            [1, :data:`MAX_HEAD_LAYERS`], or ``norm`` is unknown.

    Example:
        >>> head = ProjectionHead(16, 32, 8, num_layers=2, norm="layernorm")
        >>> head(torch.randn(4, 16)).shape
        torch.Size([4, 8])
    """

    def __init__(
        self, input_dim: int, hidden_dim: int, output_dim: int, num_layers: int = 2, norm: str | None = "batchnorm"
    ) -> None:
        super().__init__()
        for name, value in (("input_dim", input_dim), ("hidden_dim", hidden_dim), ("output_dim", output_dim)):
            check_int(name, value, 1, MAX_HEAD_WIDTH)
        check_int("num_layers", num_layers, 1, MAX_HEAD_LAYERS)
        if norm not in ("batchnorm", "layernorm", None):
            raise InputError(f"`norm` must be 'batchnorm', 'layernorm' or None, got {norm!r}.")
        self.input_dim = input_dim
        self.output_dim = output_dim
        layers: list[nn.Module] = []
        width = input_dim
        for _ in range(num_layers - 1):
            layers.append(nn.Linear(width, hidden_dim, bias=norm is None))
            if norm == "batchnorm":
                layers.append(nn.BatchNorm1d(hidden_dim))
            elif norm == "layernorm":
                layers.append(nn.LayerNorm(hidden_dim))
            layers.append(nn.ReLU(inplace=True))
            width = hidden_dim
        layers.append(nn.Linear(width, output_dim))
        self.layers = nn.Sequential(*layers)

    def reset_parameters(self) -> None:
        """Re-initialise every layer with PyTorch's defaults."""
        for module in self.layers:
            if hasattr(module, "reset_parameters"):
                module.reset_parameters()

    def forward(self, embeddings: Tensor) -> Tensor:
        """Project ``embeddings``.

        Args:
            embeddings: Backbone features. Shape: ``(B, F)``.

        Returns:
            Projections. Shape: ``(B, P)``.
        """
        return self.layers(embeddings)
