"""Backbone *instances*: a model object the user already has, wrapped as an encoder by its backbone family.

``ContrastiveEncoder.from_backbone(model)`` and the trainers' ``model=`` take a model object the user
already has, as well as a name. The object becomes the encoder's backbone as it is: its weights are
shared, not copied (training the encoder trains it), so the encoder's ``embeddings`` equal what the
object gave before. Which family takes the object, and how, is the family's adapter's
(``claims_instance``, ``encoder_from_instance`` in :mod:`hf_contrast.models.adapters`); this module holds what
every family shares: an encoder, name-only options and the keys ``from_backbone`` sets are refused, so is a
model on the meta device or spread over devices or dtypes, and the encoder is placed on the backbone's
device, dtype and mode. The built-in families take a ``SentenceTransformer`` or a transformers model with token
inputs (:class:`~hf_contrast.models.adapters.TransformersTextAdapter`) and a timm model
(:class:`~hf_contrast.models.adapters.TimmAdapter`); a registered family, what its adapter claims
(docs/encoders.md, "Adding a backbone family").
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedModel

from hf_contrast.errors import InputError, InputTypeError
from hf_contrast.models.adapters.registry import adapter_for_instance
from hf_contrast.models.configuration import ContrastiveEncoderConfig

__all__ = ["ACCEPTED_BACKBONES", "as_encoder", "encoder_from_instance"]

logger = logging.getLogger(__name__)

#: What ``from_backbone`` and the trainers' ``model=`` accept, for the error messages.
ACCEPTED_BACKBONES = (
    "a timm name, Hub id or local path (str), a sentence_transformers.SentenceTransformer, a timm model "
    "(timm.create_model(...)), a transformers PreTrainedModel with token inputs (AutoModel.from_pretrained(...)), "
    "or a model of a registered backbone family"
)


def _is_encoder(obj: Any) -> bool:
    """Whether ``obj`` is a ``ContrastiveEncoder`` (told by its config: this module does not import the model)."""
    return isinstance(obj, PreTrainedModel) and isinstance(getattr(obj, "config", None), ContrastiveEncoderConfig)


def encoder_from_instance(
    encoder_class: type,
    backbone: Any,
    *,
    tokenizer: Any = None,
    backbone_kwargs: dict[str, Any] | None = None,
    hub_kwargs: dict[str, Any] | None = None,
    **config_kwargs: Any,
) -> Any:
    """Wrap a model instance as an encoder, keeping its weights, by the family that claims it.

    Args:
        encoder_class: ``ContrastiveEncoder`` (or a subclass).
        backbone: A ``SentenceTransformer``, a timm model, a transformers ``PreTrainedModel``, or a model a
            registered family claims.
        tokenizer: text only: the tokenizer (default: the model's own).
        backbone_kwargs, hub_kwargs: Name-only options of ``from_backbone``; refused here.
        **config_kwargs: ``ContrastiveEncoderConfig`` options (``projection_dim``, ``pooling``...).

    Returns:
        The encoder on the device and in the floating dtype of ``backbone`` (its heads too; a warning for
        a dtype other than float32), in ``backbone``'s mode (``train()`` or ``eval()``) as a whole.

    Raises:
        InputError: (a ``ValueError``) for any other object (naming its type and what is accepted),
            name-only options, a model with tensors on the meta device, spread over several devices or
            dtypes, and what the family refuses (its ``encoder_from_instance``).
        InputTypeError: if ``tokenizer`` is not a tokenizer object (a name, say).
    """
    if _is_encoder(backbone):
        raise InputError(
            "`backbone` is already a ContrastiveEncoder: use it as it is (a trainer's `model=` takes it), or "
            "`ContrastiveEncoder.from_pretrained(folder)` to load a saved one."
        )
    family = adapter_for_instance(backbone)
    if family is None:
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
    encoder = family.encoder_from_instance(
        encoder_class, backbone, tokenizer=tokenizer, device=device, dtype=dtype, config_kwargs=config_kwargs
    )
    return _placed(encoder, encoder.backbone, device, dtype)


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
    if adapter_for_instance(model) is not None:  # a model object a registered family wraps
        return encoder_from_instance(encoder_class, model)
    if not isinstance(model, nn.Module):
        hint = " Build the encoder first: `ContrastiveEncoder.from_backbone(name)`." if isinstance(model, str) else ""
        raise InputError(
            f"`model` is a {type(model).__module__}.{type(model).__qualname__}; a trainer takes a ContrastiveEncoder, "
            "or a sentence_transformers.SentenceTransformer, a timm model (timm.create_model(...)) or a transformers "
            f"PreTrainedModel with token inputs (AutoModel.from_pretrained(...)).{hint}"
        )
    return model
