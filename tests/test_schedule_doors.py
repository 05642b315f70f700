"""Schedule values transformers accepts and then does not honour are refused by ContrastiveTrainingArguments,
naming the argument and its flag (issue 29: ``max_steps=0`` trained one step, ``save_steps=0`` was accepted, an
``output_dir`` that is a file failed at the first save)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_contrast.training import ContrastiveTrainingArguments


def test_max_steps_zero_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"`max_steps` \(`--max_steps`\) is 0: no training step would be run"):
        ContrastiveTrainingArguments(output_dir=str(tmp_path), max_steps=0)
    assert ContrastiveTrainingArguments(output_dir=str(tmp_path), max_steps=1).max_steps == 1
    assert ContrastiveTrainingArguments(output_dir=str(tmp_path)).max_steps == -1  # epochs


@settings(max_examples=25, deadline=None)
@given(name=st.sampled_from(["save_steps", "eval_steps"]), value=st.integers(-5, 0))
def test_nonpositive_interval_with_the_steps_strategy_is_refused(tmp_path_factory, name: str, value: int) -> None:
    out = str(tmp_path_factory.mktemp("out"))
    strategy = {"save_steps": "save_strategy", "eval_steps": "eval_strategy"}[name]
    with pytest.raises(ValueError, match=rf"`{name}` \(`--{name}`\) is {value} with the 'steps' strategy"):
        ContrastiveTrainingArguments(output_dir=out, **{strategy: "steps", name: value})
    ContrastiveTrainingArguments(output_dir=out, **{strategy: "no", name: value})  # not used: accepted


def test_an_output_dir_that_is_a_file_is_refused(tmp_path: Path) -> None:
    file = tmp_path / "model.bin"
    file.write_text("not a folder")
    with pytest.raises(ValueError, match=r"`output_dir` \(`--output_dir`\) .* is a file, not a folder"):
        ContrastiveTrainingArguments(output_dir=str(file))
    assert file.read_text() == "not a folder"  # untouched
