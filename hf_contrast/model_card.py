"""Model cards the sentence-transformers way: card data on the model, a callback fills it, a template renders it.

- :class:`ContrastiveModelCardData` lives on the encoder as ``model.model_card_data``
  (:func:`get_model_card_data` creates it on first use). Users set ``license``, ``language``,
  ``model_name``, ``train_datasets``… on it; the trainer fills the rest.
- :class:`ModelCardCallback` is added by the contrastive trainers: datasets (name, Hub id, split,
  size, columns), the objective (name, config, BibTeX), the evaluators (and the data they score),
  non-default training arguments, the log table and the evaluation metrics (a step-0 evaluation is
  kept apart as the baseline).
- The card data travels with the model: :func:`save_card_data` writes it to ``hf_contrast/model_card.json``
  (``ContrastiveEncoder.save_pretrained``), :func:`load_card_data` reads it back (``from_pretrained``), so
  a saved, reloaded and pushed model keeps its card; a new training run replaces the previous run's fields.
- :func:`generate_model_card` renders ``model_cards/model_card_template.md`` (Jinja) with
  ``huggingface_hub.ModelCard.from_template``; this module only prepares the values.
  :func:`write_model_card` is what ``ContrastiveEncoder.save_pretrained`` calls.

The card states only what is true of the saved folder: the usage snippets run as written against it
(timm for image encoders, sentence-transformers / transformers for text encoders), no local
filesystem path is ever written (a local dataset or backbone appears by its folder name, never as an
id; see :mod:`hf_contrast.provenance`), ``base_model`` names a pretrained backbone on the Hub or
nothing, and the license comes from the user or the base model. Sizes (parameters, GMACs) are
measured by the models when saving (``model_details``). This module must not import ``hf_contrast.models`` (the models write
cards; the dependency goes the other way): the model is duck-typed.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.metadata
import json
import logging
import math
import os
import platform
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult, ModelCard, ModelCardData
from transformers import TrainerCallback

from hf_contrast.errors import InputError
from hf_contrast.provenance import hub_id_or_none as _hub_id
from hf_contrast.provenance import public_name

__all__ = [
    "CARD_DATA_FILE",
    "GENERATED_MARKER",
    "ContrastiveModelCardData",
    "ModelCardCallback",
    "dataset_metadata",
    "generate_model_card",
    "get_model_card_data",
    "is_generated_card",
    "load_card_data",
    "non_default_training_args",
    "save_card_data",
    "write_model_card",
]

logger = logging.getLogger(__name__)

_MARKER_ID = "hf_contrast:generated-model-card"
#: Comment in every generated card. A README.md without it was written by a person: kept unless asked.
GENERATED_MARKER = f"<!-- {_MARKER_ID}: later saves may regenerate this card; delete this line to keep your edits -->"
TEMPLATE_PATH = Path(str(resources.files("hf_contrast.model_cards") / "model_card_template.md"))
REPO_PLACEHOLDER = "<user>/<repo>"

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
# Per-run bookkeeping of `Trainer.state.log_history`: not part of the log table or the metrics.
_BOOKKEEPING = ("_runtime", "_per_second", "_preparation_time", "total_flos", "num_input_tokens_seen", "epoch", "step")
# `info.dataset_name` of datasets' packaged builders: they name a file format, not a data set.
_PACKAGED_BUILDERS = frozenset(
    {
        "imagefolder",
        "audiofolder",
        "videofolder",
        "csv",
        "json",
        "parquet",
        "text",
        "arrow",
        "pandas",
        "generator",
        "sql",
        "webdataset",
        "xml",
        "cache",
    }
)
_WINDOWS_PATH = re.compile(r"^[A-Za-z]:[\\/]")
_LIBRARIES = ("hf_contrast", "torch", "transformers", "timm", "sentence-transformers", "huggingface_hub", "datasets")


def _json_ready(value: Any) -> Any:
    """A JSON-safe copy: tensors and NumPy scalars as numbers or lists, tuples as lists, the rest as ``str``."""
    if isinstance(value, Mapping):
        return {str(key): _json_ready(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_json_ready(item) for item in value]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if hasattr(value, "tolist"):
        return _json_ready(value.tolist())
    return str(value)


def _scrub_paths(value: Any) -> Any:
    """``value`` with every absolute or home-relative path string replaced by its last folder name."""
    if isinstance(value, Mapping):
        return {key: _scrub_paths(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_scrub_paths(item) for item in value]
    if (
        isinstance(value, str)
        and "\n" not in value
        and (os.path.isabs(value) or value.startswith(("~", "local-dir:")) or _WINDOWS_PATH.match(value))
    ):
        return public_name(value)
    return value


def _finite_number(value: Any) -> float | int | None:
    if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return value


def _tag_list(value: Any) -> list[str]:
    """``tags`` as a list: a single string is one tag (``"vision"``, not ``v, i, s, o, n``)."""
    tags = [value] if isinstance(value, str) else value
    if not isinstance(tags, (list, tuple)) or not all(isinstance(tag, str) for tag in tags):
        raise InputError(f"`tags` must be a tag or a list of tags (strings), e.g. ['vision'], got {value!r}.")
    return list(tags)


def _dataset_entries(name: str, value: Any) -> list[dict[str, Any]]:
    """``train_datasets`` / ``eval_datasets`` as a list of dicts with every documented key (``None``
    when not given); a Hub id string is ``{"id": ...}``."""
    entries = [value] if isinstance(value, (str, Mapping)) else value
    if not isinstance(entries, (list, tuple)):
        entries = [None]
    result = []
    for entry in entries:
        if isinstance(entry, str):
            entry = {"id": entry}
        if not isinstance(entry, Mapping):
            raise InputError(
                f"`{name}` must be a dataset id, a dict like {{'id': 'my-org/imgs', 'split': 'train'}} or a list of "
                f"them, got {value!r}."
            )
        result.append({"name": None, "id": None, "split": None, "size": None, "columns": None, **entry})
    return result


@dataclass
class ContrastiveModelCardData:
    """What the model card of a contrastive encoder says beyond the encoder's own config.

    It travels with the model: ``save_pretrained`` writes it to ``hf_contrast/model_card.json``
    (:func:`save_card_data`) and ``ContrastiveEncoder.from_pretrained`` reads it back
    (:func:`load_card_data`), so saving, loading and pushing keep the card. When a loaded model is
    trained again, the new run replaces the previous run's fields (method, datasets,
    hyperparameters, logs, metrics) that were not changed by hand since loading; the fields a user
    sets (license, language, tags, model name) are kept.

    Set the user-facing fields by hand (``model.model_card_data.license = "mit"``); the trainer's
    :class:`ModelCardCallback` fills the others while training.

    Args:
        model_id: The Hub repository id, used in the usage snippets (set by the pushes).
        model_name: The card's title; defaults to ``"<objective> encoder on <backbone>"``.
        license: SPDX id of the weights' license; ``None`` takes the base model's, if known.
        language: Language code(s) of a text encoder.
        tags: Extra Hub tags (``hf_contrast`` and the format's tags are always added); a single
            string is one tag.
        base_model: Hub id of the pretrained starting point (``from_backbone`` records it for a Hub
            id, a ``hf-hub:`` source or a local copy that names its Hub identity); ``None`` infers
            it from a timm registry name (a from-scratch model has none; a local path is never used).
        train_datasets: ``[{"name": ..., "id": ..., "split": ..., "size": ..., "columns": [...]}]``;
            given by hand or inferred from the trainer's datasets (sizes and columns are filled in).
            A Hub id string (``"my-org/imgs"``) is the entry ``{"id": "my-org/imgs"}``.
        eval_datasets: The same for the evaluation data.
        objective_name: The method's name (``"CARE"``); objective_class, objective_config and
            citations (BibTeX) come from ``set_objective``.
        hyperparameters: Non-default training arguments (:func:`non_default_training_args`).
        training_setup: The defaults that shaped the run, as the trainer logged them at the start of training
            (``{"image size": "28x28 px (the training images' own size)", "precision": "fp32", ...}``).
        training_logs: One row per logged step: ``{"epoch", "step", "loss", "eval_loss", ...}``.
        metrics: This model's evaluation metrics (last evaluation after step 0, or the best
            checkpoint's with ``load_best_model_at_end``), without the ``eval_`` prefix.
        baseline_metrics: The metrics of an evaluation at step 0 (before training).
        best_model_step: The step of the checkpoint kept by ``load_best_model_at_end``.
        evaluators: The trainer's evaluators: ``[{"prefix", "class", "dataset_name", "split",
            "primary_metric", "description"}]`` (their metrics are reported per dataset).
        model_details: Sizes measured when saving (parameters, GMACs, input size, architecture).
    """

    model_id: str | None = None
    model_name: str | None = None
    license: str | None = None
    language: str | list[str] | None = None
    tags: list[str] = field(default_factory=list)
    base_model: str | None = None
    train_datasets: list[dict[str, Any]] = field(default_factory=list)
    eval_datasets: list[dict[str, Any]] = field(default_factory=list)
    objective_name: str | None = None
    objective_class: str | None = None
    objective_config: dict[str, Any] = field(default_factory=dict)
    citations: list[str] = field(default_factory=list)
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    training_args_class: str = "TrainingArguments"
    training_setup: dict[str, str] = field(default_factory=dict)
    training_logs: list[dict[str, Any]] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    baseline_metrics: dict[str, float] = field(default_factory=dict)
    best_model_step: int | None = None
    evaluators: list[dict[str, Any]] = field(default_factory=list)
    model_details: dict[str, Any] = field(default_factory=dict)

    def __setattr__(self, name: str, value: Any) -> None:
        # At construction and on later assignment: one tag or one dataset id is a list of one.
        if name == "tags":
            value = _tag_list(value)
        elif name in ("train_datasets", "eval_datasets"):
            value = _dataset_entries(name, value)
        super().__setattr__(name, value)

    def add_tags(self, tags: str | list[str]) -> None:
        """Add Hub tags (duplicates ignored)."""
        for tag in _tag_list(tags):
            if tag not in self.tags:
                self.tags.append(tag)

    def set_objective(self, objective: Any) -> None:
        """Read ``name``, ``citation`` and ``get_config_dict()`` of an objective (or loss) module."""
        self.objective_class = type(objective).__name__
        name = getattr(objective, "name", None)
        self.objective_name = name if isinstance(name, str) and name else self.objective_name
        get_config = getattr(objective, "get_config_dict", None)
        self.objective_config = _json_ready(dict(get_config())) if callable(get_config) else {}
        citation = getattr(objective, "citation", None)
        for entry in [citation] if isinstance(citation, str) else list(citation or []):
            if isinstance(entry, str) and entry.strip() and entry.strip() not in self.citations:
                self.citations.append(entry.strip())

    def set_training_args(self, args: Any) -> None:
        """Keep the training arguments that differ from their class defaults (secrets dropped)."""
        self.hyperparameters = _scrub_paths(_json_ready(non_default_training_args(args)))
        self.training_args_class = type(args).__name__

    def set_evaluator(self, evaluator: Any) -> None:
        """Record an evaluator (a ``SequentialEvaluator``'s members one by one): its metric prefix names
        the data it scores (``STSEvaluator(name="sick-test")`` -> ``sick-test_spearman``), as in
        sentence-transformers' cards. An evaluator's ``dataset_name`` / ``split`` attributes, when set,
        name the dataset instead."""
        members = list(getattr(evaluator, "evaluators", None) or [evaluator]) if evaluator is not None else []
        trained_on = {(entry.get("id") or entry.get("name"), entry.get("split")) for entry in self.train_datasets}
        self.evaluators = []
        for member in members:
            prefix = getattr(member, "name", "") or ""
            primary = getattr(member, "primary_metric", None)
            scored = _evaluated_dataset(member)
            name = (
                public_name(getattr(member, "dataset_name", None))
                or scored.get("name")
                or scored.get("id")
                or (prefix or None)
            )
            split = (
                getattr(member, "split", None)
                if isinstance(getattr(member, "split", None), str)
                else scored.get("split")
            )
            self.evaluators.append(
                {
                    "prefix": prefix if isinstance(prefix, str) else str(prefix),
                    "class": type(member).__name__,
                    "dataset_name": name,
                    "dataset_id": scored.get("id"),
                    "split": split,
                    "held_out": bool(split) and (scored.get("id") or name, split) in trained_on,
                    "primary_metric": primary if isinstance(primary, str) else None,
                    "metric_names": [str(n) for n in getattr(member, "metric_names", None) or ()],
                    "description": getattr(member, "description", None)
                    if isinstance(getattr(member, "description", None), str)
                    else None,
                }
            )

    def set_datasets(self, train_dataset: Any = None, eval_dataset: Any = None) -> None:
        """Fill ``train_datasets`` / ``eval_datasets`` from the trainer's datasets.

        Entries given by hand keep their name and id and get the inferred split, size and columns
        when their number matches the datasets'; otherwise they are replaced (with a warning). An
        evaluation set cut from the training split (same dataset, same split) is marked ``held_out``.
        """
        for attribute, dataset in (("train_datasets", train_dataset), ("eval_datasets", eval_dataset)):
            if dataset is None:
                continue
            inferred = dataset_metadata(dataset)
            given = getattr(self, attribute)
            if given and len(given) != len(inferred):
                logger.warning(
                    "Model card: `%s` lists %d datasets but the trainer has %d; using the trainer's.",
                    attribute,
                    len(given),
                    len(inferred),
                )
                given = []
            merged = [
                {**found, **{k: v for k, v in user.items() if v is not None}} for found, user in zip(inferred, given)
            ]
            setattr(self, attribute, merged or inferred)
        trained_on = {(entry.get("id") or entry.get("name"), entry.get("split")) for entry in self.train_datasets}
        for entry in self.eval_datasets:
            if entry.get("split") and (entry.get("id") or entry.get("name"), entry.get("split")) in trained_on:
                entry["held_out"] = True

    def log(self, step: int, epoch: float | None, logs: Mapping[str, Any]) -> None:
        """Merge one ``Trainer.log`` call into the log table's row for ``step`` (numbers only)."""
        values = {
            key: number
            for key, value in logs.items()
            if not key.endswith(_BOOKKEEPING)
            and not key.startswith("train_")
            and (number := _finite_number(value)) is not None
        }
        if not values:
            return
        if not self.training_logs or self.training_logs[-1].get("step") != step:
            self.training_logs.append({"epoch": epoch, "step": step})
        self.training_logs[-1].update(values)

    def set_metrics(self, metrics: Mapping[str, Any], step: int) -> None:
        """Keep an evaluation's metrics: as ``baseline_metrics`` at step 0, as ``metrics`` after.

        Evaluations at the same step (one per set of a dict ``eval_dataset``) add up; a later step
        replaces them.
        """
        values = {}
        for key, value in metrics.items():
            number = _finite_number(value)
            if number is not None and not key.endswith(_BOOKKEEPING):
                values[key.split("_", 1)[1] if key.startswith("eval_") else key] = number
        current = self.__dict__.get("_metrics_step")
        if step == 0:
            self.baseline_metrics = {**self.baseline_metrics, **values} if current == 0 else values
        else:
            self.metrics = {**self.metrics, **values} if current == step else values
        object.__setattr__(self, "_metrics_step", step)

    # ---- travelling with the model -----------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The card data as JSON-ready values, with no local path (what ``model_card.json`` holds)."""
        values = {f.name: _json_ready(getattr(self, f.name)) for f in dataclasses.fields(self)}
        values["train_datasets"] = [_public_dataset(entry) for entry in values["train_datasets"]]
        values["eval_datasets"] = [_public_dataset(entry) for entry in values["eval_datasets"]]
        values["base_model"] = _hub_id(values["base_model"])
        values["model_id"] = _hub_id(values["model_id"])
        return {"format": CARD_DATA_FORMAT, "version": CARD_DATA_VERSION, **_scrub_paths(values)}

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> ContrastiveModelCardData:
        """Card data from :meth:`to_dict`'s output; unknown keys are ignored (a newer hf_contrast's file).

        The result remembers what it was loaded with, so a new training run replaces those fields
        (:meth:`start_run`) but keeps what the user changed since.

        Raises:
            ValueError: If ``values`` is not card data written by :meth:`to_dict`.
        """
        if not isinstance(values, Mapping) or values.get("format") != CARD_DATA_FORMAT:
            raise InputError(
                f'Not hf_contrast model card data (no "format": {CARD_DATA_FORMAT!r}): {str(values)[:200]}'
            )
        names = {f.name for f in dataclasses.fields(cls)}
        data = cls(**{key: copy.deepcopy(value) for key, value in values.items() if key in names})
        object.__setattr__(
            data, "_loaded_run", {name: copy.deepcopy(getattr(data, name)) for name in _RUN_FIELDS + ("model_id",)}
        )
        return data

    def start_run(self) -> None:
        """Begin a new training run on this model (called by :class:`ModelCardCallback`).

        The log table, metrics, baseline and best step always start empty. The fields read from a
        saved model (:meth:`from_dict`) and unchanged since are the previous run's: they are cleared
        for the new run's; a Hub ``model_id`` the model was loaded from becomes its ``base_model``.
        """
        loaded = self.__dict__.pop("_loaded_run", None) or {}
        defaults = {f.name: f for f in dataclasses.fields(self)}
        for name in _RUN_FIELDS:
            if name in _ALWAYS_NEW or (name in loaded and getattr(self, name) == loaded[name]):
                spec = defaults[name]
                setattr(
                    self,
                    name,
                    spec.default_factory() if spec.default_factory is not dataclasses.MISSING else spec.default,
                )
        self.__dict__.pop("_metrics_step", None)
        if loaded.get("model_id") and self.model_id == loaded["model_id"]:
            self.base_model, self.model_id = loaded["model_id"], None


CARD_DATA_FILE = "model_card.json"
CARD_DATA_FORMAT = "hf_contrast.model_card_data"
CARD_DATA_VERSION = 1
# What one training run writes; a new run on a loaded model replaces them (see `start_run`).
_RUN_FIELDS = (
    "objective_name", "objective_class", "objective_config", "citations", "hyperparameters", "training_args_class",
    "training_setup", "train_datasets", "eval_datasets", "training_logs", "metrics", "baseline_metrics", "best_model_step", "evaluators",
)  # fmt: skip
_ALWAYS_NEW = frozenset({"training_logs", "metrics", "baseline_metrics", "best_model_step"})


def save_card_data(model: Any, folder: str | os.PathLike[str]) -> Path:
    """Write ``model.model_card_data`` to ``folder/model_card.json`` (no local path in it).

    ``ContrastiveEncoder.save_pretrained`` calls it with the ``hf_contrast/`` folder of the save.

    Returns:
        The path written.
    """
    path = Path(folder) / CARD_DATA_FILE
    path.write_text(
        json.dumps(get_model_card_data(model).to_dict(), indent=2, allow_nan=False) + "\n", encoding="utf-8"
    )
    return path


def load_card_data(path: str | os.PathLike[str]) -> ContrastiveModelCardData | None:
    """Read a ``model_card.json`` written by :func:`save_card_data`; ``None`` (with a warning) if unreadable."""
    try:
        return ContrastiveModelCardData.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError) as error:
        logger.warning(
            "Model card data in %s not read (%s: %s); the card starts empty.", path, type(error).__name__, error
        )
        return None


