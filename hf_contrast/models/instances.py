"""Backbone *instances*: a ``SentenceTransformer``, a timm model or a transformers model, wrapped as an encoder.

``ContrastiveEncoder.from_backbone(model)`` and the trainers' ``model=`` take a model object the user
already has, as well as a name. The object becomes the encoder's backbone as it is: its weights are
shared, not copied (training the encoder trains it), so the encoder's ``embeddings`` equal what the
object gave before:

- ``SentenceTransformer`` (``Transformer -> Pooling [-> Normalize]``): its transformer and tokenizer,
  its Pooling mode, its ``Normalize`` and ``max_seq_length``, so ``encoder.encode`` equals
  ``model.encode``;
- a timm model: its classifier is removed in place (``reset_classifier(0)``), so the backbone outputs
  the pooled features (``forward_head(..., pre_logits=True)``); its ``pretrained_cfg`` gives the
  preprocessing (``data_config``);
- a transformers ``PreTrainedModel`` with token inputs (BERT, RoBERTa, a ``...ForSequenceClassification``,
  whose base model is taken): mean pooling unless ``pooling=`` says otherwise; the tokenizer is the
  ``tokenizer=`` argument or the one saved under the model's ``name_or_path``.
"""

from __future__ import annotations

from hf_contrast.errors import InputError

import logging
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedModel

from hf_contrast.models.backbones import built_input_size, build_timm_backbone
from hf_contrast.models.configuration import ContrastiveEncoderConfig
from hf_contrast.models.st_layout import SentenceTransformerLayout, layout_options, pooling_from_config

__all__ = ["ACCEPTED_BACKBONES", "as_encoder", "encoder_from_instance", "is_backbone_instance"]

logger = logging.getLogger(__name__)

#: What ``from_backbone`` and the trainers' ``model=`` accept, for the error messages.
ACCEPTED_BACKBONES = (
    "a timm name, Hub id or local path (str), a sentence_transformers.SentenceTransformer, a timm model "
    "(timm.create_model(...)), or a transformers PreTrainedModel with token inputs (AutoModel.from_pretrained(...))"
)


def _is_sentence_transformer(obj: Any) -> bool:
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        return False
    return isinstance(obj, SentenceTransformer)


def _is_timm_model(obj: Any) -> bool:
    """timm models are plain ``nn.Module``s with timm's model interface (``pretrained_cfg``, ``forward_head``)."""
    return (
        isinstance(obj, nn.Module)
        and not isinstance(obj, PreTrainedModel)
        and isinstance(getattr(obj, "pretrained_cfg", None), dict)
        and callable(getattr(obj, "forward_head", None))
        and callable(getattr(obj, "reset_classifier", None))
    )


def _is_encoder(obj: Any) -> bool:
    """Whether ``obj`` is a ``ContrastiveEncoder`` (told by its config: this module does not import the model)."""
    return isinstance(obj, PreTrainedModel) and isinstance(getattr(obj, "config", None), ContrastiveEncoderConfig)


def is_backbone_instance(obj: Any) -> bool:
    """Whether ``obj`` is a model object :func:`encoder_from_instance` wraps (not a ``ContrastiveEncoder``)."""
    if _is_encoder(obj):
        return False
    return _is_sentence_transformer(obj) or _is_timm_model(obj) or isinstance(obj, PreTrainedModel)


