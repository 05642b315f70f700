"""Configuration of :class:`~hf_contrast.models.ContrastiveEncoder`: backbone, pooling and projection head."""

from __future__ import annotations

from typing import Any

from transformers import AutoConfig, PretrainedConfig

from hf_contrast.errors import InputError
from hf_contrast.models.heads import MAX_HEAD_LAYERS, MAX_HEAD_WIDTH
from hf_contrast.models.save_format import SAVE_FORMAT_VERSION
from hf_contrast.tensor_checks import MAX_LENGTH

__all__ = ["ContrastiveEncoderConfig", "BACKBONE_TYPES", "POOLINGS", "PROJECTION_NORMS", "register_backbone_type"]

#: The backbone families (``hf_contrast.models.adapters.registry`` serves each; ``register_adapter`` adds one).
BACKBONE_TYPES = ("timm", "text")
POOLINGS = ("mean", "cls", "max")
PROJECTION_NORMS = ("batchnorm", "layernorm", None)


def register_backbone_type(backbone_type: str) -> None:
    """Accept ``backbone_type`` in :class:`ContrastiveEncoderConfig` (called by ``register_adapter``)."""
    global BACKBONE_TYPES
    if backbone_type not in BACKBONE_TYPES:
        BACKBONE_TYPES = (*BACKBONE_TYPES, backbone_type)


def _positive_int_or_none(name: str, value: Any, maximum: int) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= maximum):
        raise InputError(f"`{name}` must be an int in [1, {maximum}] or None, got {value!r}.")


