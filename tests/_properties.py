"""Shared pieces of the property-based suite (``tests/**/test_properties_*.py``): the one assertion and the strategies.

The property every public entry point must have: for any input, the call either returns a valid
result (the caller's ``check`` says what valid is: shape, finite values, a range) or raises one of
the package's errors (:class:`hf_contrast.errors.InputError` or a subclass) whose message names the
argument that was wrong. Anything else escaping — a raw ``RuntimeError`` from torch, an Arrow or PIL
error, a ``KeyError`` / ``AttributeError`` / ``IndexError``, a ``TypeError`` from a comparison, or a
``ValueError`` that is not ours — fails the test with the exception's type and first line.

The strategies generate the inputs users get wrong: values of the wrong type, empty and huge values,
NaN and infinities, tensors of the wrong dtype, rank or size. The hypothesis profile (``ci`` by
default, ``dev`` for more examples) is registered in ``tests/conftest.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from hypothesis import strategies as st

from hf_contrast.errors import InputError

__all__ = [
    "assert_package_error_or_result",
    "bad_names",
    "bad_numbers",
    "finite_scalar",
    "near_tensors",
    "tensors",
    "tiny_temperatures",
    "wrong_types",
]


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0][:300] if text else ""


def assert_package_error_or_result(
    call: Callable[[], Any], argument_name: str | Sequence[str], check: Callable[[Any], None] | None = None
) -> Any:
    """Run ``call()``: it must return a result that passes ``check`` or raise an ``InputError`` naming the argument.

    Args:
        call: The entry point with its (generated) arguments bound, e.g. ``lambda: info_nce_loss(z1, z2)``.
        argument_name: The argument that was generated; a sequence means any of them may be the one
            named (``z1`` of the wrong shape may be reported as "``z1`` and ``z2`` must have the same shape").
        check: Asserts that a returned result is valid (e.g. :func:`finite_scalar`); ``None`` accepts any result.

    Returns:
        The result, or ``None`` when the call raised the package's error.
    """
    names = (argument_name,) if isinstance(argument_name, str) else tuple(argument_name)
    try:
        result = call()
    except InputError as error:
        message = str(error)
        assert any(name in message for name in names), (
            f"{type(error).__name__} does not name the argument (one of {names}): {message}"
        )
        return None
    except Exception as error:
        raise AssertionError(
            f"{type(error).__module__}.{type(error).__name__} escaped (not hf_contrast.errors.InputError) "
            f"for a bad `{names[0]}`: {_first_line(error)}"
        ) from error
    if check is not None:
        check(result)
    return result


def finite_scalar(result: Any) -> None:
    """A loss: a 0-dim floating tensor holding a finite value (a dict of terms: its ``"loss"``)."""
    if isinstance(result, dict):
        result = result["loss"]
    assert isinstance(result, torch.Tensor), f"expected a tensor, got {type(result).__name__}"
    assert result.ndim == 0 and result.is_floating_point(), (
        f"expected a float scalar, got {result.dtype} {tuple(result.shape)}"
    )
    assert bool(torch.isfinite(result)), f"returned a non-finite value {result.item()} instead of an error"


def finite_float(result: Any) -> None:
    """A metric: a Python float that is finite."""
    assert isinstance(result, float), f"expected a float, got {type(result).__name__}"
    assert math.isfinite(result), f"returned {result} instead of an error"


#: Values of the wrong type for any argument (a tensor where a number belongs is in ``tensors()``).
wrong_types = st.sampled_from(
    [None, "0.1", b"x", [], [1.0, 2.0], [[1.0], [2.0, 3.0]], {}, {"a": 1}, object(), (), True, 1j, float]
)

#: Numbers users get wrong for a hyperparameter: 0, negatives, NaN, infinities, huge and tiny, bools.
bad_numbers = st.one_of(
    st.sampled_from([0, 0.0, -1, -0.5, math.nan, math.inf, -math.inf, 1e308, 1e-320, True, False, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True, width=64),
    st.integers(min_value=-(10**6), max_value=10**6),
)

#: Temperatures below ``MIN_TEMPERATURE`` (1e-6): numbers from just below it down to subnormals, and 0-d tensors
#: of them. Below ~3e-39 a similarity / temperature overflows float32 (``ocl_loss(..., temperature=7.6e-64)`` was NaN).
tiny_temperatures = st.one_of(
    st.sampled_from([9.9e-7, 1e-12, 3e-39, 1e-39, 7.6e-64, 1e-300, 5e-324]),
    st.floats(min_value=5e-324, max_value=9.99e-7, exclude_min=False),
    st.floats(min_value=1e-300, max_value=9.99e-7).map(lambda t: torch.tensor(t, dtype=torch.float64)),
)

#: Column / objective / backbone names users get wrong.
bad_names = st.one_of(
    st.sampled_from(["", " ", "Label", "labels", "img", "image ", "text\n", "../x", "0", "none"]),
    st.text(max_size=8),
    st.sampled_from([None, 0, 1.5, ["image"], ("a", "b"), True]),
)

_DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int64,
    torch.int32,
    torch.uint8,
    torch.bool,
    torch.complex64,
]
_FILLS = ["randn", "zeros", "ones", "nan", "inf", "-inf", "huge", "tiny", "one_nan"]


def _fill(shape: tuple[int, ...], dtype: torch.dtype, fill: str, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    base = torch.randn(shape, generator=generator, dtype=torch.float64)
    values = {
        "randn": base,
        "zeros": torch.zeros(shape, dtype=torch.float64),
        "ones": torch.ones(shape, dtype=torch.float64),
        "nan": torch.full(shape, math.nan, dtype=torch.float64),
        "inf": torch.full(shape, math.inf, dtype=torch.float64),
        "-inf": torch.full(shape, -math.inf, dtype=torch.float64),
        "huge": base * 1e30,
        "tiny": base * 1e-30,
    }
    if fill == "one_nan":
        value = base.clone()
        if value.numel():
            value.view(-1)[0] = math.nan
    else:
        value = values[fill]
    if dtype.is_floating_point or dtype.is_complex:
        return value.to(dtype)
    if dtype == torch.bool:
        return value > 0
    return torch.nan_to_num(value, nan=0.0, posinf=100.0, neginf=-100.0).clamp(-100, 100).round().to(dtype)


@st.composite
def tensors(draw: st.DrawFn, max_rank: int = 3, max_side: int = 5) -> torch.Tensor:
    """Any tensor: rank 0..``max_rank``, sides 0..``max_side`` (empty axes included), any dtype, any fill."""
    shape = tuple(draw(st.lists(st.integers(0, max_side), min_size=0, max_size=max_rank)))
    return _fill(shape, draw(st.sampled_from(_DTYPES)), draw(st.sampled_from(_FILLS)), draw(st.integers(0, 2**16)))


@st.composite
def near_tensors(draw: st.DrawFn, shape: tuple[int, ...]) -> torch.Tensor:
    """A tensor near a valid one of ``shape``.

    That shape or one side off / an axis more or less, any dtype and fill.
    """
    change = draw(st.sampled_from(["same", "same", "side", "rank+", "rank-"]))
    new = list(shape)
    if change == "side" and new:
        axis = draw(st.integers(0, len(new) - 1))
        new[axis] = draw(st.sampled_from([0, 1, new[axis] + 1, max(new[axis] - 1, 0)]))
    elif change == "rank+":
        new.insert(0, draw(st.integers(1, 2)))
    elif change == "rank-" and new:
        new.pop()
    return _fill(
        tuple(new),
        draw(st.sampled_from(_DTYPES[:4] * 3 + _DTYPES[4:])),
        draw(st.sampled_from(_FILLS)),
        draw(st.integers(0, 2**16)),
    )


def any_bad(shape: tuple[int, ...]) -> st.SearchStrategy[Any]:
    """A bad value for a tensor argument of ``shape``: near tensors (most), any tensor, or a wrong type."""
    return st.one_of(near_tensors(shape), near_tensors(shape), tensors(), wrong_types)
