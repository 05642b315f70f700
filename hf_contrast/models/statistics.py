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
from hf_contrast.models.stems import apply_small_image_stem

__all__ = ["count_parameters", "backbone_gmacs", "model_details"]

logger = logging.getLogger(__name__)


def count_parameters(module: nn.Module) -> int:
    """The number of parameters of ``module`` (the full count under DeepSpeed ZeRO-3, whose shards report 0)."""
    return int(sum(getattr(parameter, "ds_numel", parameter.numel()) for parameter in module.parameters()))


def backbone_gmacs(
    architecture: str,
    backbone_kwargs: dict[str, Any],
    input_size: tuple[int, int, int] | list[int],
    small_image_stem: bool = False,
) -> float | None:
    """GMACs of one image of ``input_size`` (C, H, W) through a timm backbone (``num_classes=0``).

    Args:
        architecture: The timm registry name.
        backbone_kwargs: Its ``timm.create_model`` arguments.
        input_size: ``(C, H, W)``.
        small_image_stem: The backbone has the small-image stem (:mod:`hf_contrast.models.stems`).

    Returns:
        Giga multiply-accumulates, or ``None`` when the architecture cannot be traced on ``meta``.
    """
    try:
        with torch.device("meta"):
            replica = build_timm_backbone(architecture, backbone_kwargs).eval()
            if small_image_stem:
                apply_small_image_stem(replica, architecture)
            pixels = torch.empty(1, *[int(v) for v in input_size])
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            replica(pixels)
        return counter.get_total_flops() / 2 / 1e9
    except Exception as error:  # noqa: BLE001 - a cost the card cannot state is left out, the save goes on
        logger.debug("GMACs of %s not counted: %s: %s", architecture, type(error).__name__, error)
        return None


def _architecture(encoder: Any, backbone_parameters: int) -> str:
    config = encoder.config
    source, pooling = encoder.adapter.describe(encoder)  # the backbone family's words (timm name, pooling)
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
    backbone_parameters = count_parameters(encoder.backbone)
    details: dict[str, Any] = {
        "parameters": count_parameters(encoder),
        "backbone_parameters": backbone_parameters,
        "architecture": _architecture(encoder, backbone_parameters),
    }
    details.update(encoder.adapter.details(encoder, previous))  # the family's: GMACs, sequence length...
    return details
