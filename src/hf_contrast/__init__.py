"""hf_contrast: structured contrastive representation learning for the Hugging Face ecosystem."""

__version__ = "0.1.0"