class ContrastiveEncoderConfig(PretrainedConfig):
    r"""Configuration of a contrastive encoder: a timm or Hugging Face text backbone plus a projection head.

    The backbone produces ``embeddings`` (what a linear probe uses); the projection head (an MLP, as in
    SimCLR, https://arxiv.org/abs/2002.05709) maps them to ``projections`` (what the losses use). Sizes
    left to ``None`` are filled in from the backbone when the model is built, so a saved config is always
    complete.

    Args:
        backbone: Where the backbone comes from: a timm model name (``"resnet18"``, ``"resnet18.a1_in1k"``,
            ``"hf-hub:timm/..."``) or a Hugging Face model id / local path of a BERT-style text encoder.
            Used as the provenance (``base_model`` of model cards).
        backbone_type: ``"timm"`` (images, ``pixel_values``) or ``"text"`` (``input_ids``).
        backbone_architecture: timm only: the timm registry name the backbone is rebuilt from, offline
            (defaults to ``backbone``; differs when ``backbone`` is an ``hf-hub:``/``local-dir:`` source).
        backbone_kwargs: timm only: extra keyword arguments of ``timm.create_model`` (``drop_path_rate``,
            ``img_size``, ``global_pool``…). ``num_classes`` is always 0.
        backbone_pretrained: Whether the backbone started from pretrained weights (provenance only).
        text_config: text only: the text backbone's config (a ``PretrainedConfig`` or its dict with
            ``model_type``), rebuilt with ``AutoConfig.for_model`` so loading needs no network.
        data_config: timm only: the image preprocessing (``input_size``, ``mean``, ``std``,
            ``interpolation``, ``crop_pct``, ``crop_mode``) as from ``timm.data.resolve_data_config``.
            Keys left out are resolved from the backbone when the model is built.
        pooling: text only: ``"mean"`` (mean of the token states over the attention mask), ``"cls"``
            (the first token's state) or ``"max"`` (element-wise max over the unmasked tokens), as the
            sentence-transformers ``Pooling`` modes of the same names. timm backbones use their own
            global pooling.
        normalize_embeddings: text only: L2-normalise ``embeddings`` (a sentence-transformers model
            with a ``Normalize`` module keeps it; the export writes the module back).
        max_seq_length: text only: the longest input in tokens (sentence-transformers'
            ``max_seq_length``); ``None`` = the smaller of the tokenizer's and the position limit.
        embedding_dim: The backbone width F. ``None`` means "read it from the backbone"; an explicit value
            that does not match the backbone raises ``ValueError`` when the model is built.
        projection_hidden_dim: The width of the hidden layers of the head; ``None`` means ``embedding_dim``.
        projection_dim: The output width P of the head (default 128).
        projection_layers: The number of linear layers of the head (1 = a single linear map).
        projection_norm: The normalisation after each hidden linear layer: ``"batchnorm"``,
            ``"layernorm"`` or ``None``.
        normalize_projections: Whether ``projections`` are L2-normalised.
        num_labels: The size of an optional linear task head on ``embeddings`` (``logits``); 0 (the
            default, also when ``None`` and no ``id2label`` is given) = no task head.
        feature_stages: timm only: which stage indices ``output_feature_maps=True`` returns
            (into ``backbone.feature_info``); ``None`` = all stages.
        small_image_stem: timm ResNet family only: replace the ImageNet stem (7x7 stride-2 convolution +
            max-pool) by a 3x3 stride-1 convolution and no max-pool, as the small-image (CIFAR) papers train
            32-px images (:mod:`hf_contrast.models.stems`). Rebuilt by ``from_pretrained``; a save without
            the key (older releases) has the ImageNet stem.
        **kwargs: Standard ``PretrainedConfig`` arguments.

    Every argument has a default, as transformers requires of a config (``PretrainedConfig.to_diff_dict``
    builds ``ContrastiveEncoderConfig()`` to compare against): a config without ``backbone`` is valid, and
    :class:`~hf_contrast.models.ContrastiveEncoder` raises when asked to build a backbone from it.

    Raises:
        ValueError: If an option is outside its documented values; the head's widths and ``num_labels`` go up to
            ``2**20`` and ``projection_layers`` to 64 (:data:`~hf_contrast.models.heads.MAX_HEAD_WIDTH`,
            :data:`~hf_contrast.models.heads.MAX_HEAD_LAYERS`), ``max_seq_length`` to ``2**31 - 1``.

    Example:
        >>> config = ContrastiveEncoderConfig(backbone="resnet18", backbone_type="timm", projection_dim=64)
        >>> config.projection_layers
        2
    """

    model_type = "hf_contrast_encoder"

    def __init__(
        self,
        backbone: str | None = None,
        backbone_type: str = "timm",
        backbone_architecture: str | None = None,
        backbone_kwargs: dict[str, Any] | None = None,
        backbone_pretrained: bool = False,
        text_config: PretrainedConfig | dict[str, Any] | None = None,
        data_config: dict[str, Any] | None = None,
        pooling: str = "mean",
        normalize_embeddings: bool = False,
        max_seq_length: int | None = None,
        embedding_dim: int | None = None,
        projection_hidden_dim: int | None = None,
        projection_dim: int = 128,
        projection_layers: int = 2,
        projection_norm: str | None = "batchnorm",
        normalize_projections: bool = True,
        num_labels: int | None = None,
        feature_stages: list[int] | None = None,
        small_image_stem: bool = False,
        **kwargs: Any,
    ) -> None:
        if backbone_type not in BACKBONE_TYPES:
            raise InputError(f"`backbone_type` must be one of {BACKBONE_TYPES}, got {backbone_type!r}.")
        if pooling not in POOLINGS:
            raise InputError(f"`pooling` must be one of {POOLINGS}, got {pooling!r}.")
        if projection_norm not in PROJECTION_NORMS:
            raise InputError(f"`projection_norm` must be one of {PROJECTION_NORMS}, got {projection_norm!r}.")
        _positive_int_or_none("embedding_dim", embedding_dim, MAX_HEAD_WIDTH)
        _positive_int_or_none("max_seq_length", max_seq_length, MAX_LENGTH)
        _positive_int_or_none("projection_hidden_dim", projection_hidden_dim, MAX_HEAD_WIDTH)
        _positive_int_or_none("projection_dim", projection_dim, MAX_HEAD_WIDTH)
        _positive_int_or_none("projection_layers", projection_layers, MAX_HEAD_LAYERS)
        if projection_dim is None or projection_layers is None:
            raise InputError(
                "`projection_dim` and `projection_layers` must be positive ints, got "
                f"{projection_dim!r} and {projection_layers!r}."
            )
        if num_labels is None:  # a saved config stores `id2label`, not `num_labels`
            num_labels = len(kwargs["id2label"]) if kwargs.get("id2label") is not None else 0
        if isinstance(num_labels, bool) or not isinstance(num_labels, int) or not 0 <= num_labels <= MAX_HEAD_WIDTH:
            raise InputError(
                f"`num_labels` must be an int in [0, {MAX_HEAD_WIDTH}] (0 = no task head), got {num_labels!r}."
            )
        if backbone_kwargs is not None and not isinstance(backbone_kwargs, dict):
            raise InputError(
                "`backbone_kwargs` must be a dict of timm.create_model arguments, got "
                f"{type(backbone_kwargs).__name__}."
            )
        if backbone_kwargs and "num_classes" in backbone_kwargs:
            raise InputError(
                "`backbone_kwargs` must not set `num_classes`: the backbone is built with num_classes=0; "
                "use `num_labels` for a task head."
            )
        if feature_stages is not None:
            if not isinstance(feature_stages, (list, tuple)) or not all(
                isinstance(i, int) and not isinstance(i, bool) for i in feature_stages
            ):
                raise InputError(f"`feature_stages` must be a list of stage indices or None, got {feature_stages!r}.")
            feature_stages = list(feature_stages)
        if isinstance(text_config, dict):
            if "model_type" not in text_config:
                raise InputError("`text_config` given as a dict must contain its `model_type` (e.g. 'bert').")
            text_config = AutoConfig.for_model(**text_config)
        if text_config is not None and not isinstance(text_config, PretrainedConfig):
            raise InputError(
                f"`text_config` must be a PretrainedConfig, a dict or None, got {type(text_config).__name__}."
            )
        if backbone_type == "timm" and (normalize_embeddings or max_seq_length is not None):
            raise InputError(
                "`normalize_embeddings` and `max_seq_length` are for text backbones; a timm backbone's output is "
                "its pooled features and its input size is in `data_config`."
            )
        if backbone_type == "text" and (backbone_kwargs or data_config is not None):
            raise InputError(
                "`backbone_kwargs` and `data_config` are for timm backbones; a text backbone is described by "
                "`text_config` and its tokenizer."
            )
        if not isinstance(small_image_stem, bool):
            raise InputError(f"`small_image_stem` must be True or False, got {small_image_stem!r}.")
        if backbone_type != "timm" and small_image_stem:
            raise InputError(
                f"`small_image_stem=True` is for timm ResNet-family image backbones; `{backbone}` is a "
                f"{backbone_type} backbone: drop `small_image_stem`."
            )
        if data_config is not None and not isinstance(data_config, dict):
            raise InputError(
                f"`data_config` must be a dict like timm.data.resolve_data_config's, got {type(data_config).__name__}."
            )

        self.backbone = backbone
        self.backbone_type = backbone_type
        self.backbone_architecture = backbone_architecture
        self.backbone_kwargs = dict(backbone_kwargs or {})
        self.backbone_pretrained = bool(backbone_pretrained)
        self.text_config = text_config
        self.data_config = dict(data_config) if data_config is not None else None
        self.pooling = pooling
        self.normalize_embeddings = bool(normalize_embeddings)
        self.max_seq_length = max_seq_length
        self.embedding_dim = embedding_dim
        self.projection_hidden_dim = projection_hidden_dim
        self.projection_dim = projection_dim
        self.projection_layers = projection_layers
        self.projection_norm = projection_norm
        self.normalize_projections = bool(normalize_projections)
        self.feature_stages = feature_stages
        self.small_image_stem = small_image_stem
        kwargs.pop("format_version", None)  # read by `from_pretrained`'s format check; a save writes this release's
        self.format_version = SAVE_FORMAT_VERSION
        super().__init__(num_labels=num_labels, **kwargs)

    def to_dict(self) -> dict[str, Any]:
        """The config as a dict (what ``config.json`` holds); ``small_image_stem`` only when ``True``, so a save
        without the stem reads as before in releases that do not know the key, and one with it makes them warn
        (``NewerSaveFormatWarning``: a key they do not know) instead of building the wrong stem silently."""
        output = super().to_dict()
        if not output.get("small_image_stem"):
            output.pop("small_image_stem", None)
        return output