def _timm_parts(model: nn.Module) -> dict[str, Any]:
    """The config fields of a timm instance; its classifier is removed (in place) first."""
    pretrained_cfg = model.pretrained_cfg
    architecture = pretrained_cfg.get("architecture")
    if not architecture:
        raise InputError(
            f"The timm model ({type(model).__name__}) has no `pretrained_cfg['architecture']`, so it could not be rebuilt "
            "when the encoder is loaded: create it with `timm.create_model(name)`, or pass the name to `from_backbone`."
        )
    if getattr(model, "num_classes", 0):
        model.reset_classifier(0)
    kwargs: dict[str, Any] = {}
    built = built_input_size(model)
    if built is not None and built[0] != 3:
        kwargs["in_chans"] = int(built[0])
    if built is not None and hasattr(getattr(model, "patch_embed", None), "img_size"):
        kwargs["img_size"] = [int(built[1]), int(built[2])]
    with torch.device("meta"):
        try:
            fresh = build_timm_backbone(architecture, kwargs)
        except ValueError:
            fresh = None
    shapes = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    fresh_shapes = {name: tuple(t.shape) for name, t in fresh.state_dict().items()} if fresh is not None else None
    if shapes != fresh_shapes:
        raise InputError(
            f"The timm model `{architecture}` was built with arguments the encoder cannot read back from the instance "
            f"(its tensors differ from `timm.create_model({architecture!r}, num_classes=0, **{kwargs})`), so a saved "
            f"encoder could not be loaded: pass the name instead, `ContrastiveEncoder.from_backbone({architecture!r}, "
            "backbone_kwargs={...})` with the arguments you created it with."
        )
    tag = pretrained_cfg.get("tag")
    return {
        "backbone": f"{architecture}.{tag}" if tag else architecture,
        "backbone_type": "timm",
        "backbone_architecture": architecture,
        "backbone_kwargs": kwargs,
        "backbone_pretrained": bool(pretrained_cfg.get("hf_hub_id") or pretrained_cfg.get("url") or pretrained_cfg.get("file")),
    }


def _sentence_transformer_parts(model: Any) -> tuple[PreTrainedModel, Any, dict[str, Any]]:
    """``(transformer, tokenizer, options)`` of a ``SentenceTransformer`` (Transformer -> Pooling [-> Normalize])."""
    modules = list(model)
    kinds = [type(m).__name__ for m in modules]
    if kinds[:2] != ["Transformer", "Pooling"] or any(kind != "Normalize" for kind in kinds[2:]):
        raise InputError(
            f"The SentenceTransformer has the modules {kinds}; ContrastiveEncoder reproduces Transformer -> Pooling "
            "[-> Normalize] only. Pass its transformer alone (`model[0].auto_model`) to train without the other modules."
        )
    transformer = modules[0].auto_model
    name = getattr(model.model_card_data, "base_model", None) or transformer.config.name_or_path or transformer.config.model_type
    layout = SentenceTransformerLayout(
        transformer_path="",
        pooling=pooling_from_config(modules[1].get_config_dict(), name),
        normalize=len(modules) > 2,
        max_seq_length=int(model.max_seq_length) if model.max_seq_length else None,
    )
    return transformer, modules[0].tokenizer, {"backbone": name, "layout": layout}


def _text_model(model: PreTrainedModel) -> PreTrainedModel:
    """The base model of a transformers model with token inputs (``BertForX`` -> its ``BertModel``)."""
    base = model.base_model
    if getattr(base, "main_input_name", "input_ids") != "input_ids" or not hasattr(base.config, "hidden_size"):
        raise InputError(
            f"`backbone` is a transformers {type(model).__name__}, which does not take token ids (`main_input_name` "
            f"is {base.main_input_name!r}): ContrastiveEncoder wraps transformers *text* encoders. For images, pass a "
            "timm model or name (e.g. 'resnet18', 'hf-hub:timm/...')."
        )
    return base


def _tokenizer_of(model: PreTrainedModel) -> Any:
    """The tokenizer saved under the model's ``name_or_path`` (``None``, with a warning, if there is none)."""
    from transformers import AutoTokenizer

    source = model.config.name_or_path
    if source:
        try:
            return AutoTokenizer.from_pretrained(source)
        except (OSError, ValueError) as error:
            reason = f"{type(error).__name__}: {error}"
    else:
        reason = "the model has no `name_or_path`"
    logger.warning(
        "No tokenizer for the %s backbone (%s): pass `tokenizer=` to `from_backbone`, or set `encoder.tokenizer` "
        "before encoding, training or saving.", type(model).__name__, reason,
    )
    return None


