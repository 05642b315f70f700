"""``ContrastiveTrainer``, the named trainers and the pieces of their data loaders.

Formerly also the modules ``trainers``, ``dataloaders`` of ``hf_contrast.training`` (their import paths still work,
with a ``FutureWarning``). Their parts follow.

``ContrastiveTrainer``: one ``transformers.Trainer`` for every contrastive objective.

Data flow: dataset rows → the objective's collator (views) → :meth:`compute_loss` (the objective turns
the encoder's outputs into named loss terms) → ``Trainer``'s optimisation loop → evaluation
(:meth:`prediction_step` gives ``eval_loss`` and embeddings; ``compute_metrics`` — by default
:class:`~hf_contrast.evaluation.EmbeddingMetrics` — and an optional ``evaluator`` score them) → checkpoints
and the Hub (:class:`~hf_contrast.training.checkpointing.SafeCheckpointing`,
:class:`~hf_contrast.training.publishing.HubPublishingMixin`).

The trainer never branches on a method name: everything method-specific lives in the
:class:`~hf_contrast.objectives.Objective`. Why it overrides each ``Trainer`` method it overrides (four of them
private, in the mixins) is in ``docs/training.md`` ("What the trainer overrides, and why").

Objective-owned parameters (a learnable temperature, LOCAL's classifier) live in ``trainer.objective``,
*not* in the model: the saved encoder stays a clean ``ContrastiveEncoder``. They get their own optimizer
parameter groups, their gradients are averaged over processes before each optimizer step (the model's are,
by DDP), and the objective's ``state_dict`` is stored in every checkpoint and restored on resume.

The named trainers: thin entry points over :class:`ContrastiveTrainer`, one per method family.

Each only names its default objective; ``objective=`` chooses another registered method or passes an
instance with hyperparameters (``CARETrainer(..., objective=CAREObjective(n_splits=4))``,
``CARETrainer(..., objective="care_moco")``, ``SimCLRTrainer(..., objective="vicreg")``).

Pieces of the trainer's data loaders: the Trainer's ``DataLoader`` options for a loader built here, and
``dataloader_drop_last`` forced for the length of a ``Trainer.get_train_dataloader`` call.
"""

from __future__ import annotations

import contextlib
import inspect
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

import torch
from accelerate.utils import send_to_device
from torch import Tensor, nn
from torch.utils.data import DataLoader, IterableDataset
from transformers import Trainer
from transformers.trainer_utils import seed_worker
from transformers.utils import logging

from hf_contrast.errors import InputError
from hf_contrast.hub import ModelCardCallback, get_model_card_data
from hf_contrast.losses import finite_input_checks
from hf_contrast.models.backbones import is_hub_unreachable
from hf_contrast.models.instances import as_encoder
from hf_contrast.models.modeling import ContrastiveEncoder
from hf_contrast.objectives import Objective, build_objective
from hf_contrast.progress import follow_log_level, progress_bars_disabled
from hf_contrast.training.arguments import ContrastiveTrainingArguments
from hf_contrast.training.callbacks import (
    GradientCache,
    LeftOutRows,
    LossTermTracker,
    NonFiniteLossError,
    NonFinitePolicy,
    ObjectiveGradients,
    RunSessions,
    add_objective_parameter_groups,
    summed_loss,
)
from hf_contrast.training.checkpointing import SafeCheckpointing, first_nonfinite_tensor, run_settings
from hf_contrast.training.checks import (
    batch_class_check,
    check_best_metric,
    check_classifier_classes,
    check_datasets,
    check_default_metrics_fit,
    check_distributed_engine,
    check_evaluation_fits,
    check_evaluation_set,
    check_image_files,
    check_label_values,
    check_objective_fits,
    check_sampling_strategy,
    check_streamed_batches,
    check_text_length,
    check_trainer_arguments,
    check_trainer_columns,
)
from hf_contrast.training.publishing import HubPublishingMixin
from hf_contrast.training.run_setup import (
    check_image_size_fits,
    check_launch,
    check_precision,
    log_run_setup,
    measure_token_lengths,
    resolve_image_size,
    with_evaluation_lengths,
)
from hf_contrast.views import pop_view_batch_index, views_for
from hf_contrast.views.image_cache import DecodedImageCache

__all__ = [
    "AlignUniformTrainer",
    "CachePlan",
    "CARETrainer",
    "ContrastiveTrainer",
    "dataloader_options",
    "drop_last",
    "LOCALTrainer",
    "NonFiniteLossError",
    "OCLTrainer",
    "plan_image_cache",
    "resolve_views_on_device",
    "serving_options",
    "SimCLRTrainer",
    "SimOTrainer",
    "SupConTrainer",
]