def _evaluated_dataset(evaluator: Any) -> dict[str, Any]:
    """Name, id and split of the ``datasets.Dataset`` an evaluator scores (``score_dataset``, ``dataset``), if any."""
    for attribute in ("score_dataset", "dataset", "eval_dataset"):
        dataset = getattr(evaluator, attribute, None)
        if dataset is not None and hasattr(dataset, "info") and not isinstance(dataset, Mapping):
            entries = dataset_metadata(dataset)
            return {key: entries[0].get(key) for key in ("name", "id", "split")}
    return {}


def get_model_card_data(model: Any) -> ContrastiveModelCardData:
    """``model.model_card_data``, created (and attached to the model) on first use."""
    data = getattr(model, "model_card_data", None)
    if not isinstance(data, ContrastiveModelCardData):
        data = ContrastiveModelCardData()
        try:
            model.model_card_data = data
        except AttributeError:
            logger.debug("Model card: could not attach card data to %s", type(model).__name__)
    return data


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


def dataset_metadata(dataset: Any, name: str | None = None) -> list[dict[str, Any]]:
    """``[{"name", "id", "split", "size", "columns"}]`` of a dataset (one entry per split of a ``DatasetDict``).

    The Hub id comes from the download checksums of a dataset loaded from the Hub (as
    sentence-transformers does); a local folder or file gives no id and its folder name at most.
    """
    if isinstance(dataset, Mapping) and all(
        hasattr(part, "__len__") or hasattr(part, "column_names") for part in dataset.values()
    ):
        return [{**entry, "key": key} for key, part in dataset.items() for entry in dataset_metadata(part, name=name)]
    info = getattr(dataset, "info", None)
    builder_name = getattr(info, "dataset_name", None)
    entry: dict[str, Any] = {
        "name": public_name(name) or (builder_name if builder_name not in _PACKAGED_BUILDERS else None)
    }
    checksums = getattr(info, "download_checksums", None) or {}
    for source in checksums:
        if source.startswith("hf://datasets/"):
            entry["id"] = _hub_id(source[len("hf://datasets/") :].split("@")[0])
            entry["name"] = entry["name"] or entry["id"]
            break
    split = getattr(dataset, "split", None)
    entry["split"] = str(split) if split is not None else None
    try:
        entry["size"] = len(dataset)
    except TypeError:  # an IterableDataset
        entry["size"] = None
    columns = getattr(dataset, "column_names", None)
    entry["columns"] = list(columns) if columns else []
    return [entry]


