"""Input checks and numerics shared by the whole of hf_contrast: the one vocabulary of argument checks.

Every check raises ``ValueError`` whose message names the argument in backticks, says what is
expected and what was received (``"`temperature` must be > 0, got 0.0."``), plus the fix when there
is one. Scalar hyperparameter checks (:func:`check_positive`, :func:`check_non_negative`,
:func:`check_unit_interval`, :func:`check_temperature`, :func:`check_int`, :func:`check_bool`, :func:`check_choice`,
:func:`check_name`, :func:`check_range`, :func:`check_size`) live here and nowhere else: losses,
objectives, training arguments and views all use them. Checks that would need a device
synchronisation (reading tensor *values* on an accelerator) are only done for CPU tensors, where they
are cheap.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from hf_contrast.errors import InputError, InputTypeError

__all__ = [
    "check_embeddings",
    "check_same_shape",
    "check_labels",
    "check_number",
    "check_positive",
    "check_non_negative",
    "check_unit_interval",
    "check_temperature",
    "MIN_TEMPERATURE",
    "check_int",
    "check_bool",
    "check_choice",
    "check_name",
    "check_folder_path",
    "check_range",
    "check_size",
    "MAX_LENGTH",
    "MAX_SEED",
    "MAX_SKLEARN_SEED",
    "check_device",
    "check_finite_values",
    "check_index_range",
    "check_finite_result",
    "check_finite_weighted",
    "finite_input_checks",
    "value_checks_enabled",
    "l2_normalize",
    "power_of_two_scale",
    "compute_dtype",
    "float32_math",
]


def check_embeddings(name: str, z: object, ndim: int | tuple[int, ...] = 2, shape_doc: str = "(B, D)") -> Tensor:
    """Check that ``z`` is a floating-point tensor of rank ``ndim`` with no empty axis."""
    if not isinstance(z, Tensor):
        raise InputError(f"`{name}` must be a torch.Tensor of shape {shape_doc}, got {type(z).__name__}.")
    ranks = (ndim,) if isinstance(ndim, int) else ndim
    if z.ndim not in ranks:
        raise InputError(
            f"`{name}` must have shape {shape_doc} (rank {' or '.join(map(str, ranks))}), got shape {tuple(z.shape)}."
        )
    if not z.is_floating_point():
        raise InputError(f"`{name}` must be a floating-point tensor, got dtype {z.dtype}.")
    if z.numel() == 0:
        raise InputError(f"`{name}` must not be empty, got shape {tuple(z.shape)}.")
    check_finite_values(name, z)
    return z


_FINITE_INPUT_CHECKS: ContextVar[bool] = ContextVar("hf_contrast_finite_input_checks", default=True)


@contextmanager
def finite_input_checks(enabled: bool) -> Iterator[None]:
    """Switch the checks that read input *values* (NaN/inf, label ranges, empty attention masks, token
    ids; see :func:`value_checks_enabled`) on or off inside the block.

    The trainer switches it off while computing a training loss: a non-finite loss is then its
    business (``nonfinite_policy``: reported with the step and term, or the step skipped) rather
    than a ``ValueError`` blaming the input.
    """
    token = _FINITE_INPUT_CHECKS.set(bool(enabled))
    try:
        yield
    finally:
        _FINITE_INPUT_CHECKS.reset(token)


def value_checks_enabled(t: Tensor) -> bool:
    """Whether checks that read the *values* of ``t`` run: ``t`` is on the CPU (reading it needs no
    device sync) and :func:`finite_input_checks` has not switched them off (the trainer does, for
    its training loss)."""
    return t.device.type == "cpu" and _FINITE_INPUT_CHECKS.get()


def check_finite_values(name: str, z: Tensor, fix: str = "") -> None:
    """Reject NaN/inf in ``z`` when that is cheap to detect (see :func:`value_checks_enabled`);
    ``fix`` (what to change) is appended to the message."""
    if value_checks_enabled(z) and not bool(torch.isfinite(z).all()):
        raise InputError(f"`{name}` contains NaN or infinite values" + (f"; {fix}" if fix else "."))


def check_finite_result(result: Tensor, what: str, inputs: str) -> Tensor:
    """Reject a non-finite loss computed from finite inputs: its true value is beyond the float range.

    Losses on raw embeddings grow with a power of their scale (squares, fourth powers); they are
    computed on rescaled inputs, so only a result that float32 cannot hold ends up ``inf``. Checked
    when :func:`value_checks_enabled` (a training loss is ``nonfinite_policy``'s business).

    Args:
        result: The loss (or a term of it).
        what: The loss, named in the error (e.g. ``"the spectral contrastive loss"``).
        inputs: The arguments it was computed from, named in the error (e.g. ``"`z1`, `z2`"``).
    """
    if value_checks_enabled(result) and not bool(torch.isfinite(result).all()):
        raise InputError(
            f"{what} of {inputs} is beyond the range of {result.dtype} (the inputs are finite but their scale is "
            f"so large that the loss overflows): pass float64 inputs (`.double()`) or bring the embeddings to a "
            "smaller scale (normalise them, or lower the learning rate if training made them grow)."
        )
    return result


def check_finite_weighted(
    result: Tensor, what: str, weights: str, fix: str = "use weights of moderate size"
) -> Tensor:
    """Reject a weighted loss (or term) that is not finite although its unweighted terms are: the weights
    (hyperparameters) make it overflow, so the error names them, not the inputs. Checked when
    :func:`value_checks_enabled`.

    Args:
        result: The weighted loss or term.
        what: The loss or term, named in the error (``"the VICReg loss"``).
        weights: The hyperparameters with their values, named in the error (``"`variance_weight`=1e+30"``).
        fix: What to change.
    """
    if value_checks_enabled(result) and not bool(torch.isfinite(result).all()):
        raise InputError(
            f"{what} is beyond the range of {result.dtype} with {weights}: its terms are finite, the "
            f"hyperparameters make it overflow; {fix}."
        )
    return result


def check_index_range(name: str, values: Tensor, size: int, kind: str = "classes", fix: str = "") -> None:
    """Reject an index outside ``[0, size)``: a class label, a token id (see :func:`value_checks_enabled`
    for when values are read).

    Args:
        name: The argument named in the error.
        values: Integer indices, any shape.
        size: Valid indices are ``0 .. size-1``.
        kind: What ``size`` counts, for the message (``"classes"``, ``"token ids in the vocabulary"``).
        fix: What to change, appended to the message.
    """
    if values.numel() == 0 or not value_checks_enabled(values):
        return
    low, high = int(values.min()), int(values.max())
    if low < 0 or high >= size:
        bad = low if low < 0 else high
        raise InputError(f"`{name}` holds {bad}, outside 0..{size - 1} ({size} {kind})" + (f"; {fix}" if fix else "."))


def check_same_shape(name1: str, z1: Tensor, name2: str, z2: Tensor) -> None:
    """Check that two tensors have identical shapes (nothing is broadcast)."""
    if z1.shape != z2.shape:
        raise InputError(
            f"`{name1}` and `{name2}` must have the same shape, got {tuple(z1.shape)} and {tuple(z2.shape)}."
        )


def check_labels(labels: object, n: int, name: str = "labels") -> Tensor:
    """Check that ``labels`` is an integer tensor of shape ``(n,)`` on any device."""
    if not isinstance(labels, Tensor):
        raise InputError(f"`{name}` must be an integer torch.Tensor of shape ({n},), got {type(labels).__name__}.")
    if labels.dtype.is_floating_point or labels.dtype.is_complex or labels.dtype == torch.bool:
        raise InputError(f"`{name}` must have an integer dtype (e.g. torch.long), got {labels.dtype}.")
    if labels.ndim != 1 or labels.shape[0] != n:
        raise InputError(f"`{name}` must have shape ({n},) to match the embeddings, got {tuple(labels.shape)}.")
    return labels


def check_number(name: str, value: object) -> float:
    """Check a finite real number (not a ``bool``; a one-element real tensor is read as its value); return it as a
    float."""
    if isinstance(value, Tensor):
        if value.numel() != 1:
            raise InputError(f"`{name}` must be a scalar, got a tensor of shape {tuple(value.shape)}.")
        if value.dtype == torch.bool or value.is_complex():
            raise InputError(f"`{name}` must be a real number, got a tensor of dtype {value.dtype}.")
        number = float(value.detach())
        if not math.isfinite(number):
            raise InputError(f"`{name}` must be finite, got {number}.")
        return number
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"`{name}` must be a number, got {value!r} of type {type(value).__name__}.")
    value = float(value)
    if not math.isfinite(value):
        raise InputError(f"`{name}` must be finite, got {value}.")
    return value


def check_positive(name: str, value: object) -> float:
    """Check ``value > 0`` (e.g. a temperature)."""
    v = check_number(name, value)
    if not v > 0:
        raise InputError(f"`{name}` must be > 0, got {v}.")
    return v


#: The smallest temperature a loss (or the kNN vote) accepts. Logits are similarities divided by the
#: temperature: float32 similarities carry a rounding error of about 6e-8 (2**-24), which a temperature
#: below 1e-6 turns into logit errors above 0.06, so the loss would be decided by rounding rather than by the
#: embeddings; and below about 3e-39, ``1 / temperature`` (the logit of two equal unit vectors) overflows
#: float32 and the loss is NaN. Temperatures in use are 0.01 to 1 (CLIP caps its learnt one at 0.01).
MIN_TEMPERATURE = 1e-6


def check_temperature(name: str, value: object) -> float:
    """Check a softmax / sigmoid temperature: a finite number ``>= MIN_TEMPERATURE`` (1e-6), returned as a float.

    A 0-d (one-element) tensor is read like a number. Below :data:`MIN_TEMPERATURE` the logits
    ``similarity / temperature`` are rounding noise or overflow float32 (NaN losses).
    """
    v = check_positive(name, value)
    if v < MIN_TEMPERATURE:
        raise InputError(
            f"`{name}` must be >= {MIN_TEMPERATURE:g}, got {v:g}: similarities divided by so small a temperature are "
            "float32 rounding noise (and overflow below about 3e-39, giving a NaN loss); use a temperature between "
            "0.01 and 1 (SimCLR: 0.1 to 0.5)."
        )
    return v


def check_non_negative(name: str, value: object) -> float:
    """Check ``value >= 0`` (e.g. a loss weight)."""
    v = check_number(name, value)
    if not v >= 0:
        raise InputError(f"`{name}` must be >= 0, got {v}.")
    return v


def check_unit_interval(name: str, value: object, include_one: bool = True) -> float:
    """Check ``0 <= value <= 1`` (a probability, a soft label, SimO's ``olean``), or ``0 <= value < 1``
    when not ``include_one`` (an EMA momentum)."""
    v = check_number(name, value)
    if not (0.0 <= v <= 1.0 if include_one else 0.0 <= v < 1.0):
        raise InputError(f"`{name}` must be in [0, {'1]' if include_one else '1)'}, got {v}.")
    return v


def check_int(
    name: str, value: object, minimum: int, maximum: int | None = None, allow_none: bool = False, fix: str = ""
) -> int | None:
    """Check that ``value`` is an integer (not a ``bool``; NumPy integers count) ``>= minimum`` (e.g. a
    batch size or a seed) and ``<= maximum`` when given; ``None`` passes when ``allow_none`` (an
    optional setting). ``fix`` (why, or what to change) is appended to the message."""
    if value is None and allow_none:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Integral)
        or value < minimum
        or (maximum is not None and value > maximum)
    ):
        expected = f"an integer >= {minimum}" if maximum is None else f"an integer in [{minimum}, {maximum}]"
        expected += " or None" if allow_none else ""
        raise InputError(f"`{name}` must be {expected}, got {value!r}" + (f"; {fix}" if fix else "."))
    return int(value)


def check_bool(name: str, value: object) -> bool:
    """Check that ``value`` is ``True`` or ``False`` (a flag; ``0``/``"yes"`` are refused, not guessed)."""
    if not isinstance(value, bool):
        raise InputError(f"`{name}` must be True or False, got {value!r}.")
    return value


def check_choice(name: str, value: object, choices: Sequence[object]) -> object:
    """Check that ``value`` is one of ``choices`` (e.g. ``negatives`` in ``("all", "shifted")``); a bool matches
    only a bool, and a value whose comparison is no truth value (a tensor or array of several elements) matches
    nothing."""
    if not any(_same_choice(value, choice) for choice in choices):
        raise InputError(f"`{name}` must be one of {tuple(choices)}, got {value!r}.")
    return value


def _same_choice(value: object, choice: object) -> bool:
    if isinstance(value, bool) or isinstance(choice, bool):
        return value is choice
    try:
        return bool(value == choice)
    except (RuntimeError, ValueError, TypeError):  # `tensor([a, b]) == 2` has no single truth value
        return False


def check_name(name: str, value: object, what: str = "column name", allow_none: bool = False) -> str | None:
    """Check that ``value`` is a non-empty string (a column name); ``None`` passes when ``allow_none``."""
    if value is None and allow_none:
        return None
    if not isinstance(value, str) or value == "":
        raise InputError(f"`{name}` must be a non-empty {what}, got {value!r}.")
    return value


def check_folder_path(name: str, value: object) -> Path:
    """Check a folder to write: a non-empty ``str`` or an ``os.PathLike`` (a ``pathlib.Path``); returned as a
    ``Path``. Bytes (``pathlib`` cannot join them) and a NUL character (no file system takes it) are refused."""
    path = os.fspath(value) if isinstance(value, os.PathLike) else value
    if not isinstance(path, str) or not path or "\0" in path:
        raise InputTypeError(
            f"`{name}` must be a folder path (a non-empty str or a pathlib.Path), got {value!r} of type "
            f"{type(value).__name__}."
        )
    return Path(path)


def check_range(name: str, value: object, low: float, high: float) -> tuple[float, float]:
    """Check an ordered pair ``(lo, hi)`` of numbers with ``low < lo <= hi <= high`` (e.g. a crop scale)."""
    ok = (
        isinstance(value, Sequence)
        and len(value) == 2
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
        and low < value[0] <= value[1] <= high
    )
    if not ok:
        shown = tuple(value) if isinstance(value, Sequence) and not isinstance(value, str) else value
        raise InputError(f"`{name}` must be a pair (lo, hi) with {low} < lo <= hi <= {high}, got {shown!r}.")
    return float(value[0]), float(value[1])  # type: ignore[index]


def check_device(name: str, value: object) -> torch.device:
    """Check that ``value`` names a device this machine has (``"cpu"``, ``"cuda"``, ``"cuda:1"``, a
    ``torch.device`` or an index) and return it as a ``torch.device``: an accelerator that is absent, or an index
    past the last one, is named here rather than by the first copy to it."""
    try:
        device = torch.device(value)  # type: ignore[arg-type]
    except (TypeError, RuntimeError, ValueError) as error:
        raise InputTypeError(
            f"`{name}`={value!r} is not a device ({error}); pass e.g. 'cpu', 'cuda', 'cuda:1' or a torch.device."
        ) from None
    if device.type in ("cpu", "meta"):
        return device
    backend = getattr(torch, device.type, None)
    is_available = getattr(backend, "is_available", None)
    if callable(is_available) and not is_available():
        raise InputError(
            f"`{name}`={value!r}: this machine has no {device.type} device (torch.{device.type}.is_available() is "
            "False); pass 'cpu', or run where the device is."
        )
    device_count = getattr(backend, "device_count", None)
    count = device_count() if device.index is not None and callable(device_count) else None
    if count is not None and device.index >= count:
        raise InputError(
            f"`{name}`={value!r}: this machine has {count} {device.type} device(s), indices 0 to {count - 1}; pass "
            "one of them."
        )
    return device


#: The longest ``max_length`` (tokens) a collator or ``encode`` accepts; a tokenizer raised ``OverflowError`` beyond
#: 2**64 - 1, and no model reads 2**31 tokens.
MAX_LENGTH = 2**31 - 1

#: The largest seed the package takes (data sampling, the shipped data's splits, the evaluators' draws):
#: ``torch.Generator.manual_seed`` takes it, and the ``seed + 1`` of ``hf_contrast.data.balanced_subset``.
MAX_SEED = 2**63 - 2

#: The largest seed of a scikit-learn estimator (its ``random_state``: a 32-bit seed), for the linear probe and t-SNE.
MAX_SKLEARN_SEED = 2**32 - 1

#: The largest image side :func:`check_size` accepts (a 65,536-pixel square of float32 RGB is 51 GB).
MAX_IMAGE_SIDE = 65536


def check_size(name: str, size: object) -> tuple[int, int]:
    """Check an image size and return it as ``(H, W)`` of ints in ``[1, MAX_IMAGE_SIDE]``: an int means a square."""
    if isinstance(size, int) and not isinstance(size, bool):
        pair = (size, size)
    elif (
        isinstance(size, Sequence)
        and len(size) == 2
        and all(isinstance(s, int) and not isinstance(s, bool) for s in size)
    ):
        pair = (int(size[0]), int(size[1]))
    else:
        raise InputError(f"`{name}` must be an int or a pair (H, W) of ints, got {size!r}.")
    if min(pair) <= 0:
        raise InputError(f"`{name}` must be positive, got {size!r}.")
    if max(pair) > MAX_IMAGE_SIDE:
        raise InputError(f"`{name}` must be at most {MAX_IMAGE_SIDE} pixels a side, got {size!r}.")
    return pair


def l2_normalize(z: Tensor, eps: float = 1e-12) -> Tensor:
    """Row-wise ``z / max(||z||_2, eps)`` along the last axis: never divides by zero."""
    return F.normalize(z, p=2.0, dim=-1, eps=eps)


def power_of_two_scale(z: Tensor, dim: int | tuple[int, ...] | None = None) -> Tensor:
    """A power of two near the largest ``|z|`` (over ``dim``, kept; all of ``z`` for ``None``), detached.

    Losses on *raw* embeddings divide by it and put the scale back analytically, so that squares
    and fourth powers of large norms (~1e10) do not overflow float32 on the way to a representable
    result. A power of two makes the division exact; an all-zero ``z`` gives the smallest normal
    number, never 0.
    """
    largest = z.detach().abs().amax() if dim is None else z.detach().abs().amax(dim=dim, keepdim=True)
    return torch.exp2(torch.log2(largest.clamp(min=torch.finfo(z.dtype).tiny)).floor())


def compute_dtype(*tensors: Tensor) -> torch.dtype:
    """The dtype a loss computes in: float32 for fp16/bf16/float32 inputs, float64 for float64.

    Used with :func:`float32_math` so that similarities stay float32 under autocast while float64
    inputs (``gradcheck``) keep their precision.
    """
    dtype = torch.float32
    for t in tensors:
        dtype = torch.promote_types(dtype, t.dtype)
    return dtype


@contextmanager
def float32_math(device_type: str) -> Iterator[None]:
    """Disable autocast so that similarity matrices and exponentials stay in float32.

    Use together with ``.float()`` on the inputs:

    >>> with float32_math(z.device.type):  # doctest: +SKIP
    ...     sim = z.float() @ z.float().T
    """
    with torch.autocast(device_type=device_type, enabled=False):
        yield
