"""Binary NCE: the sigmoid (SigLIP-style) alternative to ranking InfoNCE, docs/methods.md §9.

The lecture contrasts SimCLR's *ranking* NCE, whose softmax couples every anchor with all
``B`` candidates (``O(B^2)``), with *binary* NCE, which classifies each pair independently as
positive or negative. On normalised embeddings with logits ``s_ij = z1_i . z2_j / temperature + bias``:

``L = -(1/B) sum_i sum_j log sigmoid(y_ij s_ij)``, ``y_ii = +1``, ``y_ij = -1`` for ``i != j``,

over all pairs (``negatives="all"``, SigLIP's loss) or over the positive and the single negative
``j = i + 1 mod B`` of each row (``negatives="shifted"``: ``O(B D)`` time and memory).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hf_contrast.errors import InputError

from ..tensor_checks import (
    check_bool,
    check_choice,
    check_embeddings,
    check_same_shape,
    check_temperature,
    compute_dtype,
    float32_math,
    l2_normalize,
    value_checks_enabled,
)
from .hyperparameters import Hyperparameters, hyperparameter
from .tiled import check_tile_size, checked_tile_size, resolve_tile_size, tiled_binary_nce_sum

__all__ = ["binary_nce_loss", "BinaryNCELoss"]

_NEGATIVES = ("all", "shifted")
_DEFAULT_BIAS = {"all": -10.0, "shifted": 0.0}

_CITATION = """@inproceedings{zhai2023sigmoid,
  title     = {Sigmoid Loss for Language Image Pre-Training},
  author    = {Zhai, Xiaohua and Mustafa, Basil and Kolesnikov, Alexander and Beyer, Lucas},
  booktitle = {Proceedings of the IEEE/CVF International Conference on Computer Vision},
  pages     = {11975--11986},
  year      = {2023},
  url       = {https://arxiv.org/abs/2303.15343},
  note      = {Binary NCE as presented in B. Dai, CSE6243 Lecture 19: Spectral Representation Learning, 2024}
}"""


def _check_scalar_tensor(name: str, value: Tensor) -> None:
    if value.numel() != 1 or not value.is_floating_point():
        raise InputError(
            f"`{name}` must be a number or a floating-point tensor with one element, got a "
            f"{value.dtype} tensor of shape {tuple(value.shape)}."
        )


def _check_temperature(temperature: float | Tensor) -> float | Tensor:
    """A tensor temperature is returned as is (its value read on the CPU only); a number as a float
    (a Python int such as ``10**30`` would not reach torch arithmetic)."""
    if isinstance(temperature, Tensor):
        _check_scalar_tensor("temperature", temperature)
        if value_checks_enabled(temperature):  # reading an accelerator value would sync
            check_temperature("temperature", temperature)
        return temperature
    return check_temperature("temperature", temperature)


def _check_bias(bias: float | Tensor) -> float | Tensor:
    """A tensor bias is returned as is (its value read on the CPU only); a number as a float."""
    if isinstance(bias, Tensor):
        _check_scalar_tensor("bias", bias)
        if bias.device.type != "cpu" or bool(torch.isfinite(bias.detach()).all()):
            return bias
        raise InputError(f"`bias` must be finite, got {bias.detach().flatten()[0]}.")
    if isinstance(bias, bool) or not isinstance(bias, (int, float)) or not math.isfinite(bias):
        raise InputError(f"`bias` must be a finite number or a one-element tensor, got {bias!r}.")
    return float(bias)


def binary_nce_loss(
    z1: Tensor,
    z2: Tensor,
    temperature: float | Tensor = 0.1,
    bias: float | Tensor | None = None,
    negatives: str = "all",
    normalize: bool = True,
    tile_size: int | None = None,
) -> Tensor:
    """Binary (sigmoid) NCE loss of two views.

    Paper: https://arxiv.org/abs/2303.15343 (SigLIP, Algorithm 1, with ``t = 1 / temperature``);
    the O(B) variant is the lecture's binary-NCE alternative to ranking NCE (docs/methods.md §9).

    ``L = -(1/B) sum_i sum_j log sigmoid(y_ij s_ij)`` with ``s_ij = z1_i . z2_j / temperature + bias``,
    ``y_ii = +1`` and ``y_ij = -1`` for the negatives ``j``: every ``j != i`` for ``"all"``
    (a ``(B, B)`` logit matrix), only ``j = i + 1 mod B`` for ``"shifted"`` (two row-wise dot
    products, no ``(B, B)`` matrix). Logits and ``logsigmoid`` are float32 (float64 for float64
    inputs), also under fp16/bf16 autocast.

    Args:
        z1: First view. Shape: ``(B, D)``, ``B >= 2``.
        z2: Second view, row ``i`` the positive of ``z1[i]``. Shape: ``(B, D)``.
        temperature: ``> 0``. A number, or a one-element tensor (e.g. ``log_t.exp()`` of a
            learnable parameter, whose gradient then flows); its positivity is only checked
            for numbers and CPU tensors (no device sync).
        bias: Added to every logit; a number or a one-element tensor. ``None``: ``-10`` for
            ``"all"`` (SigLIP's initialisation, which offsets the ``B - 1`` negatives per
            positive), ``0`` for ``"shifted"`` (one negative per positive).
        negatives: ``"all"`` or ``"shifted"``.
        normalize: L2-normalise the rows of ``z1`` and ``z2`` first (the default).
        tile_size: For ``"all"`` only: ``None`` (default) sums the ``B × B`` pair terms in
            blocks of 1024 rows on CPU, 4096 on accelerators (recomputed in the backward,
            memory ``O(B·D + tile²)``, :mod:`hf_contrast.losses.tiled`) when ``B² > 8192²``,
            densely below; ``0``: always dense; ``k > 0``: always blocks of ``k × k``. Ignored by
            ``"shifted"`` (already ``O(B)``).

    Returns:
        The loss, a scalar tensor.

    Raises:
        ValueError: if ``z1``/``z2`` are not floating-point ``(B, D)`` tensors of the same shape,
            contain NaN/inf (checked on CPU), ``B < 2``, ``temperature`` is not positive,
            ``bias`` is not finite, a tensor hyperparameter has more than one element,
            ``negatives`` is not ``"all"``/``"shifted"``, or ``tile_size`` is not ``None`` or an
            integer ``>= 0``.

    >>> z = torch.randn(8, 4)
    >>> loss = binary_nce_loss(z, z + 0.1 * torch.randn(8, 4), negatives="shifted")
    """
    check_embeddings("z1", z1)
    check_embeddings("z2", z2)
    check_same_shape("z1", z1, "z2", z2)
    negatives = str(check_choice("negatives", negatives, _NEGATIVES))
    tile_size = check_tile_size(tile_size)
    if z1.shape[0] < 2:
        raise InputError(
            f"`z1` and `z2` need a batch of at least 2 samples (the negatives are the other "
            f"samples), got shape {tuple(z1.shape)}."
        )
    temperature = _check_temperature(temperature)
    bias = _check_bias(_DEFAULT_BIAS[negatives] if bias is None else bias)
    normalize = check_bool("normalize", normalize)
    loss = _binary_nce(z1, z2, temperature, bias, negatives, normalize, tile_size)
    if value_checks_enabled(loss) and not bool(torch.isfinite(loss)):
        shown_t = float(temperature.detach()) if isinstance(temperature, Tensor) else temperature
        shown_b = float(bias.detach()) if isinstance(bias, Tensor) else bias
        raise InputError(
            f"the binary NCE loss of finite `z1`, `z2` with `temperature`={shown_t:g} and `bias`={shown_b:g} is "
            f"beyond the range of {loss.dtype}: the logits z1·z2 / temperature + bias overflow. Use a `bias` of "
            "moderate size (SigLIP starts at -10)"
            + ("" if normalize else ", or normalised (or smaller) embeddings")
            + "."
        )
    return loss


def _binary_nce(
    z1: Tensor,
    z2: Tensor,
    temperature: float | Tensor,
    bias: float | Tensor,
    negatives: str,
    normalize: bool,
    tile_size: int | None,
) -> Tensor:
    """:func:`binary_nce_loss` on checked arguments."""

    dtype = compute_dtype(z1, z2)
    with float32_math(z1.device.type):
        z1, z2 = z1.to(dtype), z2.to(dtype)
        if isinstance(temperature, Tensor):
            temperature = temperature.to(dtype).reshape(())
        if isinstance(bias, Tensor):
            bias = bias.to(dtype).reshape(())
        if normalize:
            z1, z2 = l2_normalize(z1), l2_normalize(z2)
        if negatives == "shifted":
            positive = (z1 * z2).sum(dim=1) / temperature + bias
            negative = (z1 * z2.roll(-1, dims=0)).sum(dim=1) / temperature + bias
            return -(F.logsigmoid(positive) + F.logsigmoid(-negative)).mean()
        tile = resolve_tile_size(tile_size, z1.shape[0], z2.shape[0], z1.device.type)
        if tile:
            scaled = z1 / temperature  # a learnable temperature gets its gradient through autograd
            bias_t = bias if isinstance(bias, Tensor) else scaled.new_tensor(float(bias))
            diagonal = (scaled * z2).sum(dim=1) + bias_t
            return -(tiled_binary_nce_sum(scaled, z2, bias_t, tile) + diagonal.sum()) / z1.shape[0]
        logits = (z1 @ z2.T) / temperature + bias
        # log sigmoid(s) = log sigmoid(-s) + s, so sum_ij log sigmoid(y_ij s_ij) is the all-negative
        # sum plus the diagonal logits: no (B, B) label matrix is needed.
        return -(F.logsigmoid(-logits).sum() + logits.diagonal().sum()) / z1.shape[0]


def _checked_bias(name: str, bias: object) -> float | None:
    """A hyperparameter check: ``None`` (the default of the ``negatives``) or a finite number."""
    if bias is None:
        return None
    _check_bias(bias)  # type: ignore[arg-type]
    return float(bias)  # type: ignore[arg-type]


@dataclass
class BinaryNCEHyperparameters(Hyperparameters):
    """:class:`BinaryNCELoss`'s hyperparameters, declared once (see :mod:`.hyperparameters`)."""

    temperature: float = hyperparameter(0.1, check_temperature, help="Binary NCE: initial temperature τ > 0.")
    bias: float | None = hyperparameter(None, _checked_bias)
    negatives: str = hyperparameter(
        "all", partial(check_choice, choices=_NEGATIVES), help="Binary NCE: 'all' in-batch negatives or 'shifted'."
    )
    learnable_temperature: bool = hyperparameter(False, check_bool, help="Binary NCE: learn the temperature.")
    learnable_bias: bool = hyperparameter(False, check_bool, help="Binary NCE: learn the bias.")
    normalize: bool = hyperparameter(True, check_bool)
    tile_size: int | None = hyperparameter(None, checked_tile_size)


class BinaryNCELoss(nn.Module):
    """Module form of :func:`binary_nce_loss`, optionally with learnable temperature and bias.

    With ``learnable_temperature=True`` the module holds ``log_temperature`` (an
    ``nn.Parameter``, so the temperature stays positive); with ``learnable_bias=True`` it holds
    ``bias`` as an ``nn.Parameter``. Both reach the optimizer through ``module.parameters()``.

    Args:
        temperature: Initial (or fixed) temperature, ``> 0``.
        bias: Initial (or fixed) bias; ``None``: ``-10`` for ``"all"``, ``0`` for ``"shifted"``.
        negatives: ``"all"`` or ``"shifted"``.
        learnable_temperature: Learn ``log(temperature)``.
        learnable_bias: Learn ``bias``.
        normalize: L2-normalise the embeddings first.
        tile_size: ``None`` (automatic), ``0`` (dense) or the tile edge for ``"all"``
            (see :func:`binary_nce_loss`).

    Shape:
        ``z1``, ``z2``: ``(B, D)``, ``B >= 2``. Output: scalar.

    Raises:
        ValueError: on a non-positive ``temperature``, a non-finite ``bias``, unknown ``negatives``
            or a ``tile_size`` that is not ``None`` or an integer ``>= 0``.

    Examples:
        >>> loss_fn = BinaryNCELoss(learnable_temperature=True, learnable_bias=True)
        >>> [name for name, _ in loss_fn.named_parameters()]
        ['log_temperature', 'bias']
    """

    citation: str = _CITATION
    #: The hyperparameters; their names are taken by the (learnable) ``temperature`` and ``bias``, so
    #: the module keeps them in :attr:`hyperparameters` rather than as attributes.
    hyperparameters_class = BinaryNCEHyperparameters

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        self.hyperparameters = hp = self.hyperparameters_class(*args, **kwargs)
        if hp.bias is None:
            hp.bias = _DEFAULT_BIAS[hp.negatives]
        self.negatives, self.normalize, self.tile_size = hp.negatives, hp.normalize, hp.tile_size
        self.init_temperature, self.init_bias = hp.temperature, hp.bias
        self.learnable_temperature, self.learnable_bias = hp.learnable_temperature, hp.learnable_bias
        if self.learnable_temperature:
            self.log_temperature = nn.Parameter(torch.tensor(math.log(self.init_temperature)))
        if self.learnable_bias:
            self.bias = nn.Parameter(torch.tensor(self.init_bias))

    @property
    def temperature(self) -> float | Tensor:
        """The current temperature (a tensor when learnable)."""
        return self.log_temperature.exp() if self.learnable_temperature else self.init_temperature

    def forward(self, z1: Tensor, z2: Tensor) -> Tensor:
        """Return the loss of the views ``z1``, ``z2`` (each ``(B, D)``)."""
        bias = self.bias if self.learnable_bias else self.init_bias
        return binary_nce_loss(
            z1,
            z2,
            temperature=self.temperature,
            bias=bias,
            negatives=self.negatives,
            normalize=self.normalize,
            tile_size=self.tile_size,
        )

    def get_config_dict(self) -> dict[str, Any]:
        """Hyperparameters (initial values of the learnable ones), for model cards."""
        return dataclasses.asdict(self.hyperparameters)

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.get_config_dict().items())