class ModelCardCallback(TrainerCallback):
    """Fills ``trainer.model.model_card_data`` while training (add it at the end of the trainer's ``__init__``).

    The constructor starts a new run on the card data (:meth:`ContrastiveModelCardData.start_run`)
    and reads what the trainer knows at once (objective, datasets, evaluators, arguments: the
    trainer's ``on_init_end`` has fired by then); ``on_train_begin`` refreshes them, ``on_log``
    grows the log table, ``on_evaluate`` records metrics (step 0 = baseline), ``on_train_end``
    keeps the best checkpoint's metrics when ``load_best_model_at_end`` reloaded it.

    Args:
        trainer: A ``transformers.Trainer`` with ``model``, ``args``, ``train_dataset``,
            ``eval_dataset`` and ``objective`` (an ``nn.Module`` with ``name``, ``citation``,
            ``get_config_dict()``; a ``loss`` attribute is read when there is no ``objective``).
    """

    def __init__(self, trainer: Any) -> None:
        super().__init__()
        self.trainer = trainer
        self._data().start_run()
        self._describe_run()

    def _data(self) -> ContrastiveModelCardData:
        return get_model_card_data(self.trainer.model)

    def _describe_run(self) -> None:
        trainer, data = self.trainer, self._data()
        data.add_tags(["hf_contrast", "generated_from_trainer"])
        objective = getattr(trainer, "objective", None) or getattr(trainer, "loss", None)
        if objective is not None and not isinstance(objective, (int, float, str)):
            data.set_objective(objective)
        data.set_training_args(trainer.args)
        data.set_datasets(getattr(trainer, "train_dataset", None), getattr(trainer, "eval_dataset", None))
        data.set_evaluator(getattr(trainer, "evaluator", None))
        hub_model_id = getattr(trainer.args, "hub_model_id", None)
        if getattr(trainer.args, "push_to_hub", False) and hub_model_id and not data.model_id:
            data.model_id = _hub_id(hub_model_id)

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._describe_run()
        setup = getattr(self.trainer, "run_setup", None)  # what the trainer logged at the start of `train()`
        if setup:
            self._data().training_setup = {str(key): str(value) for key, value in setup.items()}

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None, **kwargs: Any) -> None:
        if logs:
            self._data().log(state.global_step, state.epoch, logs)

    def on_evaluate(
        self, args: Any, state: Any, control: Any, metrics: dict[str, float] | None = None, **kwargs: Any
    ) -> None:
        if metrics:
            self._data().set_metrics(metrics, state.global_step)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        best_step = getattr(state, "best_global_step", None)
        if not (args.load_best_model_at_end and best_step):
            return
        data = self._data()
        data.best_model_step = int(best_step)
        for entry in state.log_history:
            if entry.get("step") == best_step and any(key.startswith("eval_") for key in entry):
                data.set_metrics(entry, best_step)


