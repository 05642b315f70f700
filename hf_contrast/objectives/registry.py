"""The objective registry: one place where a method name resolves to its objective class.

``--method care`` on the command line, ``objective="care"`` in a trainer and the benchmarks all
resolve here; adding a method is one file with a class decorated by :func:`register_objective`
(and one import line in ``hf_contrast/objectives/__init__.py``).

>>> from hf_contrast.objectives import get_objective
>>> get_objective("care").__name__
'CAREObjective'
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from hf_contrast.errors import InputError, InputTypeError

from .base import Objective

__all__ = ["register_objective", "get_objective", "build_objective", "available_objectives"]

_REGISTRY: dict[str, type[Objective]] = {}
T = TypeVar("T", bound="type[Objective]")


def register_objective(name: str) -> Callable[[T], T]:
    """Class decorator: register an :class:`~hf_contrast.objectives.Objective` under ``name``.

    Raises:
        TypeError: if ``name`` is not a non-empty string (it is the ``--method`` value and the card's method).
        ValueError: if ``name`` is already registered to another class.
    """
    if not isinstance(name, str) or not name.strip():
        raise InputTypeError(
            f"`register_objective` takes the method's name (a non-empty string, what `--method` and "
            f'`objective=` accept), got {name!r}; write `@register_objective("my_method")`.'
        )

    def decorate(cls: T) -> T:
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise InputError(f"An objective named {name!r} is already registered ({_REGISTRY[name].__name__}).")
        _REGISTRY[name] = cls
        cls.name = name
        return cls

    return decorate


def available_objectives() -> list[str]:
    """The registered method names, sorted."""
    return sorted(_REGISTRY)


def get_objective(name: str) -> type[Objective]:
    """The objective class registered as ``name``.

    Raises:
        ValueError: naming the known methods, if ``name`` is not registered.
    """
    if not isinstance(name, str):
        raise InputTypeError(
            f"`name` must be a method name (str), got {name!r} of type {type(name).__name__}; registered objectives: "
            f"{', '.join(available_objectives())}."
        )
    if name not in _REGISTRY:
        raise InputError(f"Unknown method {name!r}; registered objectives: {', '.join(available_objectives())}.")
    return _REGISTRY[name]


def build_objective(objective: str | Objective, **hyperparameters: Any) -> Objective:
    """An objective instance from a name (with its hyperparameters) or an instance (returned as is).

    Raises:
        ValueError: on an unknown name, or hyperparameters given with an instance.
    """
    if isinstance(objective, Objective):
        if hyperparameters:
            raise InputError(
                f"Hyperparameters {sorted(hyperparameters)} were given with an already built "
                f"{type(objective).__name__}; set them on the objective instead."
            )
        return objective
    if not isinstance(objective, str):
        raise InputError(f"`objective` must be a method name or an Objective, got {type(objective).__name__}.")
    return get_objective(objective)(**hyperparameters)
