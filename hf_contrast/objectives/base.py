"""``Objective``: one contrastive method — the views it needs and how model outputs become loss terms.

An objective is an ``nn.Module`` that owns its hyperparameters (a dataclass, :attr:`Objective.config_class`,
an :class:`~hf_contrast.objectives.config.ObjectiveConfig` whose fields are also command-line flags through
``HfArgumentParser``; the fields it shares with its loss come from the loss, see :func:`.loss_config` and
:func:`.loss_field`), its loss modules and any trainable
or persistent state (a learnable temperature, LOCAL's pair classifier, the MoCo key encoder and queue).
The trainer only calls the hooks below; it never branches on a method name.

Lifecycle (driven by :class:`~hf_contrast.training.ContrastiveTrainer`):

1. ``setup(views, train_dataset)`` once, when the trainer is built: build losses and augmentations from
   the encoder (via :class:`~hf_contrast.views.ViewBuilder`) and the training data;
2. ``train_collator(views)`` / ``eval_collator(views)`` / ``train_batch_sampler(dataset, views)``: how rows
   become batches of views;
3. ``forward(model, inputs, views)`` every step: a dict of named, already-weighted terms with their total
   under ``"loss"`` (each term is logged as ``loss_<term>``);
4. ``eval_embeddings(model, inputs, views)`` at evaluation: the representations the metrics use.

Its ``state_dict`` (parameters, buffers, ``get_extra_state``) is saved in every checkpoint.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from torch import Tensor, nn
from transformers.utils import logging

from hf_contrast.errors import InputError

from ..metrics.embedding_metrics import EmbeddingMetrics
from .config import ObjectiveConfig

if TYPE_CHECKING:
    from transformers import TrainerCallback

    from ..views import ViewBuilder

__all__ = ["Objective", "ObjectiveConfig"]

logger = logging.get_logger(__name__)  # follows the Trainer's log level (hf_contrast.progress)


class Objective(nn.Module):
    """Base class of the contrastive methods (see the module docstring for the hooks).

    Args:
        config: The hyperparameters, an instance of :attr:`config_class`.
        **hyperparameters: Or the fields of :attr:`config_class` (not both).

    Raises:
        ValueError: on an unknown or out-of-range hyperparameter.
    """

    #: Registered name (set by :func:`~hf_contrast.objectives.register_objective`).
    name: ClassVar[str] = "objective"
    #: The hyperparameter dataclass.
    config_class: ClassVar[type[ObjectiveConfig]] = ObjectiveConfig
    #: Whether the batches need integer class labels.
    needs_labels: ClassVar[bool] = False
    #: Whether ``forward`` trains the encoder's task head (``config.num_labels > 0``) when it has one.
    trains_task_head: ClassVar[bool] = False
    #: Whether ``forward`` can score any evaluation batch (``eval_loss``).
    has_eval_loss: ClassVar[bool] = True
    #: Whether the loss reads ``gather_distributed`` (negatives from every process's batch). ``False``: it scores each
    #: process's batch alone (LOCAL's pairs, VICReg, binary NCE) or has negatives of its own
    #: (CARE-MoCo's queue, filled from every process); the flag is then ignored, with a warning.
    gathers_negatives: ClassVar[bool] = True
    #: Whether the batches hold pairs of inputs whose random geometry is drawn per pair in the collator (LOCAL):
    #: such views are never made on the device, so ``views_on_device`` defaults to False for them.
    paired_inputs: ClassVar[bool] = False

    def __init__(self, config: ObjectiveConfig | None = None, **hyperparameters: Any) -> None:
        super().__init__()
        if config is not None and hyperparameters:
            raise InputError(f"Pass either `config` or hyperparameters to {type(self).__name__}, not both.")
        if config is None:
            fields = {f.name for f in dataclasses.fields(self.config_class)}
            unknown = sorted(set(hyperparameters) - fields)
            if unknown:
                raise InputError(
                    f"{type(self).__name__} has no hyperparameter(s) {unknown}; "
                    f"its hyperparameters are {sorted(fields)}."
                )
            config = self.config_class(**hyperparameters)
        elif not isinstance(config, self.config_class):
            raise InputError(f"`config` must be a {self.config_class.__name__}, got {type(config).__name__}.")
        self.config = config

    # ---- description --------------------------------------------------------------------------

    def get_config_dict(self) -> dict[str, Any]:
        """The hyperparameters as a plain dict (model cards, logs)."""
        return dataclasses.asdict(self.config)

    @property
    def citation(self) -> str:
        """BibTeX of the method (from the loss modules it owns)."""
        seen: list[str] = []
        for module in self.modules():
            text = getattr(type(module), "citation", None)
            if isinstance(text, str) and text and text not in seen:
                seen.append(text)
        return "\n".join(seen)

    @property
    def batch_multiple(self) -> int:
        """Training batches must hold a multiple of this many samples (chunked methods: ``n_splits``)."""
        return 1

    @property
    def needs_full_batches(self) -> bool:
        """Whether a training batch smaller than ``per_device_train_batch_size`` cannot be used (chunks, groups)."""
        return self.batch_multiple > 1

    @property
    def min_eval_batch_size(self) -> int:
        """The fewest samples an evaluation batch needs to be scored in ``eval_loss`` (every method compares
        the samples of a batch: 2). Checked against ``per_device_eval_batch_size`` and the evaluation set's
        size when the trainer is built (:meth:`check_eval_batch_size`)."""
        return 2

    def check_eval_batch_size(self, batch_size: int) -> None:
        """Raise ``ValueError`` naming ``per_device_eval_batch_size`` if evaluation batches of ``batch_size``
        samples cannot be scored, so ``eval_loss`` would be missing. Objectives without ``eval_loss``
        (:attr:`has_eval_loss` false) accept any size; chunked methods also check their chunks."""
        if self.has_eval_loss and batch_size < self.min_eval_batch_size:
            raise InputError(
                f"`per_device_eval_batch_size`={batch_size} is too small for {type(self).__name__}'s `eval_loss`: "
                f"an evaluation batch needs at least {self.min_eval_batch_size} samples (the loss compares the "
                f"samples of a batch). Set `per_device_eval_batch_size` >= {self.min_eval_batch_size}."
            )

    def required_columns(self, views: ViewBuilder) -> list[str | tuple[str, ...]]:
        """Training-set columns (a tuple: any one of them) this objective reads; checked before training."""
        columns: list[str | tuple[str, ...]] = [views.input_columns()]
        if self.needs_labels:
            columns.append((views.args.label_column, "labels"))
        return columns

    # ---- hooks --------------------------------------------------------------------------------

    def setup(self, views: ViewBuilder, train_dataset: Any) -> None:
        """Build losses and augmentations from the encoder and the training data (called once).

        Subclasses call ``super().setup(views, train_dataset)`` first: it rejects, before training,
        a per-device batch of 1 sample when there is training data (every method compares the
        samples of a batch; SimCLR's loss is then 0 with a zero gradient, and BatchNorm fails).
        """
        if views.gather_distributed and not self.gathers_negatives and views.args.should_log:  # said once
            message = (
                f"`gather_distributed=True` does not apply to {type(self).__name__}, whose loss never compares across "
                "processes (its own batches or queue): ignored."
            )
            logger.warning(message)
            warnings.warn(message, UserWarning, stacklevel=3)
        batch = views.args.per_device_train_batch_size
        if train_dataset is not None and batch < 2:
            raise InputError(
                f"`per_device_train_batch_size`={batch} is too small for {type(self).__name__}: contrastive methods "
                "compare each sample with the others of its batch (with 1 sample there are no negatives: SimCLR's "
                "loss is 0 with a zero gradient) and BatchNorm needs 2+ samples. Use 2 or more (contrastive learning "
                "works best with hundreds; `gradient_cache_size` fits large batches in little memory)."
            )

    def train_collator(self, views: ViewBuilder) -> Callable[[list[dict[str, Any]]], dict[str, Any]]:
        """Training collator: two random views per sample (images) or the tokenised text."""
        return views.collator(n_views=2)

    def eval_collator(self, views: ViewBuilder) -> Callable[[list[dict[str, Any]]], dict[str, Any]]:
        """Evaluation collator: what :meth:`forward` needs plus a deterministic view."""
        return views.collator(n_views=2, deterministic=True)

    def classifier_classes(self) -> int | None:
        """The classes ``0 .. K - 1`` of the objective's own classifier, known once it is set up (LOCAL's pair
        classifier), or ``None`` when it has none: every evaluation set's labels must be among them (the trainer
        checks when it is built)."""
        return None

    def train_batch_sampler(self, dataset: Any, views: ViewBuilder) -> Any:
        """A batch sampler for training (e.g. class-major AFCL batches), or ``None`` for the Trainer's."""
        return None

    def callbacks(self) -> list[TrainerCallback]:
        """Trainer callbacks the method needs (e.g. MoCo's momentum update)."""
        return []

    def forward(self, model: nn.Module, inputs: Mapping[str, Any], views: ViewBuilder) -> dict[str, Tensor]:
        """Named loss terms of one batch, total under ``"loss"``."""
        raise NotImplementedError

    def eval_loss(self, model: nn.Module, inputs: Mapping[str, Any], views: ViewBuilder) -> Tensor | None:
        """The loss on an evaluation batch, or ``None`` when this batch cannot be scored (e.g. a ragged
        last batch of a chunked method); ``eval_loss`` is the mean over the scored batches."""
        if not self.has_eval_loss:
            return None
        terms = self(model, inputs, views)
        return None if "skipped" in terms else terms["loss"]  # a skipped batch is not scored as 0

    def log_statistics(self) -> dict[str, float]:
        """Diagnostics of the training batches since the last log (e.g. ``negative_cos_below_zero``), added to
        the training logs next to the ``loss_<term>`` means. Called at every log on every process (where the
        Trainer syncs anyway); accumulate on the device in :meth:`forward`, read here. Default: none."""
        return {}

    def eval_embeddings(self, model: nn.Module, inputs: Mapping[str, Any], views: ViewBuilder) -> tuple[Tensor, ...]:
        """``(representation of the deterministic view[, view 1, view 2])`` of an evaluation batch: the
        ``predictions`` that :meth:`compute_metrics` scores."""
        return views.eval_representations(model, inputs)

    def compute_metrics(self, args: Any) -> Callable[[Any], dict[str, float]]:
        """The trainer's default ``compute_metrics`` for :meth:`eval_embeddings`'s predictions:
        :class:`~hf_contrast.evaluation.EmbeddingMetrics` with the arguments' kNN settings."""
        return EmbeddingMetrics(knn_k=args.knn_k, knn_temperature=args.knn_temperature, seed=args.seed, progress=False)
