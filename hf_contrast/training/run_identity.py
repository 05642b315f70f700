"""A resumed run is the run it continues: its method, model and result-shaping settings, kept in each checkpoint.

Every checkpoint gets ``run_settings.json`` (:func:`run_settings`: the method and its hyperparameters, the
encoder's architecture, the training arguments that shape the weights). Resuming compares them with the
trainer's (:func:`changed_settings`): a SimCLR checkpoint continued with CARE, another learning rate, batch or
seed would silently make a run that is neither, so it is refused, naming each change, unless
``resume_with_changes=True`` (``--resume_with_changes``): then each change is logged once and written in the
model card's run set-up. ``max_steps`` / ``num_train_epochs`` may grow (a finished run continued), and settings
that do not shape the weights (evaluation, logging, saving) may change freely. A checkpoint written before this
file existed is resumed as before.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

__all__ = ["RUN_SETTINGS_NAME", "TRAINING_KEYS", "changed_settings", "run_settings"]

RUN_SETTINGS_NAME = "run_settings.json"
#: The training arguments that shape the weights a run ends with (the schedule's length may grow on a resume).
TRAINING_KEYS = (
    "per_device_train_batch_size", "gradient_accumulation_steps", "world_size", "learning_rate",
    "lr_scheduler_type", "warmup_steps", "weight_decay", "max_grad_norm", "optim", "adam_beta1", "adam_beta2",
    "adam_epsilon", "seed", "image_size", "bf16", "fp16",
)  # fmt: skip
#: The encoder's architecture, from its config (a model without one of them has ``None``).
MODEL_KEYS = (
    "backbone", "backbone_type", "small_image_stem", "embedding_dim", "projection_dim", "projection_layers",
    "projection_hidden_dim", "projection_norm", "pooling", "num_labels",
)  # fmt: skip


def _plain(value: Any) -> Any:
    """``value`` as JSON would give it back (tuples as lists, enums and other objects as strings)."""
    return json.loads(json.dumps(value, default=str))


def run_settings(objective: Any, model: Any, args: Any) -> dict[str, dict[str, Any]]:
    """``{"method": {...}, "model": {...}, "training": {...}}``: the objective's name and hyperparameters, the
    encoder's architecture (:data:`MODEL_KEYS`) and the weight-shaping training arguments (:data:`TRAINING_KEYS`)."""
    config = getattr(objective, "config", None)
    hyperparameters = dataclasses.asdict(config) if dataclasses.is_dataclass(config) else {}
    model_config = getattr(model, "config", None)
    return _plain(
        {
            "method": {"name": getattr(objective, "name", type(objective).__name__), **hyperparameters},
            "model": {key: getattr(model_config, key, None) for key in MODEL_KEYS},
            "training": {key: getattr(args, key, None) for key in TRAINING_KEYS},
        }
    )


def changed_settings(saved: dict[str, dict[str, Any]], current: dict[str, dict[str, Any]]) -> list[str]:
    """Each setting whose value differs, as ``"`name` (group): saved → current"`` (a setting one side lacks is
    compared as ``None``; for another method, only its name)."""
    changes = []
    for group, values in current.items():
        before = saved.get(group, {})
        keys = sorted(set(values) | set(before))
        if group == "method" and before.get("name") != values.get("name"):
            keys = ["name"]  # another method: its hyperparameters are another method's, not changes
        for key in keys:
            if before.get(key) != values.get(key):
                changes.append(f"`{key}` ({group}): {before.get(key)!r} in the checkpoint, {values.get(key)!r} now")
    return changes


def read_run_settings(checkpoint: str | Path) -> dict[str, dict[str, Any]] | None:
    """The checkpoint's ``run_settings.json``, or ``None`` for a checkpoint written without one."""
    path = Path(checkpoint) / RUN_SETTINGS_NAME
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
