"""Safe checkpoints for ``transformers.Trainer`` subclasses, written by the Trainer's own checkpoint code.

:class:`CheckpointingMixin` goes before ``Trainer`` in the bases (``class T(CheckpointingMixin, Trainer)``).
The Trainer writes each checkpoint in place, ``trainer_state.json`` last, and rotates old checkpoints
only after it (:mod:`~hf_contrast.training.checkpoint_validation`), so a kill at any moment leaves the
previous complete checkpoint. The mixin adds, through public methods:

- ``save_model`` (the Trainer's first call of every checkpoint save): refuses weights holding NaN/inf
  before anything is written. For a checkpoint folder it first removes a folder of the same step left
  by an earlier run (``trainer_state.json`` first, so a kill while it is replaced never leaves a
  folder that mixes two runs and looks complete), and adds ``contrastive_state.pt`` (the trainer's
  ``contrastive_state_dict()``) next to the weights.
- ``train``: ``resume_from_checkpoint=True`` resumes from the newest *complete* checkpoint, warning
  about each newer one it skips and why; a given incomplete folder raises, naming the file; staging
  folders and incomplete checkpoints newer than the resume point (leftovers of a killed save) are
  removed with a warning. With a trainer's optional ``run_settings()`` hook, each checkpoint also keeps
  ``run_settings.json`` and a resume of another run (method, model, weight-shaping settings) is refused
  unless ``args.resume_with_changes`` (:mod:`~hf_contrast.training.run_identity`).

Three private ``Trainer`` methods are overridden (``_save``, ``_load_from_checkpoint``, ``_load_best_model``,
the ones sentence-transformers 6 overrides too); why is said once, in docs/training.md ("What the trainer
overrides, and why").
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import safetensors.torch
import torch
from torch import nn
from transformers.utils import logging

from hf_contrast.errors import InputError
from hf_contrast.models.export import HUB_SUBFOLDER

from .checkpoint_validation import (
    CONTRASTIVE_STATE_NAME,
    TRAINER_STATE_NAME,
    checkpoint_problem,
    checkpoint_step,
    interrupted_save_leftovers,
    last_complete_checkpoint,
)
from .loss_terms import NonFiniteLossError
from .run_identity import RUN_SETTINGS_NAME, changed_settings, read_run_settings

__all__ = ["CheckpointingMixin", "first_nonfinite_tensor", "sanitized_training_args"]

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

    One host sync for the whole module when everything is finite.
    """
    tensors = [(name, t) for name, t in module.named_parameters()]
    tensors += [(name, t) for name, t in module.named_buffers() if t.is_floating_point()]
    tensors = [(name, t) for name, t in tensors if t.numel() and t.device.type != "meta"]
    if not tensors:
        return None
    flags = torch.stack([torch.isfinite(t.detach()).all().to(tensors[0][1].device) for _, t in tensors])
    if bool(flags.all()):
        return None
    return tensors[int((~flags).nonzero()[0])][0]


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


class CheckpointingMixin:
    """Safe saving and resuming for a ``transformers.Trainer`` subclass (put it before ``Trainer``).

    Optional trainer hooks: ``contrastive_state_dict() -> dict`` (saved as ``contrastive_state.pt``
    in every checkpoint when not empty, and then required to resume) and ``load_contrastive_state_dict(state)``.

    Example:
        >>> class MyTrainer(CheckpointingMixin, Trainer):  # doctest: +SKIP
        ...     def contrastive_state_dict(self): return {"loss": self.loss.state_dict()}
        ...     def load_contrastive_state_dict(self, state): self.loss.load_state_dict(state["loss"])
    """

    # ---- saving --------------------------------------------------------------------------------

    def save_model(
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
        problem = checkpoint_problem(resume_from_checkpoint, **requirements)
        if problem is not None:
            raise InputError(
                f"`resume_from_checkpoint`={str(resume_from_checkpoint)!r} is not a complete checkpoint ({problem}); "
                "pass another one, or `True` for the newest complete one in `output_dir`."
            )
        return str(resume_from_checkpoint)

    def _remove_interrupted_saves(self, resume_from_checkpoint: str | None) -> None:
        """Remove the leftovers of killed saves newer than the resume point (main process), then sync."""
        if self.args.should_save:
            step = 0
            if resume_from_checkpoint is not None:
                state = json.loads(Path(resume_from_checkpoint, TRAINER_STATE_NAME).read_text(encoding="utf-8"))
                step = int(state.get("global_step", 0))
            for path, reason in interrupted_save_leftovers(
                self.args.output_dir, step, **self.checkpoint_requirements()
            ):
                logger.warning("Removing %s, left by an interrupted save (%s).", path, reason)
                shutil.rmtree(path, ignore_errors=True)
        self.accelerator.wait_for_everyone()

    def train(self, resume_from_checkpoint: str | bool | None = None, *args: Any, **kwargs: Any) -> Any:
        """``Trainer.train``; ``resume_from_checkpoint=True`` resumes from the newest *complete* checkpoint.

        Leftovers of an interrupted save in ``output_dir`` (staging folders; incomplete checkpoints
        newer than the resume point) are removed first, with a warning naming each and why.

        Raises:
            ValueError: If ``resume_from_checkpoint=True`` finds no complete checkpoint in ``output_dir``,
                or a given checkpoint folder is incomplete (naming the file and the fix).
        """
        resume = self._complete_checkpoint(resume_from_checkpoint)
        self._remove_interrupted_saves(resume)
        if resume is not None and hasattr(self, "run_settings"):
            self._check_resumed_run(resume)
        return super().train(resume, *args, **kwargs)

    def _check_resumed_run(self, checkpoint: str) -> None:
        """Refuse to continue ``checkpoint`` with another method, model or weight-shaping setting
        (:mod:`~hf_contrast.training.run_identity`) unless ``resume_with_changes``; then log and card the changes."""
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
