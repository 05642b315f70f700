"""Griffe extensions for the API reference: the constructor signature of a loss module built from its hyperparameters.

A loss module with a ``hyperparameters_class`` (``hf_contrast/losses/hyperparameters.py``) has no
``__init__`` of its own in the source, or one taking ``*args, **kwargs``: its constructor takes the fields of its
``hyperparameters_class`` dataclass (``inspect.signature(CARELoss)`` shows them at run time). Static analysis sees only
``__init__(*args, **kwargs)``; this extension gives the API reference the real signature, so the
``Args:`` sections of those classes document parameters that exist. A subclass with its own
``__init__(*args, <keyword-only>..., **kwargs)`` (``LOCALLoss``) gets the hyperparameters in place of
``*args``/``**kwargs`` and keeps its keyword-only arguments. :class:`SphinxRolesAsCode` renders
the Sphinx roles of the docstrings as inline code.
"""

from __future__ import annotations

import re
from typing import Any

import griffe


def _hyperparameter_dataclass(cls: griffe.Class) -> griffe.Class | None:
    for klass in (cls, *cls.mro()):
        member = klass.members.get("hyperparameters_class")
        if member is None or member.is_alias or not member.is_attribute or member.value is None:
            continue
        path = getattr(member.value, "canonical_path", None)
        if path is None:
            return None
        try:
            target = cls.modules_collection[path]
        except KeyError:
            return None
        return target if isinstance(target, griffe.Class) else None
    return None


def _field_parameter(attribute: griffe.Attribute) -> griffe.Parameter:
    """``name: annotation = hyperparameter(default, check)`` -> the parameter ``name: annotation = default``."""
    value = attribute.value
    arguments = getattr(value, "arguments", None)
    default = arguments[0] if arguments else value
    if str(default) == "MISSING":  # a required hyperparameter (dataclasses.MISSING)
        default = None
    return griffe.Parameter(
        attribute.name,
        annotation=attribute.annotation,
        kind=griffe.ParameterKind.positional_or_keyword,
        default=default,
        docstring=attribute.docstring,
    )


def _apply(obj: griffe.Object, seen: set[str]) -> None:
    if obj.path in seen:
        return
    seen.add(obj.path)
    for member in list(obj.members.values()):
        if member.is_alias:
            continue
        if member.is_class:
            _set_signature(member)
        if member.is_module or member.is_class:
            _apply(member, seen)


def _set_signature(cls: griffe.Class) -> None:
    dataclass = _hyperparameter_dataclass(cls)
    if dataclass is None:
        return
    fields = [_field_parameter(a) for a in dataclass.members.values() if a.is_attribute and a.annotation is not None]
    own = cls.members.get("__init__")
    extra = []
    if own is not None and not own.is_alias:
        kinds = {p.kind for p in own.parameters}
        if griffe.ParameterKind.var_positional not in kinds:
            return  # a constructor with its own explicit arguments documents itself
        extra = [p for p in own.parameters if p.kind is griffe.ParameterKind.keyword_only]
    init = griffe.Function(
        "__init__",
        lineno=own.lineno if own is not None and not own.is_alias else 0,
        endlineno=own.endlineno if own is not None and not own.is_alias else 0,
        parent=cls,
        parameters=griffe.Parameters(
            griffe.Parameter("self", kind=griffe.ParameterKind.positional_or_keyword),
            *fields,
            *extra,
        ),
        returns="None",
    )
    cls.set_member("__init__", init)


class HyperparameterSignatures(griffe.Extension):
    """Give every class built from a ``hyperparameters_class`` the constructor its hyperparameters define."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        if pkg.path == "hf_contrast":
            _apply(pkg, set())


_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|data|attr|obj|exc|const|ref):`~?\.?([^`]+)`")


class SphinxRolesAsCode(griffe.Extension):
    """Render the Sphinx roles the docstrings use (``:func:`name```, ``:class:`~a.B```) as inline code.

    The docstrings are Google style and read well in ``help()``; on the site, Markdown would otherwise show
    the role's name (":func:") in front of the code span.
    """

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None and obj.path.startswith("hf_contrast"):
            obj.docstring.value = _ROLE.sub(r"`\1`", obj.docstring.value)
