"""Check a dataset before training: not missing, not empty, large enough, with the needed columns."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

from hf_contrast.errors import InputError, InputTypeError

from ..tensor_checks import check_int, check_name

__all__ = [
    "COLUMN_KINDS",
    "check_column_kinds",
    "check_columns",
    "check_dataset",
    "check_dataset_type",
    "check_no_missing_values",
    "dataset_classes",
    "dataset_columns",
    "is_arrow_dataset",
]


def dataset_columns(dataset: Any) -> list[str] | None:
    """The column names of a dataset, or ``None`` when they cannot be known without reading it.

    ``datasets.Dataset`` / ``IterableDataset``: ``column_names`` (or the keys of ``features``);
    an ``IterableDataset`` built without features returns ``None``. A map-style dataset of
    mappings (e.g. a list of dicts): the keys of its first row.
    """
    names = getattr(dataset, "column_names", None)
    if names is not None:
        return list(names)
    features = getattr(dataset, "features", None)
    if isinstance(features, Mapping):
        return list(features)
    if hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__") and not hasattr(dataset, "features"):
        try:
            first = dataset[0] if len(dataset) > 0 else None
        except (IndexError, KeyError, TypeError):
            return None
        if isinstance(first, Mapping):
            return list(first)
    return None


def is_arrow_dataset(dataset: Any) -> bool:
    """Whether ``dataset`` is a ``datasets.Dataset`` (an Arrow table), without importing ``datasets``: the package
    runs without it, and no such dataset exists before it is imported."""
    module = sys.modules.get("datasets")
    return module is not None and isinstance(dataset, module.Dataset)


def dataset_classes(dataset: Any, column: str) -> list[Any] | None:
    """The distinct values of a label column, or ``None`` when they cannot be read cheaply.

    ``datasets.Dataset``: the unique values of the column's Arrow array, over the rows a ``select`` kept (no image
    is decoded, and no other column copied: ``Dataset.unique`` copies the whole selected dataset first); a list or
    tuple of mappings: the values of its rows. ``IterableDataset`` s, ``DatasetDict`` s, other torch datasets and a
    missing column give ``None`` (reading them would mean decoding every row).

    >>> dataset_classes([{"label": 1}, {"label": 0}, {"label": 1}], "label")
    [0, 1]
    """
    if is_arrow_dataset(dataset):
        if column not in dataset.column_names:
            return None
        return sorted(dataset.with_format("arrow")[column].unique().to_pylist(), key=repr)
    if isinstance(dataset, (list, tuple)) and dataset and all(isinstance(row, Mapping) for row in dataset):
        if not all(column in row for row in dataset):
            return None
        return sorted({row[column] for row in dataset}, key=repr)
    return None


def check_columns(dataset: Any, columns: Sequence[str | Sequence[str]], *, name: str = "train_dataset") -> None:
    """Raise :class:`~hf_contrast.errors.InputError` when ``dataset`` lacks one of ``columns`` (a tuple entry:
    any one of its names), if its columns are known without reading it (:func:`dataset_columns`)."""
    known = dataset_columns(dataset)
    if known is None:
        return
    for entry in columns:
        options = (entry,) if isinstance(entry, str) else tuple(entry)
        if not any(option in known for option in options):
            wanted = f"column {options[0]!r}" if len(options) == 1 else "column of " + ", ".join(map(repr, options))
            raise InputError(
                f"`{name}` has no {wanted} (its columns: {known}); rename the column "
                "(`dataset.rename_column(old, new)`) or set the matching column argument (e.g. "
                "`image_column`, `text_column`, `label_column`)."
            )


def _num_rows(dataset: Any) -> int | None:
    try:
        return len(dataset)
    except TypeError:  # IterableDataset: no length without reading it
        return None


def check_dataset(
    dataset: Any,
    *,
    name: str = "train_dataset",
    min_rows: int = 1,
    columns: Sequence[str | Sequence[str]] = (),
    why: str | None = None,
) -> int | None:
    """Fail early, with the fix, on a dataset that training would crash on deep inside torch.

    Map-style datasets (with ``len``) must hold at least ``min_rows`` rows; iterable datasets
    (``datasets.IterableDataset``, streaming) skip the size check. The columns are checked when
    they are known without reading the data (``column_names`` / ``features``; the first row of a
    list of dicts).

    Args:
        dataset: A ``datasets.Dataset``, ``datasets.IterableDataset``, torch dataset or list of rows.
        name: The argument the dataset was passed as (named in the error), e.g. ``"eval_dataset"``.
        min_rows: Minimum number of rows: 1, or one batch for methods that need a full batch.
        columns: Required columns; an entry that is a tuple of names is satisfied by any one of
            them (e.g. ``("image", "pixel_values")``).
        why: Why ``min_rows`` rows are needed, added to the error (e.g. "CARE cuts every batch
            into 8 chunks").

    Returns:
        The number of rows, or ``None`` for an iterable dataset.

    Raises:
        ValueError: if ``dataset`` is ``None``, empty, smaller than ``min_rows`` or lacks a column, or an argument is
            not of its kind.
        InputTypeError: if ``dataset`` is not something a trainer can batch (:func:`check_dataset_type`).

    >>> check_dataset([{"text": "a"}, {"text": "b"}], min_rows=2, columns=["text"])
    2
    """
    check_name("name", name, "argument name")
    check_int("min_rows", min_rows, 0)
    if why is not None and not isinstance(why, str):
        raise InputError(f"`why` must be a sentence (a str) or None, got {why!r}.")
    if (
        isinstance(columns, (str, bytes))
        or not isinstance(columns, Sequence)
        or not all(
            isinstance(entry, str) or (isinstance(entry, Sequence) and all(isinstance(o, str) for o in entry))
            for entry in columns
        )
    ):
        raise InputError(
            f"`columns` must be a list of column names (an entry may be a tuple of names: any one of them), got "
            f"{columns!r}."
        )
    if dataset is None:
        raise InputError(f"`{name}` is None; pass a dataset as `{name}=` (e.g. a `datasets.Dataset`).")
    check_dataset_type(dataset, name=name)
    rows = _num_rows(dataset)
    if rows is not None:
        if rows == 0:
            raise InputError(
                f"`{name}` is empty (0 rows); pass a dataset with at least {max(min_rows, 1)} rows (check the split "
                "name and any filtering or subsampling done before training)."
            )
        if rows < min_rows:
            reason = f" ({why})" if why else ""
            raise InputError(
                f"`{name}` has {rows} row{'s' if rows != 1 else ''}, fewer than the {min_rows} needed{reason}; add "
                "data or lower the batch size (`per_device_train_batch_size` / `per_device_eval_batch_size`)."
            )
    check_columns(dataset, columns, name=name)
    return rows


# ---- the type of a dataset argument, and the kind of data in its columns ---------------------------------------

_DATASET_FIX = (
    "pass a `datasets.Dataset` (an image folder: `hf_contrast.data.load_image_splits(path)['train']`; a text file: "
    "`hf_contrast.data.load_text_dataset(path)`; in-memory rows: `datasets.Dataset.from_dict({'image': [...], "
    "'label': [...]})` or `{'text': [...]}`), a `datasets.IterableDataset`, or a torch dataset whose rows are dicts "
    "of columns"
)


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _is_hf_dataset(dataset: Any) -> bool:
    """A ``datasets.Dataset`` / ``IterableDataset`` (duck-typed: the package imports without ``datasets``)."""
    return hasattr(dataset, "column_names") and hasattr(dataset, "features") and not isinstance(dataset, Mapping)


def check_dataset_type(dataset: Any, *, name: str = "train_dataset", allow_dict: bool = False) -> None:
    """Raise :class:`~hf_contrast.errors.InputTypeError` when ``dataset`` is not something a trainer can batch.

    Accepted: ``None``, a ``datasets.Dataset`` / ``IterableDataset``, a list or tuple of dicts, a torch
    ``IterableDataset`` and a map-style torch dataset whose first row is a dict (one row is read). With
    ``allow_dict`` (``eval_dataset``), a dict (or ``DatasetDict``) of such datasets, each checked.
    Refused, with the fix: a path (``str`` / ``os.PathLike``), a list of strings or numbers, a dict of
    columns, a ``DatasetDict`` as ``train_dataset``, a pandas ``DataFrame``, a torch dataset of tuples.

    >>> check_dataset_type([{"text": "a"}])
    >>> check_dataset_type("data/train")
    Traceback (most recent call last):
    ...
    hf_contrast.errors.InputTypeError: `train_dataset` is the path 'data/train', not a dataset; load it first: ...
    """
    import os

    if dataset is None or _is_hf_dataset(dataset):
        return
    if isinstance(dataset, (str, os.PathLike)):
        path = os.fspath(dataset)
        raise InputTypeError(
            f"`{name}` is the path {_short(path)}, not a dataset; load it first: an image folder with "
            f"`hf_contrast.data.load_image_splits({path!r})['train']`, a text file with "
            f"`hf_contrast.data.load_text_dataset({path!r})`, a Hub dataset with "
            "`datasets.load_dataset(...)['train']`."
        )
    kind = type(dataset)
    if kind.__module__.split(".")[0] == "pandas":
        raise InputTypeError(
            f"`{name}` is a pandas {kind.__name__}; pass `datasets.Dataset.from_pandas(frame)` (its columns become "
            "the dataset's columns)."
        )
    if isinstance(dataset, Mapping):
        values = list(dataset.values())
        columns = bool(values) and all(
            isinstance(v, (list, tuple)) and not any(isinstance(x, Mapping) for x in v) for v in values
        )
        if allow_dict and values and not columns:  # a dict (DatasetDict) of evaluation sets
            for key, value in dataset.items():
                check_dataset_type(value, name=f"{name}[{key!r}]")
            return
        if values and all(_is_hf_dataset(v) for v in values):  # a DatasetDict as train_dataset
            raise InputTypeError(
                f"`{name}` is a {kind.__name__} of the splits {list(dataset)}; pass one split, e.g. "
                f"`{name}=data[{next(iter(dataset))!r}]`."
            )
        raise InputTypeError(
            f"`{name}` is a {kind.__name__} with the keys {_short(list(dataset))}, not a dataset; a dict of columns "
            f"becomes one with `datasets.Dataset.from_dict({_columns_hint(dataset)})`; or {_DATASET_FIX}."
        )
    if isinstance(dataset, (list, tuple)):
        bad = next((row for row in dataset if not isinstance(row, Mapping)), None)
        if dataset and bad is not None:
            raise InputTypeError(
                f"`{name}` is a {kind.__name__} of {type(bad).__name__} (e.g. {_short(bad)}), not of rows with named "
                f"columns; {_DATASET_FIX}."
            )
        return
    try:
        from torch.utils.data import IterableDataset as TorchIterable
    except ImportError:  # pragma: no cover - torch is a dependency
        TorchIterable = ()  # type: ignore[assignment]
    if isinstance(dataset, TorchIterable):
        return
    if not (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")) or isinstance(
        dataset, (bytes, bytearray)
    ):
        raise InputTypeError(
            f"`{name}` is a {kind.__module__}.{kind.__qualname__} ({_short(dataset)}), not a dataset; {_DATASET_FIX}."
        )
    try:
        first = dataset[0] if len(dataset) > 0 else None
    except Exception as error:  # any failure to read row 0 is the user's dataset's
        raise InputTypeError(
            f"`{name}` ({kind.__name__}) could not be read at row 0 ({type(error).__name__}: {error}); {_DATASET_FIX}."
        ) from error
    if first is not None and not isinstance(first, Mapping):
        raise InputTypeError(
            f"`{name}` ({kind.__name__}) yields rows of type {type(first).__name__}, not dicts of named columns; make "
            "its `__getitem__` return a dict (e.g. `{'pixel_values': x, 'labels': y}` or "
            "`{'image': ..., 'label': ...}`), "
            f"or {_DATASET_FIX}."
        )


def _columns_hint(columns: Mapping[str, Any]) -> str:
    """``{'text': [...]}`` for the keys of a dict of columns (for the messages)."""
    return "{" + ", ".join(f"{key!r}: [...]" for key in list(columns)[:3]) + "}"


#: The kinds of column :func:`check_column_kinds` knows, and what each may hold (for the messages).
COLUMN_KINDS = {
    "image": "images (an `Image` feature), file paths (strings), {'path', 'bytes'} dicts or pixel arrays",
    "text": "strings",
    "label": "integer class ids (ints or a `ClassLabel`; encode strings with `dataset.class_encode_column(column)`)",
}


def _feature_kind(feature: Any) -> tuple[set[str], str]:
    """``(kinds the feature can serve, a description)`` of a ``datasets`` feature (no data is read)."""
    kind = type(feature).__name__
    if isinstance(feature, Mapping):  # a struct: {"path", "bytes"} is an undecoded image
        keys = set(feature)
        return ({"image"} if keys & {"path", "bytes"} else set()), f"a struct with the fields {sorted(keys)}"
    if kind == "Image":
        return {"image"}, "images (an Image feature)"
    if kind == "ClassLabel":
        return {"label"}, "class labels (a ClassLabel)"
    if kind == "Value":
        dtype = str(feature.dtype)
        if dtype in ("string", "large_string"):
            return {"image", "text"}, "strings"
        if dtype.startswith(("int", "uint")):
            return {"label"}, f"numbers ({dtype})"
        return set(), f"values of type {dtype}"
    if kind.startswith("Array") or kind in ("Sequence", "List", "LargeList"):
        return {"image"}, f"arrays ({kind})"
    return set(), f"a {kind} feature"


def _value_kind(value: Any) -> tuple[set[str], str]:
    """``(kinds the value can serve, a description)`` of one row's value."""
    import os

    if isinstance(value, bool):
        return set(), "booleans"
    if isinstance(value, str):
        return {"image", "text"}, "strings"
    if isinstance(value, os.PathLike):
        return {"image"}, "paths"
    if isinstance(value, Mapping):
        return ({"image"} if set(value) & {"path", "bytes"} else set()), f"dicts with the keys {sorted(value)}"
    if isinstance(value, int) or type(value).__name__.startswith(("int", "uint")):
        return {"label"}, f"numbers ({type(value).__name__})"
    if isinstance(value, float):
        return set(), "floats"
    module = type(value).__module__.split(".")[0]
    if module in ("PIL", "numpy", "torch") or hasattr(value, "__array__"):
        return {"image"}, f"{type(value).__module__}.{type(value).__name__} values"
    return set(), f"{type(value).__name__} values"


def check_column_kinds(dataset: Any, kinds: Sequence[tuple[str, str, str]], *, name: str = "train_dataset") -> None:
    """Raise :class:`~hf_contrast.errors.InputTypeError` when a column holds the wrong kind of data.

    Read from the dataset's ``features`` when it has them (nothing decoded); a list of dicts or a torch dataset
    of dicts: its first row. Columns the dataset lacks are not checked here (:func:`check_dataset` does that).

    Args:
        dataset: The dataset (``None``: nothing to check).
        kinds: ``(column, kind, argument)`` triples: ``kind`` one of :data:`COLUMN_KINDS`, ``argument`` the
            training argument that chose the column (named in the error), e.g. ``("image", "image", "image_column")``.
        name: The argument the dataset was passed as.

    >>> check_column_kinds([{"image": 3}], [("image", "image", "image_column")])
    Traceback (most recent call last):
    ...
    hf_contrast.errors.InputTypeError: `image_column`='image' names a column of numbers (int) in ...
    """
    if dataset is None or not kinds:
        return
    features = getattr(dataset, "features", None)
    row: Mapping[str, Any] | None = None
    if not isinstance(features, Mapping):
        features = None
        if isinstance(dataset, (list, tuple)):
            row = dataset[0] if dataset and isinstance(dataset[0], Mapping) else None
        elif hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__") and not hasattr(dataset, "column_names"):
            try:
                first = dataset[0] if len(dataset) > 0 else None
            except Exception:  # check_dataset_type reports unreadable rows
                first = None
            row = first if isinstance(first, Mapping) else None
    for column, kind, argument in kinds:
        if features is not None:
            if column not in features:
                continue
            allowed, described = _feature_kind(features[column])
        elif row is not None:
            if column not in row:
                continue
            allowed, described = _value_kind(row[column])
        else:
            return
        if kind not in allowed:
            raise InputTypeError(
                f"`{argument}`={column!r} names a column of {described} in `{name}`, but the {kind} column must hold "
                f"{COLUMN_KINDS[kind]}; set `{argument}` to the column that holds them (columns: "
                f"{dataset_columns(dataset)})."
            )
        if kind != "image":  # a missing image is the image scan's: named, or skipped with `on_bad_image="skip"`
            check_no_missing_values(dataset, column, argument, name)


def check_no_missing_values(dataset: Any, column: str, argument: str, name: str) -> None:
    """A ``datasets.Dataset``'s text or label column holds no missing value (``None``): the batch holding one
    would fail there (stopping training). Read from arrow's null count (nothing decoded); other datasets are not read.

    Raises:
        InputError: naming the argument, the column, how many rows miss a value, the first, and the fix.
    """
    if not is_arrow_dataset(dataset) or column not in dataset.column_names:
        return
    values = dataset.with_format("arrow")[column]
    if not values.null_count:
        return
    import pyarrow.compute  # a `datasets` dependency, imported with it

    first = pyarrow.compute.index(pyarrow.compute.is_null(values), True).as_py()
    count = values.null_count
    rows = f"{count:,} rows of the {len(dataset):,} in `{name}` have" if count > 1 else f"1 row of `{name}` has"
    raise InputError(
        f"`{argument}`={column!r}: {rows} no value (None; the first is row {first}), and a batch holding one "
        "would fail there. Remove them "
        f"(`dataset = dataset.filter(lambda row: row[{column!r}] is not None)`) or fill them."
    )
