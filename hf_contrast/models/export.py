"""Native exports: the backbone in timm / transformers / sentence-transformers format, and the one save layout.

The exported files load without hf_contrast:

- :func:`export_timm`: ``timm.create_model("local-dir:<dir>", pretrained=True)`` (or ``"hf-hub:<repo>"``)
  gives a model whose forward output equals ``ContrastiveEncoder(...).embeddings``.
- :func:`export_transformers`: ``AutoModel.from_pretrained(<dir>)`` + ``AutoTokenizer``: the same hidden states.
- :func:`export_sentence_transformers`: ``SentenceTransformer(<dir>).encode(...)`` equals ``embeddings``
  (backbone + pooling [+ Normalize]; the projection head is not part of it).
- :func:`export_native`: the one of the above that fits the encoder (its backbone adapter picks,
  :mod:`hf_contrast.models.adapters`); ``ContrastiveEncoder.save_pretrained`` writes it at the root of
  every save and puts the full encoder in :data:`HUB_SUBFOLDER`.

This module reads encoders through their config only (it imports neither ``modeling`` nor the
adapters), so both can use it without an import cycle.
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import transformers

from hf_contrast.errors import InputError, InputTypeError
from hf_contrast.hub.layout import HUB_SUBFOLDER
from hf_contrast.models.configuration import ContrastiveEncoderConfig
from hf_contrast.models.inputs import position_limit
from hf_contrast.models.st_layout import write_st_modules
from hf_contrast.tensor_checks import check_folder_path

__all__ = [
    "HUB_SUBFOLDER",
    "PROVENANCE_KEYS",
    "export_timm",
    "export_transformers",
    "export_sentence_transformers",
    "export_native",
]

#: ``pretrained_cfg`` keys that describe where pretrained weights came from; a from-scratch export drops them.
PROVENANCE_KEYS = (
    "hf_hub_id", "hf_hub_filename", "hf_hub_revision", "url", "file", "source", "tag", "paper_ids", "paper_name",
    "origin_url", "license", "notes",
)  # fmt: skip


def _require(encoder: Any, backbone_type: str, function: str) -> None:
    config = getattr(encoder, "config", None)
    if not isinstance(config, ContrastiveEncoderConfig) or not hasattr(encoder, "backbone"):
        raise InputError(f"`encoder` must be a ContrastiveEncoder, got {type(encoder).__name__}.")
    if config.backbone_type != backbone_type:
        other = "export_timm" if backbone_type == "text" else "export_transformers / export_sentence_transformers"
        raise InputError(
            f"`{function}` needs a {backbone_type} backbone but `{config.backbone}` is {config.backbone_type}; "
            f"use `{other}`."
        )


def _backbone_state(encoder: Any, state_dict: Mapping[str, torch.Tensor] | None) -> dict[str, torch.Tensor]:
    """The backbone's tensors: from ``state_dict`` (keys ``backbone.*``, e.g. gathered by the Trainer) or the
    module."""
    if state_dict is None:
        tensors = dict(encoder.backbone.state_dict())
    elif not isinstance(state_dict, Mapping) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state_dict.items()
    ):
        raise InputTypeError(
            f"`state_dict` must be None or the encoder's state dict (str keys `backbone.*` -> tensors), got "
            f"{type(state_dict).__name__}"
            + (f" with keys {list(state_dict)[:4]}" if isinstance(state_dict, Mapping) else "")
            + "."
        )
    else:
        prefix = "backbone."
        tensors = {key[len(prefix) :]: value for key, value in state_dict.items() if key.startswith(prefix)}
    unique: dict[str, torch.Tensor] = {}
    seen: set[tuple[int, int]] = set()
    for key, value in tensors.items():  # safetensors refuses tensors sharing storage
        value = value.detach().contiguous()
        identity = (
            (value.untyped_storage().data_ptr(), value.storage_offset())
            if value.device.type != "meta"
            else (id(value), 0)
        )
        unique[key] = value.clone() if identity in seen and value.numel() else value
        seen.add(identity)
    return unique


def export_timm(
    encoder: Any, save_dir: str | os.PathLike[str], state_dict: Mapping[str, torch.Tensor] | None = None
) -> Path:
    """Save the timm backbone alone in timm's Hub format (``config.json`` + ``model.safetensors``).

    ``config.json`` holds ``architecture``, ``num_classes`` (0), ``num_features``, ``model_args`` (the
    ``backbone_kwargs``) and a ``pretrained_cfg`` whose input size / mean / std are the encoder's
    ``data_config`` (what it was trained at, see ``ContrastiveEncoder.set_image_size``); transformers'
    ``AutoModel`` loads it too (``TimmWrapperModel``, ``pooler_output`` = ``embeddings``). A backbone
    trained from scratch (``config.backbone_pretrained=False``) carries none of the untrained
    architecture's provenance (:data:`PROVENANCE_KEYS`: Hub id, tag, papers, license). The projection
    head is not exported.

    Args:
        encoder: A timm ``ContrastiveEncoder``.
        save_dir: The directory to write (created if needed).
        state_dict: The encoder's full state dict to take the weights from (keys ``backbone.*``);
            ``None`` reads the module.

    Returns:
        ``save_dir`` as a ``Path``.

    Raises:
        ValueError: If the encoder has a text backbone.

    Example:
        >>> export_timm(enc, "export")  # doctest: +SKIP
        >>> timm.create_model("local-dir:export", pretrained=True)  # doctest: +SKIP
    """
    _require(encoder, "timm", "export_timm")
    import safetensors.torch
    from timm.models._hub import save_config_for_hf

    save_dir = check_folder_path("save_dir", save_dir)
    save_dir.mkdir(parents=True, exist_ok=True)
    safetensors.torch.save_file(
        _backbone_state(encoder, state_dict), str(save_dir / "model.safetensors"), metadata={"format": "pt"}
    )
    options: dict[str, Any] = {"model_args": dict(encoder.config.backbone_kwargs) or None}
    if "data_config" in inspect.signature(save_config_for_hf).parameters:
        options["data_config"] = encoder.data_config
    else:  # timm < 1.0.20: preprocessing goes through the pretrained_cfg override
        options["model_config"] = {"pretrained_cfg": dict(encoder.data_config or {})}
    config_path = save_dir / "config.json"
    save_config_for_hf(encoder.backbone, config_path, **options)  # a Path: timm < 1.0.20 calls `config_path.open`
    config = json.loads(config_path.read_text(encoding="utf-8"))
    # `num_classes` is at the root already; in `model_args` too, transformers' TimmWrapper (AutoModel) passes it twice
    config.get("model_args", {}).pop("num_classes", None)
    if not config.get("model_args", True):
        config.pop("model_args")
    if not encoder.config.backbone_pretrained:
        for key in PROVENANCE_KEYS:
            config.get("pretrained_cfg", {}).pop(key, None)
    config_path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return save_dir


def export_transformers(
    encoder: Any, save_dir: str | os.PathLike[str], state_dict: Mapping[str, torch.Tensor] | None = None
) -> Path:
    """Save the text backbone with ``save_pretrained`` plus its tokenizer (``AutoModel``/``AutoTokenizer`` load it).

    Args:
        encoder: A text ``ContrastiveEncoder`` with a tokenizer.
        save_dir: The directory to write (created if needed).
        state_dict: The encoder's full state dict (keys ``backbone.*``); ``None`` reads the module.

    Returns:
        ``save_dir`` as a ``Path``.

    Raises:
        ValueError: If the encoder has a timm backbone or no tokenizer (set ``encoder.tokenizer``).
    """
    _require(encoder, "text", "export_transformers")
    if encoder.tokenizer is None:
        raise InputError(
            "`encoder.tokenizer` is None: a text export needs the tokenizer. Set `encoder.tokenizer = "
            "AutoTokenizer.from_pretrained(...)` or pass `tokenizer=` to `from_backbone` / `from_text_config`."
        )
    save_dir = check_folder_path("save_dir", save_dir)
    backbone_state = _backbone_state(encoder, state_dict) if state_dict is not None else None
    encoder.backbone.save_pretrained(save_dir, state_dict=backbone_state)
    encoder.tokenizer.save_pretrained(save_dir)
    return save_dir


def text_max_seq_length(encoder: Any) -> int | None:
    """``config.max_seq_length``, else the smaller of the position limit (:func:`~hf_contrast.models.inputs.
    position_limit`, else the config's ``max_position_embeddings``) and the tokenizer's ``model_max_length``."""
    if encoder.config.max_seq_length is not None:
        return int(encoder.config.max_seq_length)
    limits = [
        position_limit(encoder.backbone) or getattr(encoder.backbone.config, "max_position_embeddings", None),
        getattr(encoder.tokenizer, "model_max_length", None),
    ]
    valid = [int(limit) for limit in limits if isinstance(limit, int) and 0 < limit < 1_000_000]
    return min(valid) if valid else None


def _versions() -> dict[str, str]:
    versions = {"transformers": transformers.__version__, "pytorch": torch.__version__}
    try:
        import sentence_transformers

        versions["sentence_transformers"] = sentence_transformers.__version__
    except ImportError:
        pass
    return versions


def export_sentence_transformers(
    encoder: Any, save_dir: str | os.PathLike[str], state_dict: Mapping[str, torch.Tensor] | None = None
) -> Path:
    """Save the text backbone in the sentence-transformers layout (Transformer + Pooling [+ Normalize]).

    Writes the transformers files at the root (:func:`export_transformers`) and the module files of
    :func:`~hf_contrast.models.st_layout.write_st_modules` with the encoder's pooling, normalisation
    (``config.normalize_embeddings``) and ``max_seq_length`` (:func:`text_max_seq_length`): a model
    loaded from a sentence-transformers folder is written back as it came.
    ``SentenceTransformer(save_dir).encode(texts)`` returns the encoder's ``embeddings`` (not the
    projections); sentence-transformers is not needed to write it.

    Args:
        encoder: A text ``ContrastiveEncoder`` with a tokenizer.
        save_dir: The directory to write (created if needed).
        state_dict: The encoder's full state dict (keys ``backbone.*``); ``None`` reads the module.

    Returns:
        ``save_dir`` as a ``Path``.

    Raises:
        ValueError: If the encoder has a timm backbone or no tokenizer.
    """
    save_dir = export_transformers(encoder, save_dir, state_dict)
    write_st_modules(
        save_dir,
        embedding_dim=encoder.embedding_dim,
        pooling=encoder.config.pooling,
        normalize=encoder.config.normalize_embeddings,
        max_seq_length=text_max_seq_length(encoder),
        versions=_versions(),
    )
    return save_dir


def export_native(
    encoder: Any, save_dir: str | os.PathLike[str], state_dict: Mapping[str, torch.Tensor] | None = None
) -> Path:
    """:func:`export_timm` for a timm encoder, :func:`export_sentence_transformers` for a text encoder: what
    ``encoder.adapter.export_native`` writes (:mod:`hf_contrast.models.adapters`)."""
    adapter = getattr(encoder, "adapter", None)
    if adapter is None:  # not a ContrastiveEncoder: the text export says so
        return export_sentence_transformers(encoder, save_dir, state_dict)
    return adapter.export_native(encoder, save_dir, state_dict)
