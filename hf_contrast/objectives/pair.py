"""Pair objectives on two per-sample random views: SimCLR (InfoNCE), spectral, VICReg, binary NCE.

Images get two independent SimCLR augmentations; text gets the same sentence twice, so the encoder's
dropout makes the views (SimCSE, https://arxiv.org/abs/2104.08821), or the ``text_pair_column``
sentence as the second view. docs/methods.md §1 and §9.

A pair method is its loss: :class:`PairObjective` subclasses name a ``loss_class`` and their config (the method's
hyperparameters, flags and card entries) is derived from it, and :func:`register_pair_loss` makes any loss
``nn.Module`` a method in one line (docs/training.md, "Adding a method").
"""

from __future__ import annotations

import dataclasses
import inspect
import warnings
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar

import torch
from torch import Tensor, nn

import hf_contrast.distributed as distributed
from hf_contrast.errors import InputError

from ..losses import BinaryNCELoss, InfoNCELoss, SpectralContrastiveLoss, VICRegLoss
from ..views import ViewBuilder
from .base import Objective
from .config import ObjectiveConfig, loss_config
from .registry import register_objective

__all__ = [
    "PairObjective",
    "SimCLRObjective",
    "SimCLRConfig",
    "SpectralObjective",
    "VICRegObjective",
    "VICRegConfig",
    "BinaryNCEObjective",
    "BinaryNCEConfig",
    "register_pair_loss",
]


def as_terms(result: Tensor | Mapping[str, Tensor]) -> dict[str, Tensor]:
    """A loss result as a dict of terms with the total under ``"loss"``."""
    return dict(result) if isinstance(result, Mapping) else {"loss": result}


