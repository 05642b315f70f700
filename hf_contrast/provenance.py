"""Where a backbone comes from, said without a local path: its public name, its Hub id and its license.

``ContrastiveEncoder.from_backbone`` takes a timm name, a Hub id or a local folder. What is written
into the saved model (``hf_contrast/config.json``'s ``backbone``, the card's ``base_model`` and
``license``) must never be the folder's absolute path: it would leak the user's machine into every
push and mean nothing elsewhere. :func:`backbone_provenance` turns the source into

- ``name``: the Hub id when known, else a non-path name (the folder's name, ``"my-bert"``);
- ``base_model``: the Hub id of the pretrained weights, or ``None`` when nothing says it;
- ``license``: what the source states, or ``None``.

A local folder keeps the Hub identity of what it is a copy of, read from what the folder itself says,
in this order: the Hub cache layout (``.../models--org--name/snapshots/<sha>``), the encoder card data
of an hf_contrast save (``hf_contrast/model_card.json``'s ``model_id``), timm's ``pretrained_cfg``
(``hf_hub_id``, or ``architecture`` + ``tag`` resolved with timm's registry), the one Hub id that the
card's usage snippets load (``SentenceTransformer('sentence-transformers/all-MiniLM-L6-v2')`` in a copy
of that repository), then, with a warning, the model card's ``base_model`` metadata and a Hub id in
transformers' ``_name_or_path`` (these name what the copy was itself trained from: pass ``base_model=``
when the copy is of a Hub model). The license comes from ``pretrained_cfg["license"]`` or the card's
``license``, the language from the card's ``language``. The user's
``base_model=`` / ``license=`` always win. Nothing here touches the network.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path, PureWindowsPath
from typing import Any

from hf_contrast.errors import InputError

__all__ = ["BackboneProvenance", "backbone_provenance", "is_local_path", "hub_id_or_none", "public_name"]

logger = logging.getLogger(__name__)

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")
_CACHE_FOLDER = re.compile(r"^models--([^/\\]+?)--([^/\\]+)$")
_SOURCES = ("hf-hub:", "local-dir:")


@dataclass(frozen=True)
class BackboneProvenance:
    """What a saved model says about its backbone's origin (no local path in any field).

    Attributes:
        name: The backbone's public name: a Hub id, a timm name or a folder's name.
        base_model: The Hub id of the pretrained weights, or ``None``.
        license: The license the source states (an SPDX id such as ``"apache-2.0"``), or ``None``.
        language: The language(s) the source's card states (``"en"``), or ``None``.
    """

    name: str
    base_model: str | None = None
    license: str | None = None
    language: str | list[str] | None = None


def is_local_path(value: str) -> bool:
    """Whether ``value`` names a place on this machine rather than a Hub id or a timm name."""
    return (
        value.startswith("local-dir:")
        or os.path.isabs(value)
        or value.startswith((".", "~"))
        or "\\" in value
        or os.path.exists(value)
        or not _HUB_ID.match(value)
    )


def hub_id_or_none(value: Any) -> str | None:
    """``value`` (without an ``hf-hub:`` prefix) if it can be a Hub repository id, else ``None``."""
    if not isinstance(value, str) or not value.strip():
        return None
    value = value.strip()
    if value.startswith("hf-hub:"):
        value = value[len("hf-hub:") :]
    return None if is_local_path(value) else value


def public_name(value: Any) -> str | None:
    """A name safe to publish: a local path (or ``local-dir:`` source) becomes its last folder name."""
    if value is None or not str(value).strip():
        return None
    value = str(value).strip()
    if value.startswith("local-dir:"):
        value = value[len("local-dir:") :]
    if value.startswith("hf-hub:") or not is_local_path(value):
        return value
    if "\\" in value:  # a Windows path, whatever this machine is
        return PureWindowsPath(value).name or None
    return Path(os.path.normpath(os.path.expanduser(value))).name or None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return content if isinstance(content, dict) else {}


def _card_metadata(folder: Path) -> dict[str, Any]:
    readme = folder / "README.md"
    if not readme.is_file():
        return {}
    try:
        from huggingface_hub import ModelCard

        return ModelCard.load(readme, ignore_metadata_errors=True).data.to_dict()
    except Exception:  # noqa: BLE001 - an unreadable card says nothing
        return {}


#: The usage snippets of a Hub card that load the repository itself (sentence-transformers, transformers, timm).
_SNIPPET_ID = re.compile(
    r"""(?:SentenceTransformer|from_pretrained|create_model|pipeline\([^)]*?model\s*=)\s*\(?\s*["'](?:hf-hub:)?([\w.-]+/[\w.-]+)["']"""
)


def _card_identity(folder: Path) -> str | None:
    """The one Hub id the card's usage snippets load (``SentenceTransformer('org/name')``): what a copy of a Hub
    repository is a copy of. ``None`` if the card loads no Hub id or several different ones."""
    readme = folder / "README.md"
    try:
        text = readme.read_text(encoding="utf-8") if readme.is_file() else ""
    except (OSError, UnicodeDecodeError):
        return None
    found = {hub for hub in map(hub_id_or_none, _SNIPPET_ID.findall(text)) if hub}
    return found.pop() if len(found) == 1 else None


def _first_string(value: Any) -> str | None:
    if isinstance(value, (list, tuple)):
        value = value[0] if len(value) == 1 else None  # several base models (a merge): no single origin
    return value if isinstance(value, str) and value.strip() else None


def _timm_hub_id(pretrained_cfg: dict[str, Any], architecture: Any) -> str | None:
    hub_id = hub_id_or_none(pretrained_cfg.get("hf_hub_id"))
    if hub_id or not (isinstance(architecture, str) and pretrained_cfg.get("tag")):
        return hub_id
    try:
        import timm

        return hub_id_or_none(
            getattr(timm.models.get_pretrained_cfg(f"{architecture}.{pretrained_cfg['tag']}"), "hf_hub_id", None)
        )
    except Exception:  # noqa: BLE001 - a tag timm does not know: no claim
        return None


def _folder_provenance(folder: Path) -> BackboneProvenance:
    config = _read_json(folder / "config.json")
    pretrained_cfg = config.get("pretrained_cfg") if isinstance(config.get("pretrained_cfg"), dict) else {}
    card = _card_metadata(folder)
    cache_match = _CACHE_FOLDER.match(folder.parent.parent.name) if folder.parent.name == "snapshots" else None
    own = [  # what the folder is a copy of
        f"{cache_match.group(1)}/{cache_match.group(2)}" if cache_match else None,  # a Hub cache snapshot
        _read_json(folder / "hf_contrast" / "model_card.json").get("model_id"),  # an hf_contrast save that was pushed
        _timm_hub_id(pretrained_cfg, config.get("architecture")),
        _card_identity(folder),  # a copy of a Hub repository whose card loads it by its id
    ]
    declared = [_first_string(card.get("base_model")), config.get("_name_or_path")]  # what it says it starts from
    identity = next((hub for hub in map(hub_id_or_none, own) if hub), None)
    base_model = identity or next((hub for hub in map(hub_id_or_none, declared) if hub), None)
    if base_model and not identity:
        logger.warning(
            "The local backbone %r does not say which Hub model it is a copy of; the card names %r, what it says it "
            "was trained from. If the folder is a copy of a Hub model, pass `base_model='org/name'` to "
            "`from_backbone`.",
            folder.name,
            base_model,
        )
    license_ = pretrained_cfg.get("license") or card.get("license")
    language = card.get("language")
    return BackboneProvenance(
        name=identity or folder.name,
        base_model=base_model,
        license=license_ if isinstance(license_, str) and license_ else None,
        language=language if isinstance(language, str) or (isinstance(language, list) and language) else None,
    )


def backbone_provenance(
    backbone: str, *, base_model: str | None = None, license: str | None = None
) -> BackboneProvenance:  # noqa: A002
    """The public name, Hub id and license of a backbone source (see the module docstring).

    Args:
        backbone: What ``from_backbone`` was given: a timm name (``"resnet18.a1_in1k"``),
            ``"hf-hub:<repo>"``, ``"local-dir:<folder>"``, a Hub id or a local folder.
        base_model: The Hub id the user says the weights come from (wins over what is found).
        license: The license the user states (wins over what is found).

    Returns:
        The provenance. A Hub id or ``hf-hub:`` source is its own ``base_model``; a timm registry
        name keeps ``base_model=None`` here (the card resolves it with timm's pretrained config).

    Raises:
        ValueError: If ``base_model`` is given but is not a Hub id (a local path, say).
    """
    if base_model is not None and hub_id_or_none(base_model) is None:
        raise InputError(
            f"`base_model`={base_model!r} is not a Hub repository id like 'org/name': pass the Hub id the weights "
            "came from (a local path is never published), or leave it None."
        )
    local = backbone[len("local-dir:") :] if backbone.startswith("local-dir:") else backbone
    if backbone.startswith("local-dir:") or (is_local_path(local) and Path(local).expanduser().is_dir()):
        found = _folder_provenance(Path(os.path.normpath(os.path.expanduser(local))).absolute())
    elif backbone.startswith("hf-hub:") or "/" in backbone:
        hub = hub_id_or_none(backbone)
        found = BackboneProvenance(name=public_name(backbone) or backbone, base_model=hub)
    else:  # a timm registry name or a legacy Hub id without namespace ("bert-base-uncased")
        import timm

        found = BackboneProvenance(
            name=backbone, base_model=None if timm.is_model(backbone) else hub_id_or_none(backbone)
        )
    return BackboneProvenance(
        name=base_model or found.name,
        base_model=hub_id_or_none(base_model) or found.base_model,
        license=license or found.license,
        language=found.language,
    )