# ==================== trainer =========================================================================


logger = logging.get_logger(__name__)


class ContrastiveTrainer(SafeCheckpointing, HubPublishingMixin, Trainer):
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
    #: Every objective's loss is a mean over its batch: the Trainer divides it by the accumulation steps
    #: (transformers >= 5.x reads this; older releases decide the same from ``model_accepts_loss_kwargs``).
    loss_is_scaled_for_ga: ClassVar[bool] = False

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
                "`remove_unused_columns=True` does not work with a ContrastiveTrainer: the Trainer would keep only "
                "the arguments of the encoder's `forward`, dropping the columns the views are made from "
                f"({args.image_column!r} / {args.text_column!r}). Set `remove_unused_columns=False` (the "
                "ContrastiveTrainingArguments default); to drop columns, call `dataset.select_columns([...])` with "
                "those the objective reads (its `required_columns`: the image or text column, and the label column "
                "for supervised methods)."
            )
        if getattr(args, "label_smoothing_factor", 0):  # Trainer.compute_loss's smoother: the objective replaces it
            raise InputError(
                f"`label_smoothing_factor`={args.label_smoothing_factor} is not used by a ContrastiveTrainer: it "
                "smooths the cross-entropy that `Trainer.compute_loss` takes over `labels`, and the objective's loss "
                "replaces that. Set it to 0 (the default)."
            )
        if getattr(args, "neftune_noise_alpha", None) is not None:
            raise InputError(
                f"`neftune_noise_alpha`={args.neftune_noise_alpha}: NEFTune adds noise to a language model's input "
                "embeddings for instruction fine-tuning; a ContrastiveTrainer does not apply it (training stopped at "
                "its start). Leave it unset; a text method's own noise is its views (e.g. SimCSE's dropout)."
            )
        tokens = getattr(args, "include_num_input_tokens_seen", "no")
        if tokens not in ("no", False, None) and getattr(model, "main_input_name", None) == "pixel_values":
            raise InputError(
                f"`include_num_input_tokens_seen`={tokens!r} counts a text model's tokens (its `input_ids`); an image "
                "encoder has none, so the Trainer would warn at every step and log 0. Leave it 'no' (the default); "
                "the images a run saw are in its `train_samples_per_second` and `train_runtime`."
            )
        if tokens not in ("no", False, None) and getattr(args, "text_pair_column", None) is not None:
            warnings.warn(  # transformers counts the model's main input only; the pair's tokens are another key
                f"`include_num_input_tokens_seen`={tokens!r} counts the tokens of `text_column` only (the batches' "
                "`input_ids`, the model's main input): the positive pairs of `text_pair_column` (`pair_input_ids`) "
                "are encoded too but not counted: `num_input_tokens_seen` leaves out their tokens (about half of all, "
                "for pairs of similar length).",
                UserWarning,
                stacklevel=2,
            )
        if kwargs.get("compute_loss_func") is not None:
            raise InputError(
                "`compute_loss_func` is not used by a ContrastiveTrainer: the objective computes the loss from the "
                "views. Drop it, and pass `objective=` a method name or an Objective (a new pair method is one "
                "`@register_pair_loss` module, docs/training.md)."
            )
        if kwargs.get("model_init") is not None:
            raise InputError(
                "`model_init` is not supported by a ContrastiveTrainer: the objective, its views and the start-up "
                "checks are built for one model when the trainer is built, and `train()` would replace it with a new "
                "one. Pass `model=` (e.g. `model=model_init()`); for a search over settings (`hyperparameter_search` "
                "needs `model_init`), build one trainer per trial."
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
            check_default_metrics_fit(args)  # they score the whole evaluation set at once
            compute_metrics = self.objective.compute_metrics(args)
        try:
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
        except Exception as error:
            if getattr(args, "push_to_hub", False) and is_hub_unreachable(error):  # Trainer creates the repo now
                raise InputError(
                    "`push_to_hub=True` (`--push_to_hub`): the Hugging Face Hub is unreachable, so its repository "
                    f"cannot be created before training ({type(error).__name__}: {error}). Train without "
                    "`--push_to_hub` and upload the saved folder later (`trainer.push_to_hub()`, or `hf upload "
                    "<repo> <output_dir>`), or check the network (HF_ENDPOINT)."
                ) from error
            raise
        self.args: ContrastiveTrainingArguments
        follow_log_level(self.args.get_process_log_level())  # the package's loggers, as Trainer sets transformers'
        check_distributed_engine(self.args, self.accelerator, self.is_fsdp_enabled, self.is_deepspeed_enabled)
        if self.args.dataloader_pin_memory and self.args.device.type == "cpu":
            # pinned memory only speeds up copies to an accelerator; on a CPU run torch warns at every loader
            self.args.dataloader_pin_memory = False
        # Our losses are per-batch means, so the Trainer must divide them by the accumulation steps: it does when
        # the model takes no loss kwargs (set after `Trainer.__init__`, which reads the model's signature).
        self.model_accepts_loss_kwargs = False
        self.evaluator = evaluator
        check_precision(self.args)  # fp16 on a CPU: said before training
        check_launch(self.args)  # `accelerate launch --num_processes 2` without --multi_gpu: one process, said
        #: The image size this run trains at and why (:mod:`hf_contrast.training.run_setup`); None for text.
        self.image_size_choice = resolve_image_size(  # in the encoder's data config: views, evaluators, card read it
            self.model, self.args.image_size, train_dataset, self.args.image_column, stacklevel=2
        )
        check_image_size_fits(self.model, self.image_size_choice)  # a size the network cannot take: said now
        #: How ``views_on_device`` was decided (the argument, or the default for this device and modality).
        self.views_on_device_source = resolve_views_on_device(self.args, self.model, self.objective)
        self.views = views_for(self.model, self.args, self.processing_class, epoch=lambda: self.state.epoch)
        check_objective_fits(self.args, self.objective)
        check_trainer_columns(self)  # columns present and of the right kind, before the objective reads them
        check_text_length(self)  # a text cut longer than the position embeddings would stop at its batch
        # unlabelled rows where classes are learned or mixed in evaluation; a task head's classes; then the classes
        # of the objective's own classifier (known once it is set up)
        eval_classes = check_label_values(self)
        self.objective.setup(self.views, train_dataset)
        check_streamed_batches(self)  # an objective's batch sampler, which a stream cannot serve
        check_classifier_classes(self.objective, eval_classes, self.args.label_column)
        check_evaluation_fits(self.args, self.objective, self.eval_dataset)
        check_sampling_strategy(self)  # an order the objective ignores, or lengths image rows do not have
        measure_token_lengths(self)  # a text run grouped by length: the rows' token lengths, measured once
        self.objective.to(self.args.device)
        self.loss_terms = LossTermTracker(defer=self.args.nonfinite_policy == "skip")
        #: The ``nonfinite_policy`` and its state (:mod:`hf_contrast.training.callbacks`).
        self.nonfinite = NonFinitePolicy(
            self.args.nonfinite_policy, self.loss_terms, watched=lambda: (self.model, self.objective)
        )
        self.add_callback(ObjectiveGradients(self.objective))  # averaged before the non-finite check reads them
        self.add_callback(self.nonfinite)
        for callback in self.objective.callbacks():
            self.add_callback(callback)
        if data_collator is None:
            self.data_collator = self.objective.train_collator(self.views)
        self.eval_data_collator = eval_data_collator or self.objective.eval_collator(self.views)
        self._next_view_index: Tensor | int | None = None
        # Host counters of the batches whose views the ViewBuilder draws on the device (`views_on_device`): training
        # batches since the start of the run (checkpointed), evaluation batches since the start of the evaluation.
        self._train_view_batches = 0
        self._eval_view_batches = 0
        self.left_out_rows = LeftOutRows()  # rows the collators left out (`on_bad_image="skip"`), per stage
        #: The training images decoded once (:mod:`hf_contrast.views.image_cache`), built by :meth:`train`.
        self.image_cache: DecodedImageCache | None = None
        #: Why the training set is not served from the cache (``None`` when it is, or before :meth:`train`).
        self.image_cache_refusal: str | None = None
        self._cache_skipped_reported = False
        self._cache_plan: CachePlan | None = None
        self.add_callback(ModelCardCallback(self))  # fills model.model_card_data while training
        #: The ``train()`` calls that made the weights (:mod:`hf_contrast.training.callbacks`), checkpointed.
        self.run_sessions = RunSessions()
        self.add_callback(self.run_sessions)

    @property
    def skipped_steps(self) -> int:
        """Optimizer steps ``nonfinite_policy="skip"`` dropped so far (logged as ``skipped_steps``)."""
        return self.nonfinite.skipped_steps

    def check_datasets(self) -> None:
        """Fail before training, with the fix, on an empty or too small dataset or a missing column
        (:func:`~hf_contrast.training.checks.check_datasets`)."""
        check_datasets(self)

    def check_image_files(self) -> None:
        """Scan the training and evaluation sets' image files before training
        (:func:`~hf_contrast.training.checks.check_image_files`); not the training set when the decoded-image
        cache holds it (its build decoded every image and named the bad ones).

        Raises:
            BadImageError: with ``on_bad_image="raise"``, naming the bad files and the fix.
            InputError: with ``"skip"``, when a training batch that loses a bad image cannot keep its method's
                chunks or class groups whole (a larger batch is the fix).
        """
        # the decoded-image cache decodes every training image once already (and names the bad ones): no second pass
        check_image_files(
            self.args,
            None if self.image_cache is not None else self.train_dataset,
            self.eval_dataset,
            whole_rows=getattr(self.data_collator, "whole_rows", None),  # a batch that lost rows keeps whole parts
        )

    def train(self, resume_from_checkpoint: str | bool | None = None, *args: Any, **kwargs: Any) -> Any:
        """Checks and reports around ``Trainer.train``: :meth:`check_datasets`, :meth:`check_image_files`, the
        decoded-image cache (:meth:`build_image_cache`) and the run set-up before the first step; then the
        checkpoint to resume from (:meth:`~hf_contrast.training.checkpointing.SafeCheckpointing.resume_point`:
        ``True`` is the newest *complete* one, leftovers of an interrupted save are removed, a resume of another
        run is refused); with ``disable_tqdm=True`` no progress bar at all (the package's, transformers' "Writing
        model shards", the Hub's uploads). Rows the training collator left out in this call
        (``on_bad_image="skip"``; or, once, the unreadable images the cache left out) are reported as
        ``train_skipped_images`` in the returned metrics when there are any, and the readable rows left out with
        them to keep chunks or class groups whole (:mod:`hf_contrast.views.whole_rows`) as ``train_dropped_rows``.

        Raises:
            InputError: before any work, when ``metric_for_best_model`` is no metric the evaluations report
                (:func:`~hf_contrast.training.checks.check_best_metric`), a dataset is too small or lacks a column."""
        check_best_metric(self)  # the Trainer would find out at the first evaluation
        self.check_datasets()
        self.build_image_cache()  # before the scan: a cached training set is not decoded twice at start-up
        self.check_image_files()
        self.run_setup = log_run_setup(self)  # the defaults that shape the result, said once (and in the card)
        self.left_out_rows.start("train")
        resume = self.resume_point(resume_from_checkpoint)
        with progress_bars_disabled(self.args.disable_tqdm):
            output = super().train(resume, *args, **kwargs)
        skipped, dropped = self.left_out_rows.report("train", "training", self.args, self.accelerator)
        if skipped:
            output.metrics["train_skipped_images"] = skipped
        if dropped:
            output.metrics["train_dropped_rows"] = dropped
        cached_out = len(self.image_cache.skipped) if self.image_cache is not None else 0  # out of every batch
        if cached_out and not self._cache_skipped_reported:
            output.metrics["train_skipped_images"] = skipped + cached_out
            self._cache_skipped_reported = True  # left out once, when the cache was built
        get_model_card_data(self.model).note_left_out_rows(skipped + cached_out, dropped)  # said in the card
        output = self.nonfinite.train_output(output)  # `nonfinite_policy="skip"`: the mean over the kept steps
        global_batch = self.args.train_batch_size * self.args.gradient_accumulation_steps * self.args.world_size
        return self.run_sessions.whole_run(  # a resumed run: all of it
            output, self.state.log_history, global_batch, self.nonfinite.skipped_this_call, self.accelerator
        )

    def build_image_cache(self) -> None:
        """Decode and resize the training images once into a ``uint8`` cache (:mod:`hf_contrast.views.image_cache`)
        when the run makes its views on the device and the images fit in ``args.image_cache_max_gb``: on the
        training device when they fit there, else in host memory. Otherwise say why (once), and where the
        images do not fit, let persistent DataLoader workers decode them. Built once per trainer."""
        if self.image_cache is not None or self.image_cache_refusal is not None:
            return
        plan = self._cache_plan = plan_image_cache(
            self.args, self.data_collator, self.train_dataset, lambda: self.views.data_config()["input_size"]
        )
        if plan.refusal is not None:
            self.image_cache_refusal = plan.refusal
            if plan.log and self.is_world_process_zero():
                workers = serving_options(self.args, None, plan).get("dataloader_num_workers")
                extra = (
                    f"; {workers} persistent DataLoader workers decode them, 4 batches ahead each" if workers else ""
                )
                logger.info(f"Training images are decoded per batch: {plan.refusal}{extra}.")
            return
        start = time.perf_counter()
        self.image_cache = DecodedImageCache.build(
            self.train_dataset,
            self.data_collator,
            plan.device,
            num_workers=self.args.dataloader_num_workers,
            progress=not self.args.disable_tqdm and self.is_world_process_zero(),
            pin_memory=plan.pin_memory,
        )
        if self.is_world_process_zero():
            logger.info(f"Training images {self.image_cache.describe()} ({time.perf_counter() - start:.1f} s).")

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
        it by the number of accumulation steps. In training, with ``args.gradient_cache_size`` the encoder runs
        in mini-batches whose backward the Trainer's backward of this loss runs
        (:class:`~hf_contrast.training.callbacks.GradientCache`); under ``nonfinite_policy="skip"`` a non-finite
        loss is returned as 0 (the step itself is dropped,
        :meth:`~hf_contrast.training.callbacks.NonFinitePolicy.micro_batch_loss`).

        Raises:
            ValueError: if the objective returns no ``"loss"`` entry.
        """
        view_index = pop_view_batch_index(inputs)
        self.left_out_rows.count(inputs, "train" if model.training else "eval")
        if view_index is not None and model.training:  # the collator may already be batches ahead
            self._next_view_index = view_index + 1  # a tensor: read at checkpoints only (no host sync)
        self._start_view_batch(training=model.training)
        cache = None
        if model.training and self.args.gradient_cache_size is not None:  # the encoder in mini-batches (GradCache)
            cache = self.views.gradient_cache = GradientCache(self.args.gradient_cache_size)
        try:
            with finite_input_checks(not model.training):  # a non-finite training loss is `nonfinite_policy`'s
                terms = dict(self.objective(model, inputs, self.views))
        finally:
            self.views.gradient_cache = None
        if "loss" not in terms:
            raise InputError(
                f"{type(self.objective).__name__} must return its total under 'loss', got {sorted(terms)}."
            )
        skipped = terms.pop("skipped", None)
        loss = terms["loss"]
        if model.training:
            if skipped is not None:
                self.loss_terms.skipped_batches += 1
            else:
                self.loss_terms.record(terms, step=self.state.global_step + 1)
            if cache is not None:
                cache.attach()  # the encoder's mini-batches back-propagate inside the Trainer's backward of `loss`
            # the Trainer divides the loss by it (set by its training loop; 1 for a call outside it)
            accumulation = getattr(self, "current_gradient_accumulation_steps", 1)
            loss = self.nonfinite.micro_batch_loss(loss, accumulation)
            self.run_sessions.add_loss(summed_loss(loss, accumulation))  # the whole-run mean of a resumed run
        return (loss, terms) if return_outputs else loss

    def _start_view_batch(self, training: bool) -> None:
        """Tell the views which batch comes next (a host counter: no device sync); ``views_on_device`` draws its
        views from that batch's generator."""
        if training:
            self.views.start_batch(self._train_view_batches, training=True)
            self._train_view_batches += 1
        else:
            self.views.start_batch(self._eval_view_batches, training=False)
            self._eval_view_batches += 1

    def check_finite(self) -> None:
        """Raise :class:`NonFiniteLossError` naming the first bad step and the non-finite terms, if any loss
        since the last check was NaN/inf (``nonfinite_policy="raise"``). Called at every log, before every
        checkpoint and at the end of training, where the Trainer syncs anyway."""
        self.nonfinite.check(self.state.global_step)

    # ---- logging -----------------------------------------------------------------------------------

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """Check the losses are finite, then add the running mean of each term (``loss_<term>``) and the
        objective's :meth:`~hf_contrast.objectives.Objective.log_statistics` (e.g. ``negative_cos_below_zero``).

        Under ``nonfinite_policy="skip"`` the logged ``loss`` is the mean over the steps that were not skipped
        (NaN when every step since the last log was): a dropped step is never logged as a loss of 0.
        """
        if "loss" in logs or "train_loss" in logs:  # the end of training checks too
            self.check_finite()
        self.nonfinite.kept_step_means(logs, self.state.global_step, self.args, self.accelerator)
        if "loss" in logs:
            logs = {
                **logs,
                **self.loss_terms.drain(),
                **self.objective.log_statistics(),
                **self.nonfinite.loss_logged(self.state.global_step),
            }
        super().log(logs, start_time)

    # ---- objective parameters ------------------------------------------------------------------------

    def objective_parameters(self) -> list[nn.Parameter]:
        """Trainable parameters owned by the objective (not by the encoder)."""
        return [p for p in self.objective.parameters() if p.requires_grad]

    def create_optimizer(self, *args: Any, **kwargs: Any) -> torch.optim.Optimizer:
        """``Trainer.create_optimizer`` plus groups for the objective's trainable parameters, which it does not see
        (:func:`~hf_contrast.training.callbacks.add_objective_parameter_groups`: matrices get
        ``args.weight_decay``; a user-given optimizer gets nothing, with a warning). The arguments go to
        ``Trainer.create_optimizer`` as given (``model=`` since transformers 5.x, none before)."""
        created = self.optimizer is None
        optimizer = super().create_optimizer(*args, **kwargs)
        add_objective_parameter_groups(
            optimizer, self.objective, self.objective_parameters(), self.args.weight_decay, created
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
        cache = self.image_cache
        dataset = self.train_dataset
        streaming = isinstance(dataset, IterableDataset)
        batch_sampler = None
        if not streaming:  # the sampler reads the labels of the rows the cache kept (all of them, or fewer)
            labelled = dataset if cache is None or len(cache.kept) == len(dataset) else dataset.select(cache.kept)
            batch_sampler = self.objective.train_batch_sampler(labelled, self.views)
        chunked = self.objective.batch_multiple > 1
        with self._serving(cache):
            if batch_sampler is None and not (streaming and chunked):
                if chunked:
                    with drop_last(self.args):
                        return super().get_train_dataloader()
                return super().get_train_dataloader()
            if self.args.auto_find_batch_size:  # the Trainer would shrink only its own loader's batches
                raise InputError(
                    f"`auto_find_batch_size=True` cannot resize the batches of {type(self.objective).__name__} "
                    f"({'its batch sampler' if batch_sampler is not None else 'whole chunks of a streaming dataset'})"
                    "; set `auto_find_batch_size=False` and choose `per_device_train_batch_size`."
                )
            batching: dict[str, Any] = (
                {"batch_sampler": batch_sampler}
                if batch_sampler is not None
                else {"batch_size": self.args.train_batch_size, "drop_last": True}
            )
            loader = DataLoader(
                self.train_dataset, **batching, collate_fn=self.data_collator, **dataloader_options(self.args)
            )
            return self.accelerator.prepare(loader)

    @contextlib.contextmanager
    def _serving(self, cache: DecodedImageCache | None) -> Iterator[None]:
        """Inside the block the training loader is built over the cache's row numbers with its one-index-op
        collate (no workers: the batch is one gather, on the cache's device), or, for images that did not fit in
        the cache, with persistent prefetching workers (:func:`~hf_contrast.training.trainer.serving_options`). Without
        the cache, the collator checks each batch's class labels where they could not be checked before training
        (:func:`~hf_contrast.training.checks.batch_class_check`: a streaming training set)."""
        overrides = serving_options(self.args, cache, self._cache_plan)
        saved = {name: getattr(self.args, name) for name in overrides}
        dataset, collator = self.train_dataset, self.data_collator
        for name, value in overrides.items():
            setattr(self.args, name, value)
        if cache is not None:  # its labels are a datasets.Dataset's, checked when the trainer was built
            self.train_dataset, self.data_collator = cache.rows, cache.collate
        else:  # labels not read before training (a stream): each batch's checked as they would have been
            self.data_collator = batch_class_check(self, collator)
        try:
            yield
        finally:
            for name, value in saved.items():
                setattr(self.args, name, value)
            self.train_dataset, self.data_collator = dataset, collator

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
        """The Trainer's evaluation loader with the objective's evaluation collator. A dataset given here (by
        ``evaluate(eval_dataset=...)``) that is not one of the trainer's own evaluation sets is checked first as
        those were when the trainer was built (:func:`~hf_contrast.training.checks.check_evaluation_set`), and on a
        text run grouped by length gets its rows' token lengths as they did
        (:func:`~hf_contrast.training.run_setup.with_evaluation_lengths`)."""
        check_evaluation_set(self, eval_dataset, "eval_dataset", "evaluate")
        eval_dataset = with_evaluation_lengths(self, eval_dataset, "eval_dataset")  # grouped by length: measured
        with self._eval_collation():
            return super().get_eval_dataloader(eval_dataset)

    def get_test_dataloader(self, test_dataset: Any) -> DataLoader:
        """As :meth:`get_eval_dataloader`, for ``predict`` (its ``test_dataset`` checked the same way)."""
        check_evaluation_set(self, test_dataset, "test_dataset", "predict")
        test_dataset = with_evaluation_lengths(self, test_dataset, "test_dataset")
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
        self.left_out_rows.count(inputs, "eval")
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
        same views), then the rows the evaluation collator left out (``on_bad_image="skip"``) as
        ``<prefix>_skipped_images`` / ``<prefix>_dropped_rows`` when there are any and the ``evaluator``'s metrics
        as ``<prefix>_<metric>``. With ``disable_tqdm=True`` no progress bar (``evaluate`` and ``predict``, the
        metrics' and an evaluator's encoding included)."""
        self._eval_view_batches = 0
        self.left_out_rows.start("eval")
        with progress_bars_disabled(self.args.disable_tqdm):
            output = super().evaluation_loop(dataloader, description, *args, **kwargs)
            prefix = kwargs.get("metric_key_prefix", args[2] if len(args) > 2 else "eval")
            what = f"{description.lower()} ({prefix})"
            skipped, dropped = self.left_out_rows.report("eval", what, self.args, self.accelerator)
            if skipped:
                output.metrics[f"{prefix}_skipped_images"] = skipped
            if dropped:
                output.metrics[f"{prefix}_dropped_rows"] = dropped
            if self.evaluator is not None and description == "Evaluation":
                for key, value in self.evaluator(self.model).items():
                    output.metrics[f"{prefix}_{key}"] = value
        return output

    # ---- checkpoints (written by SafeCheckpointing) -------------------------------------------------

    def run_settings(self) -> dict[str, dict[str, Any]]:
        """What a resume must match, saved in every checkpoint: the method and its hyperparameters, the encoder's
        architecture, the weight-shaping training arguments (:mod:`~hf_contrast.training.checkpointing`)."""
        settings = run_settings(self.objective, self.accelerator.unwrap_model(self.model), self.args)
        if self.image_size_choice is not None:  # the size trained at, however it was chosen (given or not)
            settings["training"]["image_size"] = list(self.image_size_choice.size)
        return settings

    def contrastive_state_dict(self) -> dict[str, Any]:
        """Training state outside the model and optimizer, saved in every checkpoint: the objective's
        ``state_dict`` (trainable parameters, MoCo key encoder and queue, …), the index of the next batch
        of the training collator's random views and the number of training batches whose views were made on the
        device (``views_on_device``), so resumed views match; and the run's sessions so far (``run_sessions``), so
        a resumed run reports over the whole run."""
        state: dict[str, Any] = {
            "objective": self.objective.state_dict(),
            "device_views": {"next_batch": torch.tensor(self._train_view_batches)},
            "run_sessions": self.run_sessions.state_dict(),
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
        if "run_sessions" in state:  # a checkpoint of an earlier version: this run's results start at the resume
            self.run_sessions.load_state_dict(state["run_sessions"])
        if "collator" in state and hasattr(self.data_collator, "next_index"):
            self._next_view_index = int(state["collator"]["next_index"])
            self.data_collator.next_index = self._next_view_index

    def save_model(
        self, output_dir: str | None = None, _internal_call: bool = False, *, allow_nonfinite: bool = False
    ) -> None:
        """:meth:`~hf_contrast.training.checkpointing.SafeCheckpointing.save_model_safely` (NaN/inf weights refused,
        ``contrastive_state.pt`` and ``run_settings.json`` in every checkpoint) after :meth:`check_finite` (a
        non-finite loss is named by its step and terms) and a check of the objective's own parameters and buffers
        (its state is in every checkpoint). With ``args.disable_tqdm`` no "Writing model shards" bar.

        Raises:
            NonFiniteLossError: If a loss since the last check, a weight of the model or of the objective is
                NaN/inf, unless ``allow_nonfinite=True``; nothing is written then.
        """
        if not allow_nonfinite:
            self.check_finite()
            bad = first_nonfinite_tensor(self.objective)
            if bad is not None:
                raise NonFiniteLossError(
                    f"Refusing to save at step {self.state.global_step}: `{bad}` of {type(self.objective).__name__} "
                    "holds NaN/inf. Resume from the last checkpoint with a lower learning rate or gradient clipping "
                    "(`max_grad_norm`), or pass `allow_nonfinite=True` to write it anyway."
                )
        with progress_bars_disabled(self.args.disable_tqdm):  # transformers' "Writing model shards"
            self.save_model_safely(output_dir, _internal_call, allow_nonfinite=allow_nonfinite)


# ==================== trainers ========================================================================


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


# ==================== dataloaders =====================================================================


@contextlib.contextmanager
def drop_last(args: Any) -> Iterator[None]:
    """``args.dataloader_drop_last = True`` inside the block (an epoch's ragged last batch dropped), restored on
    exit."""
    previous = args.dataloader_drop_last
    args.dataloader_drop_last = True
    try:
        yield
    finally:
        args.dataloader_drop_last = previous


def dataloader_options(args: Any) -> dict[str, Any]:
    """The options the Trainer gives its training ``DataLoader``, derived the way it derives them:
    each ``DataLoader`` argument ``x`` that ``TrainingArguments`` has as ``dataloader_x``
    (``num_workers``, ``pin_memory``, ``persistent_workers``, ``prefetch_factor``, and
    ``multiprocessing_context`` / ``in_order`` where the installed versions have them), and
    ``worker_init_fn`` seeding each worker with transformers' ``seed_worker``. Batching
    (``batch_size``, ``drop_last``, samplers) is not included."""
    accepted = inspect.signature(DataLoader).parameters
    options = {name: getattr(args, f"dataloader_{name}") for name in accepted if hasattr(args, f"dataloader_{name}")}
    options.pop("drop_last", None)
    options["worker_init_fn"] = partial(seed_worker, num_workers=args.dataloader_num_workers, rank=args.process_index)
    return options


# ---- views on the device and the decoded-image cache ----------------------------------------------------------


def resolve_views_on_device(args: Any, model: Any, objective: Any) -> str:
    """Decide ``args.views_on_device`` when it is ``None`` (in place) and say how it was decided.

    The default is True for image views on an accelerator (the views are a few batched ops there, against a
    per-sample pipeline on the host that bounds the step) and False on a CPU and for views that cannot be made on
    the device (text, LOCAL's pairs).

    Returns:
        ``"argument"`` when the user set it, else ``"default for <modality> views on <device type>"``.
    """
    from ..views.for_model import input_modality_of

    if args.views_on_device is not None:
        return "argument"
    modality = input_modality_of(model)
    paired = bool(getattr(objective, "paired_inputs", False))
    args.views_on_device = args.device.type != "cpu" and modality == "image" and not paired
    what = "LOCAL's paired" if paired else modality
    return f"default for {what} views on {args.device.type}"


@dataclass(frozen=True)
class CachePlan:
    """Where the decoded-image cache goes (``device``, ``pin_memory``), or why there is none (``refusal``; ``log``:
    whether the refusal is worth a line in the log: the user asked for device views)."""

    refusal: str | None = None
    log: bool = False
    device: Any = None
    pin_memory: bool = False
    too_large: bool = False


def plan_image_cache(args: Any, collator: Any, dataset: Any, image_shape: Callable[[], Any]) -> CachePlan:
    """Whether the training set is served from a :class:`~hf_contrast.views.image_cache.DecodedImageCache`, and
    where it lives (``image_shape()``: ``(C, H, W)`` of the decoded images): the training device when its free
    memory holds the cache twice over (the rest is the model's), else the host (pinned when batches go to an
    accelerator)."""
    import torch

    from ..views.image_cache import cache_bytes, cache_refusal

    refusal = cache_refusal(collator, dataset, bool(args.views_on_device))
    if refusal is not None:
        return CachePlan(refusal=refusal, log=bool(args.views_on_device))
    if not args.image_cache_max_gb:
        return CachePlan(refusal="`image_cache_max_gb=0` turns the decoded-image cache off", log=True)
    size = cache_bytes(len(dataset), image_shape())
    limit = args.image_cache_max_gb * 2**30
    if size > limit:
        return CachePlan(
            refusal=(
                f"the decoded training images would take {size / 2**30:.1f} GiB, above `image_cache_max_gb`="
                f"{args.image_cache_max_gb:g}; raise it to cache them"
            ),
            log=True,
            too_large=True,
        )
    device = args.device
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        if 2 * size > free:
            return CachePlan(device=torch.device("cpu"), pin_memory=bool(args.dataloader_pin_memory))
    return CachePlan(device=device)


def serving_options(args: Any, cache: Any, plan: CachePlan | None) -> dict[str, Any]:
    """``args`` fields to override while the training loader is built: for a cache, no workers (a batch is one
    gather) and pinned memory only for a host cache feeding an accelerator; for images too large for the cache,
    with views on the device and no workers asked for, persistent workers prefetching 4 batches each."""
    import os

    if cache is not None:
        pin = cache.device.type == "cpu" and args.device.type != "cpu" and bool(args.dataloader_pin_memory)
        return {"dataloader_num_workers": 0, "dataloader_pin_memory": pin, "dataloader_persistent_workers": False,
                "dataloader_prefetch_factor": None}  # fmt: skip
    if plan is not None and plan.too_large and args.dataloader_num_workers == 0:
        workers = min(4, os.cpu_count() or 1)
        return {"dataloader_num_workers": workers, "dataloader_persistent_workers": True,
                "dataloader_prefetch_factor": 4}  # fmt: skip
    return {}
