"""Tiny data, models and deterministic views shared by the trainer tests and their 2-process scripts.

Importable both from the test modules (``from distributed_scripts.trainer_utils import ...``) and
from a script launched by ``torch.distributed.run`` (same directory on ``sys.path``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from hf_contrast.models import ContrastiveEncoder
from hf_contrast.training import ContrastiveTrainingArguments


def image_dataset(
    n: int = 16, size: int = 16, n_classes: int = 4, seed: int = 0, labels: list[int] | None = None
) -> Any:
    """``datasets.Dataset`` of ``n`` random RGB PIL images (``size``²) and ``label`` ``i % n_classes``."""
    import datasets
    from PIL import Image

    rng = np.random.default_rng(seed)
    images = [Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)) for _ in range(n)]
    labels = labels if labels is not None else [i % n_classes for i in range(n)]
    return datasets.Dataset.from_dict({"image": images, "label": labels})


def vit_encoder(img_size: int = 16, projection_dim: int = 8, seed: int = 0, **kwargs: Any) -> ContrastiveEncoder:
    """A ``ContrastiveEncoder`` on timm's random ``test_vit`` without batch statistics
    (LayerNorm only, no projection norm): per-sample outputs, so batches may be split freely."""
    torch.manual_seed(seed)
    return ContrastiveEncoder.from_backbone(
        "test_vit",
        pretrained=False,
        projection_dim=projection_dim,
        projection_norm=None,
        backbone_kwargs={"img_size": img_size},
        **kwargs,
    )


def training_args(output_dir: str | Path, **overrides: Any) -> ContrastiveTrainingArguments:
    """Fast, quiet, deterministic CPU arguments; ``overrides`` win."""
    options: dict[str, Any] = {
        "output_dir": str(output_dir),
        "max_steps": 2,
        "per_device_train_batch_size": 8,
        "per_device_eval_batch_size": 16,
        "learning_rate": 1e-3,
        "use_cpu": True,
        "report_to": "none",
        "save_strategy": "no",
        "logging_steps": 1,
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
        "image_size": 16,
        "seed": 0,
    }
    options.update(overrides)
    known = {f.name for f in dataclasses.fields(ContrastiveTrainingArguments)}
    if options.get("train_sampling_strategy") == "sequential" and "train_sampling_strategy" not in known:
        # transformers < 5.2 has no such field: its seeded random order is the same on 1 and on N processes
        # (accelerate shards one permutation), which is what the tests compare
        options.pop("train_sampling_strategy")
    return ContrastiveTrainingArguments(**options)


def _to_float(image: Any) -> Tensor:
    array = np.asarray(image, dtype=np.float32) / 255.0  # (H, W, C)
    return torch.from_numpy(array).permute(2, 0, 1)


def fixed_views_collator(features: list[dict[str, Any]]) -> dict[str, Tensor]:
    """Deterministic views: ``pixel_values_1`` = the image, ``pixel_values_2`` = its mirror,
    ``pixel_values_eq`` = the image as ``uint8``, ``pixel_values`` = the image; plus ``labels``."""
    x = torch.stack([_to_float(f["image"]) for f in features])
    batch = {
        "pixel_values": x,
        "pixel_values_1": x,
        "pixel_values_2": x.flip(-1),
        "pixel_values_eq": (x * 255).round().to(torch.uint8),
    }
    if "label" in features[0]:
        batch["labels"] = torch.tensor([f["label"] for f in features], dtype=torch.long)
    return batch


def fixed_equivariance_views(images: Tensor) -> tuple[Tensor, Tensor]:
    """Deterministic per-sample 'equivariance views' of a ``uint8`` batch: itself and its vertical flip."""
    x = images.float() / 255.0
    return x, x.flip(-2)


def parameters(model: torch.nn.Module) -> dict[str, Tensor]:
    """A detached CPU copy of every parameter."""
    return {name: p.detach().cpu().clone() for name, p in model.named_parameters()}
