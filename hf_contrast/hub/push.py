"""Pushing a bare encoder to the Hub (:func:`push_encoder_to_hub`); the upload itself is
:func:`~hf_contrast.hub.upload.upload_model_folder`, also used by the trainers' pushes."""

from __future__ import annotations

import tempfile
from typing import Any

from hf_contrast.errors import InputError
from hf_contrast.hub.card_storage import get_model_card_data
from hf_contrast.hub.upload import upload_model_folder

__all__ = ["push_encoder_to_hub", "save_and_push"]


def push_encoder_to_hub(encoder: Any, repo_id: str, **kwargs: Any) -> Any:
    """``encoder.push_to_hub(repo_id, **kwargs)``: ``save_pretrained`` into a temporary folder (card included,
    naming the repository), then one commit through :func:`~hf_contrast.hub.upload.upload_model_folder` (a
    hand-written Hub README is kept unless ``replace_model_card=True``). See ``ContrastiveEncoder.push_to_hub``
    for the arguments."""
    return encoder.push_to_hub(repo_id, **kwargs)


def save_and_push(
    model: Any,
    repo_id: str,
    *,
    commit_message: str | None,
    commit_description: str | None,
    private: bool | None,
    token: str | bool | None,
    revision: str | None,
    create_pr: bool,
    replace_model_card: bool,
    save_kwargs: dict[str, Any],
) -> Any:
    """The body of ``ContrastiveEncoder.push_to_hub`` (see it for the arguments): create the repository (and
    the branch ``revision``), name it in the card data, ``model.save_pretrained`` into a temporary folder and
    upload that folder in one commit (:func:`~hf_contrast.hub.upload.upload_model_folder`).

    Returns:
        The ``huggingface_hub.CommitInfo``.

    Raises:
        InputError: If ``repo_id`` is empty or ``revision`` is combined with ``create_pr``.
    """
    from huggingface_hub import HfApi

    if not isinstance(repo_id, str) or not repo_id.strip("/"):
        raise InputError(f"`repo_id` must be a Hub repository id like 'user/name', got {repo_id!r}.")
    if create_pr and revision not in (None, "main"):
        raise InputError(
            f"`create_pr=True` opens a pull request against `main`; got `revision={revision!r}`: pass one or the "
            "other."
        )
    api = HfApi(token=token, library_name="hf_contrast", library_version=_library_version())
    repo_id = api.create_repo(repo_id, private=private, exist_ok=True).repo_id
    if revision not in (None, "main"):
        api.create_branch(repo_id, branch=revision, exist_ok=True)
    get_model_card_data(model).model_id = repo_id  # the card's snippets name the repository
    with tempfile.TemporaryDirectory(prefix="hf_contrast_push_") as folder:
        model.save_pretrained(folder, **save_kwargs)
        return upload_model_folder(
            folder,
            repo_id,
            api=api,
            commit_message=commit_message or "Upload hf_contrast encoder",
            commit_description=commit_description,
            revision=revision,
            create_pr=create_pr,
            replace_model_card=replace_model_card,
        )


def _library_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hf_contrast")
    except PackageNotFoundError:
        return "unknown"
