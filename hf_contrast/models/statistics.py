"""What a model card says about an encoder's size and cost: parameters, GMACs, sequence length, architecture.

:func:`model_details` measures them for the card (``ContrastiveEncoder.save_pretrained`` stores the
result in ``model.model_card_data.model_details``). GMACs are counted the way timm's own tables
count them: one image at the encoder's ``data_config`` input size through the backbone, counted by
``torch.utils.flop_counter.FlopCounterMode`` (multiply-accumulates = FLOPs / 2) on a copy of the
architecture built on the ``meta`` device, so nothing is computed, the model's weights and
BatchNorm statistics are untouched, and a sharded (FSDP / DeepSpeed) model needs no collective call.
"""

from __future__ import annotations

import logging
import textwrap
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from hf_contrast.models.backbones import build_timm_backbone
from hf_contrast.models.export import text_max_seq_length

__all__ = ["count_parameters", "backbone_gmacs", "model_details"]

logger = logging.getLogger(__name__)


def count_parameters(module: nn.Module) -> int:
    """The number of parameters of ``module`` (the full count under DeepSpeed ZeRO-3, whose shards report 0)."""
    return int(sum(getattr(parameter, "ds_numel", parameter.numel()) for parameter in module.parameters()))


def backbone_gmacs(
    architecture: str, backbone_kwargs: dict[str, Any], input_size: tuple[int, int, int] | list[int]
) -> float | None:
    """GMACs of one image of ``input_size`` (C, H, W) through a timm backbone (``num_classes=0``).

    Args:
        architecture: The timm registry name.
        backbone_kwargs: Its ``timm.create_model`` arguments.
        input_size: ``(C, H, W)``.

    Returns:
        Giga multiply-accumulates, or ``None`` when the architecture cannot be traced on ``meta``.
    """
    try:
        with torch.device("meta"):
            replica = build_timm_backbone(architecture, backbone_kwargs).eval()
            pixels = torch.empty(1, *[int(v) for v in input_size])
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            replica(pixels)
        return counter.get_total_flops() / 2 / 1e9
    except Exception as error:  # noqa: BLE001 - a cost the card cannot state is left out, the save goes on
        logger.debug("GMACs of %s not counted: %s: %s", architecture, type(error).__name__, error)
        return None


def _architecture(encoder: Any, backbone_parameters: int) -> str:
    config = encoder.config
    if config.backbone_type == "timm":
        source = f"timm '{config.backbone_architecture or config.backbone}'"
    else:
        source = f"transformers '{getattr(config.text_config, 'model_type', None) or type(encoder.backbone).__name__}'"
    pooling = (
        ""
        if config.backbone_type == "timm"
        else f", {config.pooling} pooling" + (" + Normalize" if config.normalize_embeddings else "")
    )
    lines = [
        f"{type(encoder).__name__}(",
        f"  (backbone): {type(encoder.backbone).__name__}({source}, {backbone_parameters:,} parameters{pooling})"
        f" -> embeddings ({config.embedding_dim})",
        f"  (projection_head): {textwrap.indent(repr(encoder.projection_head), '  ').lstrip()}"
        f" -> projections ({config.projection_dim}{', L2-normalised' if config.normalize_projections else ''})",
    ]
    if getattr(encoder, "classifier", None) is not None:
        lines.append(f"  (classifier): {encoder.classifier!r} -> logits")
    return "\n".join(lines + [")"])


def model_details(encoder: Any, previous: dict[str, Any] | None = None) -> dict[str, Any]:
    """Sizes and cost of a ``ContrastiveEncoder`` for its model card.

    Args:
        encoder: The encoder.
        previous: The details measured at an earlier save; their GMACs are reused when the
            architecture and input size are unchanged (checkpoints save often).

    Returns:
        ``parameters``, ``backbone_parameters``, ``architecture`` (a short module tree) and
        ``architecture_name``; timm: ``gmacs`` and ``input_size``; text: ``max_seq_length``.
    """
    config = encoder.config
    backbone_parameters = count_parameters(encoder.backbone)
    details: dict[str, Any] = {
        "parameters": count_parameters(encoder),
        "backbone_parameters": backbone_parameters,
        "architecture": _architecture(encoder, backbone_parameters),
    }
    if config.backbone_type == "timm":
        architecture = config.backbone_architecture or config.backbone
        input_size = list((encoder.data_config or {}).get("input_size") or ())
        key = repr((architecture, sorted(config.backbone_kwargs.items()), input_size))
        details.update(architecture_name=architecture, input_size=input_size, key=key)
        if previous and previous.get("key") == key and "gmacs" in previous:
            details["gmacs"] = previous["gmacs"]
        elif input_size:
            gmacs = backbone_gmacs(architecture, config.backbone_kwargs, input_size)
            if gmacs is not None:
                details["gmacs"] = round(gmacs, 4)
    else:
        architectures = getattr(config.text_config, "architectures", None) or []
        details["architecture_name"] = architectures[0] if architectures else type(encoder.backbone).__name__
        details["max_seq_length"] = text_max_seq_length(encoder)
    return details
