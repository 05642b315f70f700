"""Write a folder next to its destination, then move it in with renames: a failed save never leaves half a model.

:func:`staged_directory` yields a sibling staging folder (same filesystem, so renames are atomic).
When the block succeeds, the staging folder becomes the destination: a single directory rename if the
destination is absent or empty; otherwise each entry replaces its namesake (``os.replace`` for files,
a rename aside and back for folders), so files that are not part of the save (``checkpoint-*``
folders, logs) stay. When the block raises (a disk full, a kill signal turned into an exception, a
bug), the staging folder is removed and the destination is untouched. A process killed outright
leaves a hidden ``.<name>.staging-*`` folder next to an intact destination. Every file of a save gets the
user's umask (:func:`with_umask`), whatever mode the library that wrote it chose.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path

__all__ = ["staged_directory", "swap_into", "with_umask"]


def swap_into(staging: str | os.PathLike[str], target: str | os.PathLike[str], stale: Iterable[str] = ()) -> None:
    """Move every entry of ``staging`` into ``target`` by renames, then remove ``staging``.

    Args:
        staging: A finished folder on the same filesystem as ``target``.
        target: The destination (created if absent).
        stale: Names in ``target`` that belong to an older save and are removed if ``staging`` does not
            replace them (e.g. ``2_Normalize`` after the normalisation was dropped).
    """
    staging, target = Path(staging), Path(target)
    if not target.exists() or (target.is_dir() and not any(target.iterdir())):
        if target.exists():
            target.rmdir()
        os.replace(staging, target)
        return
    backup = target.parent / f".{target.name}.replaced-{uuid.uuid4().hex[:8]}"
    backup.mkdir()
    try:
        entries = sorted(staging.iterdir(), key=lambda path: (path.is_dir(), path.name))
        for entry in entries:
            destination = target / entry.name
            if destination.is_dir() and not destination.is_symlink():
                os.replace(destination, backup / entry.name)
            os.replace(entry, destination)
        written = {entry.name for entry in entries}
        for name in stale:
            old = target / name
            if name not in written and (old.exists() or old.is_symlink()):
                os.replace(old, backup / name)
    finally:
        shutil.rmtree(backup, ignore_errors=True)
        shutil.rmtree(staging, ignore_errors=True)


@contextlib.contextmanager
def staged_directory(target: str | os.PathLike[str], stale: Iterable[str] = ()) -> Iterator[Path]:
    """Yield a staging folder for ``target``; on success move its contents in, on error drop it.

    Args:
        target: The folder the save is meant for.
        stale: See :func:`swap_into`.

    Yields:
        The (empty) staging folder, a hidden sibling of ``target``.

    Example:
        >>> with staged_directory("/tmp/model") as folder:  # doctest: +SKIP
        ...     (folder / "config.json").write_text("{}")
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.parent / f".{target.name}.staging-{uuid.uuid4().hex[:8]}"
    staging.mkdir()
    try:
        yield staging
        with_umask(staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    swap_into(staging, target, stale)


def with_umask(folder: str | os.PathLike[str]) -> None:
    """Give every file and folder under ``folder`` the mode a plain ``open`` / ``mkdir`` gives them: ``0o666`` /
    ``0o777`` less the process's umask. A library that saves through a private temporary file and renames it
    (safetensors: mode ``0o600``) would otherwise leave the weights unreadable to the user's group and to other
    accounts, unlike every other file of the save. Symbolic links are left alone."""
    umask = os.umask(0)  # POSIX reads the umask only by setting it: put it straight back
    os.umask(umask)
    for path in Path(folder).rglob("*"):
        if not path.is_symlink():
            os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~umask)
