"""The layout of a saved encoder folder that the Hub code relies on."""

from __future__ import annotations

__all__ = ["HUB_SUBFOLDER"]

#: Subfolder of every saved model folder (and Hub repository) holding the full encoder (head included) and its
#: card data; the root holds the backbone in its own library's format.
HUB_SUBFOLDER = "hf_contrast"
