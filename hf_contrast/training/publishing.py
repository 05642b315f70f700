"""The trainers' Hub side: ``push_to_hub`` and checkpoint pushes upload the folder ``save_pretrained`` writes.

Mixed into ``ContrastiveTrainer``. It keeps ``transformers.Trainer``'s flow (``init_hf_repo``,
``save_model``, ``create_model_card``, background checkpoint pushes with ``hub_strategy``) and
changes three things:

- the card is hf_contrast's (:mod:`hf_contrast.model_card`, filled by ``ModelCardCallback``), not
  the Trainer's generic one;
- every upload goes through :func:`hf_contrast.hub.push.upload_model_folder`: a README.md on the
  Hub that a person wrote is kept unless ``push_to_hub(replace_model_card=True)`` (or
  ``trainer.replace_model_card = True`` for the checkpoint pushes);
- what is uploaded is what ``CheckpointingMixin._save`` wrote: ``training_args.bin`` without
  ``hub_token`` (:func:`~hf_contrast.training.checkpointing.sanitized_training_args`).
"""

from __future__ import annotations

import copy
import os
import shutil
from pathlib import Path
from typing import Any

from transformers.trainer_utils import HubStrategy, SaveStrategy
from transformers.utils import PushInProgress

from hf_contrast.model_card import get_model_card_data, write_model_card
from hf_contrast.models.upload import upload_model_folder

__all__ = ["HubPublishingMixin"]

# Trainer state in a checkpoint folder: needed to resume, not part of the model folder pushed at the root.
_TRAINER_STATE_SUFFIXES = (".pt", ".pth")
_TRAINER_STATE_FILES = frozenset({"trainer_state.json"})


