"""A finished run run again says it is finished and changes nothing (issue 29: it trained a step past
``max_steps`` and rewrote ``train_results.json`` with that one step); a larger ``max_steps`` continues it. And a run
evaluates its final weights once (a short run evaluated them at its last step and then again)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_contrast.training import ContrastiveTrainingArguments, detect_last_checkpoint, evaluate_final, finished_run


def _run_dir(root: Path, steps: int, planned: int, epochs: float = 3.0, results: bool = True) -> Path:
    """An output folder as a script leaves it: a checkpoint, trainer_state.json and (at its end) train_results.json."""
    (root / f"checkpoint-{steps}").mkdir(parents=True)
    state = {"global_step": steps, "max_steps": planned, "num_train_epochs": epochs, "log_history": []}
    (root / f"checkpoint-{steps}" / "trainer_state.json").write_text(json.dumps(state))
    (root / "trainer_state.json").write_text(json.dumps(state))
    if results:
        (root / "train_results.json").write_text(json.dumps({"train_loss": 1.0}))
    return root


def _args(root: Path, **overrides) -> ContrastiveTrainingArguments:
    return ContrastiveTrainingArguments(output_dir=str(root), report_to="none", use_cpu=True, **overrides)


@settings(max_examples=30, deadline=None)
@given(done=st.integers(1, 400), asked=st.integers(1, 400))
def test_finished_exactly_when_the_steps_asked_for_are_done(tmp_path_factory, done: int, asked: int) -> None:
    root = _run_dir(tmp_path_factory.mktemp("run"), steps=done, planned=done)
    args = _args(root, max_steps=asked)
    message = finished_run(args, detect_last_checkpoint(args, overwrite_output_dir=False))
    assert (message is not None) == (done >= asked)
    if message:
        assert f"{done} training steps, which is the {asked} steps asked for" in message
        assert "Pass a larger --max_steps to continue" in message


def test_epoch_runs_compare_epochs(tmp_path: Path) -> None:
    root = _run_dir(tmp_path / "run", steps=60, planned=60, epochs=3.0)
    for epochs, finished in ((3.0, True), (2.0, True), (4.0, False)):
        args = _args(root, num_train_epochs=epochs)
        message = finished_run(args, detect_last_checkpoint(args, overwrite_output_dir=False))
        assert (message is not None) is finished
        if finished:
            assert "--num_train_epochs" in message


@pytest.mark.parametrize("case", ["interrupted before its results", "resume named by the user", "overwrite"])
def test_not_a_finished_run(tmp_path: Path, case: str) -> None:
    root = _run_dir(tmp_path / "run", steps=10, planned=10, results=case != "interrupted before its results")
    overrides = {"resume_from_checkpoint": str(root / "checkpoint-10")} if case == "resume named by the user" else {}
    args = _args(root, max_steps=10, **overrides)
    last = detect_last_checkpoint(args, overwrite_output_dir=case == "overwrite")
    assert finished_run(args, last) is None


class _Trainer:
    """What ``evaluate_final`` reads of a Trainer: its state, its arguments, and ``evaluate``."""

    def __init__(self, history: list[dict], step: int, load_best: bool = False, best: int | None = None) -> None:
        self.state = SimpleNamespace(
            log_history=history, global_step=step, best_model_checkpoint=f"checkpoint-{best}" if best else None,
            best_global_step=best,
        )  # fmt: skip
        self.args = SimpleNamespace(load_best_model_at_end=load_best)
        self.evaluated = 0

    def evaluate(self) -> dict:
        self.evaluated += 1
        return {"eval_loss": 9.0, "epoch": 1.0}


HISTORY = [
    {"loss": 3.0, "step": 5},
    {"eval_loss": 2.5, "eval_knn_accuracy": 0.5, "epoch": 0.5, "step": 5},
    {"loss": 2.0, "step": 10},
    {"eval_loss": 2.0, "eval_knn_accuracy": 0.7, "epoch": 1.0, "step": 10},
    {"train_runtime": 1.0, "train_loss": 2.5, "epoch": 1.0, "step": 10},
]


def test_the_final_weights_are_evaluated_once() -> None:
    trainer = _Trainer(HISTORY, step=10)
    assert evaluate_final(trainer) == {"eval_loss": 2.0, "eval_knn_accuracy": 0.7, "epoch": 1.0}
    assert trainer.evaluated == 0  # the last step's evaluation is of the final weights: kept
    trainer = _Trainer(HISTORY[:2] + HISTORY[2:3], step=10)  # last evaluation at step 5, weights changed since
    assert evaluate_final(trainer) == {"eval_loss": 9.0, "epoch": 1.0} and trainer.evaluated == 1
    trainer = _Trainer(HISTORY, step=10, load_best=True, best=5)  # the best checkpoint (step 5) was reloaded
    assert evaluate_final(trainer)["eval_loss"] == 9.0 and trainer.evaluated == 1
    trainer = _Trainer(HISTORY, step=10, load_best=True, best=10)  # the best is the last: nothing reloaded
    assert evaluate_final(trainer)["eval_loss"] == 2.0 and trainer.evaluated == 0
    trainer = _Trainer([{"loss": 1.0, "step": 3}], step=3)  # no evaluation during training
    assert evaluate_final(trainer)["eval_loss"] == 9.0 and trainer.evaluated == 1
