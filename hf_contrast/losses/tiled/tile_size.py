"""Which path a tiled loss runs: the ``tile_size`` argument, its check and the automatic choice.

``tile_size=None`` tiles above :data:`AUTO_TILE_MIN_LOGITS` similarities, with
:data:`DEFAULT_TILE_SIZE` on CPU and :data:`ACCELERATOR_TILE_SIZE` on GPUs and other accelerators;
``0`` forces the dense form; a positive integer forces tiles of that size. Why these values
(measured): docs/large-batches.md, "How the defaults were chosen".
"""

from __future__ import annotations

from hf_contrast.errors import InputError

__all__ = [
    "DEFAULT_TILE_SIZE",
    "ACCELERATOR_TILE_SIZE",
    "AUTO_TILE_MIN_LOGITS",
    "check_tile_size",
    "checked_tile_size",
    "resolve_tile_size",
]

#: Tile edge on CPU when ``tile_size=None`` selects the tiled path (a ``1024²`` float32 block is 4 MiB).
DEFAULT_TILE_SIZE = 1024
#: Tile edge on accelerators (CUDA, ...) when ``tile_size=None`` tiles: fewer, larger blocks (kernel launches).
ACCELERATOR_TILE_SIZE = 4096
#: ``tile_size=None`` tiles when the similarity matrix has more than this many entries (``8192²``: a 256 MiB
#: float32 matrix; InfoNCE above ``B = 4096``, SupCon/OCL above ``N = 8192``, uniformity and binary NCE above
#: ``B = 8192``).
AUTO_TILE_MIN_LOGITS = 8192 * 8192


def check_tile_size(tile_size: object) -> int | None:
    """Validate a ``tile_size`` argument: ``None`` (automatic), ``0`` (dense) or a positive int."""
    if tile_size is None:
        return None
    if isinstance(tile_size, bool) or not isinstance(tile_size, int) or tile_size < 0:
        raise InputError(
            f"`tile_size` must be None (tile automatically above {AUTO_TILE_MIN_LOGITS} similarities), "
            f"0 (always the dense form) or a positive integer (the tile edge), got {tile_size!r}."
        )
    return int(tile_size)


def checked_tile_size(name: str, tile_size: object) -> int | None:
    """:func:`check_tile_size` as a hyperparameter check ``(name, value)``."""
    return check_tile_size(tile_size)


def resolve_tile_size(tile_size: int | None, n_rows: int, n_cols: int, device_type: str = "cpu") -> int:
    """The tile edge to use for an ``(n_rows, n_cols)`` similarity matrix; ``0`` means dense.

    >>> resolve_tile_size(None, 8192, 8192), resolve_tile_size(None, 16384, 16384)
    (0, 1024)
    >>> resolve_tile_size(64, 8, 8)
    64
    >>> resolve_tile_size(None, 16384, 16384, "cuda")
    4096
    """
    tile_size = check_tile_size(tile_size)
    if tile_size is None:
        if n_rows * n_cols <= AUTO_TILE_MIN_LOGITS:
            return 0
        return DEFAULT_TILE_SIZE if device_type == "cpu" else ACCELERATOR_TILE_SIZE
    return tile_size
