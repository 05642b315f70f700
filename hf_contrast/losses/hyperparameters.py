"""Loss hyperparameters declared once: each one a dataclass field holding its default, its check and its help.

A loss module lists its hyperparameters in one :class:`Hyperparameters` dataclass; everything else is
derived from it:

* the module's constructor (:class:`HyperparameterModule`): same arguments, same defaults, each value
  checked with the field's check from :mod:`hf_contrast.tensor_checks` and set as an attribute;
* ``get_config_dict()`` (model cards, logs) and ``extra_repr()`` (``print(loss)``);
* the objective configs' fields of the same names (the fields with ``help`` text, by
  :func:`hf_contrast.objectives.loss_config`, or one by one by :func:`hf_contrast.objectives.loss_field`): their
  default, their ``--help`` text and their check, so that a bad ``temperature`` fails when the config is built,
  before training, with the loss's own message.

>>> from dataclasses import dataclass
>>> from hf_contrast.tensor_checks import check_positive
>>> @dataclass
... class Temperature(Hyperparameters):
...     temperature: float = hyperparameter(0.5, check_positive)
>>> Temperature(0.1).temperature
0.1
>>> Temperature(0)
Traceback (most recent call last):
hf_contrast.errors.InputError: `temperature` must be > 0, got 0.0.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any, ClassVar

from torch import nn

__all__ = ["hyperparameter", "same_hyperparameter", "Hyperparameters", "HyperparameterModule"]

Check = Callable[[str, Any], Any]


def hyperparameter(default: Any, check: Check, help: str | None = None) -> Any:
    """A :class:`Hyperparameters` field: ``default``, ``check(name, value) -> normalised value`` (one of
    :mod:`hf_contrast.tensor_checks`' checks, raising ``ValueError`` naming the argument) and ``help``, the
    one-line description an objective config that takes this hyperparameter shows as its ``--flag`` help."""
    return dataclasses.field(default=default, metadata={"check": check, "help": help})


def same_hyperparameter(hyperparameters: type[Hyperparameters], name: str) -> Any:
    """The field ``name`` of another loss's ``hyperparameters`` (its default, check and help), for a loss that takes
    the same hyperparameter: it stays declared once (CARE-MoCo's ``care_weight`` is CARE's)."""
    declared = {f.name: f for f in dataclasses.fields(hyperparameters)}[name]
    return dataclasses.field(default=declared.default, metadata=declared.metadata)


@dataclasses.dataclass
class Hyperparameters:
    """Base of a loss's hyperparameter dataclass: ``__post_init__`` runs every field's check."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            setattr(self, f.name, f.metadata["check"](f.name, getattr(self, f.name)))


class HyperparameterModule(nn.Module):
    """An ``nn.Module`` constructed from the fields of :attr:`hyperparameters_class` (positionally, in field
    order, or by name), checked, and set as attributes of the same names.

    Subclasses with more constructor arguments than hyperparameters (a classifier's size) define their
    own ``__init__`` and pass the hyperparameters on to ``super().__init__``.
    """

    #: The dataclass declaring the hyperparameters (names, defaults, checks).
    hyperparameters_class: ClassVar[type[Hyperparameters]] = Hyperparameters

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # help(LossClass) shows the hyperparameters as arguments (an own __init__ shows its own)
        own_init = "__init__" in cls.__dict__
        cls.__signature__ = None if own_init else inspect.signature(cls.hyperparameters_class)  # type: ignore[attr-defined]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        values = self.hyperparameters_class(*args, **kwargs)
        for f in dataclasses.fields(values):
            setattr(self, f.name, getattr(values, f.name))

    def get_config_dict(self) -> dict[str, Any]:
        """The hyperparameters by name (model cards, logs)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self.hyperparameters_class)}

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.get_config_dict().items())
