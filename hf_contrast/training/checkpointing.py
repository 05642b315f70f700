"""Checkpoints: safe saves, which checkpoint a run can resume from, and the identity of the run it continues.

Formerly also the modules ``checkpoint_validation``, ``run_identity`` of ``hf_contrast.training`` (their import
paths still work, with a ``FutureWarning``). Their parts follow.

Safe checkpoints for ``transformers.Trainer`` subclasses, written by the Trainer's own checkpoint code.

:class:`SafeCheckpointing` goes before ``Trainer`` in the bases (``class T(SafeCheckpointing, Trainer)``); it
overrides no public ``Trainer`` method: the subclass's ``save_model`` and ``train`` call it (``ContrastiveTrainer``
does), or :class:`CheckpointingMixin` does that for any ``Trainer`` (``class T(CheckpointingMixin, Trainer)``).
The Trainer writes each checkpoint in place, ``trainer_state.json`` last, and rotates old checkpoints
only after it (:mod:`~hf_contrast.training.checkpointing`), so a kill at any moment leaves the
previous complete checkpoint. It adds:

- :meth:`~SafeCheckpointing.save_model_safely` (``save_model``, the Trainer's first call of every checkpoint
  save): refuses weights holding NaN/inf before anything is written. For a checkpoint folder it first removes a
  folder of the same step left by an earlier run (``trainer_state.json`` first, so a kill while it is replaced
  never leaves a folder that mixes two runs and looks complete), and adds ``contrastive_state.pt`` (the
  trainer's ``contrastive_state_dict()``) next to the weights.
- :meth:`~SafeCheckpointing.resume_point` (``train``'s ``resume_from_checkpoint``): ``True`` resumes from the
  newest *complete* checkpoint, warning about each newer one it skips and why; a given incomplete folder raises,
  naming the file, as do a run's output folder given as a checkpoint and a checkpoint at or past the run's end
  (``max_steps``, or a fractional ``num_train_epochs``) that transformers would train a step past (inside an epoch,
  or of a streaming set); staging folders and incomplete
  checkpoints newer than the resume point (leftovers of a killed save) are removed with a warning. With a
  trainer's optional ``run_settings()`` hook, each checkpoint also keeps ``run_settings.json`` and a resume of
  another run (method, model, weight-shaping settings) is refused
  unless ``args.resume_with_changes`` (:mod:`~hf_contrast.training.checkpointing`).

Three private ``Trainer`` methods are overridden (``_save``, ``_load_from_checkpoint``, ``_load_best_model``,
the ones sentence-transformers 6 overrides too); why is said once, in docs/training.md ("What the trainer
overrides, and why").

Which ``checkpoint-N`` folders a run can resume from: a checkpoint is complete iff the loader can read it.

``transformers.Trainer`` writes a checkpoint in place, in this order (``Trainer._save_checkpoint``; the
transformers versions checked: docs/encoders.md): ``save_model`` (the model folder and ``training_args.bin``; the
contrastive trainers add ``contrastive_state.pt``), ``optimizer.pt`` and ``scheduler.pt`` (``scaler.pt``
under fp16), ``rng_state.pth`` (``rng_state_<rank>.pth`` per process), and ``trainer_state.json``
last; then it deletes the oldest checkpoints beyond ``save_total_limit``, so a save killed at any moment
leaves the previous complete checkpoint. Such a kill leaves a folder that lacks a file or holds a
truncated one; :func:`checkpoint_problem` reads every file a resume reads and says which one is wrong:

- ``trainer_state.json``: present and parseable;
- the weights: the encoder in ``hf_contrast/`` as safetensors (sizes checked against the headers,
  sharded or not). A ``pytorch_model.bin`` there is refused: the resume would not read it. A folder
  without ``hf_contrast/`` (a model that is not a ``ContrastiveEncoder``) is read at its root;
- ``optimizer.pt`` and ``scheduler.pt`` (unless ``save_only_model``), ``scaler.pt`` when present,
  the RNG states of the run's processes, and ``contrastive_state.pt`` when the trainer writes one:
  complete ``torch.save`` archives (a truncated archive loses its zip directory, at its end).

:func:`interrupted_save_leftovers` lists what a killed save leaves behind for the next run to remove.

A resumed run is the run it continues: its method, model and result-shaping settings, kept in each checkpoint.

Every checkpoint gets ``run_settings.json`` (:func:`run_settings`: the method and its hyperparameters, the
encoder's architecture, the training arguments that shape the weights). Resuming compares them with the
trainer's (:func:`changed_settings`): a SimCLR checkpoint continued with CARE, another learning rate, batch or
seed would silently make a run that is neither, so it is refused, naming each change, unless
``resume_with_changes=True`` (``--resume_with_changes``): then each change is logged once and written in the
model card's run set-up. ``max_steps`` / ``num_train_epochs`` may grow (a finished run continued), and settings
that do not shape the weights (evaluation, logging, saving) may change freely. A checkpoint written before this
file existed is resumed as before.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import re
import shutil
import struct
import zipfile
from pathlib import Path
from typing import Any

import safetensors.torch
import torch
from torch import nn
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, has_length
from transformers.utils import logging

from hf_contrast.errors import InputError, InputTypeError
from hf_contrast.models.export import HUB_SUBFOLDER
from hf_contrast.training.callbacks import NonFiniteLossError, all_finite

__all__ = [
    "changed_settings",
    "checkpoint_problem",
    "checkpoint_step",
    "CheckpointingMixin",
    "SafeCheckpointing",
    "CONTRASTIVE_STATE_NAME",
    "epoch_run_steps",
    "first_nonfinite_tensor",
    "interrupted_save_leftovers",
    "last_complete_checkpoint",
    "run_settings",
    "RUN_SETTINGS_NAME",
    "sanitized_training_args",
    "TRAINING_KEYS",
]


# ==================== checkpointing ===================================================================


logger = logging.get_logger(__name__)  # follows the Trainer's log level (hf_contrast.progress)

TRAINING_ARGS_NAME = "training_args.bin"
_TOKEN_FIELD_RE = re.compile(r"^(.*_)?token$")


def sanitized_training_args(args: Any) -> Any:
    """A shallow copy of ``args`` with every token field (``hub_token``, ``*_token``) set to ``None`` and every
    absolute path (``output_dir``, ``logging_dir``...) replaced by its last folder name.

    What ``training_args.bin`` stores, so no secret and no local path reaches the disk or the Hub (the file
    is a record of the run; resuming reads the current arguments). The original is not changed.
    """
    clean = copy.copy(args)
    names = [field.name for field in dataclasses.fields(args)] if dataclasses.is_dataclass(args) else list(vars(args))
    for name in names:
        value = getattr(clean, name, None)
        if _TOKEN_FIELD_RE.match(name) and value is not None:
            setattr(clean, name, None)
        elif isinstance(value, str) and (os.path.isabs(value) or value.startswith("~")):
            object.__setattr__(clean, name, os.path.basename(os.path.normpath(value)) or value)
    return clean


def first_nonfinite_tensor(module: nn.Module) -> str | None:
    """The name of the first parameter or floating buffer of ``module`` holding NaN/inf, else ``None``.

    One check for the whole module (:func:`~hf_contrast.training.callbacks.all_finite`) and one host sync when
    everything is finite; the tensors are searched one by one only when something is not.
    """
    tensors = [(name, t) for name, t in module.named_parameters()]
    tensors += [(name, t) for name, t in module.named_buffers() if t.is_floating_point()]
    tensors = [(name, t.detach()) for name, t in tensors if t.numel() and t.device.type != "meta"]
    if not tensors or bool(all_finite([t for _, t in tensors], tensors[0][1].device)):
        return None
    return next(name for name, t in tensors if not bool(torch.isfinite(t).all()))


def _encoder_state_dict(subfolder: Path) -> dict[str, torch.Tensor]:
    """The tensors of ``hf_contrast/``'s safetensors weights (one file or an index of shards), on the CPU."""
    index = subfolder / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
    else:
        shards = ["model.safetensors"]
    state: dict[str, torch.Tensor] = {}
    for shard in shards:
        state.update(safetensors.torch.load_file(subfolder / shard, device="cpu"))
    return state


