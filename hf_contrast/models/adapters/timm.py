"""``TimmAdapter``: timm vision backbones (``config.backbone_type == "timm"``, images as ``pixel_values``)."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any, ClassVar

import timm
from torch import Tensor, nn

from hf_contrast.errors import InputError
from hf_contrast.hub import EncoderCardFacts, get_model_card_data
from hf_contrast.models.adapters.base import BackboneAdapter
from hf_contrast.models.backbones import (
    build_timm_backbone,
    create_timm_backbone,
    restore_non_persistent_buffers,
    timm_data_config,
)
from hf_contrast.models.configuration import ContrastiveEncoderConfig
from hf_contrast.models.encode import image_batch
from hf_contrast.models.export import export_timm
from hf_contrast.models.inputs import check_pixel_values, check_training_batch
from hf_contrast.models.statistics import backbone_gmacs
from hf_contrast.models.stems import (
    SMALL_IMAGE_STEM,
    apply_small_image_stem,
    has_small_image_stem,
    outside_stem_code,
    stem_channels,
)

__all__ = ["TimmAdapter"]

logger = logging.getLogger("hf_contrast.models.modeling")


class TimmAdapter(BackboneAdapter):
    """A timm model without its classifier (``num_classes=0``): global-pooled features, stage feature maps."""

    modality: ClassVar[str] = "image"
    main_input_name: ClassVar[str] = "pixel_values"

    @classmethod
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
        if tokenizer is not None:
            raise InputError(f"`tokenizer` was given but `{name}` is a timm vision backbone; drop it.")
        small_image_stem = config_kwargs.get("small_image_stem", False) is True
        module, architecture, kwargs = create_timm_backbone(name, pretrained, backbone_kwargs, small_image_stem)
        if pretrained and small_image_stem and not has_small_image_stem(module):
            apply_small_image_stem(module, name)  # refuses another family before anything else is built
            logger.warning(
                "`%s` with `small_image_stem=True`: the pretrained weights are kept except the stem's; `conv1` is a "
                "fresh 3x3 stride-1 convolution (random weights) and the max-pool is dropped.",
                name,
            )
        config = ContrastiveEncoderConfig(
            backbone=provenance_name,
            backbone_type="timm",
            backbone_architecture=architecture,
            backbone_kwargs=kwargs,
            backbone_pretrained=pretrained,
            **config_kwargs,
        )
        return encoder_class(config, backbone=module)

    def build(self, config: Any, backbone: nn.Module | None) -> tuple[nn.Module, int]:
        architecture = config.backbone_architecture or config.backbone
        if architecture is None and backbone is None:
            raise InputError("A timm encoder needs `backbone` (a timm model name, e.g. 'resnet18') in its config.")
        if backbone is None:
            backbone = build_timm_backbone(architecture, config.backbone_kwargs)
        if getattr(config, "small_image_stem", False):
            apply_small_image_stem(backbone, architecture)
        width = int(backbone.num_features)
        config.data_config = {**timm_data_config(backbone), **(config.data_config or {})}
        num_stages = len(getattr(backbone, "feature_info", []) or [])
        if (
            config.feature_stages is not None
            and num_stages
            and any(not -num_stages <= i < num_stages for i in config.feature_stages)
        ):
            raise InputError(
                f"`feature_stages` {config.feature_stages} index stages that `{architecture}` does not have: "
                f"it has {num_stages} (valid indices 0..{num_stages - 1})."
            )
        return backbone, width

    def features(
        self,
        encoder: Any,
        pixel_values: Tensor | None,
        input_ids: Tensor | None,
        attention_mask: Tensor | None,
        token_type_ids: Tensor | None,
        output_feature_maps: bool,
    ) -> tuple[Tensor, tuple[Tensor, ...] | None]:
        """Images ``(B, C, H, W)`` → pooled features ``(B, F)`` [and stage maps ``(B, C_i, H_i, W_i)``]."""
        backbone_name = encoder.config.backbone
        if input_ids is not None or attention_mask is not None or token_type_ids is not None:
            raise InputError(
                f"`input_ids`/`attention_mask`/`token_type_ids` were given but `{backbone_name}` is a timm vision "
                "backbone: pass images as `pixel_values` of shape (B, C, H, W)."
            )
        if pixel_values is None:
            raise InputError("`pixel_values` of shape (B, C, H, W) are required for a timm vision backbone.")
        if pixel_values.ndim != 4:
            raise InputError(f"`pixel_values` must have shape (B, C, H, W), got shape {tuple(pixel_values.shape)}.")
        pixel_values = check_pixel_values(
            pixel_values,
            channels=int((encoder.data_config or {}).get("input_size", (pixel_values.shape[1],))[0]),
            min_size=self._total_stride(encoder.backbone),
            dtype=encoder.dtype,
            training=encoder.training,
            backbone=backbone_name,
        )
        check_training_batch("pixel_values", encoder, pixel_values.shape[0])
        backbone = encoder.backbone
        if not output_feature_maps:
            return backbone(pixel_values), None
        if not hasattr(backbone, "forward_intermediates"):
            raise InputError(
                f"`output_feature_maps=True` needs `forward_intermediates` (timm >= 1.0), which `{backbone_name}` "
                "does not implement; choose another timm backbone or leave `output_feature_maps=False`."
            )
        final, intermediates = backbone.forward_intermediates(pixel_values, indices=encoder.config.feature_stages)
        return backbone.forward_head(final, pre_logits=True), tuple(intermediates)

    @staticmethod
    def _total_stride(backbone: nn.Module) -> int:
        """The timm backbone's total stride (its last stage's ``reduction``; 1 when timm does not say)."""
        info = getattr(backbone, "feature_info", None) or []
        try:
            return int(info[-1]["reduction"])
        except (IndexError, KeyError, TypeError):
            return 1

    def export_native(
        self, encoder: Any, save_dir: str | os.PathLike[str], state_dict: Mapping[str, Tensor] | None
    ) -> Any:
        return export_timm(encoder, save_dir, state_dict)

    def data_config(self, config: Any) -> dict[str, Any] | None:
        if config.data_config is None:
            return None
        return {key: tuple(value) if isinstance(value, list) else value for key, value in config.data_config.items()}

    def set_image_size(self, encoder: Any, image_size: Any) -> None:
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
        config = encoder.config
        current = encoder.data_config or {}
        channels, *current_hw = current.get("input_size", (3, 0, 0))
        fixed = bool(getattr(encoder.backbone, "pretrained_cfg", {}).get("fixed_input_size", False))
        if fixed:
            current_hw = timm_data_config(encoder.backbone)["input_size"][1:]
        if fixed and list(current_hw) != list(size):
            raise InputError(
                f"`image_size`={image_size!r} does not fit `{config.backbone}`, whose input size is fixed at "
                f"{tuple(current_hw)}: build the encoder with `backbone_kwargs={{'img_size': {size[0]}}}` (or resize "
                f"the images to {tuple(current_hw)})."
            )
        config.data_config = {**(config.data_config or {}), "input_size": [int(channels), int(size[0]), int(size[1])]}

    def set_gradient_checkpointing(self, encoder: Any, enable: bool) -> bool:
        encoder.backbone.set_grad_checkpointing(enable)
        return True

    def after_load(
        self, encoder: Any, path: str | os.PathLike[str], subfolder: str, hub_kwargs: dict[str, Any]
    ) -> None:
        config = encoder.config
        restore_non_persistent_buffers(
            encoder.backbone, config.backbone_architecture or config.backbone, config.backbone_kwargs
        )

    def encode_inputs(self, encoder: Any, inputs: Any) -> tuple[list[Any], bool]:
        return image_batch(inputs, channels=len((encoder.data_config or {}).get("mean") or (3,)))

    def describe(self, encoder: Any) -> tuple[str, str]:
        config = encoder.config
        stem = f", {SMALL_IMAGE_STEM}" if getattr(config, "small_image_stem", False) else ""
        return f"timm '{config.backbone_architecture or config.backbone}'{stem}", ""

    def details(self, encoder: Any, previous: dict[str, Any] | None) -> dict[str, Any]:
        """``architecture_name``, ``input_size``, ``gmacs`` (reused from ``previous`` when nothing changed)."""
        config = encoder.config
        architecture = config.backbone_architecture or config.backbone
        input_size = list((encoder.data_config or {}).get("input_size") or ())
        small_stem = bool(getattr(config, "small_image_stem", False))
        key = repr(
            (architecture, sorted(config.backbone_kwargs.items()), input_size) + ((True,) if small_stem else ())
        )
        details: dict[str, Any] = {"architecture_name": architecture, "input_size": input_size, "key": key}
        if previous and previous.get("key") == key and "gmacs" in previous:
            details["gmacs"] = previous["gmacs"]
        elif input_size:
            gmacs = backbone_gmacs(architecture, config.backbone_kwargs, input_size, small_image_stem=small_stem)
            if gmacs is not None:
                details["gmacs"] = round(gmacs, 4)
        return details

    def card_facts(self, encoder: Any) -> EncoderCardFacts:
        """Image size, GMACs and normalisation rows; timm's library, tags and usage; timm's license."""
        config, data_config = encoder.config, getattr(encoder, "data_config", None) or {}
        card_data = get_model_card_data(encoder)
        stats = card_data.model_details or {}
        rows: list[tuple[str, str]] = []
        usage_values: tuple[tuple[str, object], ...] = ()
        if getattr(config, "small_image_stem", False):
            in_chans, channels = stem_channels(encoder.backbone)
            rows.append(
                ("Stem", f"{SMALL_IMAGE_STEM}: `conv1` = Conv2d({in_chans}, {channels}, 3, stride 1), no `maxpool`")
            )
            usage_values = (
                ("small_image_stem", SMALL_IMAGE_STEM),
                ("stem_code", outside_stem_code(in_chans, channels)),
            )
        size = data_config.get("input_size")
        if size:
            rows.append(("Image size", f"{size[1]} x {size[2]} ({size[0]} channels)"))
        if isinstance(stats.get("gmacs"), (int, float)):
            at = f" (backbone, one image at {size[1]} x {size[2]})" if size else ""
            rows.append(("GMACs", f"{stats['gmacs']:.3g}{at}"))
        if data_config.get("mean") and data_config.get("std"):
            mean, std = (tuple(round(v, 4) for v in data_config[key]) for key in ("mean", "std"))
            rows.append(("Normalisation", f"mean {mean}, std {std}"))
        base_model = self.card_base_model(config, card_data)
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
            base_model_license=_timm_license(config, base_model),
            usage_values=usage_values,
        )

    def pretrained_hub_id(self, backbone: str) -> str | None:
        """A timm name's default pretrained tag on the Hub (timm's registry, no network); ``hf-hub:`` and
        ``local-dir:`` names as the default."""
        if backbone.startswith(("hf-hub:", "local-dir:")):
            return super().pretrained_hub_id(backbone)
        try:
            return getattr(timm.models.get_pretrained_cfg(backbone), "hf_hub_id", None)
        except Exception:  # an unknown name: no provenance rather than a wrong one
            return None


def _timm_license(config: Any, base_model: str | None) -> str | None:
    """The license timm's pretrained config states for the base model (no network)."""
    if base_model is None:
        return None
    try:
        name = base_model.split("/", 1)[1] if base_model.startswith("timm/") else config.backbone
        return getattr(timm.models.get_pretrained_cfg(name), "license", None) or None
    except Exception:
        return None
