"""Safe checkpoints for ``transformers.Trainer`` subclasses: one save layout, atomic folders, no secrets, clean resume.

:class:`CheckpointingMixin` goes before ``Trainer`` in the bases (``class T(CheckpointingMixin, Trainer)``)
and overrides only Trainer methods:

- ``_save``: ``model.save_pretrained`` (``ContrastiveEncoder``'s one layout: native model at the root,
  full encoder in ``hf_contrast/``), the processing class, and ``training_args.bin`` with every token
  field set to ``None`` (:func:`sanitized_training_args`).
- ``_save_checkpoint``: refuses weights that are not finite; every process writes into
  ``tmp-checkpoint-N``, which the main process renames to ``checkpoint-N`` once it is complete (with
  ``contrastive_state.pt``, the trainer's ``contrastive_state_dict()``). A killed run leaves a
  ``tmp-checkpoint-N`` that nothing reads.
- ``_load_from_checkpoint`` / ``_load_best_model``: read the encoder from ``hf_contrast/`` (the root
  ``model.safetensors`` is the bare backbone) and restore ``load_contrastive_state_dict``.
- ``train(resume_from_checkpoint=True)``: the newest *complete* checkpoint
  (:func:`checkpoint_problem`), with a warning naming each newer incomplete one.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import os
import re
import shutil
import struct
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from hf_contrast.models.export import HUB_SUBFOLDER

from .loss_terms import NonFiniteLossError

__all__ = [
    "CheckpointingMixin",
    "CONTRASTIVE_STATE_NAME",
    "STAGING_PREFIX",
    "sanitized_training_args",
    "checkpoint_problem",
    "last_complete_checkpoint",
    "first_nonfinite_tensor",
]

logger = logging.getLogger(__name__)

CONTRASTIVE_STATE_NAME = "contrastive_state.pt"
TRAINING_ARGS_NAME = "training_args.bin"
TRAINER_STATE_NAME = "trainer_state.json"
OPTIMIZER_NAME = "optimizer.pt"
#: Prefix of the folder a checkpoint is written to before it is renamed to ``checkpoint-N``.
STAGING_PREFIX = "tmp-"
_CHECKPOINT_RE = re.compile(rf"^{PREFIX_CHECKPOINT_DIR}-(\d+)$")
_TOKEN_FIELD_RE = re.compile(r"^(.*_)?token$")


def sanitized_training_args(args: Any) -> Any:
    """A shallow copy of ``args`` with every token field (``hub_token``, ``*_token``) set to ``None``.

    What ``training_args.bin`` stores, so no secret reaches the disk or the Hub. The original is not changed.
    """
    clean = copy.copy(args)
    names = [field.name for field in dataclasses.fields(args)] if dataclasses.is_dataclass(args) else list(vars(args))
    for name in names:
        if _TOKEN_FIELD_RE.match(name) and getattr(clean, name, None) is not None:
            setattr(clean, name, None)
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


def _safetensors_problem(path: Path) -> str | None:
    """Why the safetensors file at ``path`` is unreadable (truncated, bad header), else ``None``."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as handle:
            (header_length,) = struct.unpack("<Q", handle.read(8))
            if header_length > size - 8:
                return f"{path.name} is truncated (header)"
            header = json.loads(handle.read(header_length))
        ends = [entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"]
        if 8 + header_length + max(ends, default=0) != size:
            return f"{path.name} is truncated ({size} bytes, the header describes {8 + header_length + max(ends, default=0)})"
    except (OSError, ValueError, KeyError, struct.error) as error:
        return f"{path.name} is unreadable ({type(error).__name__}: {error})"
    return None


def _weights_problem(folder: Path) -> str | None:
    for candidate in (folder / HUB_SUBFOLDER, folder):
        index = candidate / "model.safetensors.index.json"
        single = candidate / "model.safetensors"
        if index.is_file():
            try:
                shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
            except (OSError, ValueError, KeyError) as error:
                return f"{index.name} is unreadable ({error})"
            for shard in shards:
                problem = _safetensors_problem(candidate / shard) if (candidate / shard).is_file() else f"{shard} is missing"
                if problem:
                    return problem
            return None
        if single.is_file():
            return _safetensors_problem(single)
        if (candidate / "pytorch_model.bin").is_file():
            return None
    return "no model weights"


def checkpoint_problem(folder: str | os.PathLike[str], require_optimizer: bool = True) -> str | None:
    """Why ``folder`` cannot be resumed from, or ``None`` if it is a complete checkpoint.

    Complete = a parseable ``trainer_state.json``, readable weights (the encoder in ``hf_contrast/`` or
    a flat save: safetensors headers and sizes checked), and ``optimizer.pt`` (unless
    ``require_optimizer=False``, for ``save_only_model`` runs).

    Args:
        folder: A ``checkpoint-N`` folder.
        require_optimizer: Whether the optimizer state must be there.

    Returns:
        A short reason (``"trainer_state.json is missing"``...) or ``None``.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return "not a directory"
    state = folder / TRAINER_STATE_NAME
    if not state.is_file():
        return f"{TRAINER_STATE_NAME} is missing"
    try:
        json.loads(state.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        return f"{TRAINER_STATE_NAME} is unreadable ({error})"
    problem = _weights_problem(folder)
    if problem:
        return problem
    if require_optimizer and not any((folder / name).is_file() and (folder / name).stat().st_size > 0 for name in (OPTIMIZER_NAME, "optimizer.bin")):
        return f"{OPTIMIZER_NAME} is missing"
    return None


def last_complete_checkpoint(output_dir: str | os.PathLike[str], require_optimizer: bool = True) -> str | None:
    """The newest complete ``checkpoint-N`` in ``output_dir`` (by step), warning about newer incomplete ones.

    Args:
        output_dir: The training output folder.
        require_optimizer: See :func:`checkpoint_problem`.

    Returns:
        The path, or ``None`` if there is no complete checkpoint.
    """
    if not os.path.isdir(output_dir):
        return None
    found = [(int(m.group(1)), name) for name in os.listdir(output_dir) if (m := _CHECKPOINT_RE.match(name))]
    for _, name in sorted(found, reverse=True):
        path = os.path.join(output_dir, name)
        problem = checkpoint_problem(path, require_optimizer)
        if problem is None:
            return path
        logger.warning("Skipping the incomplete checkpoint %s (%s); resuming from an older one.", path, problem)
    return None


class CheckpointingMixin:
    """Safe saving and resuming for a ``transformers.Trainer`` subclass (put it before ``Trainer``).

    Optional trainer hooks: ``contrastive_state_dict() -> dict`` (saved as ``contrastive_state.pt``
    in every checkpoint when not empty) and ``load_contrastive_state_dict(state)``.

    Example:
        >>> class MyTrainer(CheckpointingMixin, Trainer):  # doctest: +SKIP
        ...     def contrastive_state_dict(self): return {"loss": self.loss.state_dict()}
        ...     def load_contrastive_state_dict(self, state): self.loss.load_state_dict(state["loss"])
    """

    # ---- saving --------------------------------------------------------------------------------

    def _save(self, output_dir: str | None = None, state_dict: dict[str, Any] | None = None) -> None:
        """``model.save_pretrained`` (the save layout), the processing class, and token-free ``training_args.bin``."""
        output_dir = output_dir if output_dir is not None else self.args.output_dir
        if not self.args.should_save and not getattr(self, "is_distributed_loading_by_transformers", False):
            return
        from transformers import PreTrainedModel

        model = self.accelerator.unwrap_model(self.model, keep_torch_compile=False) if hasattr(self, "accelerator") else self.model
        if isinstance(model, PreTrainedModel) or hasattr(model, "save_pretrained"):
            model.save_pretrained(output_dir, state_dict=state_dict, is_main_process=self.args.should_save)
        elif self.args.should_save:
            import safetensors.torch

            os.makedirs(output_dir, exist_ok=True)
            state = state_dict if state_dict is not None else model.state_dict()
            safetensors.torch.save_file(state, os.path.join(output_dir, "model.safetensors"), metadata={"format": "pt"})
        if not self.args.should_save:
            return
        processor = self.processing_class
        if processor is None and getattr(getattr(self, "data_collator", None), "tokenizer", None) is not None:
            processor = self.data_collator.tokenizer
        if processor is not None and processor is not getattr(model, "tokenizer", None):
            processor.save_pretrained(output_dir)
        torch.save(sanitized_training_args(self.args), os.path.join(output_dir, TRAINING_ARGS_NAME))

    def _save_checkpoint(self, model: nn.Module, trial: Any) -> None:
        """Write ``checkpoint-N`` atomically (``tmp-checkpoint-N`` then a rename), refusing non-finite weights.

        Raises:
            NonFiniteLossError: (a ``RuntimeError``) if a parameter or buffer of the model is NaN/inf:
                nothing is written, the previous checkpoints stay the newest.
        """
        from transformers.trainer_utils import SaveStrategy, rotate_checkpoints

        step = self.state.global_step
        bad = first_nonfinite_tensor(self.model)
        if bad is not None:
            raise NonFiniteLossError(
                f"Refusing to write {PREFIX_CHECKPOINT_DIR}-{step}: `{bad}` of the model holds NaN/inf at step {step}. "
                "The newest checkpoint already written is still intact; resume from it with a lower learning rate, "
                "gradient clipping (`max_grad_norm`) or another seed."
            )
        name = f"{PREFIX_CHECKPOINT_DIR}-{step}"
        run_dir = self._get_output_dir(trial=trial)
        final = os.path.join(run_dir, name)
        staging = os.path.join(run_dir, STAGING_PREFIX + name)
        if self.args.should_save and os.path.exists(staging):
            shutil.rmtree(staging)  # left by a killed run
        self.accelerator.wait_for_everyone()

        if self.hp_search_backend is None and trial is None:
            self.store_flos()
        self.save_model(staging, _internal_call=True)
        state = self.contrastive_state_dict() if hasattr(self, "contrastive_state_dict") else {}
        if self.args.should_save and state:
            os.makedirs(staging, exist_ok=True)
            torch.save(state, os.path.join(staging, CONTRASTIVE_STATE_NAME))

        save_strategies = (SaveStrategy.STEPS, SaveStrategy.EPOCH, getattr(SaveStrategy, "BEST", SaveStrategy.STEPS))
        if self.args.save_strategy in save_strategies and self.state.best_global_step:
            best = os.path.join(run_dir, f"{PREFIX_CHECKPOINT_DIR}-{self.state.best_global_step}")
            if self.state.best_global_step == step or os.path.exists(best):
                self.state.best_model_checkpoint = best
        if not self.args.save_only_model:
            self._save_optimizer_and_scheduler(staging)
            self._save_scaler(staging)
            self._save_rng_state(staging)
        if self.args.should_save:
            from transformers.trainer_callback import ExportableState

            for callback in [cb for cb in self.callback_handler.callbacks + [self.control] if isinstance(cb, ExportableState)]:
                callback_name = callback.__class__.__name__
                if isinstance(self.state.stateful_callbacks.get(callback_name), list):
                    self.state.stateful_callbacks[callback_name].append(callback.state())
                else:
                    self.state.stateful_callbacks[callback_name] = callback.state()
            self.state.save_to_json(os.path.join(staging, TRAINER_STATE_NAME))

        self.accelerator.wait_for_everyone()
        if self.args.should_save:
            if os.path.exists(final):  # a checkpoint of the same step from an earlier run: replace it
                old = os.path.join(run_dir, f"{STAGING_PREFIX}old-{name}")
                shutil.rmtree(old, ignore_errors=True)
                os.replace(final, old)
                os.replace(staging, final)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(staging, final)
        self.accelerator.wait_for_everyone()

        if self.args.push_to_hub:
            self._push_from_checkpoint(final)
        if self.args.should_save:
            rotate_checkpoints(
                output_dir=run_dir,
                save_total_limit=self.args.save_total_limit,
                best_model_checkpoint=self.state.best_model_checkpoint,
                use_mtime=True,
            )

    # ---- loading -------------------------------------------------------------------------------

    def _load_encoder_weights(self, folder: str, model: nn.Module) -> bool:
        """Load ``folder/hf_contrast``'s weights into ``model``; ``False`` if the folder is not in the save layout."""
        subfolder = os.path.join(folder, HUB_SUBFOLDER)
        if getattr(self, "is_deepspeed_enabled", False) or getattr(self, "is_fsdp_enabled", False):
            return False
        safe = os.path.join(subfolder, "model.safetensors")
        if os.path.isfile(safe):
            import safetensors.torch

            state = safetensors.torch.load_file(safe, device="cpu")
            result = model.load_state_dict(state, False)
        elif os.path.isfile(os.path.join(subfolder, "model.safetensors.index.json")):
            from transformers.modeling_utils import load_sharded_checkpoint

            result = load_sharded_checkpoint(model, subfolder, strict=False)
        else:
            return False
        self._issue_warnings_after_load(result)
        return True

    def _load_contrastive_state(self, folder: str) -> None:
        path = os.path.join(folder, CONTRASTIVE_STATE_NAME)
        if os.path.isfile(path) and hasattr(self, "load_contrastive_state_dict"):
            self.load_contrastive_state_dict(torch.load(path, map_location=self.args.device, weights_only=True))

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: nn.Module | None = None) -> None:
        """The encoder from ``hf_contrast/`` (else Trainer's loading), then ``contrastive_state.pt``."""
        if not self._load_encoder_weights(resume_from_checkpoint, model if model is not None else self.model):
            super()._load_from_checkpoint(resume_from_checkpoint, model)
        self._load_contrastive_state(resume_from_checkpoint)

    def _load_best_model(self) -> None:
        """Like ``Trainer._load_best_model``, reading the encoder from the best checkpoint's ``hf_contrast/``."""
        best = self.state.best_model_checkpoint
        model = self.model_wrapped if getattr(self, "is_sagemaker_mp_enabled", False) else self.model
        logger.info("Loading best model from %s (score: %s).", best, self.state.best_metric)
        if not self._load_encoder_weights(best, model):
            super()._load_best_model()
        self._load_contrastive_state(best)

    # ---- resuming ------------------------------------------------------------------------------

    def train(self, resume_from_checkpoint: str | bool | None = None, *args: Any, **kwargs: Any) -> Any:
        """``Trainer.train``; ``resume_from_checkpoint=True`` resumes from the newest *complete* checkpoint.

        Raises:
            ValueError: If ``resume_from_checkpoint=True`` finds no complete checkpoint in ``output_dir``,
                or a given checkpoint folder is incomplete (with the reason).
        """
        require_optimizer = not self.args.save_only_model
        if resume_from_checkpoint is True:
            resume_from_checkpoint = last_complete_checkpoint(self.args.output_dir, require_optimizer)
            if resume_from_checkpoint is None:
                raise ValueError(
                    f"`resume_from_checkpoint=True` found no complete checkpoint in `output_dir`={self.args.output_dir!r}: "
                    "pass a checkpoint folder, or `resume_from_checkpoint=None` to start from scratch."
                )
        elif isinstance(resume_from_checkpoint, (str, os.PathLike)):
            problem = checkpoint_problem(resume_from_checkpoint, require_optimizer)
            if problem is not None:
                raise ValueError(
                    f"`resume_from_checkpoint`={str(resume_from_checkpoint)!r} is not a complete checkpoint ({problem}); "
                    "pass another one, or `True` for the newest complete one."
                )
            resume_from_checkpoint = str(resume_from_checkpoint)
        return super().train(resume_from_checkpoint, *args, **kwargs)
