"""Which ``checkpoint-N`` folders a run can resume from: a checkpoint is complete iff the loader can read it.

``transformers.Trainer`` writes a checkpoint in place, in this order (``Trainer._save_checkpoint`` of
transformers 5.0, 5.10, 5.17 and 5.23 alike): ``save_model`` (the model folder and ``training_args.bin``; the
contrastive trainers add ``contrastive_state.pt``), ``optimizer.pt`` and ``scheduler.pt`` (``scaler.pt``
under fp16), ``rng_state.pth`` (``rng_state_<rank>.pth`` per process), and ``trainer_state.json``
last; then it deletes the oldest checkpoints beyond ``save_total_limit``, so a save killed at any moment
leaves the previous complete checkpoint. Such a kill leaves a folder that lacks a file or holds a
truncated one; :func:`checkpoint_problem` reads every file a resume reads and says which one is wrong:

- ``trainer_state.json``: present and parseable;
- the weights: the encoder in ``hf_contrast/`` as safetensors (sizes checked against the headers,
  sharded or not). A ``pytorch_model.bin`` there is refused: the resume would not read it. A folder
  without ``hf_contrast/`` (a model that is not a ``ContrastiveEncoder``) is read at its root;
- ``optimizer.pt`` and ``scheduler.pt`` (unless ``save_only_model``), ``scaler.pt`` when present,
  the RNG states of the run's processes, and ``contrastive_state.pt`` when the trainer writes one:
  complete ``torch.save`` archives (a truncated archive loses its zip directory, at its end).

:func:`interrupted_save_leftovers` lists what a killed save leaves behind for the next run to remove.
"""

from __future__ import annotations

import json
import os
import re
import struct
import zipfile
from pathlib import Path

from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from transformers.utils import logging

from hf_contrast.models.export import HUB_SUBFOLDER

__all__ = [
    "CONTRASTIVE_STATE_NAME",
    "checkpoint_problem",
    "checkpoint_step",
    "interrupted_save_leftovers",
    "last_complete_checkpoint",
]

logger = logging.get_logger(__name__)  # follows the Trainer's log level (hf_contrast.progress)

#: The trainer's state outside the model and optimizer (objective, views), in every checkpoint.
CONTRASTIVE_STATE_NAME = "contrastive_state.pt"
TRAINER_STATE_NAME = "trainer_state.json"
OPTIMIZER_NAME = "optimizer.pt"
SCHEDULER_NAME = "scheduler.pt"
SCALER_NAME = "scaler.pt"
_CHECKPOINT_RE = re.compile(rf"^{PREFIX_CHECKPOINT_DIR}-(\d+)$")
# Staging folders of a killed save: `tmp-checkpoint-N` / `tmp-old-checkpoint-N` (earlier hf_contrast versions wrote
# checkpoints there first) and the hidden `.<folder>.staging-*` / `.<folder>.replaced-*` of save_pretrained.
_STAGING_RE = re.compile(
    rf"^(\.?tmp-(old-)?{PREFIX_CHECKPOINT_DIR}-\d+.*|\.(tmp-)?{PREFIX_CHECKPOINT_DIR}-\d+\.(staging|replaced)-.*)$"
)


def checkpoint_step(folder: str | os.PathLike[str]) -> int | None:
    """``N`` of a folder named ``checkpoint-N``, else ``None``."""
    match = _CHECKPOINT_RE.match(Path(folder).name)
    return int(match.group(1)) if match else None


