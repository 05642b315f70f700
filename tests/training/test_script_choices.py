"""A field with fixed choices (``Literal``) is checked before training whether it comes from a flag or from a
``.json`` config file, naming the flag, the file and the choices (issue 29: ``--projection_plot umap`` ran to the
end, exited 0 and drew nothing); the scripts' sample caps are checked naming the flag, and an input error ends a
script with its message instead of a traceback."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_contrast.errors import InputError
from hf_contrast.training import (
    ContrastiveTrainingArguments,
    check_sample_caps,
    check_script_phases,
    parse_args_with_objective,
    run_main,
)


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


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ('{"max_steps": 1, "n_split": 4}', "unknown key(s) ['n_split']. A config file's keys are the flags' names"),
        ('{"max_steps": 1,}', "is not valid JSON: "),
        ("[1, 2]", "holds a list; it must hold one object of flags"),
        (None, "does not exist"),
    ],
)
def test_a_config_file_that_cannot_be_read_is_said_naming_the_file(tmp_path: Path, capsys, content, said) -> None:
    """An unknown key said "Some keys are not used by the HfArgumentParser: [...]" without the file; a file that is
    not JSON, or not an object, ended in a traceback."""
    config = tmp_path / "config.json"
    if content is not None:
        config.write_text(content)
    with pytest.raises((SystemExit, InputError)) as raised:
        _parse([str(config)])
    message = capsys.readouterr().err + (str(raised.value) if isinstance(raised.value, InputError) else "")
    assert str(config) in message and said in message, message


@pytest.mark.parametrize("value", ["pca", "tsne"])
def test_a_good_choice_passes_both_ways(tmp_path: Path, value: str) -> None:
    assert _parse(["--output_dir", str(tmp_path), "--projection_plot", value]).projection_plot == value
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"output_dir": str(tmp_path), "projection_plot": value}))
    assert _parse([str(config)]).projection_plot == value


@pytest.mark.parametrize("value", [0, -3, True, 2.5])
def test_sample_caps_are_checked_naming_the_flag(value) -> None:
    for name in ("max_train_samples", "max_eval_samples"):
        script = SimpleNamespace(**{name: value})
        with pytest.raises(ValueError, match=rf"`--{name}` must be a number of rows >= 1 \(or left out: every row\)"):
            check_sample_caps(script)
    check_sample_caps(SimpleNamespace(max_train_samples=None, max_eval_samples=7))
    check_sample_caps(SimpleNamespace())  # a script without the flags


@given(
    name=st.sampled_from(["num_probe_images", "max_plot_samples"]),
    value=st.integers(-10, 1) | st.booleans() | st.floats(allow_nan=True) | st.none(),
)
def test_the_evaluation_counts_are_checked_naming_the_flag(name: str, value) -> None:
    """``--num_probe_images -5`` said "`num_samples` must be an integer in [2, 32] … the dataset size" and
    ``--max_plot_samples 0`` "`n` must be …", after training: refused before any data is read, naming the flag."""
    least = 2 if name == "num_probe_images" else 1
    if value is None or (type(value) is int and value >= least):
        check_sample_caps(SimpleNamespace(**{name: value}))  # None: a script where it is not used
        return
    with pytest.raises(ValueError, match=rf"`--{name}` must be a number of test \w+ >= {least}"):
        check_sample_caps(SimpleNamespace(**{name: value}))


def test_run_main_ends_an_input_error_with_its_message_and_keeps_other_tracebacks(monkeypatch) -> None:
    monkeypatch.setattr(sys, "argv", ["run_care.py"])

    def bad_input() -> None:
        raise InputError("`--n_splits`=7 does not divide the batch; use 126.")

    with pytest.raises(SystemExit) as exit_:
        run_main(bad_input)
    assert exit_.value.code == "run_care.py: error: `--n_splits`=7 does not divide the batch; use 126."

    def bug() -> None:
        raise RuntimeError("a bug")

    with pytest.raises(RuntimeError, match="a bug"):  # not an input error: the traceback stays
        run_main(bug)


_FIELDS = {  # a field of each plain type: (config key, values of its type, values of other types)
    "resume_with_changes": (st.booleans(), st.one_of(st.text(max_size=5), st.integers(), st.floats(allow_nan=False))),
    "max_steps": (st.integers(1, 50), st.one_of(st.text(max_size=5), st.booleans(), st.floats(0.5, 9.5))),
    "learning_rate": (st.floats(1e-5, 1.0) | st.integers(1, 3), st.one_of(st.text(max_size=5), st.booleans())),
    "temperature": (st.floats(0.05, 2.0), st.one_of(st.text(max_size=5), st.booleans())),  # the method's config
}


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_a_config_files_value_of_another_type_is_refused_naming_the_field(tmp_path_factory, data) -> None:
    """The file's values reach the dataclasses as they are: `"resume_with_changes": "no"` was a true string. A
    value of another type than its field's is refused with the file, the field and the flag named."""
    key = data.draw(st.sampled_from(sorted(_FIELDS)), label="field")
    good, bad = _FIELDS[key]
    config = tmp_path_factory.mktemp("config") / "args.json"
    value = data.draw(bad, label="bad value")
    config.write_text(json.dumps({"output_dir": "out", key: value}))
    with pytest.raises(SystemExit):
        _parse([str(config)])
    value = data.draw(good, label="good value")
    config.write_text(json.dumps({"output_dir": "out", key: value}))
    script, args, method_config = parse_args_with_objective(
        (_Script, ContrastiveTrainingArguments), method="simclr", args=[str(config)]
    )
    assert getattr(args, key, getattr(method_config, key, None)) == value