class HubPublishingMixin:
    """``push_to_hub``, ``create_model_card`` and checkpoint pushes of the contrastive trainers."""

    #: Replace a README.md on the Hub that hf_contrast did not generate (checkpoint pushes read it too).
    replace_model_card: bool = False

    def _set_card_model_id(self) -> None:
        repo_id = getattr(self, "hub_model_id", None)
        if repo_id:
            get_model_card_data(self.model).model_id = repo_id

    def create_model_card(
        self,
        language: str | list[str] | None = None,
        license: str | None = None,  # noqa: A002 - Trainer.create_model_card's name
        tags: str | list[str] | None = None,
        model_name: str | None = None,
        finetuned_from: str | None = None,
        tasks: str | list[str] | None = None,
        dataset_tags: str | list[str] | None = None,
        dataset: str | list[str] | None = None,
        dataset_args: str | list[str] | None = None,
    ) -> None:
        """Write hf_contrast's card into ``output_dir``, after setting the given fields on ``model.model_card_data``.

        Takes ``Trainer.create_model_card``'s arguments: ``dataset_tags`` are Hub dataset ids,
        ``dataset`` their names, ``finetuned_from`` the base model's Hub id. A README.md in
        ``output_dir`` that hf_contrast did not write is kept.

        Raises:
            ValueError: For ``tasks`` / ``dataset_args``, which hf_contrast cards do not use.
        """
        if tasks is not None or dataset_args is not None:
            raise ValueError(
                "`tasks` and `dataset_args` have no place in an hf_contrast card (its task is feature extraction); "
                "set fields on `trainer.model.model_card_data` instead."
            )
        if not self.is_world_process_zero():
            return
        data = get_model_card_data(self.model)
        data.language = language if language is not None else data.language
        data.license = license if license is not None else data.license
        data.model_name = model_name if model_name is not None else data.model_name
        data.base_model = finetuned_from if finetuned_from is not None else data.base_model
        if tags:
            data.add_tags(tags)
        ids = [dataset_tags] if isinstance(dataset_tags, str) else list(dataset_tags or [])
        names = [dataset] if isinstance(dataset, str) else list(dataset or [])
        known = {entry.get("id") for entry in data.train_datasets}
        for index, dataset_id in enumerate(ids):
            if dataset_id not in known:
                data.train_datasets.append({"id": dataset_id, "name": names[index] if index < len(names) else dataset_id})
        self._set_card_model_id()
        write_model_card(self.model, self.args.output_dir)

    def push_to_hub(
        self,
        commit_message: str | None = "End of training",
        blocking: bool = True,
        token: str | None = None,
        revision: str | None = None,
        private: bool | None = None,
        replace_model_card: bool | None = None,
        **kwargs: Any,
    ) -> Any:
        """Save the model to ``output_dir`` (``save_pretrained``'s one layout, card included) and upload it.

        As ``Trainer.push_to_hub``: the repository is ``args.hub_model_id`` (or the name of
        ``output_dir``), ``kwargs`` go to :meth:`create_model_card` (``license``, ``tags``,
        ``language``, ``model_name``, ``finetuned_from``, ``dataset_tags``, ``dataset``), and only
        the main process uploads. ``replace_model_card=True`` replaces a README.md on the Hub that
        a person wrote (kept by default, with a warning).

        Returns:
            The ``CommitInfo`` (a ``Future`` of it with ``blocking=False``); ``None`` on other processes.
        """
        from transformers.utils.hub import hf_api

        self.callback_handler.on_push_begin(self.args, self.state, self.control)
        if replace_model_card is not None:
            self.replace_model_card = bool(replace_model_card)
        model_name = kwargs.pop("model_name", None)
        token = token if token is not None else self.args.hub_token
        if getattr(self, "hub_model_id", None) is None:
            self.init_hf_repo(token=token, private=private)
        self._set_card_model_id()
        self.save_model(_internal_call=True)
        if not self.is_world_process_zero():
            return None
        self.create_model_card(model_name=model_name, **kwargs)
        self._finish_current_push()
        api = copy.copy(hf_api())
        api.token = token
        return upload_model_folder(
            self.args.output_dir,
            self.hub_model_id,
            api=api,
            commit_message=commit_message or "End of training",
            revision=revision if revision is not None else self.args.hub_revision,
            replace_model_card=self.replace_model_card,
            ignore_patterns=["_*", "checkpoint-*", "tmp-checkpoint-*"],
            run_as_future=not blocking,
        )

    def _push_from_checkpoint(self, checkpoint_folder: str) -> None:
        """``Trainer._push_from_checkpoint`` for the one layout: the checkpoint's model folder (every
        file but the trainer state) replaces the one in ``output_dir``, which is uploaded in the
        background; ``hub_strategy="checkpoint"``/``"all_checkpoints"`` also upload the checkpoint."""
        from transformers.utils.hub import hf_api

        if not self.is_world_process_zero() or self.args.hub_strategy == HubStrategy.END:
            return
        if not self.args.hub_always_push and self.push_in_progress is not None and not self.push_in_progress.is_done():
            return
        self.callback_handler.on_push_begin(self.args, self.state, self.control)
        output_dir = Path(self.args.output_dir)
        for item in Path(checkpoint_folder).iterdir():
            if item.name in _TRAINER_STATE_FILES or item.name.endswith(_TRAINER_STATE_SUFFIXES):
                continue
            target = output_dir / item.name
            if item.is_dir():
                shutil.copytree(item, target, dirs_exist_ok=True)
            else:
                shutil.copy2(item, target)
        if self.args.save_strategy == SaveStrategy.STEPS:
            commit_message = f"Training in progress, step {self.state.global_step}"
        else:
            commit_message = f"Training in progress, epoch {int(self.state.epoch)}"
        api = copy.copy(hf_api())
        api.token = self.args.hub_token
        jobs = [
            upload_model_folder(
                output_dir, self.hub_model_id, api=api, commit_message=commit_message, revision=self.args.hub_revision,
                replace_model_card=self.replace_model_card, ignore_patterns=["_*", "checkpoint-*", "tmp-checkpoint-*"], run_as_future=True,
            )
        ]
        if self.args.hub_strategy in (HubStrategy.CHECKPOINT, HubStrategy.ALL_CHECKPOINTS):
            path_in_repo = "last-checkpoint" if self.args.hub_strategy == HubStrategy.CHECKPOINT else os.path.basename(checkpoint_folder)
            jobs.append(
                api.upload_folder(
                    repo_id=self.hub_model_id, folder_path=checkpoint_folder, path_in_repo=path_in_repo,
                    commit_message=commit_message + ", checkpoint", revision=self.args.hub_revision, run_as_future=True,
                )
            )
        if self.push_in_progress is None or self.push_in_progress.is_done():
            self.push_in_progress = PushInProgress(jobs)
        else:
            self.push_in_progress.jobs.extend(jobs)
