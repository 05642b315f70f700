"""What the card says about datasets: name, Hub id, split, size and columns, never a local path.

:func:`dataset_metadata` reads a ``datasets.Dataset`` (or a dict of them); :func:`dataset_entries` checks
entries given by hand; :func:`public_dataset` makes an entry safe to publish; :func:`evaluated_dataset`
finds the data an evaluator scores.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hf_contrast.data.naming import loader_notes
from hf_contrast.errors import InputError
from hf_contrast.provenance import hub_id_or_none as _hub_id
from hf_contrast.provenance import public_name

__all__ = ["dataset_entries", "dataset_metadata", "evaluated_dataset", "public_dataset"]

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


def dataset_entries(name: str, value: Any) -> list[dict[str, Any]]:
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


def evaluated_dataset(evaluator: Any) -> dict[str, Any]:
    """Name, id and split of the ``datasets.Dataset`` an evaluator scores (``score_dataset``, ``dataset``), if any."""
    for attribute in ("score_dataset", "dataset", "eval_dataset"):
        dataset = getattr(evaluator, attribute, None)
        if dataset is not None and hasattr(dataset, "info") and not isinstance(dataset, Mapping):
            entries = dataset_metadata(dataset)
            return {key: entries[0].get(key) for key in ("name", "id", "split")}
    return {}


def public_dataset(entry: Mapping[str, Any]) -> dict[str, Any]:
    """A dataset entry safe to publish: a path as ``name`` becomes its folder name, as ``id`` is dropped."""
    public = dict(entry)
    public["id"] = _hub_id(entry.get("id"))
    public["name"] = public_name(entry.get("name")) or (
        public_name(entry["id"]) if entry.get("id") and not public["id"] else None
    )
    return public


def dataset_metadata(dataset: Any, name: str | None = None) -> list[dict[str, Any]]:
    """``[{"name", "id", "split", "size", "columns"[, "notes"]}]`` of a dataset (one entry per split of a
    ``DatasetDict``; ``notes``: the quirks its loader warned about, :func:`hf_contrast.data.naming.loader_notes`).

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
    notes = loader_notes(dataset)  # quirks the loader warned about (a class folder without images, …)
    if notes:
        entry["notes"] = notes
    return [entry]
