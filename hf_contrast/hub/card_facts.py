"""What an encoder's model card says that depends on its backbone family (image or text).

The renderer (:mod:`hf_contrast.hub.card_render`) has no image/text branch: it asks the model for an
:class:`EncoderCardFacts` (``model.card_facts()``) and puts these values where the card needs them.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EncoderCardFacts"]


@dataclass(frozen=True)
class EncoderCardFacts:
    """The backbone-family-specific parts of a model card, supplied by the encoder.

    Args:
        model_type: The "Model type" row (``"hf_contrast ContrastiveEncoder (image)"``).
        input_noun: What one input is, in the card's first sentence (``"image"``, ``"sentence"``).
        inputs_noun: Its plural (``"images"``, ``"sentences"``).
        backbone_library: The library that names the backbone's architecture (``"timm"``, ``"transformers"``).
        detail_rows: ``(label, value)`` rows of "Model details" between the parameter count and the output
            dimensionality (image size, GMACs, normalisation; or sequence length, pooling, similarity).
        embeddings_normalized: Whether the ``embeddings`` output is L2-normalised.
        usage_template: File name, in ``model_cards/``, of the Jinja snippet for the "Usage" section on
            the repository root's own format (rendered with the card's values).
        library_name: The card metadata's ``library_name`` (``"timm"``, ``"sentence-transformers"``).
        pipeline_tag: The card metadata's ``pipeline_tag``.
        tags: Hub tags of the format, after ``hf_contrast``, ``contrastive-learning`` and the method.
        feature_extraction_task: model-index task type of an evaluation with no task of its own.
        classification_task: model-index task type of a linear-probe / kNN evaluation.
        base_model: The Hub id of the pretrained starting point (the card data's, else what the backbone's
            library knows), or ``None``.
        base_model_license: The license that the backbone library's own metadata states for ``base_model``
            (``None``: unknown there; the renderer then reads a cached Hub card).
        usage_values: ``(name, value)`` pairs the usage snippet's template reads besides the card's values
            (timm: ``small_image_stem`` and ``stem_code`` for a model with the small-image stem).
    """

    model_type: str
    input_noun: str
    inputs_noun: str
    backbone_library: str
    detail_rows: tuple[tuple[str, str], ...]
    embeddings_normalized: bool
    usage_template: str
    library_name: str
    pipeline_tag: str
    tags: tuple[str, ...]
    feature_extraction_task: str
    classification_task: str
    base_model: str | None = None
    base_model_license: str | None = None
    usage_values: tuple[tuple[str, object], ...] = ()
