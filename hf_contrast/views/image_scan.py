"""A start-up scan of a dataset's image files: find unreadable images before the first step.

The collators decode an image only when its batch is drawn, so without a scan a bad file stops a run
(``on_bad_image="raise"``) at its batch, possibly late. :func:`scan_images` reads every ``datasets.Image``
column of a ``datasets.Dataset`` undecoded (``{"path", "bytes"}``) and checks each image, as deeply as
stays cheap for the dataset's size:

- up to :data:`FULL_DECODE_ROWS` rows: every image is fully decoded (finds 0-byte, non-image and
  truncated files; about 1 ms per 28×28 PNG on a busy 2-core CPU, more for large JPEGs);
- up to :data:`HEADER_ROWS` rows: every image's header is read (``PIL.Image.open``: finds 0-byte and
  non-image files; a file cut after a valid header is found when its batch is decoded);
- above: only the file sizes are read (0-byte files).

Streaming (``IterableDataset``) and in-memory columns that are not ``datasets.Image`` are not scanned.
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hf_contrast.errors import InputError

__all__ = ["FULL_DECODE_ROWS", "HEADER_ROWS", "BadImageFile", "image_columns", "scan_depth", "scan_images"]

FULL_DECODE_ROWS = 10_000
HEADER_ROWS = 200_000


@dataclass(frozen=True)
class BadImageFile:
    """One unreadable image found by :func:`scan_images`: its row, column, file (or ``None``) and why."""

    row: int
    column: str
    source: str | None
    reason: str

    def __str__(self) -> str:
        where = repr(self.source) if self.source else f"embedded bytes of row {self.row}"
        return f"{where} (row {self.row}, column {self.column!r}): {self.reason}"


def image_columns(dataset: Any) -> list[str]:
    """The columns of a ``datasets.Dataset`` whose feature is ``datasets.Image`` (``[]`` for anything else)."""
    import datasets

    if not isinstance(dataset, datasets.Dataset):
        return []
    return [name for name, feature in dataset.features.items() if isinstance(feature, datasets.Image)]


def scan_depth(n_rows: int) -> str:
    """``"decode"``, ``"header"`` or ``"size"``: how deeply :func:`scan_images` checks ``n_rows`` images."""
    return "decode" if n_rows <= FULL_DECODE_ROWS else "header" if n_rows <= HEADER_ROWS else "size"


def _check(value: dict[str, Any] | None, depth: str) -> str | None:
    """Why one undecoded image value is unreadable, or ``None``."""
    from PIL import Image

    if value is None:
        return "the image is None (a missing value)"
    data, path = value.get("bytes"), value.get("path")
    if data is None:
        if not path:
            return "the image has neither 'path' nor 'bytes'"
        try:
            size = os.path.getsize(path)
        except OSError as error:
            return f"cannot read the file: {type(error).__name__}: {error}"
        if size == 0:
            return "the file is empty (0 bytes)"
        if depth == "size":
            return None
    elif len(data) == 0:
        return "the image bytes are empty"
    try:
        with Image.open(io.BytesIO(data) if data is not None else path) as image:
            if depth == "decode":
                image.load()
    except Exception as error:  # PIL raises OSError, SyntaxError, ValueError, struct.error...
        return f"{type(error).__name__}: {error}"
    return None


def scan_images(dataset: Any, columns: Sequence[str] | None = None) -> list[BadImageFile]:
    """Every unreadable image of ``dataset``'s image columns, as deeply as :func:`scan_depth` of its size says.

    Args:
        dataset: A ``datasets.Dataset`` (anything else: nothing is scanned, ``[]``).
        columns: The columns to scan; default: every ``datasets.Image`` column.

    Returns:
        The bad images, in row order (empty when all were read).

    Raises:
        InputError: if ``columns`` is not ``None`` or a list of names.
    """
    if columns is not None and (
        isinstance(columns, (str, bytes))
        or not isinstance(columns, Sequence)
        or not all(isinstance(c, str) for c in columns)
    ):
        raise InputError(f"`columns` must be None or a list of column names (e.g. ['image']), got {columns!r}.")
    names = image_columns(dataset) if columns is None else [c for c in columns if c in image_columns(dataset)]
    names = list(dict.fromkeys(names))  # a column named twice is scanned once (arrow refused the repeated field)
    if not names:
        return []
    depth = scan_depth(len(dataset))
    table = dataset.select_columns(names).with_format("arrow")[:]  # undecoded {"bytes", "path"} structs
    bad: list[BadImageFile] = []
    for name in names:
        for row, value in enumerate(table.column(name).to_pylist()):
            reason = _check(value, depth)
            if reason is not None:
                bad.append(BadImageFile(row, name, (value or {}).get("path"), reason))
    return sorted(bad, key=lambda b: (b.row, b.column))
