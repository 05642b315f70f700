"""Pushing a bare encoder to the Hub (:func:`push_encoder_to_hub`); the upload itself is
:func:`~hf_contrast.hub.upload.upload_model_folder`, also used by the trainers' pushes."""

from __future__ import annotations

from typing import Any

__all__ = ["push_encoder_to_hub"]


def push_encoder_to_hub(encoder: Any, repo_id: str, **kwargs: Any) -> Any:
    """``encoder.push_to_hub(repo_id, **kwargs)``: ``save_pretrained`` into a temporary folder (card included,
    naming the repository), then one commit through :func:`~hf_contrast.hub.upload.upload_model_folder` (a
    hand-written Hub README is kept unless ``replace_model_card=True``). See ``ContrastiveEncoder.push_to_hub``
    for the arguments."""
    return encoder.push_to_hub(repo_id, **kwargs)
