"""A finished run run again says it is finished and changes nothing (issue 29: it trained a step past
``max_steps`` and rewrote ``train_results.json`` with that one step); a larger ``max_steps`` continues it. And a run
evaluates its final weights once (a short run evaluated them at its last step and then again)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
from distributed_scripts.trainer_utils import image_dataset, training_args, vit_encoder
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_contrast.training import (
    ContrastiveTrainingArguments,
    SimCLRTrainer,
    detect_last_checkpoint,
    evaluate_final,
    finished_run,
)
from hf_contrast.training.callbacks import whole_run_loss


def _run_dir(
    root: Path, steps: int, planned: int, epochs: float = 3.0, results: bool = True, reached: float | None = None
) -> Path:
    """An output folder as a script leaves it: a checkpoint, trainer_state.json (with the epoch ``reached`` if given)
    and (at its end) train_results.json."""
    (root / f"checkpoint-{steps}").mkdir(parents=True)
    state = {"global_step": steps, "max_steps": planned, "num_train_epochs": epochs, "log_history": []}
    if reached is not None:
        state["epoch"] = reached
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


@pytest.mark.parametrize(
    ("recorded", "asked", "said"), [("care", "simclr", True), ("care", "care", False), (None, "simclr", False)]
)
def test_a_finished_run_of_another_method_says_so(tmp_path: Path, recorded, asked, said) -> None:
    """``--method simclr`` into a finished CARE run's folder: the message says the run is another method's."""
    root = _run_dir(tmp_path / "run", steps=10, planned=10)
    if recorded is not None:
        (root / "checkpoint-10" / "run_settings.json").write_text(json.dumps({"method": {"name": recorded}}))
    args = _args(root, max_steps=10)
    message = finished_run(args, detect_last_checkpoint(args, overwrite_output_dir=False), asked)
    assert message is not None and "Nothing was trained and nothing changed" in message
    assert ("It is a care run, not the --method simclr asked for." in message) is said


def test_epoch_runs_compare_epochs(tmp_path: Path) -> None:
    root = _run_dir(tmp_path / "run", steps=60, planned=60, epochs=3.0)
    for epochs, finished in ((3.0, True), (2.0, True), (4.0, False)):
        args = _args(root, num_train_epochs=epochs)
        message = finished_run(args, detect_last_checkpoint(args, overwrite_output_dir=False))
        assert (message is not None) is finished
        if finished:
            assert "--num_train_epochs" in message


@pytest.mark.parametrize(("asked", "finished"), [(0.75, True), (0.5, True), (0.9, False), (1.0, False)])
def test_a_run_of_fractional_epochs_compares_the_epochs_it_reached(tmp_path: Path, asked, finished) -> None:
    """transformers records ``num_train_epochs=0.75`` as 1 in the state: a run of 0.75 epochs (9 steps of 12) was
    called finished when 0.9 epochs were asked for. The epoch it reached decides."""
    root = _run_dir(tmp_path / "run", steps=9, planned=9, epochs=1, reached=0.75)
    args = _args(root, num_train_epochs=asked)
    message = finished_run(args, detect_last_checkpoint(args, overwrite_output_dir=False))
    assert (message is not None) is finished
    if finished:
        assert f"9 training steps (0.75 epochs), which is the {asked:g} epochs asked for" in message


@pytest.mark.parametrize(("asked", "finished"), [(0.07, False), (0.065, True), (0.071, False), (0.06, True)])
def test_fractional_epochs_count_the_steps_transformers_plans(tmp_path: Path, asked, finished) -> None:
    """7 steps of 100 reach epoch 0.07, yet transformers plans ``ceil(0.07 × 100)`` = 8 steps for 0.07 epochs (the
    product is 7.000000000000001): the script resumes, as the trainer would train step 8; 0.065 epochs are 7 steps."""
    root = _run_dir(tmp_path / "run", steps=7, planned=7, epochs=1, reached=0.07)
    args = _args(root, num_train_epochs=asked)
    assert (finished_run(args, detect_last_checkpoint(args, overwrite_output_dir=False)) is not None) is finished


@settings(max_examples=100, deadline=None)
@given(per_epoch=st.integers(1, 150), data=st.data())
def test_finished_exactly_when_transformers_plans_no_more_epoch_steps(tmp_path_factory, per_epoch, data) -> None:
    """A run that epochs decide (no accumulation) is finished exactly when its steps reach the ``ceil(num_train_epochs
    × steps per epoch)`` transformers plans for the epochs asked for; its state holds the epoch as transformers
    computes it after the last step (``epoch index + steps into the epoch / steps per epoch``)."""
    done = data.draw(st.integers(1, 3 * per_epoch), label="done")
    asked = data.draw(st.integers(1, 300), label="asked (hundredths of an epoch)") / 100
    reached = (done - 1) // per_epoch + ((done - 1) % per_epoch + 1) / per_epoch
    root = tmp_path_factory.mktemp("run")
    _run_dir(root, steps=done, planned=done, epochs=math.ceil(reached), reached=reached)
    args = _args(root, num_train_epochs=asked)
    message = finished_run(args, detect_last_checkpoint(args, overwrite_output_dir=False))
    assert (message is not None) == (done >= math.ceil(asked * per_epoch))


def test_a_fractional_epoch_with_accumulation_is_left_to_the_trainer(tmp_path: Path) -> None:
    """2 of 3 accumulated steps can be 0.8 epochs (an epoch's last step takes fewer batches): 0.7 epochs may still
    lack step 3, which only the training loader's length tells; the script resumes and the trainer decides
    (``test_the_run_end_of_fractional_epochs_counts_optimizer_steps``). A whole epoch reached is finished."""
    root = _run_dir(tmp_path / "run", steps=2, planned=2, epochs=1, reached=0.8)
    args = _args(root, num_train_epochs=0.7, gradient_accumulation_steps=2)
    assert finished_run(args, detect_last_checkpoint(args, overwrite_output_dir=False)) is None
    whole = _run_dir(tmp_path / "whole", steps=3, planned=3, epochs=1, reached=1.0)
    args = _args(whole, num_train_epochs=0.7, gradient_accumulation_steps=2)
    message = finished_run(args, detect_last_checkpoint(args, overwrite_output_dir=False))
    assert message is not None and "3 training steps (1 epoch), which is the 0.7 epochs asked for" in message


@pytest.mark.parametrize("case", ["interrupted before its results", "resume named by the user", "overwrite"])
def test_not_a_finished_run(tmp_path: Path, case: str) -> None:
    root = _run_dir(tmp_path / "run", steps=10, planned=10, results=case != "interrupted before its results")
    overrides = {"resume_from_checkpoint": str(root / "checkpoint-10")} if case == "resume named by the user" else {}
    args = _args(root, max_steps=10, **overrides)
    last = detect_last_checkpoint(args, overwrite_output_dir=case == "overwrite")
    assert finished_run(args, last) is None


@settings(max_examples=40, deadline=None)
@given(kept=st.integers(1, 200), more=st.integers(1, 200), asked=st.integers(1, 600), best=st.booleans())
def test_a_finished_run_whose_last_checkpoint_is_gone_is_not_resumed_from_an_older_one(
    tmp_path_factory, kept: int, more: int, asked: int, best: bool
) -> None:
    """A run finished at step ``done`` whose newest checkpoint left is step ``kept < done`` (the Trainer keeps only
    the best at the end of a run with ``save_total_limit=1`` and ``load_best_model_at_end``): a larger ``max_steps``
    would resume at ``kept``, train ``kept+1..done`` again and replace the finished model, so it is refused, naming
    both steps and ``--resume_from_checkpoint``; the steps asked for already done: the finished-run message; the
    checkpoint named on purpose: resumed."""
    done = kept + more
    root = tmp_path_factory.mktemp("run")
    state = {"global_step": done, "max_steps": done, "num_train_epochs": 3.0, "log_history": []}
    if best:
        state["best_model_checkpoint"] = str(root / f"checkpoint-{kept}")
    (root / f"checkpoint-{kept}").mkdir()
    (root / "trainer_state.json").write_text(json.dumps(state))
    (root / "train_results.json").write_text(json.dumps({"train_loss": 1.0}))
    args = _args(root, max_steps=asked)
    if asked <= done:
        message = finished_run(args, detect_last_checkpoint(args, overwrite_output_dir=False))
        assert message is not None and "Nothing was trained and nothing changed" in message
    else:
        with pytest.raises(ValueError) as refused:
            detect_last_checkpoint(args, overwrite_output_dir=False)
        message = str(refused.value)
        assert f"finished at step {done}" in message and f"checkpoint-{kept} (step {kept})" in message
        assert f"train steps {kept + 1}-{done} again" in message
        assert f"--resume_from_checkpoint {root / f'checkpoint-{kept}'}" in message
        assert ("keeps only the best checkpoint" in message) is best
        assert ("--save_total_limit 2 keeps the last checkpoint" in message) is best
        assert best or "(it is not in the folder)" in message
        best_only = _args(root, max_steps=asked, save_strategy="best", metric_for_best_model="knn_accuracy",
                          eval_strategy="steps")  # fmt: skip
        with pytest.raises(ValueError, match=r"`save_strategy='best'` saves a checkpoint only at a step whose"):
            detect_last_checkpoint(best_only, overwrite_output_dir=False)
    named = _args(root, max_steps=asked, resume_from_checkpoint=str(root / f"checkpoint-{kept}"))
    assert detect_last_checkpoint(named, overwrite_output_dir=False) == str(root / f"checkpoint-{kept}")
    assert finished_run(named, str(root / f"checkpoint-{kept}")) is None
    assert detect_last_checkpoint(_args(root, max_steps=asked), overwrite_output_dir=True) is None


def test_a_finished_runs_last_checkpoint_continues_it(tmp_path: Path) -> None:
    """The checkpoint of the last step kept (beside an older best one): a larger ``max_steps`` resumes it."""
    root = _run_dir(tmp_path / "run", steps=30, planned=30)
    (root / "checkpoint-10").mkdir()
    args = _args(root, max_steps=40)
    last = detect_last_checkpoint(args, overwrite_output_dir=False)
    assert last == str(root / "checkpoint-30") and finished_run(args, last) is None


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
    trainer = _Trainer(HISTORY, step=10, load_best=True, best=5)  # the best checkpoint (step 5) was reloaded:
    assert evaluate_final(trainer) == {"eval_loss": 2.5, "eval_knn_accuracy": 0.5, "epoch": 0.5}  # its weights' own
    assert trainer.evaluated == 0  # evaluation (logged at step 5), not a second one logged as step 10's
    trainer = _Trainer(HISTORY, step=10, load_best=True, best=10)  # the best is the last: nothing reloaded
    assert evaluate_final(trainer)["eval_loss"] == 2.0 and trainer.evaluated == 0
    trainer = _Trainer([{"loss": 1.0, "step": 3}], step=3)  # no evaluation during training
    assert evaluate_final(trainer)["eval_loss"] == 9.0 and trainer.evaluated == 1
    two_sets = [*HISTORY[:3], {"eval_a_loss": 1.0, "step": 10}, {"eval_b_loss": 4.0, "epoch": 1.0, "step": 10}]
    trainer = _Trainer(two_sets, step=10)  # a dict eval_dataset: one evaluation per set at the step, merged
    assert evaluate_final(trainer) == {"eval_a_loss": 1.0, "eval_b_loss": 4.0, "epoch": 1.0}
    assert trainer.evaluated == 0


# ------------------------------------------------------------------------------ results over the whole run


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_the_whole_run_loss_is_the_mean_over_the_steps_with_a_recorded_loss(data) -> None:
    """Per-step losses, split into sessions that each log every ``k`` steps: the whole-run mean from the logged
    windows of the earlier sessions and the last session's own mean equals the plain mean over the steps whose loss
    was recorded (an earlier session's steps after its last log were never logged)."""
    losses = data.draw(st.lists(st.floats(0.0, 10.0), min_size=2, max_size=40))
    n = len(losses)
    cuts = sorted(data.draw(st.sets(st.integers(1, n - 1), max_size=4)))
    bounds = list(zip([0, *cuts], [*cuts, n]))
    history, counted = [], []
    for start, end in bounds[:-1]:
        k = data.draw(st.integers(1, 5))
        for step in range(start + k, end + 1, k):
            window = losses[step - k : step]
            history.append({"loss": sum(window) / k, "step": step})
            counted.extend(window)
    start, end = bounds[-1]
    session = losses[start:end]
    history.append({"eval_loss": 99.0, "step": end})  # not a training loss
    mean, steps = whole_run_loss(history, bounds[:-1], sum(session) / len(session), len(session))
    counted.extend(session)
    assert steps == len(counted)
    assert mean == pytest.approx(sum(counted) / len(counted), rel=1e-9, abs=1e-12)


def _trainer(root: Path, images, max_steps: int):
    args = training_args(
        root, per_device_train_batch_size=4, max_steps=max_steps, save_strategy="steps", save_steps=2,
        logging_steps=1, learning_rate=1e-2,
    )  # fmt: skip
    return SimCLRTrainer(model=vit_encoder(), args=args, train_dataset=images)


@pytest.mark.parametrize("how", ["continued to a larger max_steps", "resumed after an interruption"])
def test_a_resumed_run_reports_the_whole_run(tmp_path: Path, how: str) -> None:
    """``train()``'s metrics (and so a script's train_results.json) after a resume cover every step of the run:
    the loss over all its steps, the time of every session that made the weights; this call's own as session_*."""
    images = image_dataset(n=16, size=16)
    first = _trainer(tmp_path, images, 4).train()
    assert "train_sessions" not in first.metrics  # one call: transformers' metrics as they are
    if how == "continued to a larger max_steps":
        second_trainer = _trainer(tmp_path, images, 6)
        output = second_trainer.train(resume_from_checkpoint=True)  # checkpoint-4, the end of the first call
        session_steps = 2
    else:  # the first call is taken as stopped after checkpoint-2: its later steps are trained again
        second_trainer = _trainer(tmp_path, images, 4)
        output = second_trainer.train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))
        session_steps = 2
    metrics = output.metrics
    logged = [h["loss"] for h in second_trainer.state.log_history if "loss" in h]
    assert len(logged) == output.global_step  # every step of the run's lineage, once
    assert metrics["train_sessions"] == 2 and metrics["session_train_steps"] == session_steps
    assert metrics["train_loss"] == pytest.approx(sum(logged) / len(logged), rel=1e-6)
    assert output.training_loss == metrics["train_loss"] and metrics["train_loss_steps"] == output.global_step
    assert metrics["session_train_loss"] == pytest.approx(sum(logged[-session_steps:]) / session_steps, rel=1e-6)
    assert (
        metrics["session_train_runtime"]
        < metrics["train_runtime"]
        < first.metrics["train_runtime"] + metrics["session_train_runtime"] + 0.01
    )
    assert metrics["train_steps_per_second"] == pytest.approx(output.global_step / metrics["train_runtime"], rel=1e-2)
    assert metrics["train_samples_per_second"] == pytest.approx(4 * metrics["train_steps_per_second"], rel=1e-2)
    sessions = second_trainer.run_sessions.sessions
    assert [s["start_step"] for s in sessions] == [0, output.global_step - session_steps]


