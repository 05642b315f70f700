"""Rendering a model card: values for ``model_cards/model_card_template.md``, then ``README.md``.

:func:`generate_model_card` renders the template (Jinja) with ``huggingface_hub.ModelCard.from_template``;
this module only prepares the values. What depends on the backbone family (image or text: metadata,
model details, the usage snippet's template) comes from the model as an
:class:`~hf_contrast.hub.card_facts.EncoderCardFacts` (``model.card_facts()``); there is no image/text
branch here. :func:`write_model_card` is what ``ContrastiveEncoder.save_pretrained`` calls.

The card states only what is true of the saved folder: the usage snippets run as written against it, no
local filesystem path is ever written (see :mod:`hf_contrast.provenance`), ``base_model`` names a
pretrained backbone on the Hub or nothing, and the license comes from the user or the base model.
"""

from __future__ import annotations

import copy
import importlib.metadata
import logging
import os
import platform
import re
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2
from huggingface_hub import EvalResult, ModelCard, ModelCardData

from hf_contrast.errors import InputTypeError
from hf_contrast.hub.card_data import ContrastiveModelCardData
from hf_contrast.hub.card_datasets import public_dataset
from hf_contrast.hub.card_facts import EncoderCardFacts
from hf_contrast.hub.card_storage import get_model_card_data
from hf_contrast.hub.card_tables import evaluation_groups, format_cell, log_columns, log_rows
from hf_contrast.hub.card_values import scrub_paths
from hf_contrast.provenance import hub_id_or_none as _hub_id
from hf_contrast.provenance import public_name

__all__ = ["GENERATED_MARKER", "generate_model_card", "is_generated_card", "write_model_card"]

logger = logging.getLogger(__name__)

_MARKER_ID = "hf_contrast:generated-model-card"
#: Comment in every generated card. A README.md without it was written by a person: kept unless asked.
GENERATED_MARKER = f"<!-- {_MARKER_ID}: later saves may regenerate this card; delete this line to keep your edits -->"
TEMPLATES = resources.files("hf_contrast.model_cards")
TEMPLATE_PATH = Path(str(TEMPLATES / "model_card_template.md"))
REPO_PLACEHOLDER = "<user>/<repo>"
_LIBRARIES = ("hf_contrast", "torch", "transformers", "timm", "sentence-transformers", "huggingface_hub", "datasets")


