"""``ContrastiveTrainer``: one ``transformers.Trainer`` for every contrastive objective.

Data flow: dataset rows → the objective's collator (views) → :meth:`compute_loss` (the objective turns
the encoder's outputs into named loss terms) → ``Trainer``'s optimisation loop → evaluation
(:meth:`prediction_step` gives ``eval_loss`` and embeddings; ``compute_metrics`` — by default
:class:`~hf_contrast.evaluation.EmbeddingMetrics` — and an optional ``evaluator`` score them) → checkpoints
and the Hub (:class:`~hf_contrast.training.checkpointing.CheckpointingMixin`,
:class:`~hf_contrast.training.publishing.HubPublishingMixin`).

The trainer never branches on a method name: everything method-specific lives in the
:class:`~hf_contrast.objectives.Objective`. It overrides public ``Trainer`` methods only:
``compute_loss``, ``training_step``, ``get_train_dataloader`` (an objective's batch sampler, whole chunks),
``create_optimizer`` (the objective's trainable parameters), ``prediction_step`` / ``evaluation_loop``
(embedding evaluation), ``log`` (per-term losses), ``save_model`` / ``train`` and callbacks. The four
private overrides of the mixins (``_save``, ``_load_from_checkpoint``, ``_load_best_model``,
``_push_from_checkpoint``, the ones sentence-transformers keeps) are explained where they are; no other
private ``Trainer`` member is used.

Objective-owned parameters (a learnable temperature, LOCAL's classifier) live in ``trainer.objective``,
*not* in the model: the saved encoder stays a clean ``ContrastiveEncoder``. They get their own optimizer
parameter groups, their gradients are averaged over processes before each optimizer step (the model's are,
by DDP), and the objective's ``state_dict`` is stored in every checkpoint and restored on resume.
"""

from __future__ import annotations

import contextlib
import inspect
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from typing import Any, ClassVar

import torch
import torch.distributed as dist
from accelerate.utils import send_to_device
from torch import Tensor, nn
from torch.utils.data import DataLoader, IterableDataset
from transformers import Trainer, TrainerCallback
from transformers.trainer_utils import TrainOutput, seed_worker
from transformers.utils import logging

from hf_contrast.errors import InputError

from .. import distributed
from ..data.checks import check_dataset, dataset_columns
from ..data.columns import CANONICAL_COLUMNS
from ..evaluation.progress import follow_log_level, progress_bars_disabled
from ..hub import ModelCardCallback
from ..losses import finite_input_checks
from ..models.instances import as_encoder
from ..models.modeling import ContrastiveEncoder
from ..objectives import Objective, build_objective
from ..views import BadImageError, pop_dropped_rows, pop_skipped_images, pop_view_batch_index, scan_images, views_for
from ..views.image_scan import image_columns, scan_depth
from .arguments import ContrastiveTrainingArguments
from .checkpointing import CheckpointingMixin, first_nonfinite_tensor
from .doors import check_trainer_arguments, check_trainer_columns
from .engine_checks import check_distributed_engine
from .gradient_cache import GradientCache
from .image_size import apply_image_size, choose_image_size
from .loss_terms import LossTermTracker, NonFiniteLossError
from .publishing import HubPublishingMixin
from .run_setup import check_precision, log_run_setup

__all__ = ["ContrastiveTrainer", "NonFiniteLossError"]

_SCAN_DEPTHS = {"decode": "every image decoded", "header": "headers read", "size": "file sizes read"}

logger = logging.get_logger(__name__)  # follows the Trainer's log level (hf_contrast.evaluation.progress)


class _ObjectiveCallback(TrainerCallback):
    """Zero the objective's gradients after every optimizer step (``Trainer`` zeroes the model's only) and,
    under ``nonfinite_policy="skip"``, drop an optimizer step whose gradients are not finite."""

    def __init__(self, trainer: ContrastiveTrainer) -> None:
        self.trainer = trainer

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.trainer.objective.zero_grad(set_to_none=True)
        self.trainer._loss_log_start = (state.global_step, self.trainer.skipped_steps)
        self.trainer._train_call_start = (state.global_step, self.trainer.skipped_steps)
        self.trainer.loss_terms.start_run()

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if args.nonfinite_policy == "skip":
            self.trainer._skip_step_if_nonfinite()
        else:  # "raise": remember, on the device, the first step whose gradients were not finite
            self.trainer.loss_terms.record_gradients(self.trainer._gradients_finite(), step=state.global_step + 1)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.trainer.objective.zero_grad(set_to_none=True)
        self.trainer._state_before_step = None  # the next optimizer step takes its own snapshot


@contextlib.contextmanager
def _drop_last(args: Any) -> Iterator[None]:
    previous = args.dataloader_drop_last
    args.dataloader_drop_last = True
    try:
        yield
    finally:
        args.dataloader_drop_last = previous


