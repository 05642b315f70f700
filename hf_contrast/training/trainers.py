"""The named trainers: thin entry points over :class:`ContrastiveTrainer`, one per method family.

Each only names its default objective; ``objective=`` chooses another registered method or passes an
instance with hyperparameters (``CARETrainer(..., objective=CAREObjective(n_splits=4))``,
``CARETrainer(..., objective="care_moco")``, ``SimCLRTrainer(..., objective="vicreg")``).
"""

from __future__ import annotations

from typing import ClassVar

from .trainer import ContrastiveTrainer

__all__ = [
    "SimCLRTrainer",
    "CARETrainer",
    "SupConTrainer",
    "OCLTrainer",
    "SimOTrainer",
    "AlignUniformTrainer",
    "LOCALTrainer",
]


class SimCLRTrainer(ContrastiveTrainer):
    """SimCLR / SimCSE (InfoNCE on two random views); also ``"spectral"``, ``"vicreg"``, ``"binary_nce"``."""

    default_objective: ClassVar[str] = "simclr"


class CARETrainer(ContrastiveTrainer):
    """CARE: InfoNCE + λ · orthogonal equivariance on chunk-shared views; ``"care_moco"`` for CARE-MoCo."""

    default_objective: ClassVar[str] = "care"


class SupConTrainer(ContrastiveTrainer):
    """Supervised contrastive (SupCon) over labelled views."""

    default_objective: ClassVar[str] = "supcon"


class OCLTrainer(ContrastiveTrainer):
    """OCL: SupCon with ``|cos|`` for negatives (LOCAL's orthonormal contrastive loss)."""

    default_objective: ClassVar[str] = "ocl"


class SimOTrainer(ContrastiveTrainer):
    """SimO / AFCL on class-major batches."""

    default_objective: ClassVar[str] = "simo"


class AlignUniformTrainer(ContrastiveTrainer):
    """Alignment + uniformity (+ SimCSE, + a task head: EquiBERT)."""

    default_objective: ClassVar[str] = "align_uniform"


class LOCALTrainer(ContrastiveTrainer):
    """LOCAL on paired images (``objective=LOCALObjective(contrastive="supcon")`` for L-SCL)."""

    default_objective: ClassVar[str] = "local"
