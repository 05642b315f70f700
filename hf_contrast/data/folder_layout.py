"""The layouts of a local image folder that :func:`~hf_contrast.data.load_image_dataset` accepts, checked
before ``datasets`` reads anything.

Accepted (``<class>`` folders hold the image files directly)::

    root/<class>/<image>                        one split, "train"
    root/<split>/<class>/<image>                 <split> in SPLIT_FOLDERS: train/, test/, val/, …
    root/<image>                                 label_column=None only: unlabelled images

Refused with an :class:`~hf_contrast.errors.InputError` naming the folders and the fix:

- nested class folders (``root/cat/indoor/1.png``): datasets' ``imagefolder`` names a class after the
  folder that *directly* holds a file (``indoor``, and ``cat/indoor`` + ``dog/indoor`` become one
  class), torchvision's ``ImageFolder`` after the top folder (``cat``, images found at any depth). The
  two disagree, so the package reads neither guess: flatten the class folders, or point at the level
  whose folders are the classes;
- split folders next to class folders or images (``root/train/`` beside ``root/cat/``);
- two split folders of one split (``val/`` and ``validation/``);
- images beside class folders (``root/cat/`` and ``root/1.png``);
- a labelled load of images without class folders (``label_column=None`` reads them unlabelled), or of a
  single class folder (a class label needs two classes);
- a folder without any image file.

A folder with a ``metadata.csv`` / ``metadata.jsonl`` / ``metadata.parquet`` file is datasets' own
metadata layout and is read as ``imagefolder`` reads it. A class folder without images is dropped from
the classes (with a warning: :func:`~hf_contrast.data.empty_class_folders`).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from hf_contrast.errors import InputError

__all__ = ["IMAGE_SUFFIXES", "SPLIT_FOLDERS", "image_files_by_split"]

#: Split folder names (datasets' split keywords, case-insensitive) and the split each one becomes.
SPLIT_FOLDERS = {
    "train": "train",
    "training": "train",
    "validation": "validation",
    "valid": "validation",
    "val": "validation",
    "dev": "validation",
    "test": "test",
    "testing": "test",
    "eval": "test",
    "evaluation": "test",
}


def _image_suffixes() -> tuple[str, ...]:
    try:
        from datasets.packaged_modules.imagefolder.imagefolder import ImageFolder

        return tuple(s.lower() for s in ImageFolder.EXTENSIONS)
    except (ImportError, AttributeError):  # pragma: no cover - the builder's public attribute moved
        return (".bmp", ".gif", ".jpeg", ".jpg", ".png", ".ppm", ".tif", ".tiff", ".webp")


#: File endings datasets' ``imagefolder`` builder reads (any file with them counts as an image).
IMAGE_SUFFIXES = _image_suffixes()
_METADATA = ("metadata.csv", "metadata.jsonl", "metadata.parquet")


def _visible(path: Path) -> bool:
    return not path.name.startswith((".", "__"))


def _children(folder: Path) -> tuple[list[Path], list[Path]]:
    """The visible sub-folders and image files directly in ``folder``, sorted."""
    entries = sorted(p for p in folder.iterdir() if _visible(p))
    return [p for p in entries if p.is_dir()], [
        p for p in entries if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES
    ]


def _images_below(folder: Path) -> list[Path]:
    return sorted(
        p
        for p in folder.rglob("*")
        if p.is_file()
        and p.suffix.lower() in IMAGE_SUFFIXES
        and all(_visible(q) for q in p.relative_to(folder).parents if q.name)
        and _visible(p)
    )


def _names(paths: Iterable[Path], root: Path, limit: int = 5) -> str:
    names = [p.relative_to(root).as_posix() + ("/" if p.is_dir() else "") for p in paths]
    return ", ".join(repr(n) for n in names[:limit]) + (
        f" and {len(names) - limit} more" if len(names) > limit else ""
    )


def _class_files(split_dir: Path, root: Path, argument: str, labelled: bool) -> list[Path]:
    """The image files of one split folder laid out as ``<class>/<image>`` (or flat, unlabelled)."""
    class_dirs, loose = _children(split_dir)
    where = "the folder" if split_dir == root else f"the split folder {split_dir.relative_to(root).as_posix()!r} of"
    if loose and class_dirs:
        raise InputError(
            f"`{argument}`={str(root)!r}: {where} holds both images ({_names(loose, root)}) and folders "
            f"({_names(class_dirs, root)}); put every image in its class folder (<class>/<image>)."
        )
    if loose:
        if labelled:
            raise InputError(
                f"`{argument}`={str(root)!r}: {where} holds {len(loose)} images but no class folders, so there are no "
                "labels; put them in one sub-folder per class (<class>/<image>), or pass `label_column=None` to load "
                "them unlabelled."
            )
        return loose
    files: list[Path] = []
    nested: list[Path] = []
    for class_dir in class_dirs:
        sub_dirs, images = _children(class_dir)
        files += images
        nested += [d for d in sub_dirs if _images_below(d)]
    if nested:
        raise InputError(
            f"`{argument}`={str(root)!r}: the class folders hold images in sub-folders ({_names(nested, root)}). "
            "datasets' imagefolder would name classes after those sub-folders (merging equal names across "
            "classes), torchvision's ImageFolder after the top folders; hf_contrast guesses neither. Move the "
            "images up into their class folder (<class>/<image>), or pass the folder whose sub-folders are the "
            "classes."
        )
    return files


def image_files_by_split(root: Path, argument: str, labelled: bool) -> dict[str, list[str]] | None:
    """The image files of each split of the image folder ``root``, after checking its layout.

    Args:
        root: An existing folder.
        argument: The argument's name in the messages.
        labelled: Whether labels (class folders) are needed.

    Returns:
        ``{split: [file, ...]}`` (``"train"``, ``"validation"``, ``"test"``; ``"train"`` alone for
        ``root/<class>/<image>``), or ``None`` for datasets' metadata layout (read as ``imagefolder`` does).

    Raises:
        InputError: on a layout of the module docstring's refused list.
    """
    if any((root / name).is_file() for name in _METADATA) or any(
        p.name in _METADATA for p in root.rglob("metadata.*")
    ):
        return None
    sub_dirs, loose = _children(root)
    split_dirs = [d for d in sub_dirs if d.name.lower() in SPLIT_FOLDERS]
    if split_dirs:
        others = [d for d in sub_dirs if d not in split_dirs] + loose
        if others:
            raise InputError(
                f"`{argument}`={str(root)!r} mixes split folders ({_names(split_dirs, root)}) with other folders or "
                f"images ({_names(others, root)}); use either root/<split>/<class>/<image> or root/<class>/<image> "
                f"(rename a class folder named like a split: {sorted(SPLIT_FOLDERS)})."
            )
        by_split: dict[str, list[Path]] = {}
        for split_dir in split_dirs:
            split = SPLIT_FOLDERS[split_dir.name.lower()]
            if split in by_split:
                same = [d for d in split_dirs if SPLIT_FOLDERS[d.name.lower()] == split]
                raise InputError(
                    f"`{argument}`={str(root)!r} has several folders for the {split!r} split ({_names(same, root)}); "
                    "merge or rename them."
                )
            by_split[split] = _class_files(split_dir, root, argument, labelled)
    else:
        by_split = {"train": _class_files(root, root, argument, labelled)}
    if not any(by_split.values()):
        raise InputError(
            f"`{argument}`={str(root)!r} holds no image file (endings such as .png, .jpg); put the images in one "
            "sub-folder per class (<class>/<image>)."
        )
    empty = [split for split, files in by_split.items() if not files]
    if empty:
        raise InputError(
            f"`{argument}`={str(root)!r}: the split folder(s) for {empty} hold no image file; add images or remove "
            "the folder(s)."
        )
    if labelled:
        classes = {p.parent.name for files in by_split.values() for p in files}
        if len(classes) < 2:
            raise InputError(
                f"`{argument}`={str(root)!r} holds a single class folder ({sorted(classes)}); class labels need at "
                "least two class folders (<class>/<image>), or pass `label_column=None` to load the images unlabelled."
            )
    return {split: [str(p) for p in files] for split, files in by_split.items()}
