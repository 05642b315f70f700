"""The model card's image/text facts of a ``ContrastiveEncoder`` (:class:`~hf_contrast.hub.EncoderCardFacts`).

Interim home of the one image/text branch of the card: the backbone adapters are to supply these facts
themselves (``ContrastiveEncoder.card_facts`` calls :func:`encoder_card_facts`).
"""

from __future__ import annotations

from typing import Any

from hf_contrast.hub.card_data import ContrastiveModelCardData
from hf_contrast.hub.card_facts import EncoderCardFacts
from hf_contrast.provenance import hub_id_or_none

__all__ = ["encoder_card_facts"]


def encoder_card_facts(model: Any, card_data: ContrastiveModelCardData) -> EncoderCardFacts:
    """The card facts of an encoder (duck-typed: ``config``, ``data_config``) and its card data.

    Args:
        model: A ``ContrastiveEncoder`` (``config.backbone_type``, ``config.backbone``, ...).
        card_data: Its card data (``base_model``, and the sizes measured when saving in ``model_details``).
    """
    config, stats = model.config, card_data.model_details or {}
    if config.backbone_type == "text":
        return _text_facts(config, stats, _base_model(config, card_data))
    return _image_facts(model, stats, _base_model(config, card_data, timm_registry=True))


def _base_model(config: Any, card_data: ContrastiveModelCardData, timm_registry: bool = False) -> str | None:
    """The Hub id of a pretrained backbone, or ``None`` (from scratch, local and unnamed, unknown)."""
    if card_data.base_model:
        return hub_id_or_none(card_data.base_model)
    backbone = getattr(config, "backbone", None)
    if not getattr(config, "backbone_pretrained", False) or not isinstance(backbone, str):
        return None
    if timm_registry and not backbone.startswith(("hf-hub:", "local-dir:")):
        try:
            import timm

            pretrained_cfg = timm.models.get_pretrained_cfg(backbone)
            return getattr(pretrained_cfg, "hf_hub_id", None)
        except Exception:  # an unknown name: no provenance rather than a wrong one
            return None
    # A namespaced Hub id ("org/name"); a bare name may be a local folder's name (from_backbone records
    # the base model of a text backbone in the card data).
    return hub_id_or_none(backbone) if "/" in backbone else None


def _timm_license(config: Any, base_model: str | None) -> str | None:
    """The license timm's pretrained config states for the base model (no network)."""
    if base_model is None:
        return None
    try:
        import timm

        name = base_model.split("/", 1)[1] if base_model.startswith("timm/") else config.backbone
        return getattr(timm.models.get_pretrained_cfg(name), "license", None) or None
    except Exception:
        return None


def _text_facts(config: Any, stats: dict[str, Any], base_model: str | None) -> EncoderCardFacts:
    rows: list[tuple[str, str]] = []
    max_length = getattr(config, "max_seq_length", None) or stats.get("max_seq_length")
    if max_length:
        rows.append(("Maximum sequence length", f"{max_length} tokens"))
    normalized = ", then L2 normalisation" if getattr(config, "normalize_embeddings", False) else ""
    rows.append(("Pooling", f"{getattr(config, 'pooling', 'mean')}{normalized}"))
    rows.append(("Similarity function", "cosine similarity"))
    return EncoderCardFacts(
        model_type="hf_contrast ContrastiveEncoder (text)",
        input_noun="sentence",
        inputs_noun="sentences",
        backbone_library="transformers",
        detail_rows=tuple(rows),
        embeddings_normalized=bool(getattr(config, "normalize_embeddings", False)),
        usage_template="usage_sentence_transformers.md",
        library_name="sentence-transformers",
        pipeline_tag="sentence-similarity",
        tags=("sentence-transformers", "sentence-similarity", "feature-extraction"),
        feature_extraction_task="feature-extraction",
        classification_task="text-classification",
        base_model=base_model,
    )


def _image_facts(model: Any, stats: dict[str, Any], base_model: str | None) -> EncoderCardFacts:
    rows: list[tuple[str, str]] = []
    data_config = getattr(model, "data_config", None) or {}
    size = data_config.get("input_size")
    if size:
        rows.append(("Image size", f"{size[1]} x {size[2]} ({size[0]} channels)"))
    if isinstance(stats.get("gmacs"), (int, float)):
        at = f" (backbone, one image at {size[1]} x {size[2]})" if size else ""
        rows.append(("GMACs", f"{stats['gmacs']:.3g}{at}"))
    if data_config.get("mean") and data_config.get("std"):
        mean, std = (tuple(round(v, 4) for v in data_config[key]) for key in ("mean", "std"))
        rows.append(("Normalisation", f"mean {mean}, std {std}"))
    return EncoderCardFacts(
        model_type="hf_contrast ContrastiveEncoder (image)",
        input_noun="image",
        inputs_noun="images",
        backbone_library="timm",
        detail_rows=tuple(rows),
        embeddings_normalized=False,
        usage_template="usage_timm.md",
        library_name="timm",
        pipeline_tag="image-feature-extraction",
        tags=("timm", "image-feature-extraction"),
        feature_extraction_task="image-feature-extraction",
        classification_task="image-classification",
        base_model=base_model,
        base_model_license=_timm_license(model.config, base_model),
    )
