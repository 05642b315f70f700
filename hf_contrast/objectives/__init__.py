"""Methods as registered objectives: each declares its views and turns model outputs into loss terms.

``get_objective("care")`` / ``build_objective("care", n_splits=8)`` resolve a method by name;
:func:`available_objectives` lists them. To add a method: write one file with an :class:`Objective`
subclass (and its :class:`ObjectiveConfig` dataclass, whose fields shared with the loss are made by
:func:`loss_field` from the loss's ``Hyperparameters``) decorated by ``@register_objective("name")``,
and import it below. :mod:`hf_contrast.objectives.geometry` holds the statistics objectives log next to
their loss terms (``negative_cos_below_zero``, ``class_mean_abs_cos``; :meth:`Objective.log_statistics`).
"""

from __future__ import annotations

# Registration: importing a module registers its objectives.
from .align_uniform import AlignUniformConfig, AlignUniformObjective
from .base import Objective
from .care import CAREConfig, CAREMoCoConfig, CAREMoCoObjective, CAREObjective
from .config import ObjectiveConfig, loss_field
from .local import LOCALConfig, LOCALObjective
from .pair import (
    BinaryNCEConfig,
    BinaryNCEObjective,
    CustomPairObjective,
    PairObjective,
    SimCLRConfig,
    SimCLRObjective,
    SpectralObjective,
    VICRegConfig,
    VICRegObjective,
)
from .registry import available_objectives, build_objective, get_objective, register_objective
from .simo import SimOConfig, SimOObjective
from .supervised import OCLObjective, SupConConfig, SupConObjective

__all__ = [
    "AlignUniformConfig",
    "AlignUniformObjective",
    "BinaryNCEConfig",
    "BinaryNCEObjective",
    "CAREConfig",
    "CAREMoCoConfig",
    "CAREMoCoObjective",
    "CAREObjective",
    "CustomPairObjective",
    "LOCALConfig",
    "LOCALObjective",
    "OCLObjective",
    "Objective",
    "ObjectiveConfig",
    "PairObjective",
    "SimCLRConfig",
    "SimCLRObjective",
    "SimOConfig",
    "SimOObjective",
    "SpectralObjective",
    "SupConConfig",
    "SupConObjective",
    "VICRegConfig",
    "VICRegObjective",
    "available_objectives",
    "build_objective",
    "get_objective",
    "loss_field",
    "register_objective",
]
