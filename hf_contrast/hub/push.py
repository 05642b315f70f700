"""Push an encoder to the Hugging Face Hub: weights, config, preprocessing, native exports, card."""

from __future__ import annotations

import copy
import logging
import tempfile
from typing import Any

from huggingface_hub import HfApi

from hf_contrast.hub.model_card import ContrastiveModelCardData

__all__ = ["push_encoder_to_hub"]

logger = logging.getLogger(__name__)


def push_encoder_to_hub(
    encoder: Any,
    repo_id: str,
    *,
    card_data: ContrastiveModelCardData | None = None,
    private: bool | None = None,
    token: str | bool | None = None,
    commit_message: str | None = "Upload hf_contrast encoder",
    revision: str | None = None,
    create_pr: bool = False,
) -> str:
    """Upload an encoder to the Hub in one commit, loadable with and without hf_contrast.

    Creates the repository if needed, writes the Hub layout with
    ``hf_contrast.models.export.save_for_hub`` into a temporary directory (the native timm /
    transformers / sentence-transformers export at the root, the full encoder in ``hf_contrast/``,
    a generated ``README.md``) and uploads it with ``HfApi.upload_folder``.

    Args:
        encoder: The ``ContrastiveEncoder`` to push.
        repo_id: ``"user/name"`` (or ``"name"`` for your own namespace).
        card_data: What the model card says beyond the encoder; its ``model_id`` defaults to
            the repository id (used in the card's usage snippets).
        private: Visibility of a newly created repository (``None``: the account's default).
            Ignored if the repository exists.
        token: A Hub token; defaults to the stored login (``hf auth login``) or ``HF_TOKEN``.
        commit_message: The commit title (``None``: the default one).
        revision: The branch to push to (created from ``main`` if missing); defaults to ``main``.
        create_pr: Open a pull request instead of committing to the branch.

    Returns:
        The commit url (a ``huggingface_hub.CommitInfo``, a ``str`` that also carries ``oid``
        and ``pr_url``).

    Raises:
        ValueError: If ``repo_id`` is empty or ``revision`` is combined with ``create_pr``.
        huggingface_hub.errors.HfHubHTTPError: If the Hub refuses the request (authentication,
            permissions).
    """
    if not isinstance(repo_id, str) or not repo_id.strip("/"):
        raise ValueError(f"`repo_id` must be a Hub repository id like 'user/name', got {repo_id!r}")
    if create_pr and revision not in (None, "main"):
        raise ValueError(f"`create_pr=True` opens a pull request against `main`; got `revision={revision!r}`, pass one or the other")
    from hf_contrast import __version__
    from hf_contrast.models.export import save_for_hub

    api = HfApi(token=token, library_name="hf_contrast", library_version=__version__)
    repo_id = api.create_repo(repo_id, private=private, exist_ok=True).repo_id
    if revision is not None and revision != "main":
        api.create_branch(repo_id, branch=revision, exist_ok=True)
    data = copy.deepcopy(card_data) if card_data is not None else ContrastiveModelCardData()
    if data.model_id is None:
        data.model_id = repo_id
    with tempfile.TemporaryDirectory(prefix="hf_contrast_push_") as folder:
        save_for_hub(encoder, folder, card_data=data)
        commit = api.upload_folder(
            repo_id=repo_id,
            folder_path=folder,
            commit_message=commit_message or "Upload hf_contrast encoder",
            revision=revision,
            create_pr=create_pr,
        )
    logger.info("Pushed %s to %s", type(encoder).__name__, commit.commit_url)
    return commit
