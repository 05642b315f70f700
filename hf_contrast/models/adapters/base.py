"""``BackboneAdapter``: everything about an encoder that depends on its backbone family, behind one interface.

``ContrastiveEncoder`` holds one adapter (``encoder.adapter``, picked from ``config.backbone_type`` by
:mod:`hf_contrast.models.adapters.registry`) and asks it to build the backbone, check the inputs and run
them to features, write the native files, describe the backbone for the card, and batch the inputs of
``encode``; it also says which names and which model objects ``from_backbone`` (and a trainer's ``model=``)
hands to it (:meth:`~BackboneAdapter.claims_name`, :meth:`~BackboneAdapter.claims_instance`). An adapter holds
no state and no tensors (it is not an ``nn.Module``): the parameters stay in ``encoder.backbone``, so the state
dict and the save layout do not depend on it. A new family is one subclass in its own file plus one
:func:`~hf_contrast.models.adapters.register_adapter` line (docs/encoders.md, "Adding a backbone family").
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar

from torch import Tensor, nn

from hf_contrast.errors import InputError
from hf_contrast.hub import EncoderCardFacts, get_model_card_data
from hf_contrast.models.encode import image_batch
from hf_contrast.provenance import hub_id_or_none

__all__ = ["BackboneAdapter"]


class BackboneAdapter(ABC):
    """One backbone family (timm, transformers text...): the family-specific half of ``ContrastiveEncoder``.

    Every method takes the encoder (or its config) it acts for; an adapter instance is stateless.
    """

    #: What the encoder reads: ``"image"`` or ``"text"`` (``ContrastiveEncoder.input_modality``: the
    #: evaluation's default batching and ``views_for`` ask it).
    modality: ClassVar[str]
    #: The forward argument holding the batch (``PreTrainedModel.main_input_name``).
    main_input_name: ClassVar[str]

    @classmethod
    def claims_name(cls, name: str) -> bool:
        """Whether ``from_backbone(name)`` builds this family. Registered families are asked newest first; a name
        none of them claims is timm's or a transformers text encoder's (:func:`~hf_contrast.models.backbones.
        backbone_type_of`). ``False`` by default (the family is built from a config or an instance only)."""
        return False

    @classmethod
    def claims_instance(cls, backbone: Any) -> bool:
        """Whether ``from_backbone(backbone)`` and a trainer's ``model=backbone`` wrap this model object with this
        family (registered families are asked newest first). ``False`` by default."""
        return False

    @classmethod
    def encoder_from_instance(
        cls,
        encoder_class: type,
        backbone: Any,
        *,
        tokenizer: Any,
        device: Any,
        dtype: Any,
        config_kwargs: dict[str, Any],
    ) -> Any:
        """Wrap ``backbone`` (a model object :meth:`claims_instance` accepted) as ``encoder_class(config,
        backbone=...)``, keeping its weights. The caller has refused the name-only options and a model spread
        over devices or dtypes, and places the encoder on ``device`` / ``dtype`` afterwards.

        Args:
            encoder_class: ``ContrastiveEncoder`` (or a subclass).
            backbone: The model object.
            tokenizer: ``from_backbone``'s ``tokenizer`` (a callable, or ``None``).
            device: The one device of ``backbone``'s tensors.
            dtype: Their one floating dtype (``None``: no floating tensor).
            config_kwargs: ``ContrastiveEncoderConfig`` options (``projection_dim``, ``pooling``...).
        """
        raise InputError(f"{cls.__name__} does not wrap model objects; pass the backbone's name to `from_backbone`.")

    @classmethod
    @abstractmethod
    def encoder_from_name(
        cls,
        encoder_class: type,
        name: str,
        *,
        pretrained: bool,
        backbone_kwargs: dict[str, Any] | None,
        tokenizer: Any,
        hub_kwargs: dict[str, Any] | None,
        provenance_name: str,
        config_kwargs: dict[str, Any],
    ) -> Any:
        """``ContrastiveEncoder.from_backbone(name)`` for this family: the backbone loaded, the config built.

        Args:
            encoder_class: The encoder class to instantiate (``cls`` of ``from_backbone``).
            name: The backbone's name (timm name, Hub id, local path).
            pretrained: As ``from_backbone``.
            backbone_kwargs: As ``from_backbone``.
            tokenizer: As ``from_backbone``.
            hub_kwargs: As ``from_backbone``.
            provenance_name: The name saved in ``config.backbone`` (never a local path).
            config_kwargs: As ``from_backbone``.

        Returns:
            The encoder.
        """

    @abstractmethod
    def build(self, config: Any, backbone: nn.Module | None) -> tuple[nn.Module, int]:
        """The backbone (``backbone`` if given, else built from ``config`` with random weights) and its
        output width F; may complete ``config`` (e.g. timm's ``data_config``).

        Raises:
            InputError: If ``config`` names no backbone and none is given, or options do not fit it.
        """

    @abstractmethod
    def features(
        self,
        encoder: Any,
        pixel_values: Tensor | None,
        input_ids: Tensor | None,
        attention_mask: Tensor | None,
        token_type_ids: Tensor | None,
        output_feature_maps: bool,
    ) -> tuple[Tensor, tuple[Tensor, ...] | None]:
        """Check the forward inputs and run the backbone: ``(embeddings (B, F), feature_maps or None)``.

        Raises:
            InputError: If the inputs are not those of this family or are malformed.
        """

    @abstractmethod
    def export_native(
        self, encoder: Any, save_dir: str | os.PathLike[str], state_dict: Mapping[str, Tensor] | None
    ) -> Any:
        """Write the backbone in its library's own format (what loads without hf_contrast)."""

    def save_native(
        self, encoder: Any, folder: str | os.PathLike[str], state_dict: Mapping[str, Tensor] | None, target: Any
    ) -> None:
        """The root of ``save_pretrained``'s layout (``target``: the folder named by the user); by default
        :meth:`export_native`."""
        self.export_native(encoder, folder, state_dict)

    def data_config(self, config: Any) -> dict[str, Any] | None:
        """The image preprocessing (``ContrastiveEncoder.data_config``): ``config.data_config`` with its lists as
        tuples (``input_size``, ``mean``, ``std``, ``interpolation``…, as timm's ``resolve_data_config``);
        ``None`` when the config has none (a text family)."""
        if config.data_config is None:
            return None
        return {key: tuple(value) if isinstance(value, list) else value for key, value in config.data_config.items()}

    def set_image_size(self, encoder: Any, image_size: Any) -> None:
        """``ContrastiveEncoder.set_image_size``: ``data_config["input_size"]`` becomes ``(C, H, W)`` (an int is a
        square); a family that reads no images refuses it.

        Raises:
            InputError: for a text family, or a size that is not a positive int or (height, width) of them.
        """
        config = encoder.config
        if self.modality != "image":
            raise InputError(
                f"`set_image_size` is for image encoders; `{config.backbone}` is a {config.backbone_type} backbone."
            )
        size = (
            [image_size, image_size]
            if isinstance(image_size, int) and not isinstance(image_size, bool)
            else image_size
        )
        if (
            not isinstance(size, (list, tuple))
            or len(size) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in size)
        ):
            raise InputError(
                f"`image_size` must be a positive int or (height, width) of positive ints, got {image_size!r}."
            )
        channels = (encoder.data_config or {}).get("input_size", (3,))[0]
        config.data_config = {**(config.data_config or {}), "input_size": [int(channels), int(size[0]), int(size[1])]}

    def set_gradient_checkpointing(self, encoder: Any, enable: bool) -> bool:
        """Switch gradient checkpointing in the backbone; ``False``: not handled here (transformers' default)."""
        return False

    def after_load(
        self, encoder: Any, path: str | os.PathLike[str], subfolder: str, hub_kwargs: dict[str, Any]
    ) -> None:
        """What ``from_pretrained`` restores beyond the weights (buffers, tokenizer); nothing by default."""

    def encode_inputs(self, encoder: Any, inputs: Any) -> tuple[list[Any], bool]:
        """``encoder.encode``'s inputs as a list of rows, and whether a single input was given: for an image
        family, images (PIL, arrays, tensors, paths; as a timm encoder takes them)."""
        if self.modality == "image":
            return image_batch(inputs, channels=len((encoder.data_config or {}).get("mean") or (3,)))
        raise InputError(f"`encode` does not support `{encoder.config.backbone}` ({type(self).__name__}).")

    def describe(self, encoder: Any) -> tuple[str, str]:
        """For the card's module tree: the backbone's source (``"timm 'resnet18'"``) and a pooling note."""
        return type(encoder.backbone).__name__, ""

    def details(self, encoder: Any, previous: dict[str, Any] | None) -> dict[str, Any]:
        """The card's family-specific sizes (``architecture_name``, GMACs, sequence length...)."""
        return {"architecture_name": type(encoder.backbone).__name__}

    def card_facts(self, encoder: Any) -> EncoderCardFacts:
        """What the model card says about this family (library, tags, detail rows, usage snippets, base model):
        ``ContrastiveEncoder.card_facts()``, read by the card renderer. By default what the modality says: an
        image or text feature extractor loaded with hf_contrast (the card's usage), with the image size and
        normalisation of its ``data_config`` when it has one.

        Args:
            encoder: The encoder (duck-typed: ``config``, ``data_config``, ``model_card_data`` with the sizes
                measured when saving in ``model_details``).
        """
        image = self.modality == "image"
        task = "image-feature-extraction" if image else "feature-extraction"
        data_config = getattr(encoder, "data_config", None) or {}
        rows: list[tuple[str, str]] = []
        if data_config.get("input_size"):
            channels, height, width = data_config["input_size"]
            rows.append(("Image size", f"{height} x {width} ({channels} channels)"))
        if data_config.get("mean") and data_config.get("std"):
            mean, std = (tuple(round(v, 4) for v in data_config[key]) for key in ("mean", "std"))
            rows.append(("Normalisation", f"mean {mean}, std {std}"))
        return EncoderCardFacts(
            model_type=f"hf_contrast ContrastiveEncoder ({self.modality})",
            input_noun="image" if image else "text",
            inputs_noun="images" if image else "texts",
            backbone_library=type(encoder.backbone).__module__.split(".")[0],
            detail_rows=tuple(rows),
            embeddings_normalized=bool(getattr(encoder.config, "normalize_embeddings", False)),
            usage_template="usage_hf_contrast.md",
            library_name="hf_contrast",
            pipeline_tag=task,
            tags=(task,),
            feature_extraction_task=task,
            classification_task="image-classification" if image else "text-classification",
            base_model=self.card_base_model(encoder.config, get_model_card_data(encoder)),
        )

    def card_base_model(self, config: Any, card_data: Any) -> str | None:
        """The Hub id of a pretrained backbone, or ``None`` (from scratch, local and unnamed, unknown).

        The card data's ``base_model`` if set, else what :meth:`pretrained_hub_id` finds for
        ``config.backbone`` when ``config.backbone_pretrained``.
        """
        if card_data.base_model:
            return hub_id_or_none(card_data.base_model)
        backbone = getattr(config, "backbone", None)
        if not getattr(config, "backbone_pretrained", False) or not isinstance(backbone, str):
            return None
        return self.pretrained_hub_id(backbone)

    def pretrained_hub_id(self, backbone: str) -> str | None:
        """The Hub id the pretrained weights of the backbone named ``backbone`` come from, or ``None``.

        By default a namespaced Hub id (``"org/name"``); a bare name may be a local folder's name
        (``from_backbone`` records the base model of such a backbone in the card data).
        """
        return hub_id_or_none(backbone) if "/" in backbone else None
