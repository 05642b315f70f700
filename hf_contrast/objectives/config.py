"""``ObjectiveConfig``: an objective's hyperparameters, the fields it shares with its loss derived from the loss.

An objective config is a dataclass whose fields are also command-line flags (``HfArgumentParser`` turns
``metadata={"help": ...}`` into ``--flag`` help). A field that a loss also takes (``temperature``,
``n_splits``, ...) is not declared again: :func:`loss_field` takes its default, its help and its check
from the loss's :class:`~hf_contrast.losses.hyperparameters.Hyperparameters` dataclass, where they are
declared once (:mod:`hf_contrast.losses.hyperparameters`):

>>> from dataclasses import dataclass, field, fields
>>> from hf_contrast.losses.care import CAREHyperparameters
>>> @dataclass
... class Chunks(ObjectiveConfig):
...     n_splits: int = loss_field(CAREHyperparameters)
...     share_views: bool = field(default=False, metadata={"help": "Share the views."})
>>> Chunks().n_splits, fields(Chunks)[0].metadata["help"]
(8, 'CARE: chunks S sharing one augmentation pair; must divide the per-device batch size.')
>>> Chunks(n_splits=0)
Traceback (most recent call last):
hf_contrast.errors.InputError: `n_splits` must be an integer >= 1, got 0.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import re
import typing
from typing import Any, ClassVar

from torch import nn

from ..losses.hyperparameters import Hyperparameters

__all__ = ["ObjectiveConfig", "loss_config", "loss_field"]

_UNSET: Any = object()


class _LossField:
    """Placeholder left in a config's class body by :func:`loss_field`; :class:`ObjectiveConfig` replaces it
    with a ``dataclasses.field`` once the class is created (when the field's name is known)."""

    def __init__(self, hyperparameters: type[Hyperparameters], default: Any, help: str | None) -> None:
        self.hyperparameters = hyperparameters
        self.default = default
        self.help = help


def loss_field(hyperparameters: type[Hyperparameters], *, default: Any = _UNSET, help: str | None = None) -> Any:
    """A config field derived from the field of the same name of a loss's ``hyperparameters`` dataclass:
    the loss's default, ``--help`` text and check (run when the config is built, by
    :meth:`ObjectiveConfig.validate`).

    Args:
        hyperparameters: The loss's dataclass, e.g. ``CARELoss.hyperparameters_class``.
        default: Only where the objective's default differs from the loss's (e.g. SimCSE's temperature 0.05
            for InfoNCE's 0.5).
        help: Only where the objective's use of the hyperparameter needs its own description.
    """
    return _LossField(hyperparameters, default, help)


@dataclasses.dataclass
class ObjectiveConfig:
    """Hyperparameters of an objective. Subclasses add fields: with :func:`loss_field` the ones a loss also
    takes (checked by :meth:`validate` with the loss's own checks), the others with
    ``metadata={"help": ...}`` and checked in an override of :meth:`validate` (which calls
    ``super().validate()``) with :mod:`hf_contrast.tensor_checks`."""

    #: Which loss hyperparameters each derived field comes from, by field name (set for every subclass).
    loss_fields: ClassVar[dict[str, type[Hyperparameters]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        derived = dict(cls.loss_fields)
        unannotated = [
            n for n, v in vars(cls).items() if isinstance(v, _LossField) and n not in inspect.get_annotations(cls)
        ]
        if unannotated:
            raise TypeError(
                f"{cls.__name__}: annotate the type of the loss fields {unannotated} (e.g. `temperature: float`)."
            )
        for name in inspect.get_annotations(cls):
            value = vars(cls).get(name)
            if isinstance(value, _LossField):
                setattr(cls, name, _derived_field(cls, name, value))
                derived[name] = value.hyperparameters
            else:
                derived.pop(name, None)  # declared by hand in a subclass: no longer derived
        cls.loss_fields = derived

    def validate(self) -> None:
        """Raise ``ValueError`` naming the field on an out-of-range value. Here: :meth:`check_loss_fields`;
        an override checks its own fields and calls ``super().validate()`` where the loss's checks belong."""
        self.check_loss_fields()

    def check_loss_fields(self) -> None:
        """Check the fields derived from a loss with the loss's checks (loss by loss, in each loss's
        declaration order), so the message is the loss's own."""
        for hyperparameters in dict.fromkeys(self.loss_fields.values()):
            for f in dataclasses.fields(hyperparameters):
                if self.loss_fields.get(f.name) is hyperparameters:
                    f.metadata["check"](f.name, getattr(self, f.name))

    def __post_init__(self) -> None:
        self.validate()
        self.check_loss_fields()  # also where an override of validate() does not call super().validate()


def _derived_field(config: type, name: str, spec: _LossField) -> Any:
    """The ``dataclasses.field`` of ``config.name`` from ``spec``'s loss hyperparameter of the same name."""
    fields = {f.name: f for f in dataclasses.fields(spec.hyperparameters)}
    if name not in fields:
        raise TypeError(
            f"{config.__name__}.{name} = loss_field({spec.hyperparameters.__name__}): "
            f"{spec.hyperparameters.__name__} has no field {name!r}; its fields are {sorted(fields)}."
        )
    source = fields[name]
    default = source.default if spec.default is _UNSET else spec.default
    help_text = spec.help if spec.help is not None else source.metadata.get("help")
    metadata = {} if help_text is None else {"help": help_text}
    return dataclasses.field(default=default, metadata=metadata)


#: Constructor arguments a method never takes from its user: the trainer sets them (``args.gather_distributed``).
SET_BY_THE_TRAINER = ("gather_distributed",)


@functools.cache
def loss_config(loss_class: type[nn.Module]) -> type[ObjectiveConfig]:
    """The base of a method's config, derived from the loss it trains (nothing declared twice): the method's
    config subclasses it and declares only its own fields, which follow the loss's::

        @dataclass
        class CAREConfig(loss_config(CARELoss)):  # temperature, care_weight, n_splits: CARE's, declared there
            share_views: bool = field(default=False, metadata={"help": "..."})

    Its fields are the method's hyperparameters, command-line flags (``--help`` text) and model-card entries:

    - a loss with a :class:`~hf_contrast.losses.hyperparameters.Hyperparameters` dataclass
      (``hyperparameters_class``): the hyperparameters that have ``help`` text, as :func:`loss_field` fields (the
      loss's default, help and check); the others (``normalize``, ``tile_size``, …) keep the loss's defaults;
    - any other ``nn.Module``: its constructor's arguments, each with a default and a type annotation, the help
      text from its docstring's ``Args:`` section; the values are checked by building the loss once when the
      config is built, so the loss's own ``ValueError`` names the argument before any training.

    ``gather_distributed`` is never a field: the trainer passes ``args.gather_distributed``. Named
    ``<Loss>Config``; one class per loss (SupCon and OCL share ``loss_config(SupConLoss)``; a pair method's config,
    e.g. ``SimCLRConfig``, is a subclass without fields of its own).

    Args:
        loss_class: The loss module the method trains.

    Raises:
        TypeError: If an argument of a plain module has no default or no type annotation.
    """
    hyperparameters = getattr(loss_class, "hyperparameters_class", None)
    namespace: dict[str, Any] = {"__module__": loss_class.__module__}
    if hyperparameters is not None:
        hints = typing.get_type_hints(hyperparameters)
        specs = [
            (f.name, hints[f.name], loss_field(hyperparameters))
            for f in dataclasses.fields(hyperparameters)
            if f.metadata.get("help") and f.name not in SET_BY_THE_TRAINER
        ]
    else:
        specs = _constructor_fields(loss_class)

        def validate(self: ObjectiveConfig) -> None:  # the loss's own checks, by building it once
            ObjectiveConfig.validate(self)
            loss_class(**dataclasses.asdict(self))

        namespace["validate"] = validate
    name = f"{loss_class.__name__}Config"
    config = dataclasses.make_dataclass(name, specs, bases=(ObjectiveConfig,), namespace=namespace)
    config.__doc__ = f"The hyperparameters of :class:`{loss_class.__module__}.{loss_class.__qualname__}`."
    return config


def _constructor_fields(loss_class: type[nn.Module]) -> list[tuple[str, Any, Any]]:
    """``(name, type, field)`` of each constructor argument of ``loss_class``, help from its docstring."""
    helps = _argument_help(inspect.getdoc(loss_class) or "")
    hints = typing.get_type_hints(loss_class.__init__)
    specs = []
    for parameter in inspect.signature(loss_class).parameters.values():
        if parameter.name in SET_BY_THE_TRAINER or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        if parameter.default is parameter.empty or parameter.name not in hints:
            raise TypeError(
                f"{loss_class.__name__}({parameter.name}): a method's loss takes hyperparameters with a default and a "
                f"type annotation (`{parameter.name}: float = 0.1`): they are its command-line flags."
            )
        metadata = {"help": helps[parameter.name]} if parameter.name in helps else {}
        if isinstance(parameter.default, (dict, set)):  # no command-line form (dataclasses would say default_factory)
            raise TypeError(
                f"{loss_class.__name__}({parameter.name}): the default {parameter.default!r} is a "
                f"{type(parameter.default).__name__}, which cannot be a command-line flag; take a list "
                f"(`{parameter.name}: list[float] = [1.0, 2.0]`), separate arguments, or None."
            )
        if isinstance(parameter.default, list):  # a fresh copy per config: `--weights 3 4` with `list[float]`
            field = dataclasses.field(default_factory=functools.partial(list, parameter.default), metadata=metadata)
        else:
            field = dataclasses.field(default=parameter.default, metadata=metadata)
        specs.append((parameter.name, hints[parameter.name], field))
    return specs


def _argument_help(docstring: str) -> dict[str, str]:
    """``{argument: text}`` of a Google-style ``Args:`` section (continuation lines joined)."""
    helps: dict[str, str] = {}
    lines = docstring.split("Args:", 1)[1].splitlines() if "Args:" in docstring else []
    indent, current = None, None
    for line in lines:
        if not line.strip():
            continue
        depth = len(line) - len(line.lstrip())
        if indent is None:
            indent = depth
        if depth < indent:  # the section ended (e.g. "Returns:")
            break
        entry = re.match(r"(\w+)(?:\s*\([^)]*\))?:\s*(.*)", line.strip())
        if depth == indent and entry:
            current = entry.group(1)
            helps[current] = entry.group(2)
        elif current is not None:
            helps[current] += " " + line.strip()
    return helps
