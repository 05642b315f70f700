"""``TimmAdapter``: timm vision backbones (``config.backbone_type == "timm"``, images as ``pixel_values``), built
from a name, a config or a timm model object."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any, ClassVar

import timm
import torch
from torch import Tensor, nn
from transformers import PreTrainedModel

from hf_contrast.errors import InputError
from hf_contrast.hub import EncoderCardFacts, get_model_card_data
from hf_contrast.models.adapters.base import BackboneAdapter
from hf_contrast.models.backbones import (
    build_timm_backbone,
    built_input_size,
    create_timm_backbone,
    restore_non_persistent_buffers,
    timm_data_config,
)
from hf_contrast.models.configuration import ContrastiveEncoderConfig
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

    @classmethod
    def claims_instance(cls, backbone: Any) -> bool:
        return _is_timm_model(backbone)

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
        """The timm model without its classifier (removed in place, ``reset_classifier(0)``, once it is accepted):
        the backbone outputs the pooled features (``forward_head(..., pre_logits=True)``); its ``pretrained_cfg``
        gives the preprocessing (``data_config``) and the name it is rebuilt from when loaded.

        Raises:
            InputError: for a ``tokenizer``, a model that cannot be rebuilt by name, or whose output is not one
                vector per image (``global_pool=''``), found by a dry forward pass of one small image before the
                model is changed.
        """
        if tokenizer is not None:
            raise InputError(
                f"`tokenizer` was given but the {type(backbone).__name__} is a timm vision model; drop it."
            )
        _check_timm_embedding(backbone, device, dtype)
        config = ContrastiveEncoderConfig(**{**_timm_parts(backbone), **config_kwargs})
        return encoder_class(config, backbone=backbone)

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
            min_size=_total_stride(encoder.backbone, default=1),
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

    def export_native(
        self, encoder: Any, save_dir: str | os.PathLike[str], state_dict: Mapping[str, Tensor] | None
    ) -> Any:
        return export_timm(encoder, save_dir, state_dict)

    def set_image_size(self, encoder: Any, image_size: Any) -> None:
        """As every image family (:meth:`BackboneAdapter.set_image_size`); refused, the config unchanged, for a
        backbone whose input size is fixed (a ViT built for one size) at another size."""
        previous = encoder.config.data_config
        super().set_image_size(encoder, image_size)  # a new dict: `previous` is left as it was
        if bool(getattr(encoder.backbone, "pretrained_cfg", {}).get("fixed_input_size", False)):
            size = list(encoder.config.data_config["input_size"][1:])
            fixed = list(timm_data_config(encoder.backbone)["input_size"][1:])
            if fixed != size:
                encoder.config.data_config = previous
                raise InputError(
                    f"`image_size`={image_size!r} does not fit `{encoder.config.backbone}`, whose input size is fixed "
                    f"at {tuple(fixed)}: build the encoder with `backbone_kwargs={{'img_size': {size[0]}}}` (or "
                    f"resize the images to {tuple(fixed)})."
                )

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


# ---- timm model objects (from_backbone(model), a trainer's model=) ------------------------------------


def _total_stride(backbone: nn.Module, default: int) -> int:
    """The timm backbone's total stride (its last stage's ``reduction``); ``default`` when timm does not say."""
    info = getattr(backbone, "feature_info", None) or []
    try:
        return int(info[-1]["reduction"])
    except (IndexError, KeyError, TypeError):
        return default


def _is_timm_model(obj: Any) -> bool:
    """timm models are plain ``nn.Module``s with timm's model interface (``pretrained_cfg``, ``forward_head``)."""
    return (
        isinstance(obj, nn.Module)
        and not isinstance(obj, PreTrainedModel)
        and isinstance(getattr(obj, "pretrained_cfg", None), dict)
        and callable(getattr(obj, "forward_head", None))
        and callable(getattr(obj, "reset_classifier", None))
    )


def _pool_type(model: nn.Module) -> str | None:
    """The global pooling of a timm model (``"avg"``, ``"max"``, ``"token"``...), where it says it."""
    pool = getattr(model, "global_pool", None)
    pool = getattr(pool, "pool_type", pool)
    return pool if isinstance(pool, str) else None


def _shapes(model: nn.Module, skip: set[int] = frozenset()) -> dict[str, tuple[int, ...]]:
    """``{name: shape}`` of the persistent tensors of ``model`` (its state dict), leaving out those in ``skip``
    (ids)."""
    by_name = dict(model.named_parameters(remove_duplicate=False))
    by_name.update(model.named_buffers(remove_duplicate=False))
    return {
        name: tuple(t.shape)
        for name, t in model.state_dict(keep_vars=True).items()
        if id(by_name.get(name, t)) not in skip
    }


