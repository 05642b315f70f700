"""Saved files get the user's umask like any other file (issue 29): safetensors writes its file through a private
``0o600`` temporary file, which made every ``model.safetensors`` unreadable to another account."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from hf_contrast.hub.staging import staged_directory

sys.path.insert(0, str(Path(__file__).parents[1]))
from _tiny import tiny_timm_encoder  # noqa: E402


def _modes(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): stat.S_IMODE(p.stat().st_mode) for p in folder.rglob("*")}


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_every_saved_file_and_folder_has_the_umask_mode(tmp_path: Path, umask: int) -> None:
    previous = os.umask(umask)
    try:
        tiny_timm_encoder().save_pretrained(tmp_path / "model")
    finally:
        os.umask(previous)
    modes = _modes(tmp_path / "model")
    assert "model.safetensors" in modes and "hf_contrast/model.safetensors" in modes
    for name, mode in modes.items():
        expected = (0o777 if (tmp_path / "model" / name).is_dir() else 0o666) & ~umask
        assert mode == expected, f"{name}: {oct(mode)} != {oct(expected)}"


def test_a_private_temporary_file_is_opened_up_to_the_umask(tmp_path: Path) -> None:
    previous = os.umask(0o022)
    try:
        with staged_directory(tmp_path / "out") as folder:
            private = folder / "weights.bin"
            private.write_bytes(b"x")
            private.chmod(0o600)  # what an atomic writer's mkstemp leaves
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "out" / "weights.bin").stat().st_mode) == 0o644
    assert os.umask(previous) == previous  # the umask is left as it was
    os.umask(previous)
