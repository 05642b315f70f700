"""The card's tables, as cells the template joins: the training log and the evaluation groups.

No Markdown is built here beyond the cell text (:func:`format_cell`: numbers shortened, pipes escaped).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hf_contrast.hub.card_data import ContrastiveModelCardData

__all__ = ["MAX_LOG_COLUMNS", "evaluation_groups", "format_cell", "log_columns", "log_rows"]


def format_cell(value: Any) -> str:
    """A table cell: floats shortened, pipes and newlines escaped."""
    if isinstance(value, float):
        text = f"{value:.4g}"
        text += ".0" if text.lstrip("-").isdigit() else ""
    elif isinstance(value, (dict, list, tuple)):
        text = f"`{value!r}`"
    else:
        text = str(value)
    return text.replace("|", "\\|").replace("\n", " ")


#: The log table shows at most this many columns; the full table is in a collapsible block.
MAX_LOG_COLUMNS = 8


def log_columns(data: ContrastiveModelCardData) -> tuple[list[str], list[str]]:
    """``(shown, all)`` log columns: epoch, step, the losses, the evaluators' primary metrics, then the rest."""
    seen: list[str] = []
    for row in data.training_logs:
        seen += [key for key in row if key not in seen]
    primaries = [f"eval_{e['primary_metric']}" for e in data.evaluators if e.get("primary_metric")]

    def rank(key: str) -> tuple[int, int]:
        order = {"epoch": 0, "step": 1, "loss": 2, "eval_loss": 3}
        if key in order:
            return order[key], 0
        if key in primaries:
            return 4, primaries.index(key)
        if key in ("learning_rate", "grad_norm"):
            return 7, 0
        return (5 if key.startswith("eval_") else 6), seen.index(key)

    ordered = sorted(seen, key=rank)
    return ordered[:MAX_LOG_COLUMNS], ordered


def log_rows(data: ContrastiveModelCardData, columns: list[str]) -> list[list[str]]:
    rows = []
    for row in data.training_logs:
        cells = [format_cell(row[c]) if row.get(c) is not None else "-" for c in columns]
        if data.best_model_step is not None and row.get("step") == data.best_model_step:
            cells = [f"**{cell}**" for cell in cells]
        rows.append(cells)
    return rows


def _dataset_label(entry: Mapping[str, Any] | None) -> dict[str, Any]:
    entry = entry or {}
    split = entry.get("split")
    return {
        "name": entry.get("name") or entry.get("id"),
        "id": entry.get("id"),
        "split": f"{split} (held out)" if split and entry.get("held_out") else split,
    }


def evaluation_groups(data: ContrastiveModelCardData) -> list[dict[str, Any]]:
    """The metrics grouped by what produced them: one group per evaluator (named by its dataset), one
    per set of a dict ``eval_dataset``, and the trainer's evaluation of ``eval_dataset`` for the rest."""
    names = list(data.metrics) + [key for key in data.baseline_metrics if key not in data.metrics]
    groups: list[dict[str, Any]] = []

    def take(prefix: str, only: list[str] | None = None, **group: Any) -> None:
        if only is not None:  # an evaluator without a prefix: its own metric names
            keys = [key for key in names if key in only]
        else:
            keys = [key for key in names if key.startswith(prefix + "_")] if prefix else list(names)
        for key in keys:
            names.remove(key)
        if keys:
            group["rows"] = [
                {
                    "name": key[len(prefix) + 1 :] if prefix else key,
                    "value": data.metrics.get(key),
                    "shown": format_cell(data.metrics[key]) if key in data.metrics else "-",
                    "baseline": format_cell(data.baseline_metrics[key]) if key in data.baseline_metrics else None,
                    "primary": key == group.get("primary"),
                }
                for key in keys
            ]
            group["has_baseline"] = any(row["baseline"] is not None for row in group["rows"])
            groups.append(group)

    for evaluator in sorted(data.evaluators, key=lambda e: -len(e.get("prefix") or "")):
        label = _dataset_label(
            {
                "name": evaluator.get("dataset_name"),
                "id": evaluator.get("dataset_id"),
                "split": evaluator.get("split"),
                "held_out": evaluator.get("held_out"),
            }
        )
        label["notes"] = evaluator.get("notes") or []  # data the card lists nowhere else (STS pairs): its loader notes
        title = (
            f"{evaluator['dataset_name']}: `{evaluator['class']}`"
            if evaluator.get("dataset_name")
            else f"`{evaluator['class']}`"
        )
        prefix = evaluator.get("prefix") or ""
        take(
            prefix,
            only=None if prefix else list(evaluator.get("metric_names") or []),
            title=title,
            source=evaluator["class"],
            dataset=label,
            primary=evaluator.get("primary_metric"),
            description=evaluator.get("description"),
        )
    for entry in data.eval_datasets:
        if entry.get("key"):
            label = _dataset_label(entry)
            take(
                str(entry["key"]),
                title=f"{label['name'] or entry['key']}: the trainer's evaluation",
                source="eval_dataset",
                dataset=label,
            )
    fallback = next((e for e in data.eval_datasets + data.train_datasets if e.get("id") or e.get("name")), None)
    label = _dataset_label(fallback)
    take(
        "",
        title=f"{label['name'] or 'Evaluation data'}: the trainer's evaluation",
        source="eval_dataset",
        dataset=label,
    )
    return groups