class SafeCheckpointing:
    """Safe saving and resuming for a ``transformers.Trainer`` subclass (put it before ``Trainer``), without
    overriding a public ``Trainer`` method: the subclass's own ``save_model`` calls :meth:`save_model_safely` and
    its ``train`` passes ``resume_from_checkpoint`` through :meth:`resume_point` (``ContrastiveTrainer`` does, so
    each public method is overridden in one place); :class:`CheckpointingMixin` does both for any ``Trainer``.
    The three private overrides (``_save``, ``_load_from_checkpoint``, ``_load_best_model``) are here.

    Optional trainer hooks: ``contrastive_state_dict() -> dict`` (saved as ``contrastive_state.pt``
    in every checkpoint when not empty, and then required to resume) and ``load_contrastive_state_dict(state)``.
    """

    # ---- saving --------------------------------------------------------------------------------

    def save_model_safely(
        self, output_dir: str | None = None, _internal_call: bool = False, *, allow_nonfinite: bool = False
    ) -> None:
        """``Trainer.save_model``, refusing a model with NaN/inf weights; in a checkpoint, with
        ``contrastive_state.pt``.

        Args:
            output_dir: The folder (default ``args.output_dir``).
            _internal_call: Set by the Trainer (checkpoints, ``push_to_hub``).
            allow_nonfinite: Write the model even if a parameter or buffer holds NaN/inf.

        Raises:
            NonFiniteLossError: (a ``RuntimeError``) if a parameter or buffer of the model is NaN/inf and
                ``allow_nonfinite`` is not set: nothing is written, what is on disk stays as it was.
        """
        target = output_dir if output_dir is not None else self.args.output_dir
        in_checkpoint = _internal_call and checkpoint_step(target) == self.state.global_step
        bad = None if allow_nonfinite else first_nonfinite_tensor(self.model)
        if bad is not None:
            step = self.state.global_step
            if in_checkpoint:
                raise NonFiniteLossError(
                    f"Refusing to write {Path(target).name}: `{bad}` of the model holds NaN/inf at step {step}. "
                    "The newest checkpoint already written is still intact; resume from it with a lower learning "
                    "rate, gradient clipping (`max_grad_norm`) or another seed."
                )
            raise NonFiniteLossError(
                f"Refusing to save the model to {target!r}: `{bad}` holds NaN/inf (step {step}). Resume from the last "
                "checkpoint with a lower learning rate or gradient clipping, or pass `allow_nonfinite=True` to write "
                "it anyway."
            )
        if in_checkpoint:
            self._remove_earlier_checkpoint(target)
        super().save_model(output_dir, _internal_call=_internal_call)
        state = self.contrastive_state_dict() if in_checkpoint and hasattr(self, "contrastive_state_dict") else {}
        if state and self.args.should_save:
            torch.save(state, os.path.join(target, CONTRASTIVE_STATE_NAME))
        if in_checkpoint and hasattr(self, "run_settings") and self.args.should_save:  # what a resume must match
            settings = json.dumps(self.run_settings(), indent=2, sort_keys=True)
            Path(target, RUN_SETTINGS_NAME).write_text(settings + "\n", encoding="utf-8")

    def _remove_earlier_checkpoint(self, folder: str) -> None:
        """Remove ``folder`` (a checkpoint of this step from an earlier run) before it is written again."""
        if self.args.should_save and os.path.isdir(folder):
            logger.warning("Replacing %s, written by an earlier run.", folder)
            Path(folder, TRAINER_STATE_NAME).unlink(missing_ok=True)  # from here on the folder reads as incomplete
            shutil.rmtree(folder)
        self.accelerator.wait_for_everyone()  # no process writes its RNG state into the folder before it is gone

    # Private override (docs/training.md): the only writer of training_args.bin, which would hold hub_token.
    def _save(self, output_dir: str | None = None, state_dict: dict[str, Any] | None = None) -> None:
        """``model.save_pretrained`` (the save layout), the processing class, and token-free ``training_args.bin``."""
        if not self.args.should_save:
            return
        output_dir = output_dir if output_dir is not None else self.args.output_dir
        os.makedirs(output_dir, exist_ok=True)
        model = self.model if hasattr(self.model, "save_pretrained") else self.accelerator.unwrap_model(self.model)
        if hasattr(model, "save_pretrained"):
            model.save_pretrained(output_dir, state_dict=state_dict)
        else:
            state = state_dict if state_dict is not None else model.state_dict()
            safetensors.torch.save_file(
                state, os.path.join(output_dir, "model.safetensors"), metadata={"format": "pt"}
            )
        processor = self.processing_class
        if processor is None:
            processor = getattr(self.data_collator, "tokenizer", None)
        if processor is not None and processor is not getattr(model, "tokenizer", None):
            processor.save_pretrained(output_dir)
        torch.save(sanitized_training_args(self.args), os.path.join(output_dir, TRAINING_ARGS_NAME))

    # ---- loading -------------------------------------------------------------------------------

    def _reads_encoder_subfolder(self, folder: str) -> bool:
        """Whether ``folder`` is in the save layout and the model is loaded here (not by DeepSpeed / FSDP)."""
        return (Path(folder) / HUB_SUBFOLDER).is_dir() and not (self.is_deepspeed_enabled or self.is_fsdp_enabled)

    def _load_encoder(self, folder: str, model: nn.Module) -> None:
        """Load ``folder/hf_contrast``'s weights into ``model``; every tensor must match.

        Raises:
            ValueError: If the weights and the model do not have the same tensors.
        """
        result = model.load_state_dict(_encoder_state_dict(Path(folder) / HUB_SUBFOLDER), strict=False)
        if result.missing_keys or result.unexpected_keys:
            raise InputError(
                f"The weights in {os.path.join(folder, HUB_SUBFOLDER)} do not fit the model (missing: "
                f"{result.missing_keys[:5]}, unexpected: {result.unexpected_keys[:5]}); resume with the encoder "
                "architecture that wrote the checkpoint."
            )

    def _load_contrastive_state(self, folder: str) -> None:
        path = os.path.join(folder, CONTRASTIVE_STATE_NAME)
        if os.path.isfile(path) and hasattr(self, "load_contrastive_state_dict"):
            self.load_contrastive_state_dict(
                torch.load(path, map_location="cpu", weights_only=True)
            )  # copied onto the objective's devices

    # Private override (docs/training.md): the Trainer would read the bare backbone at the root.
    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: nn.Module | None = None) -> None:
        """The encoder from ``hf_contrast/`` (else the Trainer's loading), then ``contrastive_state.pt``."""
        if self._reads_encoder_subfolder(resume_from_checkpoint):
            self._load_encoder(resume_from_checkpoint, model if model is not None else self.model)
        else:
            super()._load_from_checkpoint(resume_from_checkpoint, model)
        self._load_contrastive_state(resume_from_checkpoint)

    # Private override (docs/training.md): the Trainer would read the bare backbone at the root.
    def _load_best_model(self) -> None:
        """The best checkpoint's encoder from ``hf_contrast/`` (else the Trainer's loading) and contrastive state."""
        best = self.state.best_model_checkpoint
        logger.info("Loading the best model from %s (score: %s).", best, self.state.best_metric)
        if self._reads_encoder_subfolder(best):
            self._load_encoder(best, self.model)
        else:
            super()._load_best_model()
        self._load_contrastive_state(best)

    # ---- resuming ------------------------------------------------------------------------------

    def checkpoint_requirements(self) -> dict[str, Any]:
        """What a checkpoint of this run must hold to be resumed from (:func:`checkpoint_problem`'s options)."""
        return {
            "require_optimizer": not self.args.save_only_model,
            "require_contrastive_state": bool(self.contrastive_state_dict())
            if hasattr(self, "contrastive_state_dict")
            else False,
            "world_size": self.args.world_size,
        }

    def _complete_checkpoint(self, resume_from_checkpoint: str | os.PathLike[str] | bool | None) -> str | None:
        requirements = self.checkpoint_requirements()
        if resume_from_checkpoint is True:
            found = last_complete_checkpoint(self.args.output_dir, **requirements)
            if found is None:
                raise InputError(
                    "`resume_from_checkpoint=True` found no complete checkpoint in "
                    f"`output_dir`={self.args.output_dir!r} (the warnings above say what each one lacks): pass a "
                    "checkpoint folder, or `resume_from_checkpoint=None` to start from scratch."
                )
            return found
        if resume_from_checkpoint in (None, False):
            return None
        if not isinstance(resume_from_checkpoint, (str, os.PathLike)):  # pathlib's "expected str, … not int" otherwise
            raise InputTypeError(
                "`resume_from_checkpoint` must be a checkpoint folder (a str or path), `True` for the newest "
                f"complete one in `output_dir`, or `None`, got {resume_from_checkpoint!r} "
                f"({type(resume_from_checkpoint).__name__})."
            )
        inside = [] if checkpoint_step(resume_from_checkpoint) else _checkpoints_newest_first(resume_from_checkpoint)
        if inside:  # a run's output folder (it may hold a finished model too, which is not a checkpoint)
            listed = ", ".join(path.name for path in inside[:5]) + (" …" if len(inside) > 5 else "")
            raise InputError(
                f"`resume_from_checkpoint`={str(resume_from_checkpoint)!r} is a run's output folder, not a "
                f"checkpoint: it holds {listed}. Pass one of them (the newest: {str(inside[0])!r}), or `True` for the "
                "newest complete one in `output_dir` (the example scripts do that by themselves when `--output_dir` "
                "holds checkpoints: run them without `--resume_from_checkpoint`)."
            )
        problem = checkpoint_problem(resume_from_checkpoint, **requirements)
        if problem is not None:
            raise InputError(
                f"`resume_from_checkpoint`={str(resume_from_checkpoint)!r} is not a complete checkpoint ({problem}); "
                "pass another one, or `True` for the newest complete one in `output_dir`."
            )
        return str(resume_from_checkpoint)

    def _remove_interrupted_saves(self, step: int) -> None:
        """Remove the leftovers of killed saves newer than the resume point's ``step`` (main process), then sync."""
        if self.args.should_save:
            for path, reason in interrupted_save_leftovers(
                self.args.output_dir, step, **self.checkpoint_requirements()
            ):
                logger.warning("Removing %s, left by an interrupted save (%s).", path, reason)
                shutil.rmtree(path, ignore_errors=True)
        self.accelerator.wait_for_everyone()

    def resume_point(self, resume_from_checkpoint: str | os.PathLike[str] | bool | None) -> str | None:
        """The checkpoint ``train(resume_from_checkpoint=...)`` resumes from (``None``: from scratch), ready to
        pass to ``Trainer.train``: ``True`` is the newest *complete* checkpoint. Leftovers of an interrupted save
        in ``output_dir`` (staging folders; incomplete checkpoints newer than the resume point) are removed first,
        with a warning naming each and why; with a ``run_settings()`` hook, a resume of another run is refused.

        Raises:
            ValueError: If ``resume_from_checkpoint=True`` finds no complete checkpoint in ``output_dir``,
                a given checkpoint folder is incomplete (naming the file and the fix) or is a run's output folder
                (naming its checkpoints), or the checkpoint is at or past ``max_steps`` (or a fractional
                ``num_train_epochs``) inside an epoch, or at or past ``max_steps`` of a streaming training set.
        """
        resume = self._complete_checkpoint(resume_from_checkpoint)
        # a complete checkpoint's state is a JSON object (checkpoint_problem): read once
        state = {} if resume is None else json.loads(Path(resume, TRAINER_STATE_NAME).read_text(encoding="utf-8"))
        if resume is not None:
            self._refuse_finished_checkpoint(resume, state)
        self._remove_interrupted_saves(int(state.get("global_step", 0)))
        if resume is not None and hasattr(self, "run_settings"):
            self._check_resumed_run(resume)
        if resume is not None and self.args.save_only_model and not Path(resume, OPTIMIZER_NAME).is_file():
            self._note_model_only_resume(resume)
        return resume

    def _refuse_finished_checkpoint(self, checkpoint: str, state: dict[str, Any]) -> None:
        """Refuse to resume a checkpoint at or past the run's end from which transformers' Trainer would train one
        step past it (and save it), measured with transformers 5.0 and 5.24: one whose step fell inside an epoch
        and is at or past ``max_steps`` (or, when epochs decide, at or past the ``ceil(num_train_epochs × steps per
        epoch)`` optimizer steps transformers plans for a fractional ``num_train_epochs``), and any at or past
        ``max_steps`` of a streaming (unsized) training set, whose epochs transformers counts in ``max_steps``. A
        checkpoint that ended an epoch of a sized set is resumed as transformers does it: its state is loaded and no
        step is trained (a script finishing an interrupted end does that; so do tests that reload a run's state).
        ``state`` is the checkpoint's ``trainer_state.json``."""
        try:
            done, epoch = int(state["global_step"]), float(state["epoch"])
        except (ValueError, KeyError, TypeError):  # an older or hand-made state: let the Trainer decide
            return
        streaming = self.train_dataset is not None and not has_length(self.train_dataset)
        if self.args.max_steps > 0:
            if self.args.max_steps > done or (epoch.is_integer() and not streaming):
                return
            at, asked, length = f"step {done}", f"`max_steps`={self.args.max_steps}", "max_steps"
        else:  # epochs decide; an epoch is at least its share of the optimizer steps: short of it, short of the end
            if epoch.is_integer() or epoch < self.args.num_train_epochs:
                return
            batches = len(self.get_train_dataloader())  # built, not iterated
            if done < epoch_run_steps(self.args.num_train_epochs, batches, self.args.gradient_accumulation_steps):
                return
            at, asked = f"step {done} (epoch {epoch:.4g})", f"`num_train_epochs`={self.args.num_train_epochs:g}"
            length = "num_train_epochs"
        why = "a streaming training set" if streaming else f"the checkpoint ends inside epoch {int(epoch) + 1}"
        raise InputError(
            f"`resume_from_checkpoint`: {checkpoint} is at {at}, and this run asks for {asked}: there is nothing "
            f"left to train, and transformers' Trainer would train step {done + 1} past it ({why}). Pass a larger "
            f"`{length}` (`--{length}`) to continue that run; its model is in the checkpoint "
            "(`ContrastiveEncoder.from_pretrained(<checkpoint>)` loads it)."
        )

    def _note_model_only_resume(self, checkpoint: str) -> None:
        """Say (once, and in the model card's run set-up) that ``checkpoint`` holds the model only
        (``save_only_model=True``): the Trainer resumes its weights and step count, but builds the optimizer and the
        learning-rate scheduler afresh and has no random states to restore."""
        step = checkpoint_step(checkpoint)
        if self.is_world_process_zero():
            logger.warning(
                f"Resuming {checkpoint}, which holds the model only (`save_only_model=True`): its weights and step "
                f"count ({step}) continue, but the optimizer's state starts afresh, the learning-rate schedule starts "
                "again from its first step (its warm-up too) and the random views do not continue the saved run's. "
                "The result differs from an uninterrupted run's (the model card says so); save full checkpoints "
                "(`save_only_model=False`, the default) to resume exactly."
            )
        setup = getattr(self, "run_setup", None)
        if isinstance(setup, dict):  # the model card's run set-up
            setup["resumed from a model-only checkpoint"] = (
                f"at step {step}: the optimizer and the learning-rate schedule started afresh (`save_only_model=True`)"
            )

    def _check_resumed_run(self, checkpoint: str) -> None:
        """Refuse to continue ``checkpoint`` with another method, model or weight-shaping setting
        (:mod:`~hf_contrast.training.checkpointing`) unless ``resume_with_changes``; then log and card the changes."""
        saved = read_run_settings(checkpoint)
        changes = [] if saved is None else changed_settings(saved, self.run_settings())
        if not changes:
            return
        listed = "\n  ".join(changes)
        if not getattr(self.args, "resume_with_changes", False):
            raise InputError(
                f"Refusing to resume {checkpoint}: it was written by another run.\n  {listed}\nResume with the "
                "checkpoint's settings; or start a new run (another `output_dir`, or `overwrite_output_dir=True` / "
                "`--overwrite_output_dir`); or pass `resume_with_changes=True` (`--resume_with_changes`) to continue "
                "it with these changes (they are then logged and written in the model card)."
            )
        if self.is_world_process_zero():
            logger.warning(f"Resuming {checkpoint} with changed settings (`resume_with_changes=True`):\n  {listed}")
        setup = getattr(self, "run_setup", None)
        if isinstance(setup, dict):  # the model card's run set-up
            setup["resumed with changes"] = f"at step {checkpoint_step(checkpoint)}: " + "; ".join(changes)


