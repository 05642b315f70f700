"""Native exports: the backbone in timm / transformers / sentence-transformers format, and the Hub layout.

The exported files load without hf_contrast:

- :func:`export_timm`: ``timm.create_model("local-dir:<dir>", pretrained=True)`` (or ``"hf-hub:<repo>"``)
  gives a model whose forward output equals ``ContrastiveEncoder(...).embeddings``.
- :func:`export_transformers`: ``AutoModel.from_pretrained(<dir>)`` + ``AutoTokenizer``: the same hidden states.
- :func:`export_sentence_transformers`: ``SentenceTransformer(<dir>).encode(...)`` equals ``embeddings``
  (backbone + pooling; the projection head is not part of it).
- :func:`save_for_hub`: all of the above at the root, the full encoder in ``hf_contrast/``, a model card.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
from pathlib import Path
from typing import Any

import torch
import transformers

from hf_contrast.models.modeling import HUB_SUBFOLDER, ContrastiveEncoder

__all__ = ["export_timm", "export_transformers", "export_sentence_transformers", "save_for_hub"]

logger = logging.getLogger(__name__)


def _require(encoder: ContrastiveEncoder, backbone_type: str, function: str) -> None:
    if not isinstance(encoder, ContrastiveEncoder):
        raise ValueError(f"`encoder` must be a ContrastiveEncoder, got {type(encoder).__name__}.")
    if encoder.config.backbone_type != backbone_type:
        other = "export_timm" if backbone_type == "text" else "export_transformers / export_sentence_transformers"
        raise ValueError(
            f"`{function}` needs a {backbone_type} backbone but `{encoder.config.backbone}` is "
            f"{encoder.config.backbone_type}; use `{other}`."
        )


def export_timm(encoder: ContrastiveEncoder, save_dir: str | os.PathLike[str]) -> Path:
    """Save the timm backbone alone in timm's Hub format (``config.json`` + ``model.safetensors``).

    Uses ``timm.models.save_for_hf``: ``config.json`` holds ``architecture``, ``num_classes`` (0),
    ``num_features``, ``model_args`` (the ``backbone_kwargs``) and a ``pretrained_cfg`` whose input
    size / mean / std are the encoder's ``data_config``. The projection head is not exported.

    Args:
        encoder: A timm ``ContrastiveEncoder``.
        save_dir: The directory to write (created if needed).

    Returns:
        ``save_dir`` as a ``Path``.

    Raises:
        ValueError: If the encoder has a text backbone.

    Example:
        >>> export_timm(enc, "export")  # doctest: +SKIP
        >>> timm.create_model("local-dir:export", pretrained=True)  # doctest: +SKIP
    """
    _require(encoder, "timm", "export_timm")
    from timm.models import save_for_hf

    save_dir = Path(save_dir)
    options: dict[str, Any] = {"model_args": dict(encoder.config.backbone_kwargs) or None, "safe_serialization": True}
    if "data_config" in inspect.signature(save_for_hf).parameters:
        options["data_config"] = encoder.data_config
    else:  # timm < 1.0.20: preprocessing goes through the pretrained_cfg override
        options["model_config"] = {"pretrained_cfg": dict(encoder.data_config or {})}
    save_for_hf(encoder.backbone, save_dir, **options)
    return save_dir


def export_transformers(encoder: ContrastiveEncoder, save_dir: str | os.PathLike[str]) -> Path:
    """Save the text backbone with ``save_pretrained`` plus its tokenizer (``AutoModel``/``AutoTokenizer`` load it).

    Args:
        encoder: A text ``ContrastiveEncoder`` with a tokenizer.
        save_dir: The directory to write (created if needed).

    Returns:
        ``save_dir`` as a ``Path``.

    Raises:
        ValueError: If the encoder has a timm backbone or no tokenizer (set ``encoder.tokenizer``).
    """
    _require(encoder, "text", "export_transformers")
    if encoder.tokenizer is None:
        raise ValueError(
            "`encoder.tokenizer` is None: a text export needs the tokenizer. Set `encoder.tokenizer = "
            "AutoTokenizer.from_pretrained(...)` or pass `tokenizer=` to `from_backbone` / `from_text_config`."
        )
    save_dir = Path(save_dir)
    encoder.backbone.save_pretrained(save_dir)
    encoder.tokenizer.save_pretrained(save_dir)
    return save_dir


def _max_seq_length(encoder: ContrastiveEncoder) -> int | None:
    limits = [getattr(encoder.backbone.config, "max_position_embeddings", None), getattr(encoder.tokenizer, "model_max_length", None)]
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


def export_sentence_transformers(encoder: ContrastiveEncoder, save_dir: str | os.PathLike[str]) -> Path:
    """Save the text backbone in the sentence-transformers layout (Transformer + Pooling modules).

    Writes the transformers files at the root (:func:`export_transformers`), ``modules.json``,
    ``sentence_bert_config.json``, ``config_sentence_transformers.json`` and ``1_Pooling/config.json``
    with the encoder's pooling (``"mean"`` or ``"cls"``), in the classic format every
    sentence-transformers version reads. ``SentenceTransformer(save_dir).encode(texts)`` returns the
    encoder's ``embeddings`` (not the projections, and not normalised); sentence-transformers is not
    needed to write it.

    Args:
        encoder: A text ``ContrastiveEncoder`` with a tokenizer.
        save_dir: The directory to write (created if needed).

    Returns:
        ``save_dir`` as a ``Path``.

    Raises:
        ValueError: If the encoder has a timm backbone or no tokenizer.
    """
    save_dir = export_transformers(encoder, save_dir)
    pooling = encoder.config.pooling
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    pooling_config = {
        "word_embedding_dimension": encoder.embedding_dim,
        "pooling_mode_cls_token": pooling == "cls",
        "pooling_mode_mean_tokens": pooling == "mean",
        "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False,
        "pooling_mode_weightedmean_tokens": False,
        "pooling_mode_lasttoken": False,
        "include_prompt": True,
    }
    st_config = {
        "__version__": _versions(),
        "model_type": "SentenceTransformer",
        "prompts": {},
        "default_prompt_name": None,
        "similarity_fn_name": "cosine",
    }
    files = {
        "modules.json": modules,
        "sentence_bert_config.json": {"max_seq_length": _max_seq_length(encoder), "do_lower_case": False},
        "config_sentence_transformers.json": st_config,
        "1_Pooling/config.json": pooling_config,
    }
    for name, content in files.items():
        path = save_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(content, indent=2) + "\n", encoding="utf-8")
    return save_dir


def save_for_hub(encoder: ContrastiveEncoder, save_dir: str | os.PathLike[str], card_data: Any = None) -> Path:
    """Write the publishing layout of an encoder: native files at the root, the encoder in ``hf_contrast/``.

    Layout (what :meth:`ContrastiveEncoder.push_to_hub` uploads)::

        README.md                     model card (hf_contrast.hub.model_card.write_model_card)
        config.json, model.safetensors
                                      timm: export_timm        -> timm.create_model("hf-hub:user/repo", pretrained=True)
                                      text: export_transformers -> AutoModel/AutoTokenizer.from_pretrained("user/repo")
        modules.json, 1_Pooling/...   text: export_sentence_transformers -> SentenceTransformer("user/repo")
        hf_contrast/                  encoder.save_pretrained  -> ContrastiveEncoder.from_pretrained("user/repo")

    The model card is best effort: if it cannot be written, a warning is logged and the save goes on.

    Args:
        encoder: The encoder.
        save_dir: The directory to write (created if needed).
        card_data: A ``hf_contrast.hub.model_card.ContrastiveModelCardData`` for the card, or ``None``.

    Returns:
        ``save_dir`` as a ``Path``.

    Raises:
        ValueError: If a text encoder has no tokenizer.
    """
    if not isinstance(encoder, ContrastiveEncoder):
        raise ValueError(f"`encoder` must be a ContrastiveEncoder, got {type(encoder).__name__}.")
    save_dir = Path(save_dir)
    save_dir.mkdir(parents=True, exist_ok=True)
    if encoder.config.backbone_type == "timm":
        export_timm(encoder, save_dir)
    else:
        export_sentence_transformers(encoder, save_dir)
    encoder.save_pretrained(save_dir / HUB_SUBFOLDER)
    try:
        from hf_contrast.hub.model_card import write_model_card

        write_model_card(encoder, save_dir, card_data=card_data)
    except Exception as error:  # the card must never make a save fail
        logger.warning("Model card not written to %s (%s: %s)", save_dir, type(error).__name__, error)
    return save_dir
