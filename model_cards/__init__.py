"""Model card template(s) shipped with hf_contrast (top-level ``model_cards/`` in the repository)."""