# --------------------------------------------------------------------------------------------
# Rendering: values for the template
# --------------------------------------------------------------------------------------------


def _format(value: Any) -> str:
    """A table cell: floats shortened, pipes and newlines escaped."""
    if isinstance(value, float):
        text = f"{value:.4g}"
        text += ".0" if text.lstrip("-").isdigit() else ""
    elif isinstance(value, (dict, list, tuple)):
        text = f"`{value!r}`"
    else:
        text = str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def _base_model(model: Any, data: ContrastiveModelCardData) -> str | None:
    """The Hub id of a pretrained backbone, or ``None`` (from scratch, local and unnamed, unknown)."""
    if data.base_model:
        return _hub_id(data.base_model)
    config = model.config
    backbone = getattr(config, "backbone", None)
    if not getattr(config, "backbone_pretrained", False) or not isinstance(backbone, str):
        return None
    if config.backbone_type == "timm" and not backbone.startswith(("hf-hub:", "local-dir:")):
        try:
            import timm

            pretrained_cfg = timm.models.get_pretrained_cfg(backbone)
            return getattr(pretrained_cfg, "hf_hub_id", None)
        except Exception:  # an unknown name: no provenance rather than a wrong one
            return None
    # A namespaced Hub id ("org/name"); a bare name may be a local folder's name (from_backbone records
    # the base model of a text backbone in the card data).
    return _hub_id(backbone) if "/" in backbone else None