# ==================== checkpoint validation ===========================================================


class CheckpointingMixin(SafeCheckpointing):
    """:class:`SafeCheckpointing` for any ``transformers.Trainer`` subclass (put it before ``Trainer``): its
    ``save_model`` is :meth:`~SafeCheckpointing.save_model_safely` and its ``train`` resumes from
    :meth:`~SafeCheckpointing.resume_point`.

    Example:
        >>> class MyTrainer(CheckpointingMixin, Trainer):  # doctest: +SKIP
        ...     def contrastive_state_dict(self): return {"loss": self.loss.state_dict()}
        ...     def load_contrastive_state_dict(self, state): self.loss.load_state_dict(state["loss"])
    """

    def save_model(
        self, output_dir: str | None = None, _internal_call: bool = False, *, allow_nonfinite: bool = False
    ) -> None:
        """:meth:`~SafeCheckpointing.save_model_safely`."""
        self.save_model_safely(output_dir, _internal_call, allow_nonfinite=allow_nonfinite)

    def train(self, resume_from_checkpoint: str | bool | None = None, *args: Any, **kwargs: Any) -> Any:
        """``Trainer.train`` from :meth:`~SafeCheckpointing.resume_point` (``True``: the newest *complete*
        checkpoint)."""
        return super().train(self.resume_point(resume_from_checkpoint), *args, **kwargs)


