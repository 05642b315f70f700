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

import logging
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedModel

from hf_contrast.errors import InputError, InputTypeError
from hf_contrast.models.backbones import build_timm_backbone, built_input_size
from hf_contrast.models.configuration import ContrastiveEncoderConfig
from hf_contrast.models.st_layout import (
    SentenceTransformerLayout,
    apply_max_seq_length,
    layout_options,
    pooling_from_config,
)
from hf_contrast.models.stems import apply_small_image_stem, has_small_image_stem

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


def _sentence_transformer_parts(model: Any) -> tuple[PreTrainedModel, Any, dict[str, Any]]:
    """``(transformer, tokenizer, options)`` of a ``SentenceTransformer`` (Transformer -> Pooling [-> Normalize])."""
    modules = list(model)
    kinds = [type(m).__name__ for m in modules]
    if not modules:
        raise InputError(
            "`backbone` is a SentenceTransformer with no modules: there is no transformer to train. Load a model "
            "(`SentenceTransformer('sentence-transformers/all-MiniLM-L6-v2')`) or pass its name to `from_backbone`."
        )
    if kinds[:2] != ["Transformer", "Pooling"] or any(kind != "Normalize" for kind in kinds[2:]):
        raise InputError(
            f"The SentenceTransformer has the modules {kinds}; ContrastiveEncoder reproduces Transformer -> Pooling "
            "[-> Normalize] only. Pass its transformer alone (`model[0].auto_model`) to train without the other "
            "modules."
        )
    transformer = modules[0].auto_model
    name = (
        getattr(model.model_card_data, "base_model", None)
        or transformer.config.name_or_path
        or transformer.config.model_type
    )
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
        "before encoding, training or saving.",
        type(model).__name__,
        reason,
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
        The encoder on the device and in the floating dtype of ``backbone`` (its heads too; a warning for
        a dtype other than float32), in ``backbone``'s mode (``train()`` or ``eval()``) as a whole.

    Raises:
        InputError: (a ``ValueError``) for any other object (naming its type and what is accepted),
            name-only options, a model with tensors on the meta device, spread over several devices or
            dtypes, a ``SentenceTransformer`` with no modules or modules other than Transformer,
            Pooling, Normalize, a transformers model without token inputs, a timm model that cannot be
            rebuilt by name, or whose output is not one vector per image (``global_pool=''``), found
            by a dry forward pass of one small image before the model is changed.
        InputTypeError: if ``tokenizer`` is not a tokenizer object (a name, say).
    """
    if _is_encoder(backbone):
        raise InputError(
            "`backbone` is already a ContrastiveEncoder: use it as it is (a trainer's `model=` takes it), or "
            "`ContrastiveEncoder.from_pretrained(folder)` to load a saved one."
        )
    if not is_backbone_instance(backbone):
        raise InputError(
            f"`backbone` is a {type(backbone).__module__}.{type(backbone).__qualname__}; expected "
            f"{ACCEPTED_BACKBONES}."
        )
    for name, value in (("backbone_kwargs", backbone_kwargs), ("hub_kwargs", hub_kwargs)):
        if value:
            raise InputError(
                f"`{name}` apply when `backbone` is a name; the {type(backbone).__name__} instance is already built."
            )
    for reserved in ("backbone", "backbone_type", "text_config", "backbone_architecture", "backbone_pretrained"):
        if reserved in config_kwargs:
            raise InputError(f"`{reserved}` is set by `from_backbone`; do not pass it in `config_kwargs`.")
    device, dtype = _placement(backbone)
    if tokenizer is not None and not callable(tokenizer):
        raise InputTypeError(
            f"`tokenizer` is a {type(tokenizer).__name__}; pass a tokenizer object "
            f"(`AutoTokenizer.from_pretrained(name)`), not its name."
        )
    if _is_timm_model(backbone):
        if tokenizer is not None:
            raise InputError(
                f"`tokenizer` was given but the {type(backbone).__name__} is a timm vision model; drop it."
            )
        _check_timm_embedding(backbone, device, dtype)
        config = ContrastiveEncoderConfig(**{**_timm_parts(backbone), **config_kwargs})
        return _placed(encoder_class(config, backbone=backbone), backbone, device, dtype)
    if _is_sentence_transformer(backbone):
        module, own_tokenizer, parts = _sentence_transformer_parts(backbone)
        config_kwargs = layout_options(parts["layout"], config_kwargs, parts["backbone"])
        name = parts["backbone"]
    else:
        module = _text_model(backbone)
        own_tokenizer = None if tokenizer is not None else _tokenizer_of(module)
        name = module.config.name_or_path or module.config.model_type
    tokenizer = tokenizer if tokenizer is not None else own_tokenizer
    apply_max_seq_length(tokenizer, config_kwargs.get("max_seq_length"))
    config = ContrastiveEncoderConfig(
        backbone=name,
        backbone_type="text",
        text_config=module.config,
        backbone_pretrained=bool(module.config.name_or_path),
        **config_kwargs,
    )
    return _placed(encoder_class(config, backbone=module, tokenizer=tokenizer), module, device, dtype)


def _placement(model: nn.Module) -> tuple[torch.device, torch.dtype | None]:
    """The one device and the one floating dtype of ``model``'s tensors (``None``: it has no floating tensor).

    Raises:
        InputError: if a tensor is on the meta device (not materialised), or the tensors are spread
            over several devices or floating dtypes.
    """
    tensors = [*model.parameters(), *model.buffers()]
    meta = [name for name, t in [*model.named_parameters(), *model.named_buffers()] if t.device.type == "meta"]
    if meta:
        raise InputError(
            f"`backbone` ({type(model).__name__}) has {len(meta)} tensor(s) on the meta device (e.g. `{meta[0]}`): it "
            f"has shapes but no weights, so the encoder would fail at its first forward pass. Materialise it first: "
            f"`model.to_empty(device='cpu')` then load its weights (`model.load_state_dict(...)`), or build it "
            f"normally (without `torch.device('meta')` / `init_empty_weights`)."
        )
    devices = sorted({str(t.device) for t in tensors})
    if len(devices) > 1:
        raise InputError(
            f"`backbone` ({type(model).__name__}) is spread over the devices {devices} (a `device_map`?): the encoder "
            f"adds its heads on one device. Move the model to one device first (`model.to({devices[0]!r})`); "
            "multi-GPU training is the trainer's (accelerate / FSDP)."
        )
    floating = sorted({str(t.dtype) for t in tensors if t.is_floating_point()})
    if len(floating) > 1:
        raise InputError(
            f"`backbone` ({type(model).__name__}) holds tensors of several dtypes {floating}: cast it to one first "
            "(`model.float()`, or `model.to(torch.bfloat16)`); for mixed precision keep float32 weights and use the "
            "trainer's `bf16=True` / `fp16=True`."
        )
    device = tensors[0].device if tensors else torch.device("cpu")
    dtype = next((t.dtype for t in tensors if t.is_floating_point()), None)
    return device, dtype


def _placed(encoder: nn.Module, backbone: nn.Module, device: torch.device, dtype: torch.dtype | None) -> Any:
    """The encoder on the backbone's device and dtype (its heads are built in float32 on the CPU), in the
    backbone's mode (``eval()`` or ``train()``) as a whole: no module left in the other mode."""
    encoder = encoder.to(device=device, dtype=dtype) if dtype is not None else encoder.to(device)
    if dtype is not None and dtype != torch.float32:
        logger.warning(
            "The backbone's weights are %s, so the encoder's heads are too: training %s weights directly loses "
            "precision; for mixed precision keep float32 weights (`model.float()`) and pass `bf16=True` / `fp16=True` "
            "to the trainer.",
            dtype,
            dtype,
        )
    return encoder.train(backbone.training)


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
        info = getattr(model, "feature_info", None) or []
        try:
            stride = int(info[-1]["reduction"])
        except (IndexError, KeyError, TypeError):
            stride = 0
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