def _versions() -> dict[str, str]:
    versions = {"Python": platform.python_version()}
    for name in _LIBRARIES:
        try:
            versions[name] = importlib.metadata.version("hf-contrast" if name == "hf_contrast" else name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def _human(count: Any) -> str | None:
    if not isinstance(count, (int, float)) or isinstance(count, bool):
        return None
    for divisor, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if count >= divisor:
            return f"{count / divisor:.1f}{suffix}"
    return str(int(count))


def _details(
    model: Any, data: ContrastiveModelCardData, facts: EncoderCardFacts, backbone: str | None
) -> list[tuple[str, str]]:
    """The model-details list: what the backbone is, its size and cost, and what the outputs are."""
    config, stats = model.config, data.model_details or {}
    rows: list[tuple[str, str]] = [("Model type", facts.model_type)]
    if backbone:
        architecture = stats.get("architecture_name")
        rows.append(
            (
                "Backbone",
                f"`{backbone}`"
                + (
                    f" ({facts.backbone_library} `{architecture}`)"
                    if architecture and architecture != backbone
                    else ""
                ),
            )
        )
    if facts.base_model:
        rows.append(("Base model", f"[{facts.base_model}](https://huggingface.co/{facts.base_model})"))
    else:
        pretrained = getattr(config, "backbone_pretrained", False)
        rows.append(
            ("Base model", "a local model (its Hub id is unknown)" if pretrained else "none (trained from scratch)")
        )
    if _human(stats.get("parameters")):
        rows.append(
            (
                "Parameters",
                f"{_human(stats['parameters'])} ({_human(stats.get('backbone_parameters'))} in the backbone)",
            )
        )
    rows += facts.detail_rows
    outputs = f"{config.embedding_dim} (`embeddings`); {config.projection_dim} (`projections`, the training head)"
    rows.append(("Output dimensionality", outputs))
    if data.language:
        rows.append(("Language", ", ".join([data.language] if isinstance(data.language, str) else data.language)))
    return rows


def _context(model: Any, data: ContrastiveModelCardData, facts: EncoderCardFacts) -> dict[str, Any]:
    """Everything the template needs, already formatted; no Markdown is built here (the usage snippet is
    rendered from its own template, :attr:`EncoderCardFacts.usage_template`)."""
    config = model.config
    backbone = public_name(getattr(config, "backbone", None)) or getattr(config, "backbone_architecture", None)
    method = data.objective_name or (data.objective_class or "").removesuffix("Loss") or None
    data_config = getattr(model, "data_config", None) or {}
    shown, every = log_columns(data)
    context = {
        "marker": GENERATED_MARKER,
        "model_id": data.model_id or REPO_PLACEHOLDER,
        "input_noun": facts.input_noun,
        "inputs_noun": facts.inputs_noun,
        "embeddings_normalized": facts.embeddings_normalized,
        "method": method,
        "objective_class": data.objective_class,
        "objective_config": [(key, format_cell(value)) for key, value in data.objective_config.items()],
        "citations": data.citations,
        "backbone": backbone,
        "base_model": facts.base_model,
        "pretrained": bool(getattr(config, "backbone_pretrained", False)),
        "embedding_dim": getattr(config, "embedding_dim", None),
        "projection_dim": getattr(config, "projection_dim", None),
        "normalize_projections": bool(getattr(config, "normalize_projections", False)),
        "pooling": getattr(config, "pooling", "mean"),
        "normalize_embeddings": bool(getattr(config, "normalize_embeddings", False)),
        "max_seq_length": getattr(config, "max_seq_length", None) or (data.model_details or {}).get("max_seq_length"),
        "input_size": tuple(data_config["input_size"]) if data_config.get("input_size") else None,
        "details": _details(model, data, facts, backbone),
        "architecture": (data.model_details or {}).get("architecture"),
        "train_datasets": data.train_datasets,
        "eval_datasets": data.eval_datasets,
        "hyperparameters": [(key, format_cell(value)) for key, value in sorted(data.hyperparameters.items())],
        "training_args_class": data.training_args_class,
        "training_setup": list(data.training_setup.items()),
        "log_columns": shown,
        "log_rows": log_rows(data, shown),
        "all_log_columns": every if len(every) > len(shown) else None,
        "all_log_rows": log_rows(data, every) if len(every) > len(shown) else None,
        "best_model_step": data.best_model_step,
        "evaluations": evaluation_groups(data),
        "has_baseline": bool(data.baseline_metrics),
        "has_metrics": bool(data.metrics),
        "versions": _versions(),
    }
    usage = (TEMPLATES / facts.usage_template).read_text(encoding="utf-8")
    context["usage"] = jinja2.Template(usage).render(**context, **dict(facts.usage_values))
    return context


# model-index task of the evaluators whose class does not say it (``description``, as sentence-transformers' do).
_EVALUATOR_TASKS = {"STSEvaluator": "Semantic Similarity", "EmbeddingSimilarityEvaluator": "Semantic Similarity"}


def _task_type(group: Mapping[str, Any], facts: EncoderCardFacts) -> tuple[str, str | None]:
    """``(task type, task name)`` of an evaluation group's model-index entries."""
    description = group.get("description") or _EVALUATOR_TASKS.get(group.get("source", ""))
    if description:
        return re.sub(r"[^a-z0-9]+", "-", description.lower()).strip("-"), description
    if group.get("source") == "ProbeEvaluator":
        return facts.classification_task, "Linear probe and kNN classification"
    return facts.feature_extraction_task, None


def _cached_card_license(base_model: str) -> str | None:
    """The license in the base model's Hub card, if it is in the local cache (no network)."""
    try:
        from huggingface_hub import try_to_load_from_cache

        path = try_to_load_from_cache(base_model, "README.md")
        return ModelCard.load(path).data.license if isinstance(path, str) else None
    except Exception:
        return None


def _metadata(data: ContrastiveModelCardData, facts: EncoderCardFacts, context: Mapping[str, Any]) -> ModelCardData:
    tags = ["hf_contrast", "contrastive-learning"]
    if context["method"]:
        tags.append(re.sub(r"[^a-z0-9-]+", "-", context["method"].lower()).strip("-"))
    tags += facts.tags
    for tag in data.tags:
        if tag not in tags:
            tags.append(tag)
    hub_datasets = list(
        dict.fromkeys(entry["id"] for entry in data.train_datasets + data.eval_datasets if entry.get("id"))
    )
    eval_results = []
    for group in context["evaluations"]:
        dataset = group["dataset"]
        hub_dataset = _hub_id(dataset.get("id"))
        if not hub_dataset:
            # model-index's `dataset.type` is a Hub dataset id (huggingface_hub's EvalResult, the Hub's spec): metrics
            # measured on local data stay in the card's tables and out of model-index
            continue
        for row in group["rows"]:
            if row["value"] is None or row["name"].endswith("loss"):
                continue  # a loss is the objective's, not a comparable metric; the baseline is not this model's
            task_type, task_name = _task_type(group, facts)
            eval_results.append(
                EvalResult(
                    task_type=task_type,
                    task_name=task_name,
                    dataset_type=hub_dataset,
                    dataset_name=dataset.get("name") or hub_dataset,
                    dataset_split=dataset.get("split"),
                    metric_type=row["name"],
                    metric_name=row["name"].replace("_", " "),
                    metric_value=row["value"],
                )
            )
    base_model = facts.base_model
    license_ = data.license or (
        (facts.base_model_license or _cached_card_license(base_model)) if base_model is not None else None
    )
    return ModelCardData(
        library_name=facts.library_name,
        pipeline_tag=facts.pipeline_tag,
        tags=tags,
        base_model=base_model,
        datasets=hub_datasets or None,
        license=license_,
        language=data.language,
        model_name=context["model_name"],
        eval_results=eval_results or None,
    )


def generate_model_card(model: Any) -> str:
    """The README.md text of an encoder, from ``model.config`` and ``model.model_card_data``.

    Args:
        model: A ``ContrastiveEncoder`` (duck-typed: ``config.backbone``, ``config.embedding_dim``,
            ``config.projection_dim``, ``data_config``…, and ``card_facts()`` giving an
            :class:`~hf_contrast.hub.card_facts.EncoderCardFacts`).

    Returns:
        The card: YAML metadata (``library_name`` ``timm`` or ``sentence-transformers``,
        ``base_model``, ``datasets``, ``license``, ``model-index``) and the rendered template.
        The card data is not modified.

    Raises:
        InputTypeError: if ``model`` has no ``config`` or ``card_facts()`` (not an encoder).
    """
    if getattr(model, "config", None) is None or not callable(getattr(model, "card_facts", None)):
        raise InputTypeError(
            f"`model` must be a ContrastiveEncoder (a model with `config` and `card_facts()`), got "
            f"{type(model).__name__}; wrap a timm or transformers model with `ContrastiveEncoder.from_backbone`."
        )
    data = copy.deepcopy(get_model_card_data(model))
    data.train_datasets = [public_dataset(entry) for entry in data.train_datasets]
    data.eval_datasets = [public_dataset(entry) for entry in data.eval_datasets]
    data.hyperparameters = scrub_paths(data.hyperparameters)
    facts = model.card_facts()
    context = _context(model, data, facts)
    if data.model_name:
        context["model_name"] = data.model_name
    else:
        subject = f"{context['method']} encoder" if context["method"] else "Contrastive encoder"
        context["model_name"] = f"{subject} on {context['backbone']}" if context["backbone"] else subject
    card = ModelCard.from_template(_metadata(data, facts, context), template_path=str(TEMPLATE_PATH), **context)
    return re.sub(r"\n{3,}", "\n\n", str(card))  # the blank lines of the sections left out


def is_generated_card(text: str) -> bool:
    """Whether a README.md text is a card hf_contrast generated (holds :data:`GENERATED_MARKER`'s id)."""
    return _MARKER_ID in text


def write_model_card(model: Any, save_directory: str | os.PathLike[str], overwrite: bool = False) -> Path | None:
    """Write ``README.md`` into ``save_directory``; never raises (a card never makes a save fail).

    An existing README.md is replaced only if hf_contrast generated it or ``overwrite=True``.

    Returns:
        The path written, or ``None`` (a README written by a person was kept, or an error was logged).
    """
    try:
        path = Path(save_directory) / "README.md"
        if (
            path.exists()
            and not overwrite
            and not is_generated_card(path.read_text(encoding="utf-8", errors="replace"))
        ):
            logger.info("Model card: kept %s (not generated by hf_contrast; overwrite=True replaces it)", path)
            return None
        text = generate_model_card(model)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path
    except Exception as error:  # noqa: BLE001 - the card is optional, the save is not
        logger.warning("Model card: not written to %s (%s: %s)", save_directory, type(error).__name__, error)
        return None
