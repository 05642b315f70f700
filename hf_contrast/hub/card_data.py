"""The card data of a contrastive encoder: what its model card says beyond the encoder's own config.

:class:`ContrastiveModelCardData` lives on the encoder as ``model.model_card_data``
(:func:`~hf_contrast.hub.get_model_card_data` creates it on first use). Users set ``license``,
``language``, ``model_name``, ``train_datasets``... on it; the trainer's
:class:`~hf_contrast.hub.ModelCardCallback` fills the rest. It travels with the model as
``hf_contrast/model_card.json`` (:mod:`hf_contrast.hub.card_storage`).
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hf_contrast.errors import InputError
from hf_contrast.hub.card_datasets import dataset_entries, dataset_metadata, evaluated_dataset, public_dataset
from hf_contrast.hub.card_values import finite_number, json_ready, scrub_paths
from hf_contrast.hub.training_args import non_default_training_args
from hf_contrast.provenance import hub_id_or_none as _hub_id
from hf_contrast.provenance import public_name

__all__ = ["CARD_DATA_FORMAT", "CARD_DATA_VERSION", "ContrastiveModelCardData"]

logger = logging.getLogger(__name__)

# Per-run bookkeeping of `Trainer.state.log_history`: not part of the log table or the metrics.
_BOOKKEEPING = ("_runtime", "_per_second", "_preparation_time", "total_flos", "num_input_tokens_seen", "epoch", "step")
CARD_DATA_FORMAT = "hf_contrast.model_card_data"
CARD_DATA_VERSION = 1
# What one training run writes; a new run on a loaded model replaces them (see `start_run`).
_RUN_FIELDS = (
    "objective_name", "objective_class", "objective_config", "citations", "hyperparameters", "training_args_class",
    "training_setup", "train_datasets", "eval_datasets", "training_logs", "metrics", "baseline_metrics",
    "best_model_step", "evaluators",
)  # fmt: skip
_ALWAYS_NEW = frozenset({"training_logs", "metrics", "baseline_metrics", "best_model_step"})


#: What :meth:`ContrastiveModelCardData.note_left_out_rows` says, found again to replace it.
_LEFT_OUT = "left out of the training batches (`on_bad_image='skip'`"


def _metric_values(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The finite numbers of an evaluation's ``metrics`` by name (``eval_loss`` -> ``loss``), bookkeeping left out."""
    values = {}
    for key, value in metrics.items():
        number = finite_number(value)
        if number is not None and not key.endswith(_BOOKKEEPING):
            values[key.split("_", 1)[1] if key.startswith("eval_") else key] = number
    return values


def _tag_list(value: Any) -> list[str]:
    """``tags`` as a list: a single string is one tag (``"vision"``, not ``v, i, s, o, n``)."""
    tags = [value] if isinstance(value, str) else value
    if not isinstance(tags, (list, tuple)) or not all(isinstance(tag, str) for tag in tags):
        raise InputError(f"`tags` must be a tag or a list of tags (strings), e.g. ['vision'], got {value!r}.")
    return list(tags)


