"""The training arguments a card lists: those that differ from their class defaults, without secrets."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

__all__ = ["non_default_training_args"]

# Training arguments that say nothing about how the model was trained, or that are secrets.
_IGNORED_ARGS = frozenset(
    {
        "output_dir",
        "logging_dir",
        "run_name",
        "overwrite_output_dir",
        "report_to",
        "push_to_hub",
        "hub_model_id",
        "hub_strategy",
        "hub_private_repo",
        "hub_always_push",
        "hub_revision",
        "disable_tqdm",
        "do_train",
        "do_eval",
        "do_predict",
        "save_total_limit",
        "dataloader_num_workers",
        "local_rank",
        "logging_steps",
        "logging_strategy",
        "logging_first_step",
        "save_strategy",
        "save_steps",
    }
)


def _is_default(name: str, value: Any, default: Any) -> bool:
    if value == default or (not value and not default):  # None / False / "" / [] are normalised in __post_init__
        return True
    if name == "accelerator_config" and default is None and isinstance(value, Mapping):
        from transformers.trainer_pt_utils import AcceleratorConfig

        reference = dataclasses.asdict(AcceleratorConfig())
        return all(reference.get(key) == item for key, item in value.items())
    return False


def non_default_training_args(args: Any) -> dict[str, Any]:
    """The training arguments whose values differ from the field defaults of their class.

    Compared with the dataclass defaults, not with a fresh instance: building ``TrainingArguments``
    during a run resets accelerate's state. Keys holding tokens and run bookkeeping (``output_dir``,
    ``report_to``, saving and logging cadence) are dropped.

    Args:
        args: A ``transformers.TrainingArguments`` (or subclass) instance.

    Returns:
        ``{name: value}`` of the non-default arguments.
    """
    current = args.to_dict() if hasattr(args, "to_dict") else dataclasses.asdict(args)
    defaults: dict[str, Any] = {}
    for f in dataclasses.fields(args):
        if f.default is not dataclasses.MISSING:
            defaults[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            defaults[f.name] = f.default_factory()
    return {
        key: value
        for key, value in current.items()
        if key not in _IGNORED_ARGS
        and "token" not in key.replace("tokens", "")
        and key in defaults
        and not _is_default(key, value, defaults[key])
        and not (
            key == "fsdp_config" and not current.get("fsdp")
        )  # "used only when `fsdp` is enabled"; 5.0 fills it anyway
    }
