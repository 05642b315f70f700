"""The card data travels with the model: ``hf_contrast/model_card.json`` beside the encoder's config.

:func:`save_card_data` writes it (``ContrastiveEncoder.save_pretrained``), :func:`load_card_data` reads it
back (``from_pretrained``), so a saved, reloaded and pushed model keeps its card; :func:`get_model_card_data`
is the card data on a model, created on first use. The model is duck-typed (any object with a
``model_card_data`` attribute).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from hf_contrast.hub.card_data import ContrastiveModelCardData

__all__ = ["CARD_DATA_FILE", "get_model_card_data", "load_card_data", "save_card_data"]

logger = logging.getLogger(__name__)

CARD_DATA_FILE = "model_card.json"


def get_model_card_data(model: Any) -> ContrastiveModelCardData:
    """``model.model_card_data``, created (and attached to the model) on first use."""
    data = getattr(model, "model_card_data", None)
    if not isinstance(data, ContrastiveModelCardData):
        data = ContrastiveModelCardData()
        try:
            model.model_card_data = data
        except AttributeError:
            logger.debug("Model card: could not attach card data to %s", type(model).__name__)
    return data


def save_card_data(model: Any, folder: str | os.PathLike[str]) -> Path:
    """Write ``model.model_card_data`` to ``folder/model_card.json`` (no local path in it).

    ``ContrastiveEncoder.save_pretrained`` calls it with the ``hf_contrast/`` folder of the save.

    Returns:
        The path written.
    """
    path = Path(folder) / CARD_DATA_FILE
    path.write_text(
        json.dumps(get_model_card_data(model).to_dict(), indent=2, allow_nan=False) + "\n", encoding="utf-8"
    )
    return path


def load_card_data(path: str | os.PathLike[str]) -> ContrastiveModelCardData | None:
    """Read a ``model_card.json`` written by :func:`save_card_data`; ``None`` (with a warning) if unreadable."""
    try:
        return ContrastiveModelCardData.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError) as error:
        logger.warning(
            "Model card data in %s not read (%s: %s); the card starts empty.", path, type(error).__name__, error
        )
        return None