def _base_model_license(model: Any, base_model: str | None) -> str | None:
    """The license the base model states (timm's pretrained config, or its cached Hub card); no network."""
    if base_model is None:
        return None
    if model.config.backbone_type == "timm":
        try:
            import timm

            name = base_model.split("/", 1)[1] if base_model.startswith("timm/") else model.config.backbone
            license_ = getattr(timm.models.get_pretrained_cfg(name), "license", None)
            if license_:
                return license_
        except Exception:
            pass
    try:
        from huggingface_hub import try_to_load_from_cache

        path = try_to_load_from_cache(base_model, "README.md")
        return ModelCard.load(path).data.license if isinstance(path, str) else None
    except Exception:
        return None


def _versions() -> dict[str, str]:
    versions = {"Python": platform.python_version()}
    for name in _LIBRARIES:
        try:
            versions[name] = importlib.metadata.version("hf-contrast" if name == "hf_contrast" else name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def _public_dataset(entry: Mapping[str, Any]) -> dict[str, Any]:
    """A dataset entry safe to publish: a path as ``name`` becomes its folder name, as ``id`` is dropped."""
    public = dict(entry)
    public["id"] = _hub_id(entry.get("id"))
    public["name"] = public_name(entry.get("name")) or (
        public_name(entry["id"]) if entry.get("id") and not public["id"] else None
    )
    return public


#: The log table shows at most this many columns; the full table is in a collapsible block.
MAX_LOG_COLUMNS = 8


def _log_columns(data: ContrastiveModelCardData) -> tuple[list[str], list[str]]:
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


def _log_rows(data: ContrastiveModelCardData, columns: list[str]) -> list[list[str]]:
    rows = []
    for row in data.training_logs:
        cells = [_format(row[c]) if row.get(c) is not None else "-" for c in columns]
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


def _evaluation_groups(data: ContrastiveModelCardData) -> list[dict[str, Any]]:
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
                    "shown": _format(data.metrics[key]) if key in data.metrics else "-",
                    "baseline": _format(data.baseline_metrics[key]) if key in data.baseline_metrics else None,
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


def _human(count: Any) -> str | None:
    if not isinstance(count, (int, float)) or isinstance(count, bool):
        return None
    for divisor, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if count >= divisor:
            return f"{count / divisor:.1f}{suffix}"
    return str(int(count))


def _details(
    model: Any, data: ContrastiveModelCardData, base_model: str | None, backbone: str | None
) -> list[tuple[str, str]]:
    """The model-details list: what the backbone is, its size and cost, and what the outputs are."""
    config, stats = model.config, data.model_details or {}
    is_text = config.backbone_type == "text"
    rows: list[tuple[str, str]] = [
        ("Model type", f"hf_contrast ContrastiveEncoder ({'text' if is_text else 'image'})")
    ]
    if backbone:
        library, architecture = ("transformers" if is_text else "timm"), stats.get("architecture_name")
        rows.append(
            (
                "Backbone",
                f"`{backbone}`"
                + (f" ({library} `{architecture}`)" if architecture and architecture != backbone else ""),
            )
        )
    if base_model:
        rows.append(("Base model", f"[{base_model}](https://huggingface.co/{base_model})"))
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
    if is_text:
        max_length = getattr(config, "max_seq_length", None) or stats.get("max_seq_length")
        if max_length:
            rows.append(("Maximum sequence length", f"{max_length} tokens"))
        normalized = ", then L2 normalisation" if getattr(config, "normalize_embeddings", False) else ""
        rows.append(("Pooling", f"{getattr(config, 'pooling', 'mean')}{normalized}"))
        rows.append(("Similarity function", "cosine similarity"))
    else:
        data_config = getattr(model, "data_config", None) or {}
        size = data_config.get("input_size")
        if size:
            rows.append(("Image size", f"{size[1]} x {size[2]} ({size[0]} channels)"))
        if isinstance(stats.get("gmacs"), (int, float)):
            at = f" (backbone, one image at {size[1]} x {size[2]})" if size else ""
            rows.append(("GMACs", f"{stats['gmacs']:.3g}{at}"))
        if data_config.get("mean") and data_config.get("std"):
            mean, std = (tuple(round(v, 4) for v in data_config[key]) for key in ("mean", "std"))
            rows.append(("Normalisation", f"mean {mean}, std {std}"))
    outputs = f"{config.embedding_dim} (`embeddings`); {config.projection_dim} (`projections`, the training head)"
    rows.append(("Output dimensionality", outputs))
    if data.language:
        rows.append(("Language", ", ".join([data.language] if isinstance(data.language, str) else data.language)))
    return rows


def _context(model: Any, data: ContrastiveModelCardData) -> dict[str, Any]:
    """Everything the template needs, already formatted; no Markdown is built here."""
    config = model.config
    is_text = config.backbone_type == "text"
    base_model = _base_model(model, data)
    backbone = public_name(getattr(config, "backbone", None)) or getattr(config, "backbone_architecture", None)
    method = data.objective_name or (data.objective_class or "").removesuffix("Loss") or None
    data_config = getattr(model, "data_config", None) or {}
    shown, every = _log_columns(data)
    return {
        "marker": GENERATED_MARKER,
        "model_id": data.model_id or REPO_PLACEHOLDER,
        "is_text": is_text,
        "method": method,
        "objective_class": data.objective_class,
        "objective_config": [(key, _format(value)) for key, value in data.objective_config.items()],
        "citations": data.citations,
        "backbone": backbone,
        "base_model": base_model,
        "pretrained": bool(getattr(config, "backbone_pretrained", False)),
        "embedding_dim": getattr(config, "embedding_dim", None),
        "projection_dim": getattr(config, "projection_dim", None),
        "normalize_projections": bool(getattr(config, "normalize_projections", False)),
        "pooling": getattr(config, "pooling", "mean"),
        "normalize_embeddings": bool(getattr(config, "normalize_embeddings", False)),
        "max_seq_length": getattr(config, "max_seq_length", None) or (data.model_details or {}).get("max_seq_length"),
        "input_size": tuple(data_config["input_size"]) if data_config.get("input_size") else None,
        "details": _details(model, data, base_model, backbone),
        "architecture": (data.model_details or {}).get("architecture"),
        "train_datasets": data.train_datasets,
        "eval_datasets": data.eval_datasets,
        "hyperparameters": [(key, _format(value)) for key, value in sorted(data.hyperparameters.items())],
        "training_args_class": data.training_args_class,
        "training_setup": list(data.training_setup.items()),
        "log_columns": shown,
        "log_rows": _log_rows(data, shown),
        "all_log_columns": every if len(every) > len(shown) else None,
        "all_log_rows": _log_rows(data, every) if len(every) > len(shown) else None,
        "best_model_step": data.best_model_step,
        "evaluations": _evaluation_groups(data),
        "has_baseline": bool(data.baseline_metrics),
        "has_metrics": bool(data.metrics),
        "versions": _versions(),
    }


# model-index task of the evaluators whose class does not say it (``description``, as sentence-transformers' do).
_EVALUATOR_TASKS = {"STSEvaluator": "Semantic Similarity", "EmbeddingSimilarityEvaluator": "Semantic Similarity"}


def _task_type(group: Mapping[str, Any], is_text: bool) -> tuple[str, str | None]:
    """``(task type, task name)`` of an evaluation group's model-index entries."""
    description = group.get("description") or _EVALUATOR_TASKS.get(group.get("source", ""))
    if description:
        return re.sub(r"[^a-z0-9]+", "-", description.lower()).strip("-"), description
    if group.get("source") == "ProbeEvaluator":
        return ("text-classification" if is_text else "image-classification"), "Linear probe and kNN classification"
    return ("feature-extraction" if is_text else "image-feature-extraction"), None


def _metadata(model: Any, data: ContrastiveModelCardData, context: Mapping[str, Any]) -> ModelCardData:
    is_text = context["is_text"]
    tags = ["hf_contrast", "contrastive-learning"]
    if context["method"]:
        tags.append(re.sub(r"[^a-z0-9-]+", "-", context["method"].lower()).strip("-"))
    tags += (
        ["sentence-transformers", "sentence-similarity", "feature-extraction"]
        if is_text
        else ["timm", "image-feature-extraction"]
    )
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
            task_type, task_name = _task_type(group, is_text)
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
    license_ = data.license or _base_model_license(model, context["base_model"])
    return ModelCardData(
        library_name="sentence-transformers" if is_text else "timm",
        pipeline_tag="sentence-similarity" if is_text else "image-feature-extraction",
        tags=tags,
        base_model=context["base_model"],
        datasets=hub_datasets or None,
        license=license_,
        language=data.language,
        model_name=context["model_name"],
        eval_results=eval_results or None,
    )


def generate_model_card(model: Any) -> str:
    """The README.md text of an encoder, from ``model.config`` and ``model.model_card_data``.

    Args:
        model: A ``ContrastiveEncoder`` (duck-typed: ``config.backbone``, ``config.backbone_type``,
            ``config.embedding_dim``, ``config.projection_dim``, ``data_config``…).

    Returns:
        The card: YAML metadata (``library_name`` ``timm`` or ``sentence-transformers``,
        ``base_model``, ``datasets``, ``license``, ``model-index``) and the rendered template.
        The card data is not modified.
    """
    data = copy.deepcopy(get_model_card_data(model))
    data.train_datasets = [_public_dataset(entry) for entry in data.train_datasets]
    data.eval_datasets = [_public_dataset(entry) for entry in data.eval_datasets]
    data.hyperparameters = _scrub_paths(data.hyperparameters)
    context = _context(model, data)
    if data.model_name:
        context["model_name"] = data.model_name
    else:
        subject = f"{context['method']} encoder" if context["method"] else "Contrastive encoder"
        context["model_name"] = f"{subject} on {context['backbone']}" if context["backbone"] else subject
    card = ModelCard.from_template(_metadata(model, data, context), template_path=str(TEMPLATE_PATH), **context)
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
