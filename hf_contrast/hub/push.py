"""Pushing to the Hub: a bare encoder (:func:`push_encoder_to_hub`) and the one upload path
(:func:`~hf_contrast.models.upload.upload_model_folder`, used by the trainers' pushes)."""

from __future__ import annotations

from typing import Any

from hf_contrast.models.upload import hub_readme_is_user_written, upload_model_folder

__all__ = ["hub_readme_is_user_written", "push_encoder_to_hub", "upload_model_folder"]


def push_encoder_to_hub(encoder: Any, repo_id: str, **kwargs: Any) -> Any:
    """``encoder.push_to_hub(repo_id, **kwargs)``: ``save_pretrained`` into a temporary folder (card included,
    naming the repository), then one commit through :func:`upload_model_folder` (a hand-written Hub README is
    kept unless ``replace_model_card=True``). See ``ContrastiveEncoder.push_to_hub`` for the arguments."""
    return encoder.push_to_hub(repo_id, **kwargs)
