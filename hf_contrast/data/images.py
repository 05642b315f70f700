"""Load the image data users have: a local image folder or a Hub dataset, with its class names."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

from hf_contrast.errors import InputError
from hf_contrast.tensor_checks import check_name

from .columns import rename_to_canonical
from .folder_layout import IMAGE_SUFFIXES, SPLIT_FOLDERS, image_files_by_split
from .naming import add_loader_note, name_dataset
from .sources import load_from_hub, resolve_source

__all__ = ["case_twin_class_folders", "defer_image_decoding", "empty_class_folders", "load_image_dataset"]

_IMAGE_SUFFIXES = IMAGE_SUFFIXES
_SPLIT_NAMES = tuple(SPLIT_FOLDERS)


def empty_class_folders(root: str | os.PathLike[str]) -> list[str]:
    """The class folders of an image folder that hold no image file (relative paths, sorted).

    Class folders are the sub-folders of ``root`` or, when ``root`` is split into ``train/``,
    ``test/``… folders, the sub-folders of those. datasets' ``imagefolder`` builder names classes after
    the folders of the files it finds, so a class folder without images is dropped from the class
    names without a word; :func:`load_image_dataset` warns about these.

    Args:
        root: The image folder.

    Returns:
        Paths like ``"dog"`` or ``"train/dog"``, relative to ``root``.
    """
    base = Path(root)
    class_dirs = [c for group in _class_folder_groups(base) for c in group]

    def has_images(folder: Path) -> bool:
        return any(f.is_file() and f.suffix.lower() in _IMAGE_SUFFIXES for f in folder.rglob("*"))

    return [c.relative_to(base).as_posix() for c in class_dirs if not has_images(c)]


def case_twin_class_folders(root: str | os.PathLike[str]) -> list[list[str]]:
    """Groups of class folders whose names differ only in case (``Cat/`` and ``cat/``), relative paths, sorted.

    datasets' ``imagefolder`` builder makes each of them a class of its own; on a case-insensitive file system
    (a copy to macOS or Windows) they would merge. :func:`load_image_dataset` warns about them.
    """
    base = Path(root)
    groups: list[list[str]] = []
    for folders in _class_folder_groups(base):
        by_name: dict[str, list[str]] = {}
        for folder in (c for c in folders if not c.name.startswith(".")):
            by_name.setdefault(folder.name.casefold(), []).append(folder.relative_to(base).as_posix())
        groups += [names for names in by_name.values() if len(names) > 1]
    return groups


def _class_folder_groups(base: Path) -> list[list[Path]]:
    """The class folders of ``base``, sorted, one group per split folder (``train/``, ``test/``…), or one group:
    the sub-folders of ``base`` when it is not split."""
    subdirs = sorted(p for p in base.iterdir() if p.is_dir() and not p.name.startswith("."))
    split_dirs = [p for p in subdirs if p.name.lower() in _SPLIT_NAMES]
    return [[c for c in sorted(s.iterdir()) if c.is_dir()] for s in split_dirs] if split_dirs else [subdirs]


def _check_columns(dataset: Any, source: str, columns: dict[str, str | None]) -> None:
    names = list(dataset.column_names)
    for option, column in columns.items():
        if column is not None and column not in names:
            raise InputError(
                f"`{option}`={column!r} is not a column of {source!r} (its columns: {names}); pass "
                f"`{option}=` with one of them."
            )


def _prepare(dataset: Any, source: str, image_column: str, label_column: str | None, decode: bool) -> Any:
    import datasets

    _check_columns(dataset, source, {"image_column": image_column, "label_column": label_column})
    feature = dataset.features[image_column]
    if not isinstance(feature, datasets.Image):
        raise InputError(
            f"`image_column`={image_column!r} of {source!r} holds {feature!r}, not images; pass the image column."
        )
    if label_column is not None:
        label = dataset.features[label_column]
        if isinstance(label, datasets.Value) and label.dtype in ("string", "large_string"):
            dataset = dataset.class_encode_column(label_column)  # names kept as a ClassLabel
    dataset = rename_to_canonical(dataset, {"image_column": image_column, "label_column": label_column}, source)
    return dataset if decode else defer_image_decoding(dataset, "image")


def load_image_dataset(
    path_or_id: str | os.PathLike[str],
    *,
    split: str | None = "train",
    image_column: str = "image",
    label_column: str | None = "label",
    decode: bool = True,
    dataset_name: str | None = None,
    **load_kwargs: Any,
) -> Any:
    """Load an image folder or a Hub image dataset as a ``datasets.Dataset`` (or ``DatasetDict``).

    A local folder is read with datasets' ``imagefolder`` builder: one sub-folder per class
    (``root/cat/1.png``; optionally ``root/train/cat/...``, ``root/test/cat/...`` for splits),
    giving an ``image`` column and a ``label`` ``ClassLabel`` named after the folders. The layout is
    checked first (:mod:`hf_contrast.data.folder_layout`: nested class folders, split folders beside
    class folders, images without class folders are errors, never guessed). A string that looks like
    a local path but does not exist is an error naming the working directory; only a valid Hub id
    (``name`` or ``user/name``) is passed to ``datasets.load_dataset``
    (:mod:`hf_contrast.data.sources`). String labels are encoded to a
    ``ClassLabel`` (names kept), so plots and model cards can name classes.

    Args:
        path_or_id: A local folder or a Hub dataset id (e.g. ``"uoft-cs/cifar10"``).
        split: The split to return; ``None``: every split as a ``DatasetDict``.
        image_column: The column holding the images (``"img"`` for CIFAR-10 on the Hub).
        label_column: The class column; ``None``: no labels needed.
        decode: ``False`` keeps images as ``{"path", "bytes"}`` dicts
            (:func:`defer_image_decoding`), so a bad file is reported by the collator with its row
            and path instead of failing inside ``datasets``.
        dataset_name: The dataset's name in model cards; default: a local folder's name (never its
            path), a Hub dataset's own name.
        **load_kwargs: Passed to ``datasets.load_dataset`` (e.g. ``cache_dir``, ``revision``).

    Returns:
        The dataset (``split`` given) or a ``DatasetDict``, with ``image_column`` and ``label_column``
        renamed to ``image`` and ``label`` (:mod:`hf_contrast.data.columns`), the trainers' defaults.

    A class folder without images is left out of the classes with a warning
    (:func:`empty_class_folders`).

    Raises:
        MissingPathError: (an ``InputError`` and ``FileNotFoundError``) if a local path does not exist.
        InputError: (a ``ValueError``) if ``path_or_id`` is a file or neither a path nor a Hub id, the
            folder's layout is refused or it has no images, the split does not exist, or a column is
            missing or not an image column (the error lists the columns).
        ConnectionError: if a Hub id cannot be reached (the message suggests a local folder).
    """
    check_name("split", split, what="split name (e.g. 'train'), or None for every split", allow_none=True)
    loaded, is_local = read_image_source("path_or_id", path_or_id, label_column is not None, load_kwargs)
    source = os.fspath(path_or_id)
    name_dataset(loaded, source, dataset_name)
    if split is not None:
        if split not in loaded:
            fix = " (a local folder's splits are its train/, test/, val/… folders)" if is_local else ""
            raise InputError(f"`split`={split!r} is not a split of {source!r} (its splits: {list(loaded)}){fix}.")
        return _prepare(loaded[split], source, image_column, label_column, decode)
    return prepare_image_splits(loaded, source, image_column, label_column, decode)


def prepare_image_splits(loaded: Any, source: str, image_column: str, label_column: str | None, decode: bool) -> Any:
    """Every split of what :func:`read_image_source` read from ``source``, checked and renamed as
    :func:`load_image_dataset` returns them."""
    import datasets

    return datasets.DatasetDict(
        {name: _prepare(part, source, image_column, label_column, decode) for name, part in loaded.items()}
    )


def read_image_source(
    argument: str, path_or_id: object, labelled: bool, load_kwargs: dict[str, Any]
) -> tuple[Any, bool]:
    """Check and read ``path_or_id`` (a local image folder or a Hub id) as ``datasets`` gives it.

    The shared door of :func:`load_image_dataset` and :func:`~hf_contrast.data.load_image_splits`
    (``argument`` names the caller's argument in the messages).

    Returns:
        ``(DatasetDict, is_local)``.
    """
    import datasets

    is_local, where = resolve_source(argument, path_or_id, "image folder (root/<class>/<image>)")
    source = os.fspath(path_or_id)
    local = Path(where)
    if is_local and not local.is_dir():
        raise InputError(
            f"`{argument}`={source!r} is a file; pass the image folder that holds the class folders "
            f"(root/<class>/<image>), e.g. {str(local.parent)!r} if that is it."
        )
    if is_local:
        files = (
            None
            if {"data_files", "data_dir"} & set(load_kwargs)
            else image_files_by_split(local, argument, labelled=labelled)
        )
        notes = []  # warned now, and kept on the loaded splits for the model card (naming.add_loader_note)
        empty = empty_class_folders(local)
        if empty:
            notes.append(f"the class folder(s) {empty} hold no image and are left out of the classes")
            warnings.warn(
                f"Image folder {local.name!r}: the class folder(s) {empty} hold no image and are left out of the "
                "classes (datasets' imagefolder names classes after the files it finds); add images or remove "
                "the folder(s).",
                UserWarning,
                stacklevel=3,
            )
        twins = case_twin_class_folders(local)
        if twins:
            listed = "; ".join(" and ".join(repr(name) for name in group) for group in twins)
            notes.append(f"the class folders {listed} differ only in case and are separate classes")
            warnings.warn(
                f"Image folder {local.name!r}: the class folders {listed} differ only in case, so they are "
                "separate classes (and would merge on a case-insensitive file system); rename or merge them if "
                "they are one class.",
                UserWarning,
                stacklevel=3,
            )
        location = {"data_dir": str(local)} if files is None else {"data_files": files}
        if files is not None and labelled:  # the layout is checked: every split labelled from its class folders
            # (datasets infers labels split by split, from the classes seen so far: a first split with one class
            # folder got no labels, its rows None, e.g. test/<cat> read before train/<cat, dog>)
            location["drop_labels"] = False
        try:
            loaded = datasets.load_dataset("imagefolder", **{**location, **load_kwargs})
        except (FileNotFoundError, datasets.exceptions.DataFilesNotFoundError, ValueError) as error:
            raise InputError(
                f"No images found in the folder {source!r} ({error}); put them in one sub-folder per class "
                "(root/<class>/<image>)."
            ) from error
        for note in notes:
            add_loader_note(loaded, note)
    else:
        loaded = load_from_hub(argument, where, "image folder (root/<class>/<image>)", **load_kwargs)
    return loaded, is_local


def defer_image_decoding(dataset: Any, image_column: str = "image") -> Any:
    """Keep ``image_column`` as ``{"path", "bytes"}`` dicts, decoded by the collator instead.

    With ``datasets.Image()`` decoding, a truncated or unreadable file fails inside ``datasets``
    when the row is read, naming neither the row nor the file. The image collators decode these
    dicts themselves (:mod:`hf_contrast.data.decode`) and report the row and the path, or
    skip and count the image under ``on_bad_image="skip"``. Works for ``Dataset`` and
    ``IterableDataset`` (``cast_column``); a column that is not an ``Image`` feature (or a
    dataset without features) is returned unchanged.

    Args:
        dataset: A ``datasets.Dataset`` or ``datasets.IterableDataset``.
        image_column: The image column.

    Returns:
        The dataset with ``Image(decode=False)`` on ``image_column``.
    """
    import datasets

    check_name("image_column", image_column)
    features = getattr(dataset, "features", None) or {}
    feature = features.get(image_column)
    if isinstance(feature, datasets.Image) and feature.decode:
        return dataset.cast_column(image_column, datasets.Image(decode=False))
    return dataset
