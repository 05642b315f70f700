"""The package's own errors: what a public entry point raises for an input it cannot use.

Every check at a public door (trainers, ``from_backbone`` / ``from_pretrained``, ``encode``, the
loaders, the evaluators, the objectives and losses) raises one of these, with a message that names
the argument, the value it got and the fix. They subclass the built-in exceptions that code written
against earlier releases catches (``ValueError``, ``TypeError``, ``FileNotFoundError``), so
``except ValueError`` keeps working.

>>> from hf_contrast.errors import InputError
>>> issubclass(InputError, ValueError)
True
"""

from __future__ import annotations

__all__ = ["InputError", "InputTypeError", "MissingPathError"]


class InputError(ValueError):
    """An argument or a piece of data the package cannot use: the message names it, its value and the fix."""


class InputTypeError(InputError, TypeError):
    """An argument of the wrong type (a path where a dataset belongs, a string where a model belongs, …)."""


class MissingPathError(InputError, FileNotFoundError):
    """A local file or folder that does not exist (the message names the path and the working directory)."""
