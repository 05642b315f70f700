"""Load the text data users have: a Hub id or a local CSV / TSV / JSON / JSONL / parquet / text file.

Local files are read with datasets' packaged builders (``csv``, ``json``, ``parquet``, ``text``),
chosen from the extension:

========================  ==========================================================
``.csv``                  ``csv`` (``delimiter`` default ``","``)
``.tsv``, ``.tab``        ``csv`` with ``delimiter="\\t"`` and no quote processing
``.txt``                  tab-separated (as ``.tsv``) when its first line holds a tab or a
                          ``delimiter`` is given, else ``text`` (one sentence per line,
                          column ``text``)
``.json``, ``.jsonl``     ``json`` (JSON Lines or a JSON list of records)
``.parquet``              ``parquet``
========================  ==========================================================

The chosen columns are renamed to the package's names (:mod:`hf_contrast.data.columns`): ``text``,
``text_pair``, ``label``, ``score`` for :func:`load_text_dataset`; ``sentence1``, ``sentence2``,
``score`` for :func:`load_sts_pairs`.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any

from hf_contrast.errors import InputError
from hf_contrast.tensor_checks import check_name

from .columns import rename_to_canonical
from .naming import name_dataset
from .sources import load_from_hub, resolve_source

__all__ = ["load_sts_pairs", "load_text_dataset"]

_BUILDERS = {".csv": "csv", ".tsv": "csv", ".tab": "csv", ".json": "json", ".jsonl": "json", ".parquet": "parquet"}


def _builder(path: Path, delimiter: str | None) -> tuple[str, dict[str, Any]]:
    if delimiter is not None and (not isinstance(delimiter, str) or len(delimiter) != 1):
        # pandas reads a longer one as a regular expression: '0|' split every character into its own column
        raise InputError(f"`delimiter` must be one character (e.g. ',' or '\\t'), got {delimiter!r}.")
    suffix = path.suffix.lower()
    if suffix == ".txt":
        if delimiter is None:
            with path.open(encoding="utf-8", errors="replace") as f:
                first = f.readline()
            if "\t" not in first:
                return "text", {}
            delimiter = "\t"
        suffix = ".tsv" if delimiter == "\t" else ".csv"
    if suffix not in _BUILDERS:
        raise InputError(
            f"Cannot tell the format of {str(path)!r} from its extension {suffix!r}; use one of "
            f"{sorted([*_BUILDERS, '.txt'])} (or load it with `datasets.load_dataset` yourself)."
        )
    builder = _BUILDERS[suffix]
    kwargs: dict[str, Any] = {}
    if builder == "csv":
        tab = suffix in (".tsv", ".tab")
        kwargs["delimiter"] = delimiter if delimiter is not None else ("\t" if tab else ",")
        if kwargs["delimiter"] == "\t":
            kwargs["quoting"] = csv.QUOTE_NONE  # sentences hold quote characters (STS-B, SICK)
    elif delimiter is not None:
        raise InputError(f"`delimiter` applies to CSV / TSV / text files, not to {suffix!r} files; leave it None.")
    return builder, kwargs


def _has_text(path: Path) -> bool:
    """Whether the file holds anything but white space (read in blocks: a big file stops at its first text)."""
    with path.open("rb") as f:
        while block := f.read(1 << 16):
            if block.strip():
                return True
    return False


def _is_number(name: object) -> bool:
    try:
        float(str(name))
    except ValueError:
        return False
    return True


def _check_text(
    dataset: Any,
    source: str,
    columns: dict[str, str | None],
    text_options: tuple[str, ...] = ("text_column", "text_pair_column"),
) -> None:
    """Each named column exists; those of ``text_options`` hold strings in every row (messages name the option)."""
    names = list(dataset.column_names)
    for option, column in columns.items():
        if column is None:
            continue
        if column not in names:
            if any(_is_number(name) for name in names):  # a header row of data: the file has none
                raise InputError(
                    f"`{option}`={column!r} is not a column of {source!r}: its first row is read as the header, and "
                    f"that row looks like data (a number among its column names: {names}). Add a header row naming "
                    f"the columns (e.g. `{','.join(str(c) for c in columns.values() if c)}`) as the file's first line."
                )
            raise InputError(
                f"`{option}`={column!r} is not a column of {source!r} (its columns: {names}); pass `{option}=` "
                "with one of them" + (" (or `delimiter=` if the file was split wrongly)." if len(names) == 1 else ".")
            )
        if option in text_options:
            feature = dataset.features.get(column) if dataset.features else None
            if feature is not None and not (
                hasattr(feature, "dtype") and feature.dtype in ("string", "large_string", "null")
            ):
                raise InputError(
                    f"`{option}`={column!r} of {source!r} holds {feature!r}, not text; pass the column of the "
                    f"sentences (its columns: {names})."
                )
            for row, text in enumerate(dataset[column]):
                if not isinstance(text, str):
                    raise InputError(
                        f"Row {row} of {source!r} has no text in `{option}`={column!r} (got {text!r}); fill or "
                        "remove it (e.g. `dataset.filter(lambda r: r[column] is not None)`)."
                    )


def _prepare(
    dataset: Any,
    source: str,
    text_column: str,
    text_pair_column: str | None,
    label_column: str | None,
    score_column: str | None,
    names: dict[str, str] | None = None,
) -> Any:
    """Check and rename one split; ``names`` maps a role (``"text_column"``…) to the caller's argument name for
    the messages and the column's name (``load_sts_pairs`` calls its text column ``sentence1_column``, renamed to
    ``sentence1``)."""
    import datasets

    names = names or {}
    if len(dataset) == 0:
        raise InputError(f"{source!r} holds no rows (only a header?); pass a file with data rows.")
    roles = {
        "text_column": text_column,
        "text_pair_column": text_pair_column,
        "label_column": label_column,
        "score_column": score_column,
    }
    text_options = tuple(names.get(role, role) for role in ("text_column", "text_pair_column"))
    _check_text(dataset, source, {names.get(role, role): column for role, column in roles.items()}, text_options)
    if label_column is not None:
        label = dataset.features[label_column]
        if isinstance(label, datasets.Value) and label.dtype in ("string", "large_string"):
            dataset = dataset.class_encode_column(label_column)
        elif not isinstance(label, datasets.ClassLabel) and not (
            isinstance(label, datasets.Value) and label.dtype.startswith(("int", "uint"))
        ):
            raise InputError(
                f"`label_column`={label_column!r} of {source!r} holds {label!r}; class labels must be strings or "
                "integers (a real-valued similarity goes in `score_column`)."
            )
    if score_column is not None:
        try:
            dataset = dataset.cast_column(score_column, datasets.Value("float32"))
        except (ValueError, TypeError) as error:
            raise InputError(f"`score_column`={score_column!r} of {source!r} must hold numbers ({error}).") from error
    return rename_to_canonical(
        dataset,
        {
            "text_column": text_column,
            "text_pair_column": text_pair_column,
            "label_column": label_column,
            "score_column": score_column,
        },
        source,
        targets={role: argument.removesuffix("_column") for role, argument in names.items()},
    )


def load_text_dataset(
    path_or_id: str | os.PathLike[str],
    *,
    split: str | None = "train",
    text_column: str = "text",
    text_pair_column: str | None = None,
    label_column: str | None = None,
    score_column: str | None = None,
    delimiter: str | None = None,
    dataset_name: str | None = None,
    **load_kwargs: Any,
) -> Any:
    """Load sentences (and optional pairs, labels, scores) from a Hub id or a local file.

    Args:
        path_or_id: A local file (format from the extension, see the module docstring) or a Hub
            dataset id.
        split: The split to return (a local file is the ``"train"`` split); ``None``: a
            ``DatasetDict`` of every split.
        text_column: Column of the sentences (for ``.txt`` one-sentence-per-line files: ``"text"``).
        text_pair_column: Optional column of a second sentence per row (positive pairs, STS).
        label_column: Optional class column; string labels become a ``ClassLabel`` (names kept).
        score_column: Optional similarity score column (cast to float32).
        delimiter: Field separator of a CSV / TSV / ``.txt`` file, one character (default from the extension).
        dataset_name: The dataset's name in model cards; default: a local file's folder or file
            name (never its path), a Hub dataset's own name.
        **load_kwargs: Passed to ``datasets.load_dataset`` (e.g. ``cache_dir``, ``revision``).

    Returns:
        A ``datasets.Dataset`` (or ``DatasetDict`` for ``split=None``) with the file's columns, the
        chosen ones renamed to ``text``, ``text_pair``, ``label`` and ``score``
        (:mod:`hf_contrast.data.columns`): the trainers read ``text`` and ``label`` by default.

    Raises:
        MissingPathError: if a local-looking ``path_or_id`` does not exist (names the working directory).
        InputError: (a ``ValueError``) on a string that is neither a path nor a Hub id, a folder, an
            unknown extension, an empty or unreadable file, a missing split or column (the error lists
            the columns), a text column that does not hold strings, a missing text (naming the row), or
            non-numeric scores.
        ConnectionError: if a Hub id cannot be reached (the message suggests a local file).
    """
    return _load_text(
        "path_or_id",
        path_or_id,
        split,
        text_column,
        text_pair_column,
        label_column,
        score_column,
        delimiter,
        dataset_name,
        load_kwargs,
    )


def _load_text(
    argument: str,
    path_or_id: object,
    split: str | None,
    text_column: str,
    text_pair_column: str | None,
    label_column: str | None,
    score_column: str | None,
    delimiter: str | None,
    dataset_name: str | None,
    load_kwargs: dict[str, Any],
    names: dict[str, str] | None = None,
) -> Any:
    import datasets

    check_name("split", split, what="split name (e.g. 'train'), or None for every split", allow_none=True)
    what = "text file (CSV, TSV, JSON, JSONL, parquet, txt)"
    is_local, where = resolve_source(argument, path_or_id, what)
    source = os.fspath(path_or_id)
    local = Path(where)
    if is_local and local.is_file():
        builder, kwargs = _builder(local, delimiter)
        if local.stat().st_size == 0 or (builder != "parquet" and not _has_text(local)):
            raise InputError(f"`{argument}`={source!r} is empty; pass a file with one row (or sentence) per line.")
        try:
            loaded = datasets.load_dataset(builder, data_files={"train": str(local)}, **kwargs, **load_kwargs)
        except (ValueError, TypeError, OSError, datasets.exceptions.DatasetGenerationError) as error:
            if "corresponds to no data" in str(error):
                raise InputError(f"`{argument}`={source!r} holds no data rows (only a header?); add rows.") from error
            cause = error.__cause__ or error
            raise InputError(
                f"`{argument}`={source!r} could not be read as {builder} ({type(cause).__name__}: {cause}); check the "
                "file's format (or `delimiter=`), or load it with `datasets.load_dataset` yourself."
            ) from error
    elif is_local:
        raise InputError(
            f"`{argument}`={source!r} is a folder; pass one file in it (CSV, TSV, JSON, JSONL, parquet, txt)."
        )
    else:
        if delimiter is not None:
            raise InputError(f"`delimiter` applies to local files; {source!r} is not one (read as a Hub id).")
        loaded = load_from_hub(argument, where, what, **load_kwargs)
    name_dataset(loaded, source, dataset_name)
    columns = (text_column, text_pair_column, label_column, score_column)
    if split is not None:
        if split not in loaded:
            raise InputError(f"`split`={split!r} is not a split of {source!r} (its splits: {list(loaded)}).")
        return _prepare(loaded[split], source, *columns, names=names)
    return datasets.DatasetDict({name: _prepare(part, source, *columns, names=names) for name, part in loaded.items()})


def load_sts_pairs(
    path: str | os.PathLike[str],
    sentence1_column: str = "sentence1",
    sentence2_column: str = "sentence2",
    score_column: str = "score",
    *,
    split: str = "train",
    delimiter: str | None = None,
    dataset_name: str | None = None,
    **load_kwargs: Any,
) -> Any:
    """Load scored sentence pairs (STS-B, SICK relatedness...) with canonical column names.

    Args:
        path: A local file or Hub id (as :func:`load_text_dataset`).
        sentence1_column: Column of the first sentence.
        sentence2_column: Column of the second sentence.
        score_column: Column of the gold similarity score.
        split: The split to read (a local file is ``"train"``).
        delimiter: Field separator of a CSV / TSV / ``.txt`` file, one character.
        dataset_name: The dataset's name in model cards (as :func:`load_text_dataset`).
        **load_kwargs: Passed to ``datasets.load_dataset``.

    Returns:
        A ``datasets.Dataset`` with exactly the columns ``sentence1``, ``sentence2`` (str) and
        ``score`` (float32), e.g. for :func:`hf_contrast.metrics.sts_spearman`.

    Raises:
        ValueError: as :func:`load_text_dataset`, or if fewer than 2 pairs are found (a
            correlation needs two).
    """
    for name, value in (
        ("sentence1_column", sentence1_column),
        ("sentence2_column", sentence2_column),
        ("score_column", score_column),
    ):
        check_name(name, value)
    check_name("split", split, what="split name (e.g. 'train'): the pairs are one split")
    columns = [sentence1_column, sentence2_column, score_column]
    if len(set(columns)) != 3:
        raise InputError(f"The sentence and score columns must be three different columns, got {columns}.")
    pairs = _load_text(
        "path",
        path,
        split,
        sentence1_column,
        sentence2_column,
        None,
        score_column,
        delimiter,
        dataset_name,
        load_kwargs,
        names={"text_column": "sentence1_column", "text_pair_column": "sentence2_column"},
    )
    pairs = pairs.select_columns(["sentence1", "sentence2", "score"])
    if len(pairs) < 2:
        raise InputError(f"{str(path)!r} holds {len(pairs)} scored pair(s); an STS correlation needs at least 2.")
    return pairs
