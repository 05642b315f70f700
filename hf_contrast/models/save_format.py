"""The save layout's format version, and what ``from_pretrained`` says about a folder written by a newer one.

Every save writes ``"format_version"`` into ``hf_contrast/config.json`` (:data:`SAVE_FORMAT_VERSION`)
and ``"version"`` into ``hf_contrast/model_card.json`` (``CARD_DATA_VERSION``). A folder written by a
newer hf_contrast (a higher version, or config keys this release does not know) may hold what this
release would silently drop or misread: loading it warns once, naming the versions and the keys, and
suggests ``pip install -U hf-contrast``. A version that is not a non-negative integer is not a save
of any release: it raises. A folder without a version (a save older than versioning) is version 0
and loads silently.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Mapping
from typing import Any

from transformers import PretrainedConfig

from hf_contrast.errors import InputError

__all__ = ["SAVE_FORMAT_VERSION", "NewerSaveFormatWarning", "check_save_format", "format_version"]

#: The version of the save layout this release writes (``hf_contrast/config.json``'s ``format_version``).
SAVE_FORMAT_VERSION = 1

_UPGRADE = "`pip install -U hf-contrast`"


class NewerSaveFormatWarning(UserWarning):
    """A folder written by a newer hf_contrast: this release may drop or misread part of it."""


def format_version(value: Any, *, key: str, location: str) -> int:
    """A saved format version as an int (a missing one is 0: a save from before versioning).

    Raises:
        InputError: if the version is not a non-negative integer (naming the file and the value).
    """
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(
            f"{location} has `{key}`={value!r}, which is not a version any hf_contrast release writes (a non-negative "
            "integer): the file was edited or written by another program. Restore it from the original save, or save "
            "the model again."
        )
    return value


def _known_config_keys(config_class: type) -> set[str]:
    known = set(inspect.signature(config_class.__init__).parameters) - {"self", "kwargs"}
    known |= set(PretrainedConfig().to_dict())
    known |= {"format_version", "num_labels", "torch_dtype", "dtype", "transformers_version", "architectures"}
    # transformers' Trainer sets `model.config.use_cache = args.use_cache` on every model it trains (5.0 to 5.24),
    # so every trained encoder saves it
    known |= {"use_cache"}
    return known


def check_save_format(
    config: Mapping[str, Any] | None,
    card: Mapping[str, Any] | None,
    *,
    config_class: type,
    card_version: int,
    config_location: str,
    card_location: str,
) -> None:
    """Warn once if a save was written by a newer hf_contrast; raise on a version no release writes.

    Args:
        config: The raw ``hf_contrast/config.json`` (``None``: not read).
        card: The raw ``hf_contrast/model_card.json`` (``None``: none saved).
        config_class: ``ContrastiveEncoderConfig`` (its arguments are the known keys).
        card_version: The card data version this release writes.
        config_location, card_location: The files, for the messages.

    Raises:
        InputError: on a version that is not a non-negative integer.
    """
    found: list[str] = []
    if config is not None:
        version = format_version(config.get("format_version"), key="format_version", location=config_location)
        if version > SAVE_FORMAT_VERSION:
            found.append(
                f"{config_location} has format_version {version} (this release reads up to {SAVE_FORMAT_VERSION})"
            )
        unknown = sorted(set(config) - _known_config_keys(config_class))
        if unknown:
            found.append(f"{config_location} has keys this release does not know: {unknown}")
    if card is not None and isinstance(card, Mapping):
        version = format_version(card.get("version"), key="version", location=card_location)
        if version > card_version:
            found.append(f"{card_location} has version {version} (this release reads up to {card_version})")
    if found:
        warnings.warn(
            "The model was saved by a newer hf_contrast: "
            + "; ".join(found)
            + ". This release ignores what it does not "
            f"know, so the loaded model may differ from the saved one. Upgrade with {_UPGRADE}.",
            NewerSaveFormatWarning,
            stacklevel=4,  # check_save_format < load_encoder < from_pretrained < the caller
        )
