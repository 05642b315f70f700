"""A minimal ``Trainer`` with :class:`CheckpointingMixin` on a tiny encoder, for the save-layout and checkpoint tests.

The loss is a regression of the projections on fixed targets, scaled by ``1 + 0.1 * steps`` where
``steps`` counts training steps: that counter lives outside the model and is saved through
``contrastive_state_dict``, so a resume that lost it gives different losses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset
from transformers import Trainer, TrainingArguments

from hf_contrast.training.checkpointing import CheckpointingMixin

__all__ = ["TOKEN", "TinyTrainer", "RandomImages", "tiny_args", "losses_of"]

#: A fake Hub token: it must never appear in any file written.
TOKEN = "hf_tinySECRETtoken0123456789"


class RandomImages(Dataset):
    """``n`` random images ``(3, size, size)`` with a fixed random target ``(P,)`` each."""

    def __init__(self, n: int = 16, size: int = 32, projection_dim: int = 16, seed: int = 0) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.images = torch.randn(n, 3, size, size, generator=generator)
        self.targets = torch.nn.functional.normalize(torch.randn(n, projection_dim, generator=generator), dim=-1)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"pixel_values": self.images[index], "targets": self.targets[index]}


class TinyTrainer(CheckpointingMixin, Trainer):
    """``compute_loss`` = ``(1 + 0.1 * steps) * mean((projections - targets)^2)``; ``steps`` is checkpointed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.steps = torch.zeros((), dtype=torch.long)

    def compute_loss(
        self, model: Any, inputs: dict[str, torch.Tensor], return_outputs: bool = False, **kwargs: Any
    ) -> Any:
        outputs = model(pixel_values=inputs["pixel_values"])
        loss = (1 + 0.1 * self.steps.float()) * (outputs.projections - inputs["targets"]).pow(2).mean()
        if model.training:
            self.steps += 1
        return (loss, outputs) if return_outputs else loss

    def contrastive_state_dict(self) -> dict[str, Any]:
        return {"steps": self.steps.clone()}

    def load_contrastive_state_dict(self, state: dict[str, Any]) -> None:
        self.steps = state["steps"].clone()


def tiny_args(output_dir: str | Path, **overrides: Any) -> TrainingArguments:
    """Fast, deterministic CPU arguments (6 steps, a checkpoint every 2, a fake ``hub_token``)."""
    options: dict[str, Any] = {
        "output_dir": str(output_dir),
        "max_steps": 6,
        "per_device_train_batch_size": 4,
        "learning_rate": 1e-2,
        "save_strategy": "steps",
        "save_steps": 2,
        "logging_steps": 1,
        "use_cpu": True,
        "report_to": "none",
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
        "remove_unused_columns": False,
        "seed": 0,
        "hub_token": TOKEN,
    }
    options.update(overrides)
    return TrainingArguments(**options)


def losses_of(trainer: Trainer) -> dict[int, float]:
    """``{step: loss}`` from the trainer's log history."""
    return {entry["step"]: entry["loss"] for entry in trainer.state.log_history if "loss" in entry}