def test_the_refusal_names_the_file_the_field_and_the_flag(tmp_path: Path, capsys) -> None:
    config = tmp_path / "args.json"
    config.write_text(json.dumps({"output_dir": "out", "resume_with_changes": "no"}))
    with pytest.raises(SystemExit):
        _parse([str(config)])
    said = capsys.readouterr().err
    assert (
        f"{config}: 'resume_with_changes' is 'no' (str); give true or false (the flag --resume_with_changes)" in said
    )


@pytest.mark.parametrize(
    ("model", "close"),
    [("resnt18", "resnet18"), ("notamodel", None), ("bert-base-uncased", None), ("sentence-transformers/x", None)],
)
def test_an_image_script_refuses_a_model_that_is_not_timm_at_once(model: str, close: str | None) -> None:
    """``run_care.py --model notamodel`` looked it up on the Hub as a text encoder (a minute of retries offline) and
    then suggested dropping a ``--pretrained`` that was never given; now one message, with the close timm names."""
    from hf_contrast.training import check_image_backbone

    with pytest.raises(InputError, match=rf"--model '{model}' is not a timm image model") as caught:
        check_image_backbone(model)
    assert ("Close timm names: " + (close or "")) in str(caught.value) if close else "Close" not in str(caught.value)
    for good in ("resnet18", "hf-hub:timm/resnet18.a1_in1k", "local-dir:/anywhere", "test_resnet"):
        check_image_backbone(good)  # timm names and sources pass without reading anything


_PHASES = ("do_train", "do_eval", "do_predict")


@settings(max_examples=40, deadline=None)
@given(
    flags=st.dictionaries(st.sampled_from(_PHASES), st.sampled_from([None, "true", "false", "True", "0", "yes"])),
    as_file=st.booleans(),
)
def test_phase_flags_are_accepted_where_the_script_does_that_and_refused_otherwise(
    tmp_path_factory, flags: dict, as_file: bool
) -> None:
    """The example scripts always train and then evaluate, with no prediction phase: a phase flag asking for that
    (``--do_train``, ``--do_eval true``, ``--do_predict false``) passes; one asking for anything else is refused, named
    with its value, whether from the command line or a config file; a flag not given is never named."""
    root = tmp_path_factory.mktemp("phases")
    argv = ["--output_dir", str(root)]
    for name, value in flags.items():
        argv += [f"--{name}"] + ([] if value is None else [value])
    args = parse_args_with_objective((_Script, ContrastiveTrainingArguments), method="simclr", args=argv)[1]
    typed = {n: args.do_train if n == "do_train" else getattr(args, n) for n in flags}  # the values as parsed
    if as_file:
        config = root / "args.json"
        config.write_text(json.dumps({"output_dir": str(root), **typed}))
        argv = [str(config)]
    wrong = [n for n in _PHASES if n in flags and typed[n] != (n != "do_predict")]
    if not wrong:
        check_script_phases(argv)
        return
    with pytest.raises(InputError) as refused:
        check_script_phases(argv)
    said = str(refused.value)
    assert said.startswith(", ".join(f"--{n} {str(typed[n]).lower()}" for n in wrong) + ": ")
    assert "always trains, then evaluates the final encoder" in said and "run_linear_probe.py" in said


def test_do_eval_false_is_refused_though_transformers_turns_it_back_on() -> None:
    """`TrainingArguments` sets `do_eval=True` whenever `eval_strategy` is not "no" (the scripts evaluate during
    training): the check reads the flag as typed, so `--do_eval false` is still refused, not silently undone."""
    argv = ["--output_dir", "out", "--eval_strategy", "steps", "--do_eval", "false"]
    args = parse_args_with_objective((_Script, ContrastiveTrainingArguments), method="simclr", args=argv)[1]
    assert args.do_eval is True
    with pytest.raises(InputError, match=r"^--do_eval false: "):
        check_script_phases(argv)