#: The trainer's state outside the model and optimizer (objective, views), in every checkpoint.
CONTRASTIVE_STATE_NAME = "contrastive_state.pt"
TRAINER_STATE_NAME = "trainer_state.json"
OPTIMIZER_NAME = "optimizer.pt"
SCHEDULER_NAME = "scheduler.pt"
SCALER_NAME = "scaler.pt"
_CHECKPOINT_RE = re.compile(rf"^{PREFIX_CHECKPOINT_DIR}-(\d+)$")
# Staging folders of a killed save: `tmp-checkpoint-N` / `tmp-old-checkpoint-N` (earlier hf_contrast versions wrote
# checkpoints there first) and the hidden `.<folder>.staging-*` / `.<folder>.replaced-*` of save_pretrained.
_STAGING_RE = re.compile(
    rf"^(\.?tmp-(old-)?{PREFIX_CHECKPOINT_DIR}-\d+.*|\.(tmp-)?{PREFIX_CHECKPOINT_DIR}-\d+\.(staging|replaced)-.*)$"
)


def epoch_run_steps(num_train_epochs: float, batches_per_epoch: int, accumulation: int = 1) -> int:
    """The optimizer steps transformers' ``Trainer.train`` plans for a run that epochs decide
    (``set_initial_training_values``, 5.0 to 5.24): ``ceil(num_train_epochs × steps per epoch)``, an epoch's steps its
    loader's ``batches_per_epoch`` over ``accumulation`` (gradient accumulation steps), a partial step counted."""
    per_epoch = max(batches_per_epoch // accumulation + int(batches_per_epoch % accumulation > 0), 1)
    return math.ceil(num_train_epochs * per_epoch)


def checkpoint_step(folder: str | os.PathLike[str]) -> int | None:
    """``N`` of a folder named ``checkpoint-N``, else ``None``."""
    match = _CHECKPOINT_RE.match(Path(folder).name)
    return int(match.group(1)) if match else None


def _safetensors_problem(path: Path) -> str | None:
    """Why the safetensors file at ``path`` is unreadable (truncated, bad header), else ``None``."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as handle:
            (header_length,) = struct.unpack("<Q", handle.read(8))
            if header_length > size - 8:
                return f"{path.name} is truncated ({size} bytes, shorter than its header)"
            header = json.loads(handle.read(header_length))
        end = (
            8
            + header_length
            + max((entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"), default=0)
        )
        if end != size:
            return f"{path.name} is truncated ({size} bytes, its header describes {end})"
    except (OSError, ValueError, KeyError, TypeError, struct.error) as error:
        return f"{path.name} is unreadable ({type(error).__name__}: {error})"
    return None


def _torch_archive_problem(path: Path) -> str | None:
    """Why ``path`` is not a complete ``torch.save`` archive (a zip file), else ``None``.

    Reads the zip directory (at the end of the file: a truncated archive has none), checks that every
    record lies inside the file, and reads the pickle record (its CRC is checked); tensor data is not read.
    """
    try:
        size = path.stat().st_size
        with zipfile.ZipFile(path) as archive:
            records = archive.infolist()
            pickles = [record for record in records if record.filename.endswith("/data.pkl")]
            if not pickles:
                return f"{path.name} is not a torch.save archive (no data.pkl)"
            outside = [record.filename for record in records if record.header_offset + record.compress_size > size]
            if outside:
                return f"{path.name} is truncated ({outside[0]} ends past the end of the file)"
            archive.read(pickles[0])
    except (OSError, zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError) as error:
        return f"{path.name} is unreadable or truncated ({type(error).__name__}: {error})"
    return None


def _file_problem(path: Path) -> str | None:
    """The problem of one file that must be there."""
    if not path.is_file():
        return f"{path.name} is missing"
    return _safetensors_problem(path) if path.suffix == ".safetensors" else _torch_archive_problem(path)


def _sharded_safetensors_problem(index: Path) -> str | None:
    try:
        shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
    except (OSError, ValueError, KeyError, AttributeError) as error:
        return f"{index.name} is unreadable ({type(error).__name__}: {error})"
    for shard in shards:
        problem = _file_problem(index.parent / shard)
        if problem:
            return problem
    return None


def _weights_problem(folder: Path) -> str | None:
    """The encoder's weights in ``hf_contrast/`` (safetensors only), or a flat save's at the root."""
    encoder = folder / HUB_SUBFOLDER
    if encoder.is_dir():
        if (encoder / "model.safetensors.index.json").is_file():
            return _sharded_safetensors_problem(encoder / "model.safetensors.index.json")
        if (encoder / "model.safetensors").is_file():
            return _safetensors_problem(encoder / "model.safetensors")
        found = sorted(path.name for path in encoder.iterdir() if path.suffix in (".bin", ".pt", ".pth"))
        return f"{HUB_SUBFOLDER}/model.safetensors is missing" + (
            f" ({HUB_SUBFOLDER}/ holds {', '.join(found)}, which a resume does not read: "
            "the root weights are the bare backbone)"
            if found
            else ""
        )
    if (folder / "model.safetensors.index.json").is_file():
        return _sharded_safetensors_problem(folder / "model.safetensors.index.json")
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (folder / name).is_file():
            return _file_problem(folder / name)
    return "no model weights (neither hf_contrast/model.safetensors nor model.safetensors)"


def _rng_problem(folder: Path, world_size: int) -> str | None:
    """The RNG states a resume with ``world_size`` processes reads (``rng_state.pth`` / ``rng_state_<rank>.pth``).

    A checkpoint written with another number of processes has none of them: the Trainer then resumes
    without restoring the RNG (it says so), which is allowed; some but not all of them is a torn save.
    """
    present = sorted(folder.glob("rng_state*.pth"))
    for path in present:
        problem = _torch_archive_problem(path)
        if problem:
            return problem
    expected = ["rng_state.pth"] if world_size <= 1 else [f"rng_state_{rank}.pth" for rank in range(world_size)]
    missing = [name for name in expected if not (folder / name).is_file()]
    if not present:
        return f"{expected[0]} is missing"
    if missing and len(missing) < len(expected):
        return f"{missing[0]} is missing"
    return None


def checkpoint_problem(
    folder: str | os.PathLike[str],
    require_optimizer: bool = True,
    require_contrastive_state: bool = False,
    world_size: int = 1,
) -> str | None:
    """Why ``folder`` cannot be resumed from, or ``None`` if it is a complete checkpoint (see the module doc).

    Args:
        folder: A ``checkpoint-N`` folder.
        require_optimizer: Whether the optimizer, scheduler and RNG states must be there (``False`` for
            ``save_only_model`` runs).
        require_contrastive_state: Whether ``contrastive_state.pt`` must be there (the trainer writes one).
        world_size: The number of processes of the resuming run (which RNG files it reads).

    Returns:
        A short reason naming the file (``"optimizer.pt is unreadable or truncated (...)"``...) or ``None``.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return "not a directory"
    state = folder / TRAINER_STATE_NAME
    if not state.is_file():
        return f"{TRAINER_STATE_NAME} is missing"
    try:
        if not isinstance(json.loads(state.read_text(encoding="utf-8")), dict):
            return f"{TRAINER_STATE_NAME} is not a JSON object"
    except (OSError, ValueError) as error:
        return f"{TRAINER_STATE_NAME} is unreadable ({error})"
    problem = _weights_problem(folder)
    if problem:
        return problem
    names = [CONTRASTIVE_STATE_NAME] if require_contrastive_state else []
    if require_optimizer:
        names += [OPTIMIZER_NAME, SCHEDULER_NAME]
    if (folder / SCALER_NAME).exists():
        names.append(SCALER_NAME)
    for name in names:
        problem = _file_problem(folder / name)
        if problem:
            return problem
    return _rng_problem(folder, world_size) if require_optimizer else None


def _checkpoints_newest_first(output_dir: str | os.PathLike[str]) -> list[Path]:
    if not os.path.isdir(output_dir):
        return []
    found = [
        (step, Path(output_dir) / name)
        for name in os.listdir(output_dir)
        if (step := checkpoint_step(name)) is not None
    ]
    return [path for _, path in sorted(found, reverse=True) if path.is_dir()]


def last_complete_checkpoint(output_dir: str | os.PathLike[str], **requirements: bool | int) -> str | None:
    """The newest complete ``checkpoint-N`` in ``output_dir`` (by step), warning about each newer incomplete one.

    Args:
        output_dir: The training output folder.
        **requirements: :func:`checkpoint_problem`'s ``require_optimizer``, ``require_contrastive_state``
            and ``world_size``.

    Returns:
        The path, or ``None`` if there is no complete checkpoint.
    """
    for path in _checkpoints_newest_first(output_dir):
        problem = checkpoint_problem(path, **requirements)  # type: ignore[arg-type]
        if problem is None:
            return str(path)
        logger.warning("Skipping the incomplete checkpoint %s (%s); resuming from an older one.", path, problem)
    return None


def interrupted_save_leftovers(
    output_dir: str | os.PathLike[str], resume_step: int, **requirements: bool | int
) -> list[tuple[Path, str]]:
    """What killed saves left in ``output_dir``: ``(path, reason)`` of every staging folder and of every
    incomplete ``checkpoint-N`` with ``N > resume_step`` (complete checkpoints are never listed).

    Args:
        output_dir: The training output folder.
        resume_step: The step the run starts from (0 for a new run).
        **requirements: As :func:`last_complete_checkpoint`.
    """
    if not os.path.isdir(output_dir):
        return []
    leftovers = [
        (Path(output_dir) / name, "staging folder of an interrupted save")
        for name in sorted(os.listdir(output_dir))
        if _STAGING_RE.match(name)
    ]
    for path in _checkpoints_newest_first(output_dir):
        if checkpoint_step(path) > resume_step:  # type: ignore[operator]
            problem = checkpoint_problem(path, **requirements)  # type: ignore[arg-type]
            if problem is not None:
                leftovers.append((path, f"incomplete: {problem}"))
    return leftovers


# ==================== run identity ====================================================================


RUN_SETTINGS_NAME = "run_settings.json"
#: The training arguments that shape the weights a run ends with (the schedule's length may grow on a resume).
TRAINING_KEYS = (
    "per_device_train_batch_size", "gradient_accumulation_steps", "world_size", "learning_rate",
    "lr_scheduler_type", "warmup_steps", "weight_decay", "max_grad_norm", "optim", "adam_beta1", "adam_beta2",
    "adam_epsilon", "seed", "image_size", "bf16", "fp16",
)  # fmt: skip
#: Settings recorded since after checkpoints were first written, by group: a checkpoint without one predates it
#: (its value unknown), so it is not compared. ``gather_distributed``: whether the loss compared with every
#: process's batch (False where the method ignores the flag, or on one process).
LATER_KEYS = {"training": ("gather_distributed",)}
#: The encoder's architecture, from its config (a model without one of them has ``None``).
MODEL_KEYS = (
    "backbone", "backbone_type", "small_image_stem", "embedding_dim", "projection_dim", "projection_layers",
    "projection_hidden_dim", "projection_norm", "pooling", "num_labels",
)  # fmt: skip


def _plain(value: Any) -> Any:
    """``value`` as JSON would give it back (tuples as lists, enums and other objects as strings)."""
    return json.loads(json.dumps(value, default=str))


def run_settings(objective: Any, model: Any, args: Any) -> dict[str, dict[str, Any]]:
    """``{"method": {...}, "model": {...}, "training": {...}}``: the objective's name and hyperparameters, the
    encoder's architecture (:data:`MODEL_KEYS`) and the weight-shaping training arguments (:data:`TRAINING_KEYS`, and
    whether the loss gathered every process's batch: `gather_distributed` where the method reads it)."""
    config = getattr(objective, "config", None)
    hyperparameters = dataclasses.asdict(config) if dataclasses.is_dataclass(config) else {}
    model_config = getattr(model, "config", None)
    gathered = (  # the flag changes the loss only where the method reads it, on more than one process
        bool(getattr(args, "gather_distributed", False))
        and getattr(objective, "gathers_negatives", True)
        and (getattr(args, "world_size", 1) or 1) > 1
    )
    return _plain(
        {
            "method": {"name": getattr(objective, "name", type(objective).__name__), **hyperparameters},
            "model": {key: getattr(model_config, key, None) for key in MODEL_KEYS},
            "training": {**{key: getattr(args, key, None) for key in TRAINING_KEYS}, "gather_distributed": gathered},
        }
    )


def changed_settings(saved: dict[str, dict[str, Any]], current: dict[str, dict[str, Any]]) -> list[str]:
    """Each setting whose value differs, as ``"`name` (group): saved → current"`` (a setting one side lacks is
    compared as ``None``, but for :data:`LATER_KEYS` a checkpoint that predates them; for another method, only its
    name)."""
    changes = []
    for group, values in current.items():
        before = saved.get(group, {})
        keys = sorted(set(values) | set(before))
        keys = [key for key in keys if key in before or key not in LATER_KEYS.get(group, ())]
        if group == "method" and before.get("name") != values.get("name"):
            keys = ["name"]  # another method: its hyperparameters are another method's, not changes
        for key in keys:
            if before.get(key) != values.get(key):
                changes.append(f"`{key}` ({group}): {before.get(key)!r} in the checkpoint, {values.get(key)!r} now")
    return changes


def read_run_settings(checkpoint: str | Path) -> dict[str, dict[str, Any]] | None:
    """The checkpoint's ``run_settings.json``, or ``None`` for a checkpoint written without one."""
    path = Path(checkpoint) / RUN_SETTINGS_NAME
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