def _timm_parts(model: nn.Module) -> dict[str, Any]:
    """The config fields of a timm instance; its classifier is removed (in place) once it is accepted."""
    pretrained_cfg = model.pretrained_cfg
    architecture = pretrained_cfg.get("architecture")
    if not architecture:
        raise InputError(
            f"The timm model ({type(model).__name__}) has no `pretrained_cfg['architecture']`, so it could not be "
            "rebuilt when the encoder is loaded: create it with `timm.create_model(name)`, or pass the name to "
            "`from_backbone`."
        )
    kwargs: dict[str, Any] = {}
    built = built_input_size(model)
    if built is not None and built[0] != 3:
        kwargs["in_chans"] = int(built[0])
    if built is not None and hasattr(getattr(model, "patch_embed", None), "img_size"):
        kwargs["img_size"] = [int(built[1]), int(built[2])]
    pool = _pool_type(model)
    if pool:  # the pooling it was built with ('max', 'avgmax', 'token'...) when it is not the architecture's default
        with torch.device("meta"):
            try:
                default_pool = _pool_type(build_timm_backbone(architecture, kwargs))
            except ValueError:
                default_pool = pool
        if default_pool is not None and pool != default_pool:
            kwargs["global_pool"] = pool
    small_stem = has_small_image_stem(model)  # e.g. a model loaded by the route the model card shows
    with torch.device("meta"):
        try:
            fresh = build_timm_backbone(architecture, kwargs)
            if small_stem:
                apply_small_image_stem(fresh, architecture)
        except ValueError:
            fresh = None
    classifier = model.get_classifier() if getattr(model, "num_classes", 0) else None
    head = (
        {id(t) for t in classifier.parameters()} | {id(t) for t in classifier.buffers()}
        if isinstance(classifier, nn.Module)
        else set()
    )
    shapes = _shapes(model, skip=head)  # without the classifier, which is removed only once the model is accepted
    fresh_shapes = _shapes(fresh) if fresh is not None else None
    if shapes != fresh_shapes:
        raise InputError(
            f"The timm model `{architecture}` was built with arguments the encoder cannot read back from the instance "
            f"(its tensors differ from `timm.create_model({architecture!r}, num_classes=0, **{kwargs})`), so a saved "
            f"encoder could not be loaded: pass the name instead, `ContrastiveEncoder.from_backbone({architecture!r}, "
            "backbone_kwargs={...})` with the arguments you created it with."
        )
    if getattr(model, "num_classes", 0):
        model.reset_classifier(0)
    tag = pretrained_cfg.get("tag")
    return {
        **({"small_image_stem": True} if small_stem else {}),
        "backbone": f"{architecture}.{tag}" if tag else architecture,
        "backbone_type": "timm",
        "backbone_architecture": architecture,
        "backbone_kwargs": kwargs,
        "backbone_pretrained": bool(
            pretrained_cfg.get("hf_hub_id") or pretrained_cfg.get("url") or pretrained_cfg.get("file")
        ),
    }


def _check_timm_embedding(model: nn.Module, device: torch.device, dtype: torch.dtype | None) -> None:
    """Check with a dry forward pass of one small image (eval mode, no gradient, the model unchanged) that
    ``forward_head(forward_features(x), pre_logits=True)`` is one vector per image, ``(1, F)``.

    A timm model built with ``global_pool=''`` (or ``reset_classifier(0, '')``) gives feature maps
    ``(B, C, H, W)`` or tokens ``(B, N, C)``: the projection head cannot take them.

    Raises:
        InputError: naming the shape, the pooling and the fix; also if the dry forward itself fails.
    """
    built = built_input_size(model) or tuple(model.pretrained_cfg.get("input_size") or (3, 224, 224))
    channels, height, width = (int(v) for v in built)
    if not model.pretrained_cfg.get("fixed_input_size", False):  # the smallest input the model reduces to 1x1
        stride = _total_stride(model, default=0)
        if stride:
            height = width = min(height, max(stride, 8))
    x = torch.zeros(1, channels, height, width, device=device, dtype=dtype or torch.float32)
    mode = model.training
    try:
        model.eval()
        with torch.no_grad():
            features = model.forward_head(model.forward_features(x), pre_logits=True)
    except Exception as error:  # any failure of the user's model at the door, named
        raise InputError(
            f"`backbone` ({type(model).__name__}) failed a dry forward pass of a {tuple(x.shape)} {x.dtype} image on "
            f"{device} ({type(error).__name__}: {error}); the encoder would fail the same way. Check the model runs: "
            "`model(torch.zeros(1, 3, 224, 224))`."
        ) from error
    finally:
        model.train(mode)
    if features.ndim != 2:
        pool = _pool_type(model)
        name = model.pretrained_cfg.get("architecture") or type(model).__name__
        raise InputError(
            f"`backbone` ({name}) gives features of shape {tuple(features.shape)} for one image, not one vector (1, "
            f"F): its global pooling is off (`global_pool={pool!r}`). Build it with pooling, e.g. "
            f"`timm.create_model({name!r}, num_classes=0)` (or `global_pool='avg'`), or call "
            f"`model.reset_classifier(0, global_pool='avg')` first."
        )
