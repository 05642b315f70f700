"""A field with fixed choices (``Literal``) is checked before training whether it comes from a flag or from a
``.json`` config file, naming the flag, the file and the choices (issue 29: ``--projection_plot umap`` ran to the
end, exited 0 and drew nothing)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest

from hf_contrast.training import ContrastiveTrainingArguments, parse_args_with_objective


@dataclass
class _Script:
    method: str = "simclr"
    projection_plot: Literal["pca", "tsne"] = field(default="tsne", metadata={"help": "pca or tsne."})


def _parse(args: list[str]) -> _Script:
    script, _, _ = parse_args_with_objective((_Script, ContrastiveTrainingArguments), method="simclr", args=args)
    return script


@pytest.mark.parametrize("value", ["umap", "PCA", ""])
def test_a_bad_choice_in_a_flag_or_a_config_file_stops_before_training(tmp_path: Path, capsys, value: str) -> None:
    with pytest.raises(SystemExit):
        _parse(["--output_dir", str(tmp_path), "--projection_plot", value])
    assert "--projection_plot" in capsys.readouterr().err
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"output_dir": str(tmp_path), "projection_plot": value}))
    with pytest.raises(SystemExit):
        _parse([str(config)])
    error = capsys.readouterr().err
    assert (
        f"{config}: 'projection_plot' is {value!r}; choose one of 'pca', 'tsne' (the flag --projection_plot)" in error
    )


@pytest.mark.parametrize("value", ["pca", "tsne"])
def test_a_good_choice_passes_both_ways(tmp_path: Path, value: str) -> None:
    assert _parse(["--output_dir", str(tmp_path), "--projection_plot", value]).projection_plot == value
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"output_dir": str(tmp_path), "projection_plot": value}))
    assert _parse([str(config)]).projection_plot == value
