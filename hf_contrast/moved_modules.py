"""Old import paths of modules that moved: ``hf_contrast.<package>.<old>`` keeps importing, with a ``FutureWarning``
naming the module that holds its names now (the training room's merged modules, the evaluation helpers that moved
below the models).

>>> import sys, types, warnings
>>> new = types.ModuleType("pkg.new"); new.answer = 42
>>> register_moved_modules("pkg", {"old": new})
>>> with warnings.catch_warnings(record=True) as caught:
...     warnings.simplefilter("always")
...     sys.modules["pkg.old"].answer, str(caught[0].message)
(42, 'pkg.old is now part of pkg.new: import `answer` from there.')
"""

from __future__ import annotations

import sys
import types
import warnings
from collections.abc import Mapping

__all__ = ["register_moved_modules"]


class _MovedModule(types.ModuleType):
    """``<package>.<old>``: every attribute read (``from … import name``) or write is the new module's, with a
    ``FutureWarning`` naming where it is now."""

    def __init__(self, name: str, new: types.ModuleType, also: str | None) -> None:
        super().__init__(name, new.__doc__)
        object.__setattr__(self, "_new", new)
        object.__setattr__(self, "_also", also)

    def __getattr__(self, name: str) -> object:
        new = object.__getattribute__(self, "_new")
        if name.startswith("__"):  # the import system's own lookups (`__path__`, `__spec__`): no warning
            return getattr(new, name)
        also = object.__getattribute__(self, "_also")
        exported = also is not None and name in getattr(sys.modules.get(also), "__all__", ())
        warnings.warn(
            f"{self.__name__} is now part of {new.__name__}: import `{name}` from there"
            f"{f' (or from {also})' if exported else ''}.",
            FutureWarning,
            stacklevel=2,
        )
        return getattr(new, name)

    def __setattr__(self, name: str, value: object) -> None:
        setattr(object.__getattribute__(self, "_new"), name, value)


def register_moved_modules(package: str, moved: Mapping[str, types.ModuleType], also: str | None = None) -> None:
    """Make ``package.<old>`` importable for each ``old -> new module`` of ``moved`` (``also``: another module whose
    ``__all__`` exports some of the names, e.g. the package itself, said in the warning for those names)."""
    for old, new in moved.items():
        sys.modules[f"{package}.{old}"] = _MovedModule(f"{package}.{old}", new, also)
