"""Schedule values transformers accepts and then does not honour are refused by ContrastiveTrainingArguments,
naming the argument and its flag (issue 29: ``max_steps=0`` trained one step, ``save_steps=0`` was accepted, an
``output_dir`` that is a file failed at the first save)."""

from __future__ import annotations

import re
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


@settings(max_examples=30, deadline=None)
@given(name=st.sampled_from(["save_steps", "eval_steps", "logging_steps"]), value=st.integers(-5, 0))
def test_nonpositive_interval_with_the_steps_strategy_is_refused(tmp_path_factory, name: str, value: int) -> None:
    """``logging_steps=-1`` was accepted and logged only at the last step."""
    out = str(tmp_path_factory.mktemp("out"))
    strategy = name.replace("steps", "strategy")
    with pytest.raises(ValueError, match=rf"`{name}` \(`--{name}`\) is {value} with the 'steps' strategy"):
        ContrastiveTrainingArguments(output_dir=out, **{strategy: "steps", name: value})
    ContrastiveTrainingArguments(output_dir=out, **{strategy: "no", name: value})  # not used: accepted


def test_an_output_dir_that_is_a_file_is_refused(tmp_path: Path) -> None:
    file = tmp_path / "model.bin"
    file.write_text("not a folder")
    with pytest.raises(ValueError, match=r"`output_dir` \(`--output_dir`\) .* is a file, not a folder"):
        ContrastiveTrainingArguments(output_dir=str(file))
    assert file.read_text() == "not a folder"  # untouched


@settings(max_examples=40, deadline=None)
@given(
    name=st.sampled_from(
        ["max_steps", "learning_rate", "gradient_accumulation_steps", "seed", "dataloader_num_workers"]
        + ["save_total_limit", "weight_decay", "max_grad_norm"]
    ),
    data=st.data(),
)
def test_values_that_failed_after_training_began_are_refused_up_front(tmp_path_factory, name: str, data) -> None:
    """``--learning_rate -1`` (torch's optimizer), ``--gradient_accumulation_steps 0`` (a ZeroDivisionError), ``--seed
    -1`` (numpy), ``--dataloader_num_workers -1`` (the DataLoader) failed once training began; ``--max_steps -5``
    trained for the epochs and ``--save_total_limit 0`` kept every checkpoint. Refused naming the argument; the edges
    of the accepted range are accepted."""
    bad, good = {
        "max_steps": (st.integers(-(10**6), -2) | st.just(0), st.sampled_from([-1, 1, 10**6])),
        "learning_rate": (st.floats(max_value=-1e-12) | st.just(float("nan")), st.sampled_from([0.0, 1e-9, 3.0])),
        "gradient_accumulation_steps": (st.integers(-100, 0), st.sampled_from([1, 64])),
        "seed": (st.integers(-(2**40), -1) | st.integers(2**32, 2**40), st.sampled_from([0, 2**32 - 1])),
        "dataloader_num_workers": (st.integers(-100, -1), st.sampled_from([0, 4])),
        "save_total_limit": (st.integers(-100, 0), st.sampled_from([None, 1, 5])),
        "weight_decay": (st.floats(max_value=-1e-12) | st.just(float("nan")), st.sampled_from([0.0, 0.05])),
        "max_grad_norm": (st.floats(max_value=-1e-12) | st.just(float("nan")), st.sampled_from([0.0, 1.0, None])),
    }[name]
    out = str(tmp_path_factory.mktemp("out"))
    value = data.draw(bad)
    with pytest.raises(ValueError, match=rf"`{name}` "):
        ContrastiveTrainingArguments(output_dir=out, **{name: value})
    accepted = data.draw(good)
    assert getattr(ContrastiveTrainingArguments(output_dir=out, **{name: accepted}), name) == accepted


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--warmup_steps", "-1"], r"`warmup_steps` \(`--warmup_steps`\) must be a number of steps >= 0"),
        (
            ["--load_best_model_at_end", "--eval_strategy", "steps", "--save_strategy", "epoch"],
            "--load_best_model_at_end requires the save and eval strategy to match",
        ),
    ],
)
def test_transformers_own_argument_errors_end_the_script_without_a_traceback(tmp_path: Path, flags, said) -> None:
    """transformers' ``TrainingArguments`` refuses ``--load_best_model_at_end`` with an evaluation strategy
    that is not the save strategy with a plain ``ValueError`` (and
    ``--warmup_steps -1``, with another message in each version: checked by us first): the scripts' parser makes it
    an input error (the script ends with ``<script>: error: <message>``, no traceback)."""
    import dataclasses

    from hf_contrast.errors import InputError
    from hf_contrast.training import parse_args_with_objective

    @dataclasses.dataclass
    class Script:
        method: str = "simclr"

    with pytest.raises(InputError, match=said):
        parse_args_with_objective(
            (Script, ContrastiveTrainingArguments), method="simclr", args=["--output_dir", str(tmp_path), *flags]
        )


@pytest.mark.parametrize("epochs", [0, 0.0, -1.0])
def test_no_epochs_without_max_steps_is_refused(tmp_path: Path, epochs) -> None:
    """``--num_train_epochs 0`` ran no step, saved the untrained model with a card and exited 0."""
    with pytest.raises(ValueError, match=r"`num_train_epochs` \(`--num_train_epochs`\) is .* no training step"):
        ContrastiveTrainingArguments(output_dir=str(tmp_path), num_train_epochs=epochs)
    assert ContrastiveTrainingArguments(output_dir=str(tmp_path), num_train_epochs=epochs, max_steps=5).max_steps == 5