def _safetensors_problem(path: Path) -> str | None:
    """Why the safetensors file at ``path`` is unreadable (truncated, bad header), else ``None``."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as handle:
            (header_length,) = struct.unpack("<Q", handle.read(8))
            if header_length > size - 8:
                return f"{path.name} is truncated ({size} bytes, shorter than its header)"
            header = json.loads(handle.read(header_length))
        end = (
            8
            + header_length
            + max((entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"), default=0)
        )
        if end != size:
            return f"{path.name} is truncated ({size} bytes, its header describes {end})"
    except (OSError, ValueError, KeyError, TypeError, struct.error) as error:
        return f"{path.name} is unreadable ({type(error).__name__}: {error})"
    return None


def _torch_archive_problem(path: Path) -> str | None:
    """Why ``path`` is not a complete ``torch.save`` archive (a zip file), else ``None``.

    Reads the zip directory (at the end of the file: a truncated archive has none), checks that every
    record lies inside the file, and reads the pickle record (its CRC is checked); tensor data is not read.
    """
    try:
        size = path.stat().st_size
        with zipfile.ZipFile(path) as archive:
            records = archive.infolist()
            pickles = [record for record in records if record.filename.endswith("/data.pkl")]
            if not pickles:
                return f"{path.name} is not a torch.save archive (no data.pkl)"
            outside = [record.filename for record in records if record.header_offset + record.compress_size > size]
            if outside:
                return f"{path.name} is truncated ({outside[0]} ends past the end of the file)"
            archive.read(pickles[0])
    except (OSError, zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError) as error:
        return f"{path.name} is unreadable or truncated ({type(error).__name__}: {error})"
    return None


def _file_problem(path: Path) -> str | None:
    """The problem of one file that must be there."""
    if not path.is_file():
        return f"{path.name} is missing"
    return _safetensors_problem(path) if path.suffix == ".safetensors" else _torch_archive_problem(path)


def _sharded_safetensors_problem(index: Path) -> str | None:
    try:
        shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
    except (OSError, ValueError, KeyError, AttributeError) as error:
        return f"{index.name} is unreadable ({type(error).__name__}: {error})"
    for shard in shards:
        problem = _file_problem(index.parent / shard)
        if problem:
            return problem
    return None


def _weights_problem(folder: Path) -> str | None:
    """The encoder's weights in ``hf_contrast/`` (safetensors only), or a flat save's at the root."""
    encoder = folder / HUB_SUBFOLDER
    if encoder.is_dir():
        if (encoder / "model.safetensors.index.json").is_file():
            return _sharded_safetensors_problem(encoder / "model.safetensors.index.json")
        if (encoder / "model.safetensors").is_file():
            return _safetensors_problem(encoder / "model.safetensors")
        found = sorted(path.name for path in encoder.iterdir() if path.suffix in (".bin", ".pt", ".pth"))
        return f"{HUB_SUBFOLDER}/model.safetensors is missing" + (
            f" ({HUB_SUBFOLDER}/ holds {', '.join(found)}, which a resume does not read: the root weights are the "
            "bare backbone)"
            if found
            else ""
        )
    if (folder / "model.safetensors.index.json").is_file():
        return _sharded_safetensors_problem(folder / "model.safetensors.index.json")
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (folder / name).is_file():
            return _file_problem(folder / name)
    return "no model weights (neither hf_contrast/model.safetensors nor model.safetensors)"


def _rng_problem(folder: Path, world_size: int) -> str | None:
    """The RNG states a resume with ``world_size`` processes reads (``rng_state.pth`` / ``rng_state_<rank>.pth``).

    A checkpoint written with another number of processes has none of them: the Trainer then resumes
    without restoring the RNG (it says so), which is allowed; some but not all of them is a torn save.
    """
    present = sorted(folder.glob("rng_state*.pth"))
    for path in present:
        problem = _torch_archive_problem(path)
        if problem:
            return problem
    expected = ["rng_state.pth"] if world_size <= 1 else [f"rng_state_{rank}.pth" for rank in range(world_size)]
    missing = [name for name in expected if not (folder / name).is_file()]
    if not present:
        return f"{expected[0]} is missing"
    if missing and len(missing) < len(expected):
        return f"{missing[0]} is missing"
    return None


def checkpoint_problem(
    folder: str | os.PathLike[str],
    require_optimizer: bool = True,
    require_contrastive_state: bool = False,
    world_size: int = 1,
) -> str | None:
    """Why ``folder`` cannot be resumed from, or ``None`` if it is a complete checkpoint (see the module doc).

    Args:
        folder: A ``checkpoint-N`` folder.
        require_optimizer: Whether the optimizer, scheduler and RNG states must be there (``False`` for
            ``save_only_model`` runs).
        require_contrastive_state: Whether ``contrastive_state.pt`` must be there (the trainer writes one).
        world_size: The number of processes of the resuming run (which RNG files it reads).

    Returns:
        A short reason naming the file (``"optimizer.pt is unreadable or truncated (...)"``...) or ``None``.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return "not a directory"
    state = folder / TRAINER_STATE_NAME
    if not state.is_file():
        return f"{TRAINER_STATE_NAME} is missing"
    try:
        if not isinstance(json.loads(state.read_text(encoding="utf-8")), dict):
            return f"{TRAINER_STATE_NAME} is not a JSON object"
    except (OSError, ValueError) as error:
        return f"{TRAINER_STATE_NAME} is unreadable ({error})"
    problem = _weights_problem(folder)
    if problem:
        return problem
    names = [CONTRASTIVE_STATE_NAME] if require_contrastive_state else []
    if require_optimizer:
        names += [OPTIMIZER_NAME, SCHEDULER_NAME]
    if (folder / SCALER_NAME).exists():
        names.append(SCALER_NAME)
    for name in names:
        problem = _file_problem(folder / name)
        if problem:
            return problem
    return _rng_problem(folder, world_size) if require_optimizer else None


