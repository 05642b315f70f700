"""Hub upload of hf_contrast encoders (the model card itself is :mod:`hf_contrast.model_card`)."""

from __future__ import annotations

from hf_contrast.hub.push import hub_readme_is_user_written, push_encoder_to_hub, upload_model_folder

__all__ = ["hub_readme_is_user_written", "push_encoder_to_hub", "upload_model_folder"]
