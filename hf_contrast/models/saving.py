"""The one save layout of a ``ContrastiveEncoder`` (:func:`save_encoder`, the body of ``save_pretrained``).

The native model at the root (the backbone adapter's ``save_native``), the full encoder, its tokenizer and
its card data in ``hf_contrast/``, and the model card; written all-or-nothing through
:func:`~hf_contrast.hub.staging.staged_directory`. The card never makes a save fail: a failure only warns.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable, Mapping
from typing import Any

from torch import Tensor

from hf_contrast.hub import get_model_card_data, save_card_data, staged_directory, write_model_card
from hf_contrast.models.export import HUB_SUBFOLDER
from hf_contrast.models.statistics import model_details

__all__ = ["save_encoder"]

#: The encoder's logger: what a save warns about is said in the name of ``ContrastiveEncoder``.
logger = logging.getLogger("hf_contrast.models.modeling")

#: Root entries of an older save that a new save removes when it does not write them itself.
_LAYOUT_ENTRIES = (
    "modules.json", "sentence_bert_config.json", "config_sentence_transformers.json", "1_Pooling", "2_Normalize",
    "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json",
)  # fmt: skip


def save_encoder(
    model: Any,
    save_directory: str | os.PathLike[str],
    state_dict: Mapping[str, Tensor] | None,
    save_weights: Callable[..., None],
    **kwargs: Any,
) -> None:
    """Write ``model``'s save layout to ``save_directory`` (see ``ContrastiveEncoder.save_pretrained``).

    Args:
        model: The encoder.
        save_directory: The folder to write (created if needed).
        state_dict: The state dict to save instead of the module's, or ``None``.
        save_weights: ``PreTrainedModel.save_pretrained`` bound to ``model``: writes ``hf_contrast/``.
        **kwargs: Further ``save_weights`` arguments (``max_shard_size``, ``variant``...).
    """
    with staged_directory(save_directory, stale=_LAYOUT_ENTRIES) as folder:
        model.adapter.save_native(model, folder, state_dict, save_directory)
        save_weights(folder / HUB_SUBFOLDER, state_dict=state_dict, **kwargs)
        if model.tokenizer is not None:
            model.tokenizer.save_pretrained(folder / HUB_SUBFOLDER)
        _save_card_data(model, folder / HUB_SUBFOLDER)
        existing_card = os.path.join(save_directory, "README.md")
        if os.path.isfile(existing_card):  # the card writer keeps a README.md the user wrote
            shutil.copy2(existing_card, folder / "README.md")
        _write_model_card(model, folder)


def _save_card_data(model: Any, folder: os.PathLike[str]) -> None:
    """``hf_contrast/model_card.json``: the card data, with the sizes measured now (a failure only warns)."""
    data = get_model_card_data(model)
    try:
        data.model_details = model_details(model, data.model_details)
        save_card_data(model, folder)
    except Exception as error:  # the card must never make a save fail
        logger.warning(
            "Model card data not saved (%s: %s); the card will not survive a reload.", type(error).__name__, error
        )


def _write_model_card(model: Any, folder: os.PathLike[str]) -> None:
    try:
        write_model_card(model, folder)
    except Exception as error:  # the card must never make a save fail
        logger.warning(
            "Model card not written (%s: %s); the model is saved without README.md.", type(error).__name__, error
        )