def _checkpoints_newest_first(output_dir: str | os.PathLike[str]) -> list[Path]:
    if not os.path.isdir(output_dir):
        return []
    found = [
        (step, Path(output_dir) / name)
        for name in os.listdir(output_dir)
        if (step := checkpoint_step(name)) is not None
    ]
    return [path for _, path in sorted(found, reverse=True) if path.is_dir()]


def last_complete_checkpoint(output_dir: str | os.PathLike[str], **requirements: bool | int) -> str | None:
    """The newest complete ``checkpoint-N`` in ``output_dir`` (by step), warning about each newer incomplete one.

    Args:
        output_dir: The training output folder.
        **requirements: :func:`checkpoint_problem`'s ``require_optimizer``, ``require_contrastive_state``
            and ``world_size``.

    Returns:
        The path, or ``None`` if there is no complete checkpoint.
    """
    for path in _checkpoints_newest_first(output_dir):
        problem = checkpoint_problem(path, **requirements)  # type: ignore[arg-type]
        if problem is None:
            return str(path)
        logger.warning("Skipping the incomplete checkpoint %s (%s); resuming from an older one.", path, problem)
    return None


def interrupted_save_leftovers(
    output_dir: str | os.PathLike[str], resume_step: int, **requirements: bool | int
) -> list[tuple[Path, str]]:
    """What killed saves left in ``output_dir``: ``(path, reason)`` of every staging folder and of every
    incomplete ``checkpoint-N`` with ``N > resume_step`` (complete checkpoints are never listed).

    Args:
        output_dir: The training output folder.
        resume_step: The step the run starts from (0 for a new run).
        **requirements: As :func:`last_complete_checkpoint`.
    """
    if not os.path.isdir(output_dir):
        return []
    leftovers = [
        (Path(output_dir) / name, "staging folder of an interrupted save")
        for name in sorted(os.listdir(output_dir))
        if _STAGING_RE.match(name)
    ]
    for path in _checkpoints_newest_first(output_dir):
        if checkpoint_step(path) > resume_step:  # type: ignore[operator]
            problem = checkpoint_problem(path, **requirements)  # type: ignore[arg-type]
            if problem is not None:
                leftovers.append((path, f"incomplete: {problem}"))
    return leftovers
