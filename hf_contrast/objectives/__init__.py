"""Methods as registered objectives: each declares its views and turns model outputs into loss terms.

``get_objective("care")`` / ``build_objective("care", n_splits=8)`` resolve a method by name;
:func:`available_objectives` lists them. To add a pair method (a loss on two random views of each sample):
write one file with the loss ``nn.Module`` decorated by ``@register_pair_loss("name")`` and import it below; its
constructor's arguments are the method's hyperparameters, flags and card entries
(:func:`~hf_contrast.objectives.pair.register_pair_loss`). A method that needs other views, batches or state: an
:class:`Objective` subclass (its config subclasses :func:`loss_config` of its loss and declares only its own
fields; :func:`loss_field` takes a field from another loss) decorated by ``@register_objective("name")``, imported
below.
:mod:`hf_contrast.objectives.geometry` holds the statistics objectives log next to
their loss terms (``negative_cos_below_zero``, ``class_mean_abs_cos``; :meth:`Objective.log_statistics`).
"""

from __future__ import annotations

# Registration: importing a module registers its objectives.
from .align_uniform import AlignUniformConfig, AlignUniformObjective
from .base import Objective
from .care import CAREConfig, CAREMoCoConfig, CAREMoCoObjective, CAREObjective
from .config import ObjectiveConfig, loss_config, loss_field
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
    register_pair_loss,
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
    "loss_config",
    "loss_field",
    "register_objective",
    "register_pair_loss",
]