class ContrastiveTrainer(CheckpointingMixin, HubPublishingMixin, Trainer):
    """``Trainer`` for a contrastive :class:`~hf_contrast.objectives.Objective` on a ``ContrastiveEncoder``.

    Args:
        model: A ``ContrastiveEncoder`` (image: ``config.backbone_type == "timm"``; text: ``"text"``), or a
            ``SentenceTransformer``, timm model or transformers text model, wrapped with
            ``ContrastiveEncoder.from_backbone(model)`` (its weights kept; the trained encoder is ``trainer.model``).
        args: :class:`ContrastiveTrainingArguments`.
        objective: A registered method name (``"care"``, ``"simclr"``, … — see
            :func:`hf_contrast.objectives.available_objectives`) or an :class:`Objective` instance with its
            hyperparameters. Default: the named trainer's method.
        data_collator: Training collator; default the objective's (random views).
        train_dataset: ``datasets.Dataset`` / ``IterableDataset`` with an image or text column, and labels
            where the objective or the metrics need them.
        eval_dataset: The same for evaluation (or a dict of evaluation sets).
        processing_class: Tokenizer for text models; default ``model.tokenizer``.
        eval_data_collator: Collator used at evaluation; default the objective's.
        compute_metrics: Called with ``EvalPrediction(predictions=(embeddings[, view1, view2]),
            label_ids=labels or -1)``; default the objective's (:class:`~hf_contrast.evaluation.EmbeddingMetrics`;
            LOCAL adds its pair classifier's accuracy and macro-F1). Pass your own to replace it.
        evaluator: An :class:`~hf_contrast.evaluation.Evaluator` (STS, kNN/probe on another set, geometry) run
            at every evaluation; its metrics are reported as ``eval_<name>_<metric>`` so
            ``metric_for_best_model`` can pick the best checkpoint by any of them.
        **kwargs: Any other ``Trainer`` argument (``callbacks``, ``optimizers``, …).

    Raises:
        ValueError: if ``args`` is not a :class:`ContrastiveTrainingArguments`, the objective is unknown, the
            training batch size does not fit the objective, ``load_best_model_at_end`` relies on an
            ``eval_loss`` the objective does not have, or (when the run evaluates) ``per_device_eval_batch_size``
            or an ``eval_dataset`` is too small for the objective's ``eval_loss``
            (:meth:`~hf_contrast.objectives.Objective.check_eval_batch_size`).
    """

    #: The method a named trainer trains (``None``: ``objective`` is required).
    default_objective: ClassVar[str | None] = None
    # Our losses are per-batch means: the Trainer divides them by the accumulation steps.
    loss_is_scaled_for_ga = False

    def __init__(
        self,
        model: nn.Module | None = None,
        args: ContrastiveTrainingArguments | None = None,
        data_collator: Callable[[list[dict[str, Any]]], dict[str, Any]] | None = None,
        train_dataset: Any = None,
        eval_dataset: Any = None,
        processing_class: Any = None,
        objective: str | Objective | None = None,
        eval_data_collator: Callable[[list[dict[str, Any]]], dict[str, Any]] | None = None,
        compute_metrics: Callable[[Any], dict[str, float]] | None = None,
        evaluator: Callable[[nn.Module], dict[str, float]] | None = None,
        **kwargs: Any,
    ) -> None:
        if args is None:
            args = ContrastiveTrainingArguments(output_dir="tmp_trainer")
        if not isinstance(args, ContrastiveTrainingArguments):
            raise InputError(
                f"`args` must be a ContrastiveTrainingArguments, got {type(args).__name__}; build it with the same "
                "fields, e.g. ContrastiveTrainingArguments(output_dir=...)."
            )
        if args.remove_unused_columns:
            raise InputError(
                "`remove_unused_columns=True` does not work with a ContrastiveTrainer: the Trainer would keep only the "
                f"arguments of the encoder's `forward`, dropping the columns the views are made from ({args.image_column!r} / "
                f"{args.text_column!r}). Set `remove_unused_columns=False` (the ContrastiveTrainingArguments default); to "
                "drop columns, call `dataset.select_columns([...])` with those the objective reads (its "
                "`required_columns`: the image or text column, and the label column for supervised methods)."
            )
        check_trainer_arguments(model, train_dataset, eval_dataset)  # types, before any work
        objective = objective if objective is not None else self.default_objective
        if objective is None:
            raise InputError(
                f"{type(self).__name__} needs an objective: pass `objective=` a method name or an Objective "
                "(e.g. objective='simclr'), or use a named trainer such as SimCLRTrainer or CARETrainer."
            )
        self.objective: Objective = build_objective(objective)
        model = as_encoder(
            model, ContrastiveEncoder
        )  # a SentenceTransformer, timm or transformers instance becomes an encoder
        if processing_class is None and model is not None:
            processing_class = getattr(model, "tokenizer", None)
        if compute_metrics is None:
            compute_metrics = self.objective.compute_metrics(args)
        super().__init__(
            model=model,
            args=args,
            data_collator=data_collator,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            compute_metrics=compute_metrics,
            **kwargs,
        )
        self.args: ContrastiveTrainingArguments
        follow_log_level(self.args.get_process_log_level())  # the package's loggers, as Trainer sets transformers'
        check_distributed_engine(self.args, self.accelerator, self.is_fsdp_enabled, self.is_deepspeed_enabled)
        if self.args.dataloader_pin_memory and self.args.device.type == "cpu":
            # pinned memory only speeds up copies to an accelerator; on a CPU run torch warns at every loader
            self.args.dataloader_pin_memory = False
        # The encoder takes no loss kwargs: the Trainer must divide our per-batch mean by the number of
        # accumulation steps. Set after `Trainer.__init__`, which sets it from the model's signature.
        self.model_accepts_loss_kwargs = False
        self.evaluator = evaluator
        check_precision(self.args)  # fp16 on a CPU: said before training
        #: The image size this run trains at and why (:mod:`hf_contrast.training.image_size`); None for text.
        self.image_size_choice = choose_image_size(
            self.model, self.args.image_size, train_dataset, self.args.image_column
        )
        apply_image_size(self.model, self.image_size_choice)  # the evaluators' views and the saved model take it
        self.views = views_for(self.model, self.args, self.processing_class, epoch=lambda: self.state.epoch)
        self.views.prepare_model()  # image views: the saved data config says `args.image_size`
        self._check_objective_fits()
        check_trainer_columns(self)  # columns present and of the right kind, before the objective reads them
        self.objective.setup(self.views, train_dataset)
        self._check_evaluation_fits()
        self.objective.to(self.args.device)
        self.add_callback(_ObjectiveCallback(self))
        for callback in self.objective.callbacks():
            self.add_callback(callback)
        if data_collator is None:
            self.data_collator = self.objective.train_collator(self.views)
        self.eval_data_collator = eval_data_collator or self.objective.eval_collator(self.views)
        self.loss_terms = LossTermTracker(defer=self.args.nonfinite_policy == "skip")
        self._loss_log_start = (0, 0)  # (global step, skipped steps) at the last logged loss
        self.skipped_steps = 0
        self._train_call_start = (0, 0)  # (global step, skipped steps) when this `train()` call began
        self._state_before_step: list[tuple[Tensor, Tensor]] | None = None
        self._next_view_index: Tensor | int | None = None
        # Host counters of the batches whose views the ViewBuilder draws on the device (`views_on_device`): training
        # batches since the start of the run (checkpointed), evaluation batches since the start of the evaluation.
        self._train_view_batches = 0
        self._eval_view_batches = 0
        # Rows the collators left out (`on_bad_image="skip"`) in this `train()` call / this evaluation: device tensors.
        self._skipped_images: dict[str, Tensor | None] = {"train": None, "eval": None}
        # Readable rows a batch that lost rows also left out to keep its chunks / class groups whole (`whole_rows`).
        self._dropped_rows: dict[str, Tensor | None] = {"train": None, "eval": None}
        self.add_callback(ModelCardCallback(self))  # fills model.model_card_data while training

    # ---- set-up checks -------------------------------------------------------------------------

    def _check_objective_fits(self) -> None:
        args, objective = self.args, self.objective
        multiple = objective.batch_multiple
        if args.per_device_train_batch_size % multiple:
            raise InputError(
                f"`per_device_train_batch_size`={args.per_device_train_batch_size} must be a multiple of "
                f"{multiple} for {type(objective).__name__} (its chunks must be whole, e.g. `n_splits`={multiple}); "
                f"use {max(multiple, args.per_device_train_batch_size // multiple * multiple)}."
            )
        if (
            args.load_best_model_at_end
            and not objective.has_eval_loss
            and args.metric_for_best_model in (None, "loss", "eval_loss")
        ):
            raise InputError(
                f"`load_best_model_at_end=True` chooses by `eval_loss`, which {type(objective).__name__} does not "
                "report (its batches are not evaluation batches); set `metric_for_best_model`, e.g. "
                "'eval_knn_loo_accuracy'."
            )

    def _check_evaluation_fits(self) -> None:
        """When the run evaluates (an ``eval_dataset`` or an ``eval_strategy``): evaluation batches and sets
        the objective can score, so ``eval_loss`` is always reported (or the error says what to set)."""
        args, objective = self.args, self.objective
        if self.eval_dataset is None and args.eval_strategy == "no":
            return
        objective.check_eval_batch_size(args.per_device_eval_batch_size)
        if not objective.has_eval_loss:
            return
        eval_sets = self.eval_dataset if isinstance(self.eval_dataset, dict) else {"": self.eval_dataset}
        for key, dataset in eval_sets.items():
            if dataset is not None:
                check_dataset(
                    dataset,
                    name=f"eval_dataset[{key!r}]" if key else "eval_dataset",
                    min_rows=objective.min_eval_batch_size,
                    why=f"{type(objective).__name__}'s `eval_loss` compares the samples of an evaluation batch",
                )

    def check_datasets(self) -> None:
        """Fail before training, with the fix, on an empty or too small dataset or a missing column."""
        objective, args = self.objective, self.args
        if self.train_dataset is not None:
            full = objective.needs_full_batches
            check_dataset(
                self.train_dataset,
                name="train_dataset",
                min_rows=args.per_device_train_batch_size if full else 1,
                columns=objective.required_columns(self.views),
                why=f"{type(objective).__name__} trains on whole batches of {args.per_device_train_batch_size}"
                if full
                else None,
            )
            pair = CANONICAL_COLUMNS["text_pair_column"]
            if (
                getattr(self.model.config, "backbone_type", None) == "text"
                and args.text_pair_column is None
                and pair in (dataset_columns(self.train_dataset) or ())
            ):
                warnings.warn(
                    f"train_dataset has a {pair!r} column (what `load_text_dataset(text_pair_column=...)` names the "
                    f"paired sentences) but `text_pair_column` is None: training on {args.text_column!r} alone (SimCSE "
                    f"views). Set `text_pair_column={pair!r}` in the training arguments to train on the pairs.",
                    stacklevel=3,
                )
        eval_sets = self.eval_dataset if isinstance(self.eval_dataset, dict) else {"": self.eval_dataset}
        for key, dataset in eval_sets.items():
            if dataset is not None:
                check_dataset(dataset, name=f"eval_dataset[{key!r}]" if key else "eval_dataset", min_rows=1)

    def train(self, *args: Any, **kwargs: Any) -> Any:
        """``Trainer.train`` after :meth:`check_datasets`; with ``disable_tqdm=True`` no progress bar at all
        (the package's, transformers' "Writing model shards", the Hub's uploads). Rows the training collator
        left out in this call (``on_bad_image="skip"``) are reported as ``train_skipped_images`` in the
        returned metrics when there are any, and the readable rows left out with them to keep chunks or class
        groups whole (:mod:`hf_contrast.views.whole_rows`) as ``train_dropped_rows``. Before the first step the
        image files are scanned (:meth:`check_image_files`)."""
        self.check_datasets()
        self.check_image_files()
        self.run_setup = log_run_setup(self)  # the defaults that shape the result, said once (and in the card)
        self._skipped_images["train"] = self._dropped_rows["train"] = None
        with progress_bars_disabled(self.args.disable_tqdm):
            output = super().train(*args, **kwargs)
        skipped, dropped = self._reported_left_out_rows("train", "training")
        if skipped:
            output.metrics["train_skipped_images"] = skipped
        if dropped:
            output.metrics["train_dropped_rows"] = dropped
        if self.skipped_steps > self._train_call_start[1] and "train_loss" in output.metrics:
            # `nonfinite_policy="skip"` dropped steps: the mean over the kept ones, as logged (`log`)
            output = TrainOutput(output.global_step, output.metrics["train_loss"], output.metrics)
        return output

    def evaluate(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        """``Trainer.evaluate``; with ``disable_tqdm=True`` no progress bar (an evaluator's encoding included).
        Rows the evaluation collator left out (``on_bad_image="skip"``) are reported as
        ``<prefix>_skipped_images`` (and ``<prefix>_dropped_rows``) when there are any."""
        with progress_bars_disabled(self.args.disable_tqdm):
            return super().evaluate(*args, **kwargs)

    def predict(self, *args: Any, **kwargs: Any) -> Any:
        """``Trainer.predict``; with ``disable_tqdm=True`` no progress bar."""
        with progress_bars_disabled(self.args.disable_tqdm):
            return super().predict(*args, **kwargs)

    def push_to_hub(self, *args: Any, **kwargs: Any) -> Any:
        """:meth:`HubPublishingMixin.push_to_hub <hf_contrast.training.publishing.HubPublishingMixin.push_to_hub>`;
        with ``disable_tqdm=True`` no progress bar."""
        with progress_bars_disabled(self.args.disable_tqdm):
            return super().push_to_hub(*args, **kwargs)

    # ---- loss ------------------------------------------------------------------------------------

    def compute_loss(
        self,
        model: nn.Module,
        inputs: dict[str, Any],
        return_outputs: bool = False,
        num_items_in_batch: Tensor | int | None = None,
    ) -> Tensor | tuple[Tensor, dict[str, Tensor]]:
        """The objective's total loss; its named terms are recorded for logging (``loss_<term>``).

        ``num_items_in_batch`` is ignored: every objective is a mean over its batch, and the Trainer divides
        it by the number of accumulation steps.

        Raises:
            ValueError: if the objective returns no ``"loss"`` entry.
        """
        view_index = pop_view_batch_index(inputs)
        self._count_skipped_images(inputs, "train" if model.training else "eval")
        if view_index is not None and model.training:  # the collator may already be batches ahead
            self._next_view_index = view_index + 1  # a tensor: read at checkpoints only (no host sync)
        self._start_view_batch(training=model.training)
        with finite_input_checks(not model.training):  # a non-finite training loss is `nonfinite_policy`'s business
            terms = dict(self.objective(model, inputs, self.views))
        if "loss" not in terms:
            raise InputError(
                f"{type(self.objective).__name__} must return its total under 'loss', got {sorted(terms)}."
            )
        skipped = terms.pop("skipped", None)
        if model.training:
            if skipped is not None:
                self.loss_terms.skipped_batches += 1
            else:
                self.loss_terms.record(terms, step=self.state.global_step + 1)
        loss = terms["loss"]
        return (loss, terms) if return_outputs else loss

    def training_step(
        self, model: nn.Module, inputs: dict[str, Any], num_items_in_batch: Tensor | int | None = None
    ) -> Tensor:
        """``Trainer.training_step`` (with ``args.gradient_cache_size``: the encoder in mini-batches, see
        :mod:`~hf_contrast.training.gradient_cache`); then average the objective's gradients over processes. Under
        ``nonfinite_policy="skip"`` a non-finite loss is reported as 0 (the step itself is dropped)."""
        if self.args.nonfinite_policy == "skip" and self._state_before_step is None:
            self._state_before_step = self._statistics_snapshot()  # restored if this optimizer step is dropped
        if self.args.gradient_cache_size is None:
            loss = super().training_step(model, inputs, num_items_in_batch)
        else:  # the objective sees the whole batch; the encoder runs in mini-batches (GradCache)
            cache = self.views.gradient_cache = GradientCache(self.args.gradient_cache_size)
            try:
                loss = super().training_step(model, inputs, num_items_in_batch)
            finally:
                self.views.gradient_cache = None
            cache.backward()
        if self.accelerator.sync_gradients:
            self._sync_objective_gradients()
        if self.args.nonfinite_policy == "skip":
            self.loss_terms.add_step_loss(loss)  # counted in the logged losses only if the step is kept
            loss = torch.where(torch.isfinite(loss), loss, torch.zeros_like(loss))
        return loss

    def _start_view_batch(self, training: bool) -> None:
        """Tell the views which batch comes next (a host counter: no device sync); ``views_on_device`` draws its
        views from that batch's generator."""
        if training:
            self.views.start_batch(self._train_view_batches, training=True)
            self._train_view_batches += 1
        else:
            self.views.start_batch(self._eval_view_batches, training=False)
            self._eval_view_batches += 1

    # ---- non-finite steps ------------------------------------------------------------------------

    def _gradients_finite(self) -> Tensor:
        """Whether every gradient of the model and the objective is finite: a device bool (no host sync)."""
        grads = [p.grad for p in [*self.model.parameters(), *self.objective.parameters()] if p.grad is not None]
        if not grads:
            return torch.tensor(True, device=self.args.device)
        return torch.stack([torch.isfinite(g).all() for g in grads]).all()

    def _statistics_snapshot(self) -> list[tuple[Tensor, Tensor]]:
        """Copies of what a forward pass changes outside the optimizer: the model's buffers (BatchNorm running
        statistics) and the objective's buffers and frozen parameters (a MoCo queue and key encoder), on their
        devices; ``nonfinite_policy="skip"`` puts them back when it drops a step (NaN inputs write NaN into
        running statistics before the loss is seen)."""
        tensors = [*self.model.buffers(), *self.objective.buffers()]
        tensors += [p for p in self.objective.parameters() if not p.requires_grad]
        return [(t, t.detach().clone()) for t in tensors]

    def _skip_step_if_nonfinite(self) -> None:
        """Drop this optimizer step (gradients set to None, running statistics restored) when its loss or a
        gradient is not finite."""
        params = [*self.model.parameters(), *self.objective.parameters()]
        finite = self._gradients_finite()
        for flag in (self.loss_terms.last_loss_finite, self.loss_terms.step_loss_finite()):
            if flag is not None:
                finite = finite & flag.to(finite.device)
        if bool(finite):  # the one host sync per step of the "skip" policy
            self.loss_terms.commit()
            return
        for p in params:
            p.grad = None
        with torch.no_grad():
            for tensor, saved in self._state_before_step or []:
                tensor.copy_(saved)
        self.loss_terms.discard()
        self.skipped_steps += 1
        warnings.warn(
            f"Step {self.state.global_step + 1}: non-finite loss or gradients; the optimizer step was skipped "
            f"(`nonfinite_policy='skip'`, {self.skipped_steps} skipped so far, logged as `skipped_steps`).",
            RuntimeWarning,
            stacklevel=2,
        )

    def check_finite(self) -> None:
        """Raise :class:`NonFiniteLossError` naming the first bad step and the non-finite terms, if any loss
        since the last check was NaN/inf (``nonfinite_policy="raise"``). Called at every log, before every
        checkpoint and at the end of training, where the Trainer syncs anyway."""
        if self.args.nonfinite_policy == "raise":
            self.loss_terms.check(fallback_step=self.state.global_step)

    # ---- logging -----------------------------------------------------------------------------------

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """Check the losses are finite, then add the running mean of each term (``loss_<term>``) and the
        objective's :meth:`~hf_contrast.objectives.Objective.log_statistics` (e.g. ``negative_cos_below_zero``).

        Under ``nonfinite_policy="skip"`` the logged ``loss`` is the mean over the steps that were not skipped
        (NaN when every step since the last log was): a dropped step is never logged as a loss of 0.
        """
        if "loss" in logs or "train_loss" in logs:  # the end of training checks too
            self.check_finite()
        if self.args.nonfinite_policy == "skip":  # means over the kept steps, whatever dropped the others
            self._loss_over_kept_steps(logs)
        if "loss" in logs:
            self._loss_log_start = (self.state.global_step, self.skipped_steps)
            logs = {**logs, **self.loss_terms.drain(), **self.objective.log_statistics()}
            if self.skipped_steps:
                logs["skipped_steps"] = self.skipped_steps
        super().log(logs, start_time)

    def _loss_over_kept_steps(self, logs: dict[str, float]) -> None:
        """Under ``nonfinite_policy="skip"``: ``train_loss`` (this ``train()`` call) and ``loss`` (since the last
        logged loss) become the means of the kept steps' losses, in place (``train()``'s returned metrics are
        this dict), plus ``skipped_steps``. The Trainer's own means count a dropped step as its loss, or as 0
        when the loss was not finite; these sums hold only the kept steps (:class:`LossTermTracker`)."""
        for key, scope, start in (
            ("train_loss", "run", self._train_call_start),
            ("loss", "log", self._loss_log_start),
        ):
            if key not in logs:
                continue
            kept_sum = self.loss_terms.kept_loss_sum(scope)
            steps, skipped = self.state.global_step - start[0], self.skipped_steps - start[1]
            if skipped:  # every process skips the same steps (their gradients are all-reduced)
                total = torch.zeros((), device=self.args.device) if kept_sum is None else kept_sum.to(self.args.device)
                if self.args.world_size > 1:
                    total = self.accelerator.reduce(total, reduction="mean")
                logs[key] = float(total) / (steps - skipped) if steps > skipped else float("nan")
            if self.skipped_steps:
                logs["skipped_steps"] = self.skipped_steps

    # ---- objective parameters ------------------------------------------------------------------------

    def objective_parameters(self) -> list[nn.Parameter]:
        """Trainable parameters owned by the objective (not by the encoder)."""
        return [p for p in self.objective.parameters() if p.requires_grad]

    def _sync_objective_gradients(self) -> None:
        params = self.objective_parameters()
        world = distributed.world_size()
        if not params or world == 1:
            return
        for p in params:
            grad = p.grad if p.grad is not None else torch.zeros_like(p)
            dist.all_reduce(grad, op=dist.ReduceOp.SUM)
            p.grad = grad / world

    def create_optimizer(self, *args: Any, **kwargs: Any) -> torch.optim.Optimizer:
        """``Trainer.create_optimizer`` plus parameter groups for the objective's trainable parameters.

        Matrices get ``args.weight_decay``, vectors and scalars (temperatures, biases) none. With a
        user-given optimizer nothing is added; a warning says which parameters it misses. The arguments
        go to ``Trainer.create_optimizer`` as given (``model=`` since transformers 5.x, none before).
        """
        created = self.optimizer is None
        optimizer = super().create_optimizer(*args, **kwargs)
        params = self.objective_parameters()
        if not params:
            return optimizer
        if created:
            if distributed.world_size() > 1:
                for tensor in [*self.objective.parameters(), *self.objective.buffers()]:
                    dist.broadcast(tensor.data, src=0)
            decay = [p for p in params if p.ndim >= 2]
            no_decay = [p for p in params if p.ndim < 2]
            target = getattr(optimizer, "optimizer", optimizer)
            if decay:
                target.add_param_group({"params": decay, "weight_decay": self.args.weight_decay})
            if no_decay:
                target.add_param_group({"params": no_decay, "weight_decay": 0.0})
        else:
            known = {id(p) for group in optimizer.param_groups for p in group["params"]}
            if any(id(p) not in known for p in params):
                warnings.warn(
                    f"The given optimizer does not hold the trainable parameters of {type(self.objective).__name__}; "
                    "they will not be trained. Add `trainer.objective_parameters()`.",
                    UserWarning,
                    stacklevel=2,
                )
        return optimizer

    # ---- data ----------------------------------------------------------------------------------------

    def get_train_dataloader(self) -> DataLoader:
        """The Trainer's loader; the objective's batch sampler when it has one (e.g. class-major AFCL
        batches); and, for objectives that need whole chunks, the ragged last batch of an epoch dropped.

        A batch sampler yields this run's whole sequence of batches (``num_replicas=1``);
        ``accelerator.prepare`` shards it, giving each process every ``world_size``-th batch. A streaming
        (``IterableDataset``) loader for a chunked objective is built here with ``drop_last=True``: the
        Trainer's ignores ``dataloader_drop_last`` for iterable datasets.
        """
        if self.train_dataset is None:
            raise InputError("Trainer: training requires a train_dataset.")
        dataset = self.train_dataset
        streaming = isinstance(dataset, IterableDataset)
        batch_sampler = None if streaming else self.objective.train_batch_sampler(dataset, self.views)
        chunked = self.objective.batch_multiple > 1
        if batch_sampler is None and not (streaming and chunked):
            if chunked:
                with _drop_last(self.args):
                    return super().get_train_dataloader()
            return super().get_train_dataloader()
        if self.args.auto_find_batch_size:  # the Trainer would shrink only its own loader's batches
            raise InputError(
                f"`auto_find_batch_size=True` cannot resize the batches of {type(self.objective).__name__} "
                f"({'its batch sampler' if batch_sampler is not None else 'whole chunks of a streaming dataset'}); set "
                "`auto_find_batch_size=False` and choose `per_device_train_batch_size`."
            )
        batching: dict[str, Any] = (
            {"batch_sampler": batch_sampler}
            if batch_sampler is not None
            else {"batch_size": self.args.train_batch_size, "drop_last": True}
        )
        loader = DataLoader(dataset, **batching, collate_fn=self.data_collator, **self._dataloader_options())
        return self.accelerator.prepare(loader)

    def _dataloader_options(self) -> dict[str, Any]:
        """The options the Trainer gives its training ``DataLoader``, derived the way it derives them:
        each ``DataLoader`` argument ``x`` that ``TrainingArguments`` has as ``dataloader_x``
        (``num_workers``, ``pin_memory``, ``persistent_workers``, ``prefetch_factor``, and
        ``multiprocessing_context`` / ``in_order`` where the installed versions have them), and
        ``worker_init_fn`` seeding each worker with transformers' ``seed_worker``. Batching
        (``batch_size``, ``drop_last``, samplers) is not included."""
        accepted = inspect.signature(DataLoader).parameters
        options = {
            name: getattr(self.args, f"dataloader_{name}")
            for name in accepted
            if hasattr(self.args, f"dataloader_{name}")
        }
        options.pop("drop_last", None)
        options["worker_init_fn"] = partial(
            seed_worker, num_workers=self.args.dataloader_num_workers, rank=self.args.process_index
        )
        return options

    @contextlib.contextmanager
    def _eval_collation(self) -> Iterator[None]:
        """The objective's evaluation collator in place of the training one, restarted at batch 0 (the same
        seeded views at every evaluation)."""
        if hasattr(self.eval_data_collator, "next_index"):
            self.eval_data_collator.next_index = 0
        train_collator, self.data_collator = self.data_collator, self.eval_data_collator
        try:
            yield
        finally:
            self.data_collator = train_collator

    def get_eval_dataloader(self, eval_dataset: Any = None) -> DataLoader:
        """The Trainer's evaluation loader with the objective's evaluation collator."""
        with self._eval_collation():
            return super().get_eval_dataloader(eval_dataset)

    def get_test_dataloader(self, test_dataset: Any) -> DataLoader:
        """As :meth:`get_eval_dataloader`, for ``predict``."""
        with self._eval_collation():
            return super().get_test_dataloader(test_dataset)

    # ---- evaluation ------------------------------------------------------------------------------------

    def prediction_step(
        self,
        model: nn.Module,
        inputs: dict[str, Any],
        prediction_loss_only: bool,
        ignore_keys: list[str] | None = None,
    ) -> tuple[Tensor | None, tuple[Tensor, ...] | None, Tensor | None]:
        """``(eval loss or None, (embeddings[, view1, view2]), labels)`` of one evaluation batch.

        The loss is the objective on the batch's evaluation views (``None`` when the objective cannot score
        it, e.g. a ragged batch of a chunked method); the representations are ``args.eval_representation``
        of the deterministic view (and of two random views, for alignment). Unlabelled batches get labels
        ``-1`` so that ``compute_metrics`` still runs.
        """
        inputs = send_to_device(inputs, self.args.device)
        pop_view_batch_index(inputs)
        self._count_skipped_images(inputs, "eval")
        self._start_view_batch(training=False)
        with torch.no_grad(), self.compute_loss_context_manager():
            loss = self.objective.eval_loss(model, inputs, self.views)
            loss = None if loss is None else loss.detach().float()
            if prediction_loss_only:
                return loss, None, None
            embeddings = self.objective.eval_embeddings(model, inputs, self.views)
        labels = inputs.get("labels")
        if labels is None:
            labels = torch.full((embeddings[0].shape[0],), -1, dtype=torch.long, device=embeddings[0].device)
        return loss, embeddings, labels

    def evaluation_loop(self, dataloader: DataLoader, description: str, *args: Any, **kwargs: Any) -> Any:
        """``Trainer.evaluation_loop`` (device views restarted at evaluation batch 0: every evaluation draws the
        same views), then the ``evaluator``'s metrics added as ``<prefix>_<metric>``."""
        self._eval_view_batches = 0
        self._skipped_images["eval"] = self._dropped_rows["eval"] = None
        output = super().evaluation_loop(dataloader, description, *args, **kwargs)
        prefix = kwargs.get("metric_key_prefix", args[2] if len(args) > 2 else "eval")
        skipped, dropped = self._reported_left_out_rows("eval", f"{description.lower()} ({prefix})")
        if skipped:
            output.metrics[f"{prefix}_skipped_images"] = skipped
        if dropped:
            output.metrics[f"{prefix}_dropped_rows"] = dropped
        if self.evaluator is not None and description == "Evaluation":
            for key, value in self.evaluator(self.model).items():
                output.metrics[f"{prefix}_{key}"] = value
        return output

    def check_image_files(self) -> None:
        """Scan the training and evaluation sets' image files before training (:func:`hf_contrast.views.image_scan.
        scan_images`: full decode up to 10,000 rows, headers up to 200,000, file sizes above).

        Raises:
            BadImageError: with ``on_bad_image="raise"``, naming the bad files and the fix; with ``"skip"`` they
                are logged (the collators leave them out when their batch is drawn, and count them).
        """
        sets = {"train_dataset": self.train_dataset}
        evals = self.eval_dataset if isinstance(self.eval_dataset, dict) else {"": self.eval_dataset}
        if self.eval_dataset is not None and (self.args.eval_strategy != "no" or self.args.do_eval):
            sets.update({f"eval_dataset[{k!r}]" if k else "eval_dataset": d for k, d in evals.items()})
        found = []
        for name, dataset in sets.items():
            if dataset is None or not image_columns(dataset):
                continue
            start = time.perf_counter()
            found += [(name, bad) for bad in scan_images(dataset)]
            logger.info(  # said: on a large folder this takes a while (about 1 ms per decoded 28-px PNG)
                "Checked the image files of %s before training (%d rows, %s) in %.1f s.",
                name, len(dataset), _SCAN_DEPTHS[scan_depth(len(dataset))], time.perf_counter() - start,
            )  # fmt: skip
        if not found:
            return
        listed = "\n".join(f"  {name}: {bad}" for name, bad in found[:10])
        more = f"\n  … and {len(found) - 10} more" if len(found) > 10 else ""
        if self.args.on_bad_image == "raise":
            raise BadImageError(
                f"{len(found)} unreadable image(s) found before training:\n{listed}{more}\nFix or remove them, or pass "
                "`on_bad_image='skip'` (`--on_bad_image skip`) to leave them out of their batches (counted as "
                "`train_skipped_images` / `eval_skipped_images`)."
            )
        logger.warning(
            "%d unreadable image(s) found before training; on_bad_image='skip' leaves them out of their batches "
            "(counted as `*_skipped_images`):\n%s%s", len(found), listed, more,
        )  # fmt: skip

    def _count_skipped_images(self, inputs: dict[str, Any], stage: str) -> None:
        """Add the rows this batch's collator left out (``skipped_images``, popped from ``inputs``) to the
        ``stage`` count, on the device (no host sync per step)."""
        for counts, value in (
            (self._skipped_images, pop_skipped_images(inputs)),
            (self._dropped_rows, pop_dropped_rows(inputs)),
        ):
            if value is not None:
                count = counts.get(stage)
                counts[stage] = value if count is None else count + value.to(count.device)

    def _reported_left_out_rows(self, stage: str, what: str) -> tuple[int, int]:
        """The ``stage`` counts of ``skipped_images`` and ``dropped_rows`` summed over the processes (every process
        calls this: one all-reduce for both), each with a warning when it is not zero."""
        local = torch.zeros(2, dtype=torch.long, device=self.args.device)
        for i, counts in enumerate((self._skipped_images, self._dropped_rows)):
            count = counts.get(stage)
            if count is not None:
                local[i] += count.to(local.device)
        if self.args.world_size > 1:
            local = self.accelerator.reduce(local, reduction="sum")
        skipped, dropped = (int(v) for v in local.tolist())
        if skipped:
            logger.warning(
                "%d unreadable image row(s) were left out of the %s batches (on_bad_image='skip'); the warnings "
                "above name their files.", skipped, what,
            )  # fmt: skip
        if dropped:
            logger.warning(
                "%d readable row(s) were left out of the %s batches that lost bad images, to keep the objective's "
                "chunks or class groups whole (on_bad_image='skip'; reported as `dropped_rows`).", dropped, what,
            )  # fmt: skip
        return skipped, dropped

    # ---- checkpoints (written by CheckpointingMixin) -------------------------------------------------

    def contrastive_state_dict(self) -> dict[str, Any]:
        """Training state outside the model and optimizer, saved in every checkpoint: the objective's
        ``state_dict`` (trainable parameters, MoCo key encoder and queue, …), the index of the next batch
        of the training collator's random views and the number of training batches whose views were made on the
        device (``views_on_device``), so resumed views match."""
        state: dict[str, Any] = {
            "objective": self.objective.state_dict(),
            "device_views": {"next_batch": torch.tensor(self._train_view_batches)},
        }
        if self._next_view_index is not None:
            state["collator"] = {"next_index": torch.as_tensor(self._next_view_index).cpu()}
        return state

    def load_contrastive_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`contrastive_state_dict`."""
        if "objective" in state:
            self.objective.load_state_dict(state["objective"])
        if "device_views" in state:
            self._train_view_batches = int(state["device_views"]["next_batch"])
        elif self.args.views_on_device:
            warnings.warn(
                "The checkpoint does not say how many batches its run trained on (it predates `views_on_device`): the "
                "device views restart at batch 0 and differ from those an uninterrupted run would draw.",
                UserWarning,
                stacklevel=2,
            )
        if "collator" in state and hasattr(self.data_collator, "next_index"):
            self._next_view_index = int(state["collator"]["next_index"])
            self.data_collator.next_index = self._next_view_index

    def save_model(
        self, output_dir: str | None = None, _internal_call: bool = False, *, allow_nonfinite: bool = False
    ) -> None:
        """:meth:`CheckpointingMixin.save_model <hf_contrast.training.checkpointing.CheckpointingMixin.save_model>`
        after :meth:`check_finite` (a non-finite loss is named by its step and terms) and a check of the
        objective's own parameters and buffers (its state is in every checkpoint).

        Raises:
            NonFiniteLossError: If a loss since the last check, a weight of the model or of the objective is
                NaN/inf, unless ``allow_nonfinite=True``; nothing is written then.
        """
        if not allow_nonfinite:
            self.check_finite()
            bad = first_nonfinite_tensor(self.objective)
            if bad is not None:
                raise NonFiniteLossError(
                    f"Refusing to save at step {self.state.global_step}: `{bad}` of {type(self.objective).__name__} holds "
                    "NaN/inf. Resume from the last checkpoint with a lower learning rate or gradient clipping "
                    "(`max_grad_norm`), or pass `allow_nonfinite=True` to write it anyway."
                )
        with progress_bars_disabled(self.args.disable_tqdm):  # transformers' "Writing model shards"
            super().save_model(output_dir, _internal_call, allow_nonfinite=allow_nonfinite)
