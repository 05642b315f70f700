"""The trainers' Hub side: ``push_to_hub`` and checkpoint pushes upload the folder ``save_pretrained`` writes.

Mixed into ``ContrastiveTrainer``. It keeps ``transformers.Trainer``'s flow (the repository named by
``hub_model_id``, ``save_model``, ``create_model_card``, background checkpoint pushes with
``hub_strategy``) and changes four things:

- the card is hf_contrast's (:mod:`hf_contrast.hub`, filled by ``ModelCardCallback``), not
  the Trainer's generic one;
- every upload goes through :func:`hf_contrast.hub.upload_model_folder`: a README.md on the
  Hub that a person wrote is kept unless ``push_to_hub(replace_model_card=True)`` (or
  ``trainer.replace_model_card = True`` for the checkpoint pushes);
- what is uploaded is what ``SafeCheckpointing._save`` wrote: ``training_args.bin`` without
  ``hub_token`` (:func:`~hf_contrast.training.checkpointing.sanitized_training_args`);
- an uploaded ``trainer_state.json`` names the best checkpoint relative to ``output_dir``
  (:func:`portable_trainer_state`): ``push_to_hub`` rewrites the one ``save_state`` wrote in ``output_dir``
  so before uploading it (the background checkpoint pushes leave it to the final push, so that one read
  while ``save_state`` writes it is never published), and a pushed checkpoint's copy is rewritten so in
  the upload (the local checkpoint keeps the path the Trainer reads when resuming).

``push_to_hub`` and ``create_model_card`` are public ``Trainer`` methods; ``_push_from_checkpoint``
is a private override, explained with the others in docs/training.md ("What the trainer overrides, and why").
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from huggingface_hub import CommitOperationAdd, HfApi
from transformers.trainer_utils import HubStrategy, SaveStrategy
from transformers.utils import PushInProgress, logging

from hf_contrast.hub import HUB_SUBFOLDER, get_model_card_data, save_card_data, upload_model_folder, write_model_card
from hf_contrast.progress import progress_bars_disabled

__all__ = ["HubPublishingMixin", "portable_trainer_state"]

# Trainer state in a checkpoint folder: needed to resume, not part of the model folder pushed at the root.
_TRAINER_STATE_SUFFIXES = (".pt", ".pth")
_TRAINER_STATE_NAME = "trainer_state.json"
_TRAINER_STATE_FILES = frozenset({_TRAINER_STATE_NAME})
# Never uploaded from output_dir: private files, checkpoints and the staging folders of interrupted saves.
_NOT_PUSHED = ["_*", ".*", "checkpoint-*", "tmp-checkpoint-*"]

logger = logging.get_logger(__name__)  # follows the Trainer's log level (hf_contrast.progress)


def portable_trainer_state(state: dict[str, Any], output_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """A copy of a ``trainer_state.json`` dict whose absolute paths name no local folder.

    ``best_model_checkpoint`` (an absolute path when ``output_dir`` is one) becomes its path relative to
    ``output_dir`` (``"checkpoint-500"``), or its last folder name when it lies elsewhere; any other
    absolute path among the top-level strings is treated the same way.
    """
    root = os.path.abspath(output_dir)
    clean = dict(state)
    for key, value in state.items():
        if isinstance(value, str) and os.path.isabs(value):
            inside = os.path.commonpath([root, os.path.abspath(value)]) == root
            clean[key] = os.path.relpath(value, root) if inside else os.path.basename(os.path.normpath(value))
    return clean


def _portable_state_text(path: Path, output_dir: str | os.PathLike[str]) -> str:
    """The ``trainer_state.json`` at ``path`` as :func:`portable_trainer_state` makes it, formatted as the Trainer
    writes the file (``TrainerState.save_to_json``: two-space indent, sorted keys, a final newline)."""
    state = portable_trainer_state(json.loads(path.read_text(encoding="utf-8")), output_dir)
    return json.dumps(state, indent=2, sort_keys=True) + "\n"


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

        Takes ``Trainer.create_model_card``'s arguments: ``language``, ``license``, ``tags``,
        ``model_name``; ``finetuned_from`` (the base model's Hub id); ``dataset_tags`` (Hub dataset ids)
        with ``dataset`` (their names); ``dataset`` alone renames the training datasets the card lists
        (one name per dataset). Ignored, with a warning: ``tasks`` (an hf_contrast card's task
        is the encoder's feature extraction) and ``dataset_args`` (dataset configurations have no place
        in the card). A README.md in ``output_dir`` that
        hf_contrast did not write is kept. The model saved in ``output_dir`` gets the updated card data
        (``hf_contrast/model_card.json``), so loading it back keeps these fields.
        """
        ignored = [name for name, value in (("dataset_args", dataset_args), ("tasks", tasks)) if value is not None]
        if ignored:
            logger.warning(
                "create_model_card: %s not used by hf_contrast cards (their task is feature extraction); "
                "set fields on `trainer.model.model_card_data` for anything else.",
                ", ".join(f"`{name}`" for name in ignored),
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
                name = names[index] if index < len(names) else dataset_id
                data.train_datasets.append(
                    {"id": dataset_id, "name": name, "size": None}
                )  # the card template reads `size`
        if names and not ids:  # names alone: the names of the training data the card already lists
            if len(names) == len(data.train_datasets):
                for entry, name in zip(data.train_datasets, names):
                    entry["name"] = name
            else:
                logger.warning(
                    "create_model_card: `dataset`=%r gives %d name(s) for %d training dataset(s) in the card; "
                    "not used. "
                    "Name the data when loading it (`dataset_name=`) or pass one name per training dataset.",
                    dataset,
                    len(names),
                    len(data.train_datasets),
                )
        self._set_card_model_id()
        write_model_card(self.model, self.args.output_dir)
        encoder_folder = Path(self.args.output_dir) / HUB_SUBFOLDER
        if encoder_folder.is_dir():  # the saved model carries the card data the README was made from
            save_card_data(self.model, encoder_folder)

    def _create_hub_repo(self, token: str | None, private: bool | None) -> None:
        """Create (or reuse) the repository ``args.hub_model_id`` (default: the name of ``output_dir``)."""
        name = self.args.hub_model_id or Path(self.args.output_dir).absolute().name
        private = private if private is not None else self.args.hub_private_repo
        self.hub_model_id = HfApi(token=token).create_repo(name, private=private, exist_ok=True).repo_id
        self.push_in_progress = None

    def _wait_for_checkpoint_pushes(self) -> None:
        pushes = getattr(self, "push_in_progress", None)
        if pushes is not None and not pushes.is_done():
            logger.info("Waiting for the checkpoint pushes in progress to finish.")
            pushes.wait_until_done()

    def _portable_output_state(self) -> None:
        """Before ``output_dir`` is uploaded: its ``trainer_state.json`` (written by ``save_state``), if there is
        one, names the best checkpoint relative to ``output_dir`` (:func:`portable_trainer_state`), so that no
        local path is published. Main process only; the checkpoints keep the path the Trainer resumes from."""
        path = Path(self.args.output_dir) / _TRAINER_STATE_NAME
        if not path.is_file():
            return
        portable = _portable_state_text(path, self.args.output_dir)
        if portable != path.read_text(encoding="utf-8"):
            # written beside it, then swapped in: an interrupted rewrite leaves the file whole
            staged = path.with_name(f".{_TRAINER_STATE_NAME}.tmp")
            staged.write_text(portable, encoding="utf-8")
            os.replace(staged, path)

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
        ``output_dir``), created if needed (``private`` or ``args.hub_private_repo``), ``kwargs`` go to
        :meth:`create_model_card`, and only the main process uploads, after the checkpoint pushes in
        progress. ``replace_model_card=True`` replaces a README.md on the Hub that a person wrote
        (kept by default, with a warning).

        With ``args.disable_tqdm`` no progress bar (the Hub's upload bars run after ``save_model``, outside every
        ``Trainer`` hook).

        Returns:
            The ``CommitInfo`` (a ``Future`` of it with ``blocking=False``); ``None`` on other processes.
        """
        with progress_bars_disabled(self.args.disable_tqdm):
            self.callback_handler.on_push_begin(self.args, self.state, self.control)
            if replace_model_card is not None:
                self.replace_model_card = bool(replace_model_card)
            model_name = kwargs.pop("model_name", None)
            token = token if token is not None else self.args.hub_token
            if getattr(self, "hub_model_id", None) is None and self.is_world_process_zero():
                self._create_hub_repo(token, private)
            self._set_card_model_id()
            self.save_model(_internal_call=True)
            if not self.is_world_process_zero():
                return None
            self.create_model_card(model_name=model_name, **kwargs)
            self._wait_for_checkpoint_pushes()
            self._portable_output_state()
            return upload_model_folder(
                self.args.output_dir,
                self.hub_model_id,
                api=HfApi(token=token),
                commit_message=commit_message or "End of training",
                revision=revision if revision is not None else self.args.hub_revision,
                replace_model_card=self.replace_model_card,
                ignore_patterns=_NOT_PUSHED,
                run_as_future=not blocking,
            )

    # Private override (docs/training.md): the Trainer's own writes the token and overwrites a hand-written card.
    def _push_from_checkpoint(self, checkpoint_folder: str) -> None:
        """``Trainer._push_from_checkpoint`` for the one layout: the checkpoint's model folder (every
        file but the trainer state) replaces the one in ``output_dir``, which is uploaded in the
        background; ``hub_strategy="checkpoint"``/``"all_checkpoints"`` also upload the checkpoint."""
        pushes = getattr(self, "push_in_progress", None)
        if not self.is_world_process_zero() or self.args.hub_strategy == HubStrategy.END:
            return
        if not self.args.hub_always_push and pushes is not None and not pushes.is_done():
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
        api = HfApi(token=self.args.hub_token)
        jobs = [
            upload_model_folder(
                output_dir, self.hub_model_id, api=api, commit_message=commit_message, revision=self.args.hub_revision,
                replace_model_card=self.replace_model_card, ignore_patterns=[*_NOT_PUSHED, _TRAINER_STATE_NAME],
                run_as_future=True,
            )
        ]  # fmt: skip
        if self.args.hub_strategy in (HubStrategy.CHECKPOINT, HubStrategy.ALL_CHECKPOINTS):
            path_in_repo = (
                "last-checkpoint"
                if self.args.hub_strategy == HubStrategy.CHECKPOINT
                else os.path.basename(checkpoint_folder)
            )
            jobs.append(
                api.create_commit(
                    repo_id=self.hub_model_id, operations=self._checkpoint_upload(checkpoint_folder, path_in_repo),
                    commit_message=commit_message + ", checkpoint", revision=self.args.hub_revision,
                    run_as_future=True,
                )
            )  # fmt: skip
        if pushes is None or pushes.is_done():
            self.push_in_progress = PushInProgress(jobs)
        else:
            pushes.jobs.extend(jobs)

    def _checkpoint_upload(self, checkpoint_folder: str, path_in_repo: str) -> list[CommitOperationAdd]:
        """Every file of a checkpoint under ``path_in_repo``; its ``trainer_state.json`` as
        :func:`portable_trainer_state` writes it (the local file keeps the absolute path for resuming)."""
        folder = Path(checkpoint_folder)
        operations = []
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            target = f"{path_in_repo}/{path.relative_to(folder).as_posix()}"
            content: str | bytes = str(path)
            if path.relative_to(folder).as_posix() == _TRAINER_STATE_NAME:
                content = _portable_state_text(path, self.args.output_dir).encode("utf-8")
            operations.append(CommitOperationAdd(path_in_repo=target, path_or_fileobj=content))
        return operations
