"""What ``ContrastiveEncoder.from_pretrained`` reads: where the encoder is in a save, and whether it loaded whole.

A save (:meth:`~hf_contrast.models.ContrastiveEncoder.save_pretrained`) holds the native model at
its root and the full encoder in ``hf_contrast/``; an older flat save has our ``config.json`` at the
root. Without these checks a bad source fails with an error about something else (``Repo id must be
in the form ...`` for a folder that does not exist; ``A timm encoder needs 'backbone'`` when
``hf_contrast/config.json`` is missing; ``SafetensorError: header too small`` without a path) or
loads silently wrong (weights of NaN; a projection head left at random initialisation with only
transformers' load report). Each raises an error naming the file, what is wrong and the fix.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import Any

import torch
from safetensors import SafetensorError
from torch import nn

from hf_contrast.errors import InputError, InputTypeError, MissingPathError
from hf_contrast.hub import CARD_DATA_FILE, CARD_DATA_VERSION, load_card_data
from hf_contrast.hub.layout import find_saved_file
from hf_contrast.hub_ids import is_hub_repo_id
from hf_contrast.models.backbones import folder_listing
from hf_contrast.models.configuration import ContrastiveEncoderConfig
from hf_contrast.models.export import HUB_SUBFOLDER
from hf_contrast.models.save_format import check_save_format

__all__ = [
    "check_local_save",
    "check_source",
    "encoder_subfolder",
    "weights_location",
    "check_loaded_weights",
    "read_saved_json",
]

_FIX_SAVE = "pass the folder that `save_pretrained` / `trainer.save_model` wrote (or a checkpoint-* folder)"


def read_saved_json(
    path: str | os.PathLike[str], filename: str, subfolder: str, hub_kwargs: Mapping[str, Any]
) -> tuple[Any, str]:
    """``(content, location)`` of a JSON file of a save (``content`` is ``None`` if it is absent or unreadable:
    ``from_pretrained`` reports an unreadable config with its own error)."""
    found = find_saved_file(path, filename, subfolder, hub_kwargs)
    location = os.path.join(os.fspath(path), subfolder, filename)
    if found is None:
        return None, location
    try:
        with open(found, encoding="utf-8") as handle:
            return json.load(handle), location
    except (OSError, ValueError):
        return None, location


_ARGUMENT = "pretrained_model_name_or_path"
_WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
_FIX_BACKBONE = (
    "a plain timm or transformers model folder is not a ContrastiveEncoder: start one on it with "
    "`ContrastiveEncoder.from_backbone('<folder>')`"
)


def check_source(path: str | os.PathLike[str]) -> None:
    """Reject a ``pretrained_model_name_or_path`` that is a file, or neither a folder nor a Hub id.

    Raises:
        InputTypeError: if ``path`` is not a string or ``os.PathLike``.
        MissingPathError: if ``path`` is a file, or not a folder and cannot be a Hub repository id.
    """
    if not isinstance(path, (str, os.PathLike)) or not isinstance(os.fspath(path), str):
        raise InputTypeError(
            f"`{_ARGUMENT}` must be a folder path or a Hub repository id (a str or pathlib.Path), got "
            f"{type(path).__name__} {path!r:.60}."
        )
    text = os.fspath(path)
    if os.path.isdir(text):
        return
    if os.path.isfile(text):
        raise MissingPathError(f"`{_ARGUMENT}`={text!r} is a file, not a folder: {_FIX_SAVE}.")
    if not is_hub_repo_id(text) or os.path.isabs(text) or text.startswith((".", "~")):
        raise MissingPathError(
            f"`{_ARGUMENT}`={text!r} is not a folder (no such directory; the working directory is "
            f"{os.getcwd()!r}) nor a Hub repository id like 'user/name': check the path, or {_FIX_SAVE}."
        )


def check_local_save(path: str | os.PathLike[str], subfolder: str) -> None:
    """Reject a local folder that is not a ContrastiveEncoder save, naming what it holds, before transformers reads it.

    A save has ``config.json`` (of ``model_type`` ``"hf_contrast"``, valid JSON) and a weights file
    (``model.safetensors``, ``pytorch_model.bin`` or their sharded index) in ``subfolder``
    (``hf_contrast/`` for the save layout, ``""`` for an older flat save). A Hub id is not checked here.

    Raises:
        MissingPathError: if the config or the weights file is missing.
        InputError: if the config is not valid JSON, or belongs to another model.
    """
    root = os.fspath(path)
    if not os.path.isdir(root):
        return
    folder = os.path.join(root, subfolder) if subfolder else root
    config_file = os.path.join(folder, "config.json")
    if not os.path.isfile(config_file):
        raise MissingPathError(
            f"`{_ARGUMENT}`={root!r} is not a saved ContrastiveEncoder: {config_file} is missing (the folder holds "
            f"{folder_listing(folder)}). {_FIX_SAVE[0].upper() + _FIX_SAVE[1:]}, written by `save_pretrained`; "
            f"{_FIX_BACKBONE}."
        )
    try:
        with open(config_file, encoding="utf-8") as handle:
            config = json.load(handle)
    except (OSError, ValueError) as error:
        raise InputError(
            f"`{_ARGUMENT}`={root!r}: {config_file} is not valid JSON ({error}): the save is damaged (an interrupted "
            "write or copy). Restore it from the original save, or save the model again with `save_pretrained`."
        ) from None
    model_type = config.get("model_type") if isinstance(config, dict) else None
    if model_type != ContrastiveEncoderConfig.model_type:
        raise InputError(
            f"`{_ARGUMENT}`={root!r}: {config_file} is the config of a {model_type or 'non-transformers'} model, not "
            f"of a ContrastiveEncoder (model_type {ContrastiveEncoderConfig.model_type!r}); {_FIX_BACKBONE}, or "
            f"{_FIX_SAVE}."
        )
    if not any(os.path.isfile(os.path.join(folder, name)) for name in _WEIGHT_FILES):
        raise MissingPathError(
            f"`{_ARGUMENT}`={root!r} has a ContrastiveEncoder config but no weights: none of "
            f"{', '.join(_WEIGHT_FILES)} is in {folder} (it holds {folder_listing(folder)}). The save is incomplete "
            f"(an interrupted `save_pretrained`?): {_FIX_SAVE}, or save the model again."
        )


def encoder_subfolder(path: str | os.PathLike[str], hub_kwargs: Mapping[str, Any]) -> str:
    """The subfolder holding the encoder's config: ``"hf_contrast"`` (the save layout) or ``""`` (a flat save).

    Raises:
        MissingPathError: (an ``OSError``) if the root ``config.json`` belongs to another model (timm's or a text
            backbone's export) and ``hf_contrast/config.json`` is missing: the save is incomplete.
    """
    root = find_saved_file(path, "config.json", "", hub_kwargs)
    model_type = None
    if root is not None:
        try:
            with open(root, encoding="utf-8") as handle:
                model_type = json.load(handle).get("model_type")
        except (OSError, ValueError):
            return ""  # let from_pretrained report the unreadable config
        if model_type == ContrastiveEncoderConfig.model_type:
            return ""
    if find_saved_file(path, "config.json", HUB_SUBFOLDER, hub_kwargs) is not None:
        return HUB_SUBFOLDER
    if root is not None:
        location = os.path.join(os.fspath(path), HUB_SUBFOLDER, "config.json")
        raise MissingPathError(
            f"{location} is missing: `{_ARGUMENT}`={os.fspath(path)!r} has a root config.json of "
            f"{f'model_type {model_type!r}' if model_type else 'a timm model'} (a ContrastiveEncoder's is "
            f"{ContrastiveEncoderConfig.model_type!r}) and no `{HUB_SUBFOLDER}/` encoder (its projection head and "
            f"preprocessing); the folder holds {folder_listing(os.fspath(path))}. Restore the `{HUB_SUBFOLDER}/` "
            "folder from the original save, or load the root with timm / transformers, or start a new encoder on "
            "these backbone weights with `ContrastiveEncoder.from_backbone('local-dir:<folder>')` (timm) or "
            "`from_backbone('<folder>')` (text)."
        )
    return ""


def weights_location(path: str | os.PathLike[str], subfolder: str, hub_kwargs: Mapping[str, Any]) -> str:
    """The weights file that ``from_pretrained`` reads (its cached copy for a Hub id), or the folder if sharded."""
    found = find_saved_file(path, "model.safetensors", subfolder, hub_kwargs)
    return found if found is not None else os.path.join(os.fspath(path), subfolder)


def check_loaded_weights(model: nn.Module, loading_info: Mapping[str, Any], location: str) -> None:
    """Reject an encoder whose weights did not all come from the file, or are not finite.

    ``classifier.*`` may be missing (a task head added with ``num_labels``: transformers' documented
    behaviour, reported by its load report); every backbone and projection-head tensor must be read.

    Args:
        model: The loaded encoder.
        loading_info: ``from_pretrained(..., output_loading_info=True)``'s report (``missing_keys``).
        location: The weights file, named in the errors.

    Raises:
        ValueError: if backbone or projection-head tensors are missing from the file, or a saved
            tensor holds NaN/inf.
    """
    missing = sorted(k for k in loading_info.get("missing_keys", ()) if not k.startswith("classifier."))
    if missing:
        shown = ", ".join(missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
        raise InputError(
            f"{location} lacks {len(missing)} of the encoder's tensors ({shown}); they would start from random "
            "values. The file is not a complete ContrastiveEncoder save (a backbone-only export, or a save of "
            f"another configuration): {_FIX_SAVE}, or build a new encoder with `ContrastiveEncoder.from_backbone` to "
            "train a new head."
        )
    bad = [
        name
        for name, tensor in model.state_dict().items()
        if tensor.is_floating_point() and tensor.device.type != "meta" and not bool(torch.isfinite(tensor).all())
    ]
    if bad:
        shown = ", ".join(bad[:4]) + (f" and {len(bad) - 4} more" if len(bad) > 4 else "")
        raise InputError(
            f"{location} holds NaN or infinite values in {len(bad)} tensor(s) ({shown}): the weights are unusable "
            "(a training run that diverged saved them?). Load an earlier checkpoint, or retrain (e.g. with a lower "
            "learning rate); `safetensors.torch.load_file` reads the file as is for inspection."
        )


_HUB_KWARGS = ("cache_dir", "force_download", "proxies", "token", "revision", "local_files_only")


def load_encoder(
    load_weights: Callable[..., tuple[Any, dict[str, Any]]],
    pretrained_model_name_or_path: str | os.PathLike[str],
    *model_args: Any,
    **kwargs: Any,
) -> Any:
    """``ContrastiveEncoder.from_pretrained``: check the source and the save format, load the weights with
    ``load_weights`` (``PreTrainedModel.from_pretrained`` of the encoder class), check them, restore the card
    data and what the backbone adapter keeps beside the weights (``adapter.after_load``).

    Args:
        load_weights: ``PreTrainedModel.from_pretrained`` bound to the encoder class; called with
            ``output_loading_info=True``.
        pretrained_model_name_or_path, *model_args, **kwargs: As ``ContrastiveEncoder.from_pretrained``.

    Returns:
        The encoder, or ``(encoder, loading_info)`` with ``output_loading_info=True``.
    """
    kwargs.pop("tokenizer", None)
    hub_kwargs = {key: kwargs[key] for key in _HUB_KWARGS if key in kwargs}
    check_source(pretrained_model_name_or_path)
    if not kwargs.get("subfolder"):
        kwargs["subfolder"] = encoder_subfolder(pretrained_model_name_or_path, hub_kwargs)
    check_local_save(pretrained_model_name_or_path, kwargs["subfolder"])
    output_loading_info = kwargs.pop("output_loading_info", False)
    config_json, config_location = read_saved_json(
        pretrained_model_name_or_path, "config.json", kwargs["subfolder"], hub_kwargs
    )
    card_json, card_location = read_saved_json(
        pretrained_model_name_or_path, CARD_DATA_FILE, kwargs["subfolder"], hub_kwargs
    )
    check_save_format(
        config_json if isinstance(config_json, dict) else None,
        card_json if isinstance(card_json, dict) else None,
        config_class=ContrastiveEncoderConfig,
        card_version=CARD_DATA_VERSION,
        config_location=config_location,
        card_location=card_location,
    )
    try:
        model, loading_info = load_weights(
            pretrained_model_name_or_path, *model_args, output_loading_info=True, **kwargs
        )
    except SafetensorError as error:
        location = weights_location(pretrained_model_name_or_path, kwargs["subfolder"], hub_kwargs)
        raise OSError(
            f"{location} is not a readable safetensors file ({error}): it is corrupted, truncated or empty (an "
            "interrupted save, copy or download). Save or copy the model again, or download it again "
            "(`force_download=True`)."
        ) from error
    check_loaded_weights(
        model, loading_info, weights_location(pretrained_model_name_or_path, kwargs["subfolder"], hub_kwargs)
    )
    card_file = find_saved_file(pretrained_model_name_or_path, CARD_DATA_FILE, kwargs["subfolder"], hub_kwargs)
    if card_file is not None:  # an older save has none
        model.model_card_data = load_card_data(card_file)
    model.adapter.after_load(model, pretrained_model_name_or_path, kwargs["subfolder"], hub_kwargs)
    return (model, loading_info) if output_loading_info else model