class PairObjective(Objective):
    """``loss(z1, z2)`` on the projections of two random views of each sample.

    A method is its loss: a subclass names :attr:`loss_class` and its config (hyperparameters, command-line flags,
    card entries) is derived from that loss (a subclass of :func:`~hf_contrast.objectives.config.loss_config`); or
    :func:`register_pair_loss` registers a loss module as a method in one line. Pass ``loss=`` to use any module
    called as ``loss(z1, z2)`` (returning a scalar or a dict of terms with ``"loss"``).
    """

    #: The loss this method trains: built as ``loss_class(**config, gather_distributed=...)`` at :meth:`setup`.
    loss_class: ClassVar[type[nn.Module] | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if vars(cls).get("loss_class") is not None and "config_class" not in vars(cls):
            base = loss_config(cls.loss_class)
            if dataclasses.fields(base):  # a loss without hyperparameters (spectral): ObjectiveConfig itself
                name = cls.__name__.removesuffix("Objective") + "Config"  # SimCLRConfig: the loss's fields only
                cls.config_class = dataclasses.make_dataclass(
                    name, [], bases=(base,), namespace={"__module__": cls.__module__}
                )

    def __init__(self, config: ObjectiveConfig | None = None, loss: nn.Module | None = None, **hyperparameters: Any):
        super().__init__(config, **hyperparameters)
        self.loss = loss

    @property
    def gathers_negatives(self) -> bool:  # type: ignore[override]
        """Whether ``loss_class`` takes ``gather_distributed`` (InfoNCE, spectral; not VICReg or binary NCE, which
        score each process's batch); a ``loss=`` module without a ``loss_class`` is yours, built as you chose."""
        return self.loss_class is None or _takes_gather_distributed(self.loss_class)

    def build_loss(self, views: ViewBuilder) -> nn.Module:
        """``loss_class`` with the config's hyperparameters (and ``views.gather_distributed`` where it takes it)."""
        if self.loss_class is None:
            raise InputError(f"{type(self).__name__} needs `loss=`: a module called as loss(z1, z2).")
        arguments = dataclasses.asdict(self.config)
        if _takes_gather_distributed(self.loss_class):
            arguments["gather_distributed"] = views.gather_distributed
        return self.loss_class(**arguments)

    def setup(self, views: ViewBuilder, train_dataset: Any) -> None:
        super().setup(views, train_dataset)
        if self.loss is None:
            self.loss = self.build_loss(views)

    def forward(self, model: nn.Module, inputs: Mapping[str, Any], views: ViewBuilder) -> dict[str, Tensor]:
        """The loss terms of two views; a batch of one sample (the ragged end of an epoch or of an evaluation
        set) has no negative: it is skipped (zero loss on the graph, counted as ``skipped_batches``, not
        scored in ``eval_loss``) with a warning, unless the loss gathers negatives from other processes."""
        z1, z2 = views.projections(model, views.augmented(inputs, 2))
        if z1.shape[0] < 2 and not (views.gather_distributed and distributed.world_size() > 1):
            warnings.warn(
                f"{type(self).__name__}: skipped a batch of 1 sample (no negatives; usually the last, ragged batch of "
                "an epoch or evaluation set). Choose a batch size that leaves no single sample, or set "
                "`dataloader_drop_last=True`. Training continues; the count is logged as `skipped_batches`.",
                RuntimeWarning,
                stacklevel=2,
            )
            return {"loss": (z1.sum() + z2.sum()) * 0.0, "skipped": torch.ones((), device=z1.device)}
        return as_terms(self.loss(z1, z2))


def _takes_gather_distributed(loss_class: type[nn.Module]) -> bool:
    hyperparameters = getattr(loss_class, "hyperparameters_class", None)
    if hyperparameters is not None:
        return "gather_distributed" in {f.name for f in dataclasses.fields(hyperparameters)}
    return "gather_distributed" in inspect.signature(loss_class).parameters


L = TypeVar("L", bound=type[nn.Module])


def register_pair_loss(name: str) -> Callable[[L], L]:
    """Register a pair loss module as the method ``name``: one file and this one line make a new method.

    The loss is an ``nn.Module`` called as ``loss(z1, z2)`` on the projections of two random views of each sample
    (``(B, D)`` each), returning a scalar or a dict of terms with the total under ``"loss"`` (each term is logged
    as ``loss_<term>``). Its constructor's arguments, each with a default and a type annotation, are the method's
    hyperparameters: ``ContrastiveTrainer(objective="name")`` or ``build_objective("name", arg=...)`` sets them,
    the example scripts' ``--method name`` takes them as flags with the docstring's ``Args:`` text as ``--help`` (a
    ``list[float] = [...]`` default is a multi-value flag, a dict or set default is refused),
    and the model card lists them; the loss's own checks run when the method is built. A ``gather_distributed``
    argument gets ``args.gather_distributed``. The method's objective class, ``<Loss>Objective``, is the loss's
    ``objective_class``.

    Example:
        >>> @register_pair_loss("cosine_pull")  # doctest: +SKIP
        ... class CosinePull(nn.Module):
        ...     def __init__(self, weight: float = 1.0): ...
        ...     def forward(self, z1, z2): return self.weight * (1 - F.cosine_similarity(z1, z2)).mean()
    """

    add_to_registry = register_objective(name)  # a name that is not a non-empty string is refused here

    def register(loss_class: L) -> L:
        if not (isinstance(loss_class, type) and issubclass(loss_class, nn.Module)):
            raise TypeError(f"register_pair_loss({name!r}) decorates an nn.Module class, got {loss_class!r}.")
        objective = type(
            f"{loss_class.__name__}Objective",
            (PairObjective,),
            {
                "loss_class": loss_class,
                "__module__": loss_class.__module__,
                "__doc__": f"The method {name!r}: :class:`{loss_class.__qualname__}` on two random views per sample.",
            },
        )
        add_to_registry(objective)
        loss_class.objective_class = objective
        return loss_class

    return register


@register_objective("pair")
class CustomPairObjective(PairObjective):
    """Any pair loss module: ``ContrastiveTrainer(objective=CustomPairObjective(loss=MyLoss()))``."""


@register_objective("simclr")
class SimCLRObjective(PairObjective):
    """SimCLR (https://arxiv.org/abs/2002.05709): InfoNCE between two random views of each sample."""

    loss_class = InfoNCELoss


@register_objective("spectral")
class SpectralObjective(PairObjective):
    """Spectral contrastive loss (HaoChen et al. 2021, docs/methods.md §9)."""

    loss_class = SpectralContrastiveLoss


@register_objective("vicreg")
class VICRegObjective(PairObjective):
    """VICReg (Bardes et al. 2022, docs/methods.md §9); logs its three terms."""

    loss_class = VICRegLoss


@register_objective("binary_nce")
class BinaryNCEObjective(PairObjective):
    """Sigmoid (binary) NCE (docs/methods.md §9); a learnable temperature/bias is trained and checkpointed."""

    loss_class = BinaryNCELoss


#: The methods' configs, derived from their losses (their former names).
SimCLRConfig = SimCLRObjective.config_class
VICRegConfig = VICRegObjective.config_class
BinaryNCEConfig = BinaryNCEObjective.config_class