@pytest.mark.parametrize(
    ("flags", "limit"),
    [
        (["--load_best_model_at_end"], 2),  # the script's 1 would leave only the best checkpoint at the end
        (["--load_best_model_at_end", "--save_total_limit", "1"], 1),  # the user's choice is kept
        (["--load_best_model_at_end", "--save_total_limit=3"], 3),
        ([], 1),  # no best model: the newest checkpoint is the last step's
    ],
)
def test_a_script_keeps_the_last_checkpoint_beside_the_best(tmp_path: Path, flags: list[str], limit: int) -> None:
    from hf_contrast.training import parse_args_with_objective

    common = ["--output_dir", str(tmp_path), "--eval_strategy", "steps", "--save_strategy", "steps"]
    defaults = {"save_total_limit": 1, "use_cpu": True, "report_to": "none"}
    args, _ = parse_args_with_objective(
        (ContrastiveTrainingArguments,), method="simclr", defaults=defaults, args=[*common, *flags]
    )
    assert args.save_total_limit == limit
    config = tmp_path / "args.json"  # the same from a config file's keys
    keys = {"output_dir": str(tmp_path), "eval_strategy": "steps", "save_strategy": "steps"}
    if "--load_best_model_at_end" in flags:
        keys["load_best_model_at_end"] = True
    if limit != 2 and flags:
        keys["save_total_limit"] = limit
    config.write_text(json.dumps(keys))
    args, _ = parse_args_with_objective(
        (ContrastiveTrainingArguments,), method="simclr", defaults=defaults, args=[str(config)]
    )
    assert args.save_total_limit == limit