@pytest.mark.parametrize(
    ("overrides", "said"),
    [({"max_steps": 150}, "150 steps"), ({"max_steps": 1}, "1 step"), ({"num_train_epochs": 3}, "3 epochs"),
     ({"num_train_epochs": 1}, "1 epoch"), ({"num_train_epochs": 0.5}, "0.5 epochs")],
)  # fmt: skip
def test_the_start_up_line_says_epochs_when_epochs_decide(tmp_path: Path, overrides, said) -> None:
    """The scripts said "for -1 steps" when ``num_train_epochs`` decided the length."""
    from hf_contrast.training import training_length

    assert training_length(ContrastiveTrainingArguments(output_dir=str(tmp_path), **overrides)) == said


@pytest.mark.parametrize("warmup", [1.5, 2.25, -0.5])
def test_warmup_steps_must_be_whole_steps_or_a_fraction(tmp_path: Path, warmup: float) -> None:
    """``--warmup_steps 1.5`` trained with 1 warmup step (transformers truncates a value >= 1), silently."""
    with pytest.raises(ValueError, match=r"`warmup_steps` \(`--warmup_steps`\) must be a number of steps >= 0"):
        ContrastiveTrainingArguments(output_dir=str(tmp_path), warmup_steps=warmup)
    for good in (0, 0.1, 3, 3.0):
        assert ContrastiveTrainingArguments(output_dir=str(tmp_path), warmup_steps=good).warmup_steps == good


def test_an_empty_output_dir_is_refused() -> None:
    """``--output_dir ""`` failed with ``FileNotFoundError: ''`` when the trainer was built."""
    with pytest.raises(ValueError, match=r"`output_dir` \(`--output_dir`\) is empty"):
        ContrastiveTrainingArguments(output_dir="  ")


def test_a_tracker_that_is_not_installed_is_refused(tmp_path: Path, monkeypatch) -> None:
    """``--report_to wandb`` without wandb failed with a RuntimeError traceback when the Trainer was built."""
    import transformers.integrations

    monkeypatch.setattr(transformers.integrations, "get_available_reporting_integrations", lambda: ["tensorboard"])
    with pytest.raises(ValueError, match=r"`report_to` \(`--report_to`\) names \['wandb'\], not installed here"):
        ContrastiveTrainingArguments(output_dir=str(tmp_path), report_to=["tensorboard", "wandb"])
    assert ContrastiveTrainingArguments(output_dir=str(tmp_path), report_to="tensorboard").report_to == ["tensorboard"]
    assert ContrastiveTrainingArguments(output_dir=str(tmp_path), report_to="none").report_to == []


@settings(max_examples=20, deadline=None)
@given(
    name=st.sampled_from(["gather_distributed", "resume_with_changes"]),
    value=st.sampled_from(["no", "yes", "", 0, 1, None, 1.0]) | st.text(max_size=3),
)
def test_a_switch_that_is_not_a_bool_is_refused(tmp_path_factory, name: str, value) -> None:
    """``gather_distributed="no"`` (a non-empty string, so true) was accepted and gathered; a switch takes True or
    False only (the scripts' `--gather_distributed no` parses to False before it gets here)."""
    out = str(tmp_path_factory.mktemp("out"))
    with pytest.raises(ValueError, match=rf"`{name}` must be True or False"):
        ContrastiveTrainingArguments(output_dir=out, **{name: value})
    for good in (True, False):
        assert getattr(ContrastiveTrainingArguments(output_dir=out, **{name: good}), name) is good


@settings(max_examples=25, deadline=None)
@given(mode=st.sampled_from(["fastest", "Default", "reduce_overhead", "max-autotune ", ""]) | st.text(max_size=12))
def test_a_compile_mode_the_inductor_does_not_know_is_refused_before_training(tmp_path_factory, mode: str) -> None:
    """``--torch_compile_mode fastest`` trained until the model was compiled and stopped there with torch's own
    RuntimeError traceback; now the arguments refuse every mode ``torch.compile`` refuses, and accept only modes it
    accepts (``""``, which torch 2.6 refuses and later releases read as the default, is refused on all)."""
    import torch

    out = str(tmp_path_factory.mktemp("out"))
    try:  # the reference: torch.compile's own decision, made when the wrapper is built (nothing is compiled yet)
        torch.compile(torch.nn.Identity(), backend="inductor", mode=mode)
        torch_accepts = True
    except RuntimeError as error:
        assert "Unrecognized mode" in str(error)
        torch_accepts = False
    try:
        args = ContrastiveTrainingArguments(output_dir=out, torch_compile_mode=mode)
    except ValueError as error:
        assert re.fullmatch(r"`torch_compile_mode` must be one of \('default', .*\), got .*\.", str(error), re.S)
        assert mode == "" or not torch_accepts
        return
    assert torch_accepts and args.torch_compile and args.torch_compile_mode == mode


def test_every_inductor_mode_is_accepted_and_another_backend_keeps_its_own(tmp_path: Path) -> None:
    out = str(tmp_path)
    for mode in ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"):
        assert ContrastiveTrainingArguments(output_dir=out, torch_compile_mode=mode).torch_compile_mode == mode
    args = ContrastiveTrainingArguments(output_dir=out, torch_compile_backend="eager", torch_compile_mode="x")
    assert args.torch_compile_mode == "x"  # not inductor's: torch passes it to that backend
