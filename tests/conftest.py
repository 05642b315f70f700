"""Test-suite set-up: nothing may reach the Hugging Face Hub (it is unreachable on CI)."""

from __future__ import annotations

import os

# Set before transformers / huggingface_hub are imported by any test module. The Hub tests
# point HF_ENDPOINT at a loopback stand-in and switch offline mode off explicitly.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
