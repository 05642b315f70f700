"""``parse_args_with_objective``: command-line flags that include the chosen method's hyperparameters.

Each objective owns its hyperparameters in a config dataclass (``get_objective("care").config_class``).
A script that lets the user pick the method with ``--method`` needs that dataclass in its
``HfArgumentParser`` *before* parsing, so ``--method`` is read first; ``--method X --help`` then lists X's
flags, and a flag another method has (``--n_splits`` with ``--method simclr``) is refused by name.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys
import typing
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from transformers import HfArgumentParser

from ..errors import InputError
from ..objectives import available_objectives, get_objective

__all__ = ["given_arguments", "parse_args_with_objective"]


def parse_args_with_objective(
    dataclass_types: Sequence[type],
    *,
    method: str,
    defaults: Mapping[str, Any] | None = None,
    args: Sequence[str] | None = None,
) -> tuple[Any, ...]:
    """Parse the command line into ``(*dataclasses, method_config)``.

    ``--method`` (default ``method``; one of :func:`~hf_contrast.objectives.available_objectives`) is read
    first; the parser then holds the fields of ``dataclass_types`` (e.g. the script's arguments and
    :class:`~hf_contrast.training.ContrastiveTrainingArguments`) and of that method's config dataclass.
    ``defaults`` change the default of any of these fields (a default naming a field the chosen method
    does not have is dropped); every flag overrides them. For a method with class-major batches (SimO's
    ``classes_per_batch`` × ``samples_per_class``) the batch size is that product unless
    ``--per_device_train_batch_size`` is given. Flags are spelled out in full (no argparse abbreviations: a
    script must see which fields the user named). A single ``.json`` argument is read as a
    config file of field values (its ``"method"`` picks the method), as ``transformers`` examples do.

    Args:
        dataclass_types: The dataclasses to fill, in the order returned. One of them should have a
            ``method`` field (it receives the chosen method).
        method: The default method.
        defaults: New defaults by field name.
        args: The arguments (default ``sys.argv[1:]``).

    Returns:
        One instance per dataclass of ``dataclass_types``, then the method's config instance.

    Raises:
        SystemExit: (argparse) on an unknown method or flag; the message lists the method's hyperparameters.

    Example:
        >>> script, training_args, config = parse_args_with_objective(  # doctest: +SKIP
        ...     (ScriptArguments, ContrastiveTrainingArguments), method="care", defaults={"max_steps": 150})
    """
    argv = list(sys.argv[1:] if args is None else args)
    given: dict[str, Any] | None = None
    if _is_config_file(argv):
        with open(argv[0], encoding="utf-8") as handle:
            given = json.load(handle)
        method = given.get("method", method)
    else:
        first = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
        first.add_argument("--method", default=method, choices=available_objectives())
        method = first.parse_known_args(argv)[0].method
    config_class = get_objective(method).config_class
    _check_no_shared_fields(method, config_class, dataclass_types)
    # no abbreviated flags: `--per_device_train_batch 12` would set the batch size while `given_arguments` (and a
    # reader of the command line) sees no `--per_device_train_batch_size`, so a derived default could replace it
    parser = HfArgumentParser((*dataclass_types, config_class), allow_abbrev=False)
    known = {f.name for kind in (*dataclass_types, config_class) for f in dataclasses.fields(kind) if f.init}
    chosen = {key: value for key, value in (defaults or {}).items() if key in known}
    if "method" in known:
        chosen["method"] = method
    parser.set_defaults(**chosen)
    if given is not None:
        _check_config_types(given, (*dataclass_types, config_class), parser, source=argv[0])
        with _argument_errors():
            parsed = parser.parse_dict({**chosen, **given})
        _check_choices(parsed, parser, source=argv[0])  # argparse checks a flag's choices; a file's values too
    else:
        with _argument_errors():
            *parsed, rest = parser.parse_args_into_dataclasses(args=argv, return_remaining_strings=True)
        if rest:  # e.g. `--n_splits` with `--method simclr`
            fields = sorted(f.name for f in dataclasses.fields(config_class))
            parser.error(
                f"unrecognized arguments: {' '.join(rest)} (flags are spelled out in full; the hyperparameters of "
                f"--method {method} are {fields})"
            )
    _derive_class_major_batch_size(parsed, set(given) if given is not None else given_arguments(argv))
    return tuple(parsed)


@contextlib.contextmanager
def _argument_errors() -> Iterator[None]:
    """A value the arguments' own checks refuse (transformers' ``TrainingArguments.__post_init__`` raises plain
    ``ValueError``s: ``--warmup_steps -1``, ``--logging_steps 0``) is an input error: the script ends with its
    message (:func:`~hf_contrast.training.run_main`), not a traceback."""
    try:
        yield
    except InputError:
        raise
    except ValueError as error:
        raise InputError(str(error)) from error


def _check_no_shared_fields(method: str, config_class: type, dataclass_types: Sequence[type]) -> None:
    """Raise when the method's hyperparameters and the script's arguments declare a field of the same name.

    One flag cannot set two fields (argparse would stop with "conflicting option string" and a traceback).
    """
    own = {f.name for f in dataclasses.fields(config_class) if f.init}
    for kind in dataclass_types:
        shared = sorted(own & {f.name for f in dataclasses.fields(kind) if f.init})
        if shared:
            raise InputError(
                f"--method {method}'s hyperparameters ({config_class.__name__}) and {kind.__name__} both declare "
                f"{shared}: one flag cannot set two fields. Rename the field in {config_class.__name__} "
                f"(e.g. {shared[0]!r} → '{method}_{shared[0]}')."
            )


_PLAIN_TYPES = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def _check_config_types(
    given: Mapping[str, Any], kinds: Sequence[type], parser: argparse.ArgumentParser, source: str
) -> None:
    """Exit with argparse's error when a value of the config file ``source`` is not of its field's plain type
    (``bool``, ``int``, ``float``, ``str``, or one of them or ``None``): the file's values reach the dataclasses as
    they are, so ``"resume_with_changes": "no"`` would be a true string, and ``"max_steps": "10"`` a string."""
    for kind in kinds:
        hints = typing.get_type_hints(kind)
        for field in dataclasses.fields(kind):
            if field.name not in given:
                continue
            value, members = given[field.name], set(typing.get_args(hints.get(field.name))) - {type(None)}
            plain = hints.get(field.name) if hints.get(field.name) in _PLAIN_TYPES else None
            if plain is None and len(members) == 1 and next(iter(members)) in _PLAIN_TYPES:
                plain = next(iter(members))  # `X | None`
            if plain is None or (value is None and type(None) in typing.get_args(hints.get(field.name))):
                continue
            fits = (
                isinstance(value, bool)
                if plain is bool
                else isinstance(value, (int, float)) and not isinstance(value, bool)
                if plain is float
                else isinstance(value, plain) and not isinstance(value, bool)
            )
            if not fits:
                parser.error(
                    f"{source}: {field.name!r} is {value!r} ({type(value).__name__}); give {_PLAIN_TYPES[plain]} "
                    f"(the flag --{field.name})"
                )


def _check_choices(parsed: Sequence[Any], parser: argparse.ArgumentParser, source: str) -> None:
    """Exit with argparse's error when a value read from the config file ``source`` is not one of its field's
    ``Literal`` choices (argparse checks them for flags only)."""
    for instance in parsed:
        hints = typing.get_type_hints(type(instance))
        for field in dataclasses.fields(instance):
            kind = hints.get(field.name)
            if typing.get_origin(kind) is typing.Literal and getattr(instance, field.name) not in typing.get_args(
                kind
            ):
                choices = ", ".join(repr(choice) for choice in typing.get_args(kind))
                parser.error(
                    f"{source}: {field.name!r} is {getattr(instance, field.name)!r}; choose one of {choices} "
                    f"(the flag --{field.name})"
                )


def _is_config_file(argv: Sequence[str]) -> bool:
    return len(argv) == 1 and argv[0].endswith(".json")


def given_arguments(args: Sequence[str] | None = None) -> set[str]:
    """The field names the command line sets (``--name value`` or ``--name=value``), or the keys of its single
    ``.json`` config file: what the user chose, as opposed to a script's default.

    Args:
        args: The arguments (default ``sys.argv[1:]``).

    Example:
        >>> sorted(given_arguments(["--max_steps", "5", "--bf16=true"]))
        ['bf16', 'max_steps']
    """
    argv = list(sys.argv[1:] if args is None else args)
    if _is_config_file(argv):
        with open(argv[0], encoding="utf-8") as handle:
            return set(json.load(handle))
    return {arg[2:].split("=", 1)[0] for arg in argv if arg.startswith("--")}


def _derive_class_major_batch_size(parsed: Sequence[Any], named: set[str]) -> None:
    """A method with class-major batches (a config with ``classes_per_batch`` and ``samples_per_class``, as
    SimO's) trains on batches of exactly C × k rows: unless the batch size is named on the command line (then
    the trainer checks it equals C × k), ``per_device_train_batch_size`` becomes that product."""
    config = parsed[-1]
    classes, samples = getattr(config, "classes_per_batch", None), getattr(config, "samples_per_class", None)
    if not (isinstance(classes, int) and isinstance(samples, int)) or "per_device_train_batch_size" in named:
        return
    for values in parsed[:-1]:
        if hasattr(values, "per_device_train_batch_size"):
            values.per_device_train_batch_size = classes * samples