@dataclass
class ContrastiveModelCardData:
    """What the model card of a contrastive encoder says beyond the encoder's own config.

    It travels with the model: ``save_pretrained`` writes it to ``hf_contrast/model_card.json``
    (:func:`~hf_contrast.hub.save_card_data`) and ``ContrastiveEncoder.from_pretrained`` reads it
    back (:func:`~hf_contrast.hub.load_card_data`), so saving, loading and pushing keep the card.
    When a loaded model is trained again, the new run replaces the previous run's fields (method,
    datasets, hyperparameters, logs, metrics) that were not changed by hand since loading; the fields
    a user sets (license, language, tags, model name) are kept.

    Set the user-facing fields by hand (``model.model_card_data.license = "mit"``); the trainer's
    :class:`~hf_contrast.hub.ModelCardCallback` fills the others while training.

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
        hyperparameters: Non-default training arguments (:func:`~hf_contrast.hub.non_default_training_args`).
        training_setup: The defaults that shaped the run, as the trainer logged them at the start of training
            (``{"image size": "28x28 px (the training images' own size)", "precision": "fp32", ...}``).
        training_logs: One row per logged step: ``{"epoch", "step", "loss", "eval_loss", ...}``.
        metrics: This model's evaluation metrics (last evaluation after step 0, or the best
            checkpoint's with ``load_best_model_at_end``), without the ``eval_`` prefix.
        baseline_metrics: The metrics of an evaluation at step 0 (before training).
        best_model_step: The step of the checkpoint kept by ``load_best_model_at_end``.
        evaluators: The trainer's evaluators: ``[{"prefix", "class", "dataset_name", "dataset_id", "split",
            "held_out", "notes", "primary_metric", "metric_names", "description"}]`` (their metrics are reported per
            dataset; ``notes``: an evaluator's ``dataset_notes``, what the loaders said of data the card lists
            nowhere else, e.g. a subset of STS pairs).
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
            value = dataset_entries(name, value)
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
        self.objective_config = json_ready(dict(get_config())) if callable(get_config) else {}
        citation = getattr(objective, "citation", None)
        for entry in [citation] if isinstance(citation, str) else list(citation or []):
            if isinstance(entry, str) and entry.strip() and entry.strip() not in self.citations:
                self.citations.append(entry.strip())

    def set_training_args(self, args: Any) -> None:
        """Keep the training arguments that differ from their class defaults (secrets dropped)."""
        self.hyperparameters = scrub_paths(json_ready(non_default_training_args(args)))
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
            scored = evaluated_dataset(member)
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
            notes = [str(note) for note in getattr(member, "dataset_notes", None) or ()]
            if notes:  # only then: a card without them is written as before, to the byte
                self.evaluators[-1]["notes"] = notes

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

    def note_left_out_rows(self, skipped: int, dropped: int) -> None:
        """Say on the training data's line what a ``train()`` call with ``on_bad_image="skip"`` left out of its
        batches: ``skipped`` unreadable image rows and ``dropped`` readable rows left out with them (whole chunks or
        class groups). Replaces what an earlier call said; zero and zero: nothing said."""
        note = f"{skipped:,} unreadable image row(s) left out of the training batches (`on_bad_image='skip'`"
        note += f"; {dropped:,} readable row(s) with them, to keep chunks or class groups whole)" if dropped else ")"
        for entry in self.train_datasets:
            notes = [kept for kept in entry.get("notes") or [] if _LEFT_OUT not in kept]
            entry["notes"] = [*notes, note] if skipped or dropped else notes

    def log(self, step: int, epoch: float | None, logs: Mapping[str, Any]) -> None:
        """Merge one ``Trainer.log`` call into the log table's row for ``step`` (numbers only)."""
        values = {
            key: number
            for key, value in logs.items()
            if not key.endswith(_BOOKKEEPING)
            and not key.startswith("train_")
            and (number := finite_number(value)) is not None
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
        values = _metric_values(metrics)
        current = self.__dict__.get("_metrics_step")
        if step == 0:
            self.baseline_metrics = {**self.baseline_metrics, **values} if current == 0 else values
        else:
            self.metrics = {**self.metrics, **values} if current == step else values
        object.__setattr__(self, "_metrics_step", step)

    def add_metrics(self, metrics: Mapping[str, Any]) -> None:
        """Add numbers measured on the kept weights after training (an example script's own, such as the class
        orthogonality of the test projections) to the card's metrics, beside the kept evaluation's; keys as the
        Trainer's (``eval_<name>``). Not a baseline: call it after training."""
        self.metrics = {**self.metrics, **_metric_values(metrics)}

    # ---- travelling with the model -----------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The card data as JSON-ready values, with no local path (what ``model_card.json`` holds)."""
        values = {f.name: json_ready(getattr(self, f.name)) for f in dataclasses.fields(self)}
        values["train_datasets"] = [public_dataset(entry) for entry in values["train_datasets"]]
        values["eval_datasets"] = [public_dataset(entry) for entry in values["eval_datasets"]]
        values["base_model"] = _hub_id(values["base_model"])
        values["model_id"] = _hub_id(values["model_id"])
        return {"format": CARD_DATA_FORMAT, "version": CARD_DATA_VERSION, **scrub_paths(values)}

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
        """Begin a new training run on this model (called by :class:`~hf_contrast.hub.ModelCardCallback`).

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
