"""``ContrastiveTrainer``: ``transformers.Trainer`` for losses over augmented views.

A method trainer is a loss plus a way to build views from a batch. Subclasses override:

- :meth:`ContrastiveTrainer.build_loss` — the loss ``nn.Module`` from the arguments;
- :meth:`ContrastiveTrainer.build_data_collator` — how the CPU workers make views from rows;
- :meth:`ContrastiveTrainer.compute_contrastive_loss` — forward the views, call the loss; it
  returns a scalar or a dict of named, already-weighted terms with their total under ``"loss"``.

Everything else is shared: term logging, skipping batches without a positive pair, loss-owned
parameters in the optimizer (synchronised across processes and checkpointed), embedding metrics
instead of logits metrics at evaluation, and publishing to the Hub.

Loss-owned parameters (e.g. a learnable temperature, LOCAL's classifier) live in ``trainer.loss``,
*not* inside the model: the saved encoder stays a clean ``ContrastiveEncoder``. They get their own
optimizer parameter groups, their gradients are averaged over processes before each optimizer
step (the model's are, by DDP), and their state is stored in ``contrastive_state.pt`` in every
checkpoint and restored on resume.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, ClassVar

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.utils.data import DataLoader, Sampler
from transformers import Trainer, TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, seed_worker

from .. import distributed
from .arguments import ContrastiveTrainingArguments
from .collators import ImageViewCollator, TextViewCollator, pad_and_concat, raw_image_transform
from .evaluation import EmbeddingEvaluationMixin
from .publishing import HubPublishingMixin

__all__ = ["ContrastiveTrainer", "CONTRASTIVE_STATE_NAME"]

CONTRASTIVE_STATE_NAME = "contrastive_state.pt"
_TEXT_KEYS = ("input_ids", "attention_mask", "token_type_ids")


def _split_output(output: Mapping[str, Any], sizes: list[int]) -> list[dict[str, Any]]:
    """Split every batched tensor of a model output (and tuples of them) back into views."""
    total = sum(sizes)
    parts: list[dict[str, Any]] = [{} for _ in sizes]
    for key, value in output.items():
        if isinstance(value, Tensor) and value.ndim > 0 and value.shape[0] == total:
            for part, chunk in zip(parts, value.split(sizes)):
                part[key] = chunk
        elif isinstance(value, (tuple, list)) and value and all(
            isinstance(v, Tensor) and v.ndim > 0 and v.shape[0] == total for v in value
        ):
            chunks = [v.split(sizes) for v in value]
            for i, part in enumerate(parts):
                part[key] = tuple(c[i] for c in chunks)
    return parts


class _ResetLossGradients(TrainerCallback):
    """Zero the loss-owned gradients after every optimizer step (``Trainer`` only zeroes the model's)."""

    def __init__(self, loss: nn.Module) -> None:
        self.loss = loss

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.loss.zero_grad(set_to_none=True)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.loss.zero_grad(set_to_none=True)


class ContrastiveTrainer(EmbeddingEvaluationMixin, HubPublishingMixin, Trainer):
    """``Trainer`` for contrastive objectives on a ``ContrastiveEncoder``.

    The default behaviour is a two-view pair objective: ``loss(z1, z2)`` on the projections of
    two augmented views of each sample (SimCLR with ``loss=InfoNCELoss()``). Method trainers
    (``SimCLRTrainer``, ``CARETrainer``, …) build their loss from the arguments.

    Args:
        model: A ``ContrastiveEncoder`` (image: ``config.backbone_type == "timm"``; text: ``"text"``).
        args: :class:`ContrastiveTrainingArguments`.
        data_collator: Training collator; default :meth:`build_data_collator` (random views).
        train_dataset: A ``datasets.Dataset`` with an image or text column (and labels if needed).
        eval_dataset: Dataset (or dict of them) for :meth:`evaluate`.
        processing_class: Tokenizer for text models; default ``model.tokenizer``.
        loss: The loss module; default :meth:`build_loss`. Any parameters it owns are trained.
        eval_data_collator: Collator used by :meth:`evaluate`; default
            :meth:`build_eval_data_collator` (a deterministic view + two augmented views).
        **kwargs: Any other ``Trainer`` argument (``callbacks``, ``optimizers``, ``model_init``…).

    Raises:
        ValueError: if ``args`` is not a :class:`ContrastiveTrainingArguments`.
    """

    method: ClassVar[str] = "contrastive"
    #: Temperature used when ``args.temperature`` is ``None``.
    default_temperature: ClassVar[float] = 0.5
    #: Augmented views per sample when ``args.n_views`` is ``None``.
    default_n_views: ClassVar[int] = 2
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
        loss: nn.Module | None = None,
        eval_data_collator: Callable[[list[dict[str, Any]]], dict[str, Any]] | None = None,
        **kwargs: Any,
    ) -> None:
        if args is None:
            args = ContrastiveTrainingArguments(output_dir="tmp_trainer")
        if not isinstance(args, ContrastiveTrainingArguments):
            raise ValueError(
                f"`args` must be a ContrastiveTrainingArguments (it holds the method's hyperparameters), got "
                f"{type(args).__name__}; build it with the same fields, e.g. ContrastiveTrainingArguments(output_dir=...)."
            )
        if processing_class is None and model is not None:
            processing_class = getattr(model, "tokenizer", None)
        super().__init__(
            model=model,
            args=args,
            data_collator=data_collator,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            **kwargs,
        )
        self.args: ContrastiveTrainingArguments
        # The encoder takes no loss kwargs: the Trainer must divide our per-batch mean by the number
        # of accumulation steps (and must not count label tokens). Set after `Trainer.__init__`,
        # which overwrites it from the model's forward signature.
        self.model_accepts_loss_kwargs = False
        self.loss: nn.Module = (loss if loss is not None else self.build_loss()).to(self.args.device)
        self.add_callback(_ResetLossGradients(self.loss))
        if data_collator is None:
            self.data_collator = self.build_data_collator()
        self.eval_data_collator = eval_data_collator
        self.skipped_batches = 0
        self._term_sums: dict[str, Tensor] = {}
        self._term_counts: dict[str, int] = {}
        self._skipped_since_log = 0
        self._skip_current = False
        self._next_view_index: int | None = None

    # ---- what a method defines ---------------------------------------------------------------

    def build_loss(self) -> nn.Module:
        """The loss module built from ``self.args``. The base trainer has no default loss.

        Raises:
            ValueError: always; pass ``loss=`` or use a method trainer.
        """
        raise ValueError(
            f"{type(self).__name__} needs a loss: pass `loss=` (e.g. `InfoNCELoss()`) or use a method trainer "
            "such as SimCLRTrainer or CARETrainer."
        )

    def build_data_collator(self) -> Callable[[list[dict[str, Any]]], dict[str, Any]]:
        """The training collator: ``num_views`` random views per image, or tokenised text."""
        if self.is_text:
            return self._text_collator()
        return ImageViewCollator(
            transform=self.view_transform(),
            n_views=self.num_views,
            image_column=self.args.image_column,
            label_column=self.args.label_column,
            seed=self.views_seed,
        )

    def build_eval_data_collator(self) -> Callable[[list[dict[str, Any]]], dict[str, Any]]:
        """The evaluation collator: a deterministic view (``pixel_values``) and two random views."""
        if self.is_text:
            return self._text_collator()
        from ..augment.image import eval_transform_from_data_config

        return ImageViewCollator(
            transform=self.view_transform(),
            n_views=2,
            image_column=self.args.image_column,
            label_column=self.args.label_column,
            eval_transform=eval_transform_from_data_config(self.image_data_config()),
            seed=self.views_seed,  # the same eval views at every evaluation
        )

    def compute_contrastive_loss(self, model: nn.Module, inputs: dict[str, Any]) -> Tensor | Mapping[str, Tensor]:
        """Forward the views of one batch and return the loss (a scalar or a dict of terms).

        The base version is a pair objective: ``self.loss(z1, z2)`` on :meth:`positive_pair_views`.
        """
        z1, z2 = self.projections(model, self.positive_pair_views(inputs))
        return self.loss(z1, z2)

    # ---- views ---------------------------------------------------------------------------------

    @property
    def is_text(self) -> bool:
        """Whether the encoder is a text model (``config.backbone_type == "text"``)."""
        config = getattr(self.model, "config", None)
        return getattr(config, "backbone_type", "timm") == "text"

    @property
    def num_views(self) -> int:
        """Augmented views per sample: ``args.n_views`` or the method's default."""
        return self.args.n_views if self.args.n_views is not None else self.default_n_views

    @property
    def temperature(self) -> float:
        """``args.temperature`` or the method's default."""
        return self.args.temperature if self.args.temperature is not None else self.default_temperature

    def image_data_config(self) -> dict[str, Any]:
        """The encoder's timm data config, with ``input_size`` overridden by ``args.image_size``."""
        data_config = getattr(self.model, "data_config", None)
        if not data_config:
            raise ValueError(
                "The model has no `data_config` (input_size, mean, std) to build image views from; use a "
                "ContrastiveEncoder with a timm backbone or pass `data_collator=`."
            )
        data_config = dict(data_config)
        if self.args.image_size is not None:
            channels = data_config["input_size"][0]
            data_config["input_size"] = (channels, self.args.image_size, self.args.image_size)
        return data_config

    @property
    def views_seed(self) -> int:
        """Seed of the collators' random views: ``args.data_seed`` or ``args.seed``."""
        return self.args.data_seed if self.args.data_seed is not None else self.args.seed

    def view_transform(self) -> Callable[[Any], Tensor]:
        """The per-sample random view transform: SimCLR's augmentation sized from the data config."""
        from ..augment.image import simclr_transform_from_data_config

        return simclr_transform_from_data_config(self.image_data_config())

    def raw_transform(self) -> Callable[[Any], Tensor]:
        """Resize to the view size, un-normalised ``uint8``: input of on-device chunked augmentation."""
        channels, height, width = self.image_data_config()["input_size"]
        return raw_image_transform((height, width), n_channels=channels)

    def _text_collator(self) -> TextViewCollator:
        if self.processing_class is None:
            raise ValueError(
                "A text encoder needs a tokenizer: pass `processing_class=tokenizer` (or build the encoder with one)."
            )
        return TextViewCollator(
            tokenizer=self.processing_class,
            text_column=self.args.text_column,
            text_pair_column=self.args.text_pair_column,
            label_column=self.args.label_column,
            max_length=self.args.max_length,
        )

    def view_inputs(self, inputs: Mapping[str, Any], name: str) -> dict[str, Tensor]:
        """The model inputs of one named view of a collated batch.

        Image view ``name`` reads ``pixel_values`` (``name=""``) or ``pixel_values_{name}``; text
        view ``name`` reads ``input_ids`` … (``name=""``) or ``{name}_input_ids`` ….

        Raises:
            ValueError: if the batch lacks the view (names the missing key and the keys present).
        """
        if self.is_text:
            prefix = f"{name}_" if name else ""
            view = {key: inputs[prefix + key] for key in _TEXT_KEYS if prefix + key in inputs}
            missing = f"{prefix}input_ids"
        else:
            key = f"pixel_values_{name}" if name else "pixel_values"
            view = {"pixel_values": inputs[key]} if key in inputs else {}
            missing = key
        if not view:
            raise ValueError(
                f"The batch has no `{missing}` (keys: {sorted(inputs)}): the data collator does not build the "
                f"views {type(self).__name__} needs."
            )
        return view

    def augmented_views(self, inputs: Mapping[str, Any], n_views: int) -> list[dict[str, Tensor]]:
        """``n_views`` random views of each sample: images ``pixel_values_1..n``; text the sentence
        (and its pair column, when the collator made one, as the second view) — a repeated sentence
        gets fresh dropout at each occurrence (SimCSE)."""
        if not self.is_text:
            return [self.view_inputs(inputs, str(v + 1)) for v in range(n_views)]
        names = [""] * n_views
        if n_views >= 2 and "pair_input_ids" in inputs:
            names[1] = "pair"
        return [self.view_inputs(inputs, name) for name in names]

    def positive_pair_views(self, inputs: Mapping[str, Any]) -> list[dict[str, Tensor]]:
        """The two views of each sample that form a positive pair."""
        return self.augmented_views(inputs, 2)

    def forward_views(
        self, model: nn.Module, views: Sequence[Mapping[str, Tensor]], **forward_kwargs: Any
    ) -> list[dict[str, Any]]:
        """Encode several views in one forward pass and split the outputs back per view.

        Text views are right-padded to a common length (padding changes neither mean nor CLS
        pooling). With batch-statistics layers (BatchNorm) the statistics are those of all views
        together, as in SimCLR.

        Returns:
            One dict per view with the model output's batched fields (``projections``,
            ``embeddings``, ``logits``, ``feature_maps``…), each of the view's batch size.
        """
        sizes = [next(iter(v.values())).shape[0] for v in views]
        if len(views) == 1:
            merged = dict(views[0])
        elif self.is_text:
            pad_id = getattr(self.processing_class, "pad_token_id", None) or 0
            merged = {}
            for key in views[0]:
                merged[key] = pad_and_concat([v[key] for v in views], pad_value=pad_id if key == "input_ids" else 0)
        else:
            merged = {key: torch.cat([v[key] for v in views]) for key in views[0]}
        output = model(**merged, **forward_kwargs)
        return _split_output(output, sizes)

    def projections(self, model: nn.Module, views: Sequence[Mapping[str, Tensor]]) -> list[Tensor]:
        """The ``projections`` of each view (what the losses use), one forward pass."""
        return [out["projections"] for out in self.forward_views(model, views)]

    # ---- supervised helpers ----------------------------------------------------------------------

    def require_labels(self, inputs: Mapping[str, Any]) -> Tensor:
        """The batch's ``labels``. Raises ValueError naming ``label_column`` when absent."""
        if "labels" not in inputs:
            raise ValueError(
                f"{type(self).__name__} needs class labels: the dataset has no `label_column`="
                f"{self.args.label_column!r} column (batch keys: {sorted(inputs)})."
            )
        return inputs["labels"]

    def has_positive_pair(self, labels: Tensor) -> bool:
        """Whether some label occurs twice (over all processes when ``gather_distributed``).

        Every process gets the same answer, so a skipped step is skipped everywhere.
        """
        if self.args.gather_distributed and distributed.world_size() > 1:
            labels = distributed.gather(labels)
        return bool(torch.unique(labels).numel() < labels.numel())

    def skip_batch(self, reference: Tensor, labels: Tensor) -> Tensor:
        """A zero loss connected to ``reference`` (so DDP sees every parameter), with a warning.

        Used when a supervised batch has no positive pair: the loss is undefined there and a
        long run must not crash on one unlucky batch.
        """
        self.skipped_batches += 1
        self._skipped_since_log += 1
        warnings.warn(
            f"{type(self).__name__}: skipped a batch with no positive pair ({labels.numel()} samples, all of "
            "different classes); use larger batches or two views per sample (`n_views=2`). Training continues; "
            "the count is logged as `skipped_batches`.",
            RuntimeWarning,
            stacklevel=2,
        )
        self._skip_current = True
        return reference.sum() * 0.0

    # ---- Trainer overrides -----------------------------------------------------------------------

    def compute_loss(
        self,
        model: nn.Module,
        inputs: dict[str, Any],
        return_outputs: bool = False,
        num_items_in_batch: Tensor | int | None = None,
    ) -> Tensor | tuple[Tensor, dict[str, Tensor]]:
        """Total loss of :meth:`compute_contrastive_loss`; its named terms are recorded for logging.

        ``num_items_in_batch`` is ignored: every loss here is a mean over its batch, and the
        Trainer divides it by the number of accumulation steps (``model_accepts_loss_kwargs`` is
        ``False``).

        Raises:
            ValueError: if the loss returns a dict without a ``"loss"`` entry.
        """
        self._skip_current = False
        view_index = inputs.pop("view_batch_index", None)
        if view_index is not None and model.training:  # the collator may already be batches ahead
            self._next_view_index = int(view_index) + 1
        result = self.compute_contrastive_loss(model, inputs)
        if isinstance(result, Mapping):
            if "loss" not in result:
                raise ValueError(
                    f"A loss returning a dict must put the total under 'loss', got keys {sorted(result)}."
                )
            terms = dict(result)
        else:
            terms = {"loss": result}
        if model.training and not self._skip_current:
            self._record_terms(terms)
        loss = terms["loss"]
        return (loss, terms) if return_outputs else loss

    def _record_terms(self, terms: Mapping[str, Tensor]) -> None:
        for name, value in terms.items():
            if name == "loss" or not isinstance(value, Tensor):
                continue
            value = value.detach().float()
            self._term_sums[name] = self._term_sums[name] + value if name in self._term_sums else value
            self._term_counts[name] = self._term_counts.get(name, 0) + 1

    def _drain_terms(self) -> dict[str, float]:
        """Mean of each recorded term since the last log (over all processes), then reset."""
        local = {name: (float(total), self._term_counts[name]) for name, total in self._term_sums.items()}
        skipped = self._skipped_since_log
        self._term_sums, self._term_counts, self._skipped_since_log = {}, {}, 0
        if distributed.world_size() > 1:  # `log` runs on every process at the same steps
            gathered: list[Any] = [None] * distributed.world_size()
            dist.all_gather_object(gathered, (local, skipped))
            merged: dict[str, tuple[float, int]] = {}
            skipped = 0
            for terms, n_skipped in gathered:
                skipped += n_skipped
                for name, (total, count) in terms.items():
                    old_total, old_count = merged.get(name, (0.0, 0))
                    merged[name] = (old_total + total, old_count + count)
            local = merged
        logs = {f"loss_{name}": total / count for name, (total, count) in local.items() if count > 0}
        if skipped:
            logs["skipped_batches"] = skipped
        return logs

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """Add the running mean of each loss term (``loss_<term>``) to the training logs."""
        if "loss" in logs:
            logs = {**logs, **self._drain_terms()}
        super().log(logs, start_time)

    def training_step(
        self, model: nn.Module, inputs: dict[str, Any], num_items_in_batch: Tensor | int | None = None
    ) -> Tensor:
        """``Trainer.training_step``, then average the loss-owned gradients over processes."""
        loss = super().training_step(model, inputs, num_items_in_batch)
        if self.accelerator.sync_gradients:
            self._sync_loss_gradients()
        return loss

    def loss_parameters(self) -> list[nn.Parameter]:
        """Trainable parameters owned by the loss module (not by the encoder)."""
        return [p for p in self.loss.parameters() if p.requires_grad]

    def _sync_loss_gradients(self) -> None:
        params = self.loss_parameters()
        world = distributed.world_size()
        if not params or world == 1:
            return
        for p in params:
            grad = p.grad if p.grad is not None else torch.zeros_like(p)
            dist.all_reduce(grad, op=dist.ReduceOp.SUM)
            p.grad = grad / world

    def create_optimizer(self, model: nn.Module | None = None) -> torch.optim.Optimizer:
        """``Trainer.create_optimizer`` plus parameter groups for the loss-owned parameters.

        Matrices get ``args.weight_decay``, vectors and scalars (temperatures, biases) none. With
        a user-given optimizer nothing is added; a warning says which loss parameters it misses.
        """
        created = self.optimizer is None
        optimizer = super().create_optimizer(model)
        params = self.loss_parameters()
        if not params:
            return optimizer
        if created:
            self._broadcast_loss_state()
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
                    "The given optimizer does not hold the loss's trainable parameters "
                    f"({type(self.loss).__name__}); they will not be trained. Add `trainer.loss_parameters()`.",
                    UserWarning,
                    stacklevel=2,
                )
        return optimizer

    def _broadcast_loss_state(self) -> None:
        if distributed.world_size() > 1:
            for tensor in [*self.loss.parameters(), *self.loss.buffers()]:
                dist.broadcast(tensor.data, src=0)

    def train_batch_sampler(self) -> Sampler[list[int]] | None:
        """A batch sampler for training (e.g. class-major AFCL batches), or ``None`` for the default."""
        return None

    def get_train_dataloader(self) -> DataLoader:
        """The Trainer's loader, or one driven by :meth:`train_batch_sampler` when it gives one.

        A batch sampler yields this run's whole sequence of batches (``num_replicas=1``);
        ``accelerator.prepare`` shards it, giving each process every ``world_size``-th batch.
        """
        batch_sampler = self.train_batch_sampler()
        if batch_sampler is None:
            return super().get_train_dataloader()
        if self.train_dataset is None:
            raise ValueError("Trainer: training requires a train_dataset.")
        dataset = self.train_dataset
        if hasattr(dataset, "column_names"):
            dataset = self._remove_unused_columns(dataset, description="Training")
        loader = DataLoader(
            dataset,
            batch_sampler=batch_sampler,
            collate_fn=self.data_collator,
            num_workers=self.args.dataloader_num_workers,
            pin_memory=self.args.dataloader_pin_memory,
            persistent_workers=self.args.dataloader_persistent_workers and self.args.dataloader_num_workers > 0,
            prefetch_factor=self.args.dataloader_prefetch_factor,
            worker_init_fn=partial(
                seed_worker, num_workers=self.args.dataloader_num_workers, rank=self.args.process_index
            ),
        )
        return self.accelerator.prepare(loader)

    def _set_signature_columns_if_needed(self) -> None:
        """With ``remove_unused_columns=True``, keep the columns the collators read."""
        if self._signature_columns is None:
            args = self.args
            columns = {args.image_column, args.text_column, args.label_column, "labels", "label", *_TEXT_KEYS}
            if args.text_pair_column is not None:
                columns.add(args.text_pair_column)
            columns.update(getattr(self, "extra_columns", ()))
            self._signature_columns = sorted(columns)

    def _remove_unused_columns(self, dataset: Any, description: str | None = None) -> Any:
        if not self.args.remove_unused_columns:
            return dataset
        self._set_signature_columns_if_needed()
        keep = set(self._signature_columns) | {c for c in dataset.column_names if c.startswith("pixel_values")}
        drop = [c for c in dataset.column_names if c not in keep]
        return dataset.remove_columns(drop) if drop else dataset

    # ---- checkpoints -----------------------------------------------------------------------------

    def contrastive_state_dict(self) -> dict[str, Any]:
        """Training state outside the model and optimizer, saved in every checkpoint.

        The base state is the loss module's ``state_dict`` and the index of the next batch of the
        training collator's random views (so resumed views match); CARE-MoCo adds its key encoder
        and queue.
        """
        state: dict[str, Any] = {"loss": self.loss.state_dict()}
        if self._next_view_index is not None:
            state["collator"] = {"next_index": torch.tensor(self._next_view_index)}
        return state

    def load_contrastive_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`contrastive_state_dict`."""
        if "loss" in state:
            self.loss.load_state_dict(state["loss"])
        if "collator" in state and hasattr(self.data_collator, "next_index"):
            self._next_view_index = int(state["collator"]["next_index"])
            self.data_collator.next_index = self._next_view_index

    def _save_checkpoint(self, model: nn.Module, trial: Any) -> None:
        state = self.contrastive_state_dict()
        if self.args.should_save and any(len(v) for v in state.values() if isinstance(v, Mapping)):
            folder = os.path.join(self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
            os.makedirs(folder, exist_ok=True)
            torch.save(state, os.path.join(folder, CONTRASTIVE_STATE_NAME))
        super()._save_checkpoint(model, trial)

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: nn.Module | None = None) -> None:
        super()._load_from_checkpoint(resume_from_checkpoint, model)
        path = os.path.join(resume_from_checkpoint, CONTRASTIVE_STATE_NAME)
        if os.path.isfile(path):
            state = torch.load(path, map_location=self.args.device, weights_only=True)
            self.load_contrastive_state_dict(state)