def encoder_from_instance(
    encoder_class: type,
    backbone: Any,
    *,
    tokenizer: Any = None,
    backbone_kwargs: dict[str, Any] | None = None,
    hub_kwargs: dict[str, Any] | None = None,
    **config_kwargs: Any,
) -> Any:
    """Wrap a model instance as an encoder, keeping its weights (see the module docstring for each kind).

    Args:
        encoder_class: ``ContrastiveEncoder`` (or a subclass).
        backbone: A ``SentenceTransformer``, a timm model or a transformers ``PreTrainedModel``.
        tokenizer: text only: the tokenizer (default: the model's own).
        backbone_kwargs, hub_kwargs: Name-only options of ``from_backbone``; refused here.
        **config_kwargs: ``ContrastiveEncoderConfig`` options (``projection_dim``, ``pooling``...).

    Returns:
        The encoder on the same device as ``backbone``, in training mode.

    Raises:
        ValueError: for any other object (naming its type and what is accepted), name-only options, a
            ``SentenceTransformer`` with modules other than Transformer, Pooling, Normalize, a
            transformers model without token inputs, or a timm model that cannot be rebuilt by name.
    """
    if _is_encoder(backbone):
        raise InputError(
            "`backbone` is already a ContrastiveEncoder: use it as it is (a trainer's `model=` takes it), or "
            "`ContrastiveEncoder.from_pretrained(folder)` to load a saved one."
        )
    if not is_backbone_instance(backbone):
        raise InputError(f"`backbone` is a {type(backbone).__module__}.{type(backbone).__qualname__}; expected {ACCEPTED_BACKBONES}.")
    for name, value in (("backbone_kwargs", backbone_kwargs), ("hub_kwargs", hub_kwargs)):
        if value:
            raise InputError(f"`{name}` apply when `backbone` is a name; the {type(backbone).__name__} instance is already built.")
    for reserved in ("backbone", "backbone_type", "text_config", "backbone_architecture", "backbone_pretrained"):
        if reserved in config_kwargs:
            raise InputError(f"`{reserved}` is set by `from_backbone`; do not pass it in `config_kwargs`.")
    device = next((p.device for p in backbone.parameters()), torch.device("cpu"))
    if _is_timm_model(backbone):
        if tokenizer is not None:
            raise InputError(f"`tokenizer` was given but the {type(backbone).__name__} is a timm vision model; drop it.")
        config = ContrastiveEncoderConfig(**_timm_parts(backbone), **config_kwargs)
        return encoder_class(config, backbone=backbone).to(device)
    if _is_sentence_transformer(backbone):
        module, own_tokenizer, parts = _sentence_transformer_parts(backbone)
        config_kwargs = layout_options(parts["layout"], config_kwargs, parts["backbone"])
        name = parts["backbone"]
    else:
        module = _text_model(backbone)
        own_tokenizer = None if tokenizer is not None else _tokenizer_of(module)
        name = module.config.name_or_path or module.config.model_type
    tokenizer = tokenizer if tokenizer is not None else own_tokenizer
    max_seq_length = config_kwargs.get("max_seq_length")
    if max_seq_length is not None and tokenizer is not None and getattr(tokenizer, "model_max_length", 0) > max_seq_length:
        tokenizer.model_max_length = int(max_seq_length)  # truncate as sentence-transformers does
    config = ContrastiveEncoderConfig(
        backbone=name,
        backbone_type="text",
        text_config=module.config,
        backbone_pretrained=bool(module.config.name_or_path),
        **config_kwargs,
    )
    return encoder_class(config, backbone=module, tokenizer=tokenizer).to(device)


def as_encoder(model: Any, encoder_class: type) -> Any:
    """What a trainer's ``model=`` becomes: a ``SentenceTransformer``, timm or transformers instance wrapped by
    :func:`encoder_from_instance` (default options); an encoder or another ``nn.Module`` as it is.

    Args:
        model: The trainer's ``model`` argument.
        encoder_class: ``ContrastiveEncoder``.

    Raises:
        ValueError: if ``model`` is not an ``nn.Module`` (a name, say), naming its type and what is accepted.
    """
    if model is None or _is_encoder(model):
        return model
    if is_backbone_instance(model):
        return encoder_from_instance(encoder_class, model)
    if not isinstance(model, nn.Module):
        hint = " Build the encoder first: `ContrastiveEncoder.from_backbone(name)`." if isinstance(model, str) else ""
        raise InputError(
            f"`model` is a {type(model).__module__}.{type(model).__qualname__}; a trainer takes a ContrastiveEncoder, "
            "or a sentence_transformers.SentenceTransformer, a timm model (timm.create_model(...)) or a transformers "
            f"PreTrainedModel with token inputs (AutoModel.from_pretrained(...)).{hint}"
        )
    return model
