"""CheckpointingMixin: atomic checkpoints, resume past an incomplete one, no token on disk, no NaN checkpoint."""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import math
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import safetensors.torch
import torch
from _tiny import tiny_timm_encoder
from _tiny_trainer import TOKEN, RandomImages, TinyTrainer, losses_of, tiny_args
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers import PreTrainedModel, TrainerCallback, TrainerState, TrainingArguments

from hf_contrast.models import HUB_SUBFOLDER, ContrastiveEncoder
from hf_contrast.training.checkpointing import (
    CONTRASTIVE_STATE_NAME,
    checkpoint_problem,
    first_nonfinite_tensor,
    last_complete_checkpoint,
    sanitized_training_args,
)


def _trainer(output_dir: Path, seed: int = 0, **overrides) -> TinyTrainer:
    torch.manual_seed(seed)
    return TinyTrainer(
        model=tiny_timm_encoder(), args=tiny_args(output_dir, **overrides), train_dataset=RandomImages()
    )


@pytest.fixture(scope="module")
def full_run(tmp_path_factory) -> tuple[Path, dict[int, float], dict[str, torch.Tensor]]:
    """The uninterrupted run: 6 steps, checkpoints 2, 4 and 6, then ``save_model``."""
    output_dir = tmp_path_factory.mktemp("full")
    trainer = _trainer(output_dir)
    trainer.train()
    trainer.save_model()
    return output_dir, losses_of(trainer), {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _assert_same_state(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert got.keys() == want.keys()
    for key, value in got.items():
        torch.testing.assert_close(value, want[key], atol=1e-6, rtol=1e-5, msg=key)


def test_checkpoints_are_complete_and_in_the_save_layout(full_run) -> None:
    output_dir, losses, _ = full_run
    assert sorted(p.name for p in output_dir.iterdir() if p.name.startswith(("checkpoint-", "tmp-"))) == [
        "checkpoint-2", "checkpoint-4", "checkpoint-6",
    ]  # fmt: skip
    for step in (2, 4, 6):
        folder = output_dir / f"checkpoint-{step}"
        assert checkpoint_problem(folder) is None
        assert (folder / "config.json").is_file() and (folder / HUB_SUBFOLDER / "model.safetensors").is_file()
        assert torch.load(folder / CONTRASTIVE_STATE_NAME, weights_only=True)["steps"].item() == step
    assert len(losses) == 6 and len(set(losses.values())) == 6


# damage -> the file the warning must name
DAMAGES = {
    "truncated_weights": "model.safetensors",
    "no_trainer_state": "trainer_state.json",
    "broken_trainer_state": "trainer_state.json",
    "no_optimizer": "optimizer.pt",
    "truncated_optimizer": "optimizer.pt",
    "truncated_scheduler": "scheduler.pt",
    "truncated_rng_state": "rng_state.pth",
    "truncated_contrastive_state": CONTRASTIVE_STATE_NAME,
    "bin_instead_of_safetensors": "pytorch_model.bin",
}


def _damage(folder: Path, damage: str) -> None:
    """What a process killed while writing ``folder`` (or a converted / corrupted copy) leaves."""
    if damage == "truncated_weights":
        _truncate(folder / HUB_SUBFOLDER / "model.safetensors")
    elif damage == "no_trainer_state":
        (folder / "trainer_state.json").unlink()
    elif damage == "broken_trainer_state":
        (folder / "trainer_state.json").write_text('{"global_step": 6, "log_hi')
    elif damage == "no_optimizer":
        (folder / "optimizer.pt").unlink()
    elif damage == "bin_instead_of_safetensors":  # resuming would read the root backbone and start from random weights
        weights = folder / HUB_SUBFOLDER / "model.safetensors"
        torch.save(safetensors.torch.load_file(weights), folder / HUB_SUBFOLDER / "pytorch_model.bin")
        weights.unlink()
    else:
        _truncate(folder / DAMAGES[damage])


@pytest.mark.parametrize("damage", ["truncated_weights", "no_trainer_state", "broken_trainer_state", "no_optimizer"])
def test_resume_true_skips_an_incomplete_newest_checkpoint(tmp_path, full_run, damage: str, caplog) -> None:
    source, full_losses, full_state = full_run
    for step in (2, 4, 6):
        shutil.copytree(source / f"checkpoint-{step}", tmp_path / f"checkpoint-{step}")
    newest = tmp_path / "checkpoint-6"
    _damage(newest, damage)
    assert DAMAGES[damage] in checkpoint_problem(newest, require_contrastive_state=True)
    (tmp_path / "checkpoint-4" / "extra").mkdir()  # unrelated content does not matter

    trainer = _trainer(tmp_path, seed=1)  # other initial weights: everything must come from checkpoint-4
    with caplog.at_level(logging.WARNING, logger="hf_contrast.training.checkpointing"):
        trainer.train(resume_from_checkpoint=True)
    skipped = [r.getMessage() for r in caplog.records if "Skipping the incomplete checkpoint" in r.getMessage()]
    assert len(skipped) == 1 and "checkpoint-6" in skipped[0] and DAMAGES[damage] in skipped[0]
    resumed = losses_of(trainer)
    assert trainer.state.global_step == 6 and sorted(resumed) == [1, 2, 3, 4, 5, 6]  # 1-4 from checkpoint-4's state
    assert [resumed[5], resumed[6]] == pytest.approx([full_losses[5], full_losses[6]], rel=1e-5, abs=1e-7)
    _assert_same_state(trainer.model.state_dict(), full_state)
    assert checkpoint_problem(newest) is None  # rewritten by the resumed run


@pytest.mark.parametrize(
    "damage", [d for d in DAMAGES if d.startswith(("truncated_", "bin_")) and d != "truncated_weights"]
)
def test_resume_true_falls_back_past_an_unreadable_file(tmp_path, full_run, damage: str, caplog) -> None:
    """Every file the resume reads is checked: the newest checkpoint with one bad file is skipped, naming it."""
    source, full_losses, _ = full_run
    for step in (4, 6):
        shutil.copytree(source / f"checkpoint-{step}", tmp_path / f"checkpoint-{step}")
    _damage(tmp_path / "checkpoint-6", damage)
    trainer = _trainer(tmp_path, seed=1, max_steps=5)  # other initial weights: one step from checkpoint-4's state
    with caplog.at_level(logging.WARNING, logger="hf_contrast.training"):
        trainer.train(resume_from_checkpoint=True)
    skipped = [r.getMessage() for r in caplog.records if "Skipping the incomplete checkpoint" in r.getMessage()]
    assert len(skipped) == 1 and "checkpoint-6" in skipped[0] and DAMAGES[damage] in skipped[0]
    assert trainer.state.global_step == 5 and trainer.steps.item() == 5
    assert losses_of(trainer)[5] == pytest.approx(full_losses[5], rel=1e-5, abs=1e-7)  # checkpoint-4 was loaded
    assert not (tmp_path / "checkpoint-6").exists()  # an incomplete checkpoint newer than the resume point is removed


def test_leftovers_of_interrupted_saves_are_removed_at_the_next_start(tmp_path, full_run, caplog) -> None:
    source, _, _ = full_run
    for step in (2, 4):
        shutil.copytree(source / f"checkpoint-{step}", tmp_path / f"checkpoint-{step}")
    leftovers = ["checkpoint-6", "checkpoint-8", "tmp-checkpoint-6", "tmp-old-checkpoint-4",
                 ".tmp-checkpoint-6.staging-0a1b2c3d", ".checkpoint-6.staging-0a1b2c3d",
                 ".checkpoint-4.replaced-0a1b2c3d"]  # fmt: skip
    for name in leftovers:
        shutil.copytree(source / "checkpoint-6", tmp_path / name)
    (tmp_path / "checkpoint-6" / "rng_state.pth").unlink()  # killed before its RNG state and trainer_state.json
    (tmp_path / "checkpoint-6" / "trainer_state.json").unlink()
    (tmp_path / "checkpoint-8" / "optimizer.pt").write_bytes(b"")
    shutil.copytree(source / "checkpoint-2", tmp_path / "checkpoint-1")  # incomplete but older than the resume point
    (tmp_path / "checkpoint-1" / "optimizer.pt").unlink()
    (tmp_path / "notes").mkdir()

    trainer = _trainer(tmp_path, seed=1, max_steps=5)  # one step from checkpoint-4 (the last step is saved)
    with caplog.at_level(logging.WARNING, logger="hf_contrast.training"):
        trainer.train(resume_from_checkpoint=True)
    removed = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Removing ")]
    assert len(removed) == len(leftovers) and all("interrupted save" in message for message in removed)
    assert any("checkpoint-8" in message and "optimizer.pt" in message for message in removed)
    kept = ["checkpoint-1", "checkpoint-2", "checkpoint-4", "checkpoint-5", "notes"]
    assert sorted(p.name for p in tmp_path.iterdir()) == kept
    assert trainer.state.global_step == 5


def test_rng_states_of_every_process_are_required(tmp_path, full_run) -> None:
    source, _, _ = full_run
    folder = tmp_path / "checkpoint-6"
    shutil.copytree(source / "checkpoint-6", folder)
    assert checkpoint_problem(folder, world_size=1) is None
    assert checkpoint_problem(folder, world_size=2) is None  # written by one process: resumed without its RNG state
    shutil.copy(folder / "rng_state.pth", folder / "rng_state_0.pth")
    (folder / "rng_state.pth").unlink()
    assert checkpoint_problem(folder, world_size=2) == "rng_state_1.pth is missing"  # a torn save of 2 processes
    shutil.copy(folder / "rng_state_0.pth", folder / "rng_state_1.pth")
    assert checkpoint_problem(folder, world_size=2) is None
    (folder / "rng_state_1.pth").write_bytes(b"PK\x03\x04")
    assert "rng_state_1.pth is unreadable or truncated" in checkpoint_problem(folder, world_size=2)
    for name in ("rng_state_0.pth", "rng_state_1.pth"):
        (folder / name).unlink()
    assert checkpoint_problem(folder) == "rng_state.pth is missing"
    assert checkpoint_problem(folder, require_optimizer=False) is None  # save_only_model checkpoints


class _Killed(BaseException):
    """Stands for SIGKILL: nothing catches it (a real kill would not run `finally` blocks either)."""


def _kill_at(monkeypatch, point: str, seen: list[str]) -> None:
    """Patch the file operations of a checkpoint save.

    At the one labelled ``point`` (``"save:optimizer.pt"``, ``"rmtree:checkpoint-2"``...) do half of it (half a
    file written, half a folder deleted) and raise :class:`_Killed`.
    """
    real_save, real_rmtree, real_replace = torch.save, shutil.rmtree, os.replace

    def step(label: str, half: Any) -> None:
        seen.append(label)
        if label == point:
            half()
            raise _Killed(label)

    def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(f, (str, os.PathLike)) and "checkpoint-" in str(f):

            def half() -> None:
                buffer = io.BytesIO()
                real_save(obj, buffer, *args, **kwargs)
                Path(f).write_bytes(buffer.getvalue()[: len(buffer.getvalue()) // 2])

            step(f"save:{Path(f).name}", half)
        return real_save(obj, f, *args, **kwargs)

    def rmtree(path: Any, *args: Any, **kwargs: Any) -> Any:
        if Path(path).name.startswith("checkpoint-"):

            def half() -> None:
                files = sorted(p for p in Path(path).rglob("*") if p.is_file())
                for file in files[: len(files) // 2]:
                    file.unlink()

            step(f"rmtree:{Path(path).name}", half)
        return real_rmtree(path, *args, **kwargs)

    def replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> Any:
        if Path(dst).name.startswith("checkpoint-"):
            step(f"replace:{Path(dst).name}", lambda: None)  # the model folder, written aside, is moved in
        return real_replace(src, dst, *args, **kwargs)

    def save_to_json(self: TrainerState, json_path: str) -> None:
        text = json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True) + "\n"
        step(f"json:{Path(json_path).name}", lambda: Path(json_path).write_text(text[: len(text) // 2]))
        Path(json_path).write_text(text)

    monkeypatch.setattr(torch, "save", save)
    monkeypatch.setattr(shutil, "rmtree", rmtree)
    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(TrainerState, "save_to_json", save_to_json)


# The file operations of the save at step 4 with save_total_limit=1, in the order the Trainer does them.
KILL_POINTS = [
    "replace:checkpoint-4", "save:training_args.bin", "save:contrastive_state.pt", "save:optimizer.pt",
    "save:scheduler.pt", "save:rng_state.pth", "json:trainer_state.json", "rmtree:checkpoint-2",
]  # fmt: skip
_QUICK_KILL_POINTS = {"json:trainer_state.json", "rmtree:checkpoint-2"}  # the others run with -m slow


@pytest.mark.parametrize(
    "point", [p if p in _QUICK_KILL_POINTS else pytest.param(p, marks=pytest.mark.slow) for p in KILL_POINTS]
)
def test_a_kill_at_any_moment_of_a_save_resumes_exactly(tmp_path, full_run, monkeypatch, point: str) -> None:
    """With ``save_total_limit=1``: a kill anywhere in the save of checkpoint-4 leaves a complete checkpoint,
    and ``resume_from_checkpoint=True`` ends where the uninterrupted run ends, without leftovers."""
    source, full_losses, full_state = full_run
    shutil.copytree(source / "checkpoint-2", tmp_path / "checkpoint-2")
    seen: list[str] = []
    with monkeypatch.context() as patch:
        _kill_at(patch, point, seen)
        with pytest.raises(_Killed):
            _trainer(tmp_path, seed=1, save_total_limit=1).train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))
    assert seen == KILL_POINTS[: KILL_POINTS.index(point) + 1]  # the save went as far as `point`, in this order
    assert last_complete_checkpoint(tmp_path, require_contrastive_state=True) is not None

    trainer = _trainer(tmp_path, seed=2, save_total_limit=1)
    trainer.train(resume_from_checkpoint=True)
    resumed = losses_of(trainer)
    assert [resumed[5], resumed[6]] == pytest.approx([full_losses[5], full_losses[6]], rel=1e-5, abs=1e-7)
    _assert_same_state(trainer.model.state_dict(), full_state)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-6"]  # rotated, no staging leftovers


def test_resume_from_an_explicit_incomplete_checkpoint_is_refused(tmp_path, full_run) -> None:
    source, _, _ = full_run
    shutil.copytree(source / "checkpoint-4", tmp_path / "checkpoint-4")
    (tmp_path / "checkpoint-4" / "trainer_state.json").unlink()
    trainer = _trainer(tmp_path / "out")
    with pytest.raises(ValueError, match=r"checkpoint-4.*not a complete checkpoint \(trainer_state.json is missing\)"):
        trainer.train(resume_from_checkpoint=str(tmp_path / "checkpoint-4"))
    with pytest.raises(ValueError, match="found no complete checkpoint"):
        _trainer(tmp_path).train(resume_from_checkpoint=True)


def test_resume_from_a_run_folder_names_its_checkpoints(tmp_path, full_run) -> None:
    """The run's output folder (checkpoints and the finished model) given as the checkpoint: the error says what the
    folder is and names its newest checkpoint, not a file a checkpoint would hold (``contrastive_state.pt is
    missing``); nothing in it is touched."""
    source, _, _ = full_run
    run = tmp_path / "run"
    shutil.copytree(source, run)
    before = sorted(str(p.relative_to(run)) for p in run.rglob("*"))
    trainer = _trainer(tmp_path / "out")
    newest = str(run / "checkpoint-6")
    with pytest.raises(ValueError) as error:
        trainer.train(resume_from_checkpoint=str(run))
    message = str(error.value)
    assert f"`resume_from_checkpoint`={str(run)!r} is a run's output folder, not a checkpoint" in message
    assert "it holds checkpoint-6, checkpoint-4, checkpoint-2." in message
    assert f"(the newest: {newest!r})" in message and "is missing" not in message
    assert sorted(str(p.relative_to(run)) for p in run.rglob("*")) == before
    trainer.train(resume_from_checkpoint=str(run / "checkpoint-4"))  # a checkpoint in it resumes: steps 5 and 6
    assert trainer.state.global_step == 6


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(at=st.sampled_from([2, 4, 6]), max_steps=st.integers(1, 9))
def test_a_checkpoint_at_max_steps_inside_an_epoch_is_refused_not_trained_past(
    tmp_path, full_run, at, max_steps
) -> None:
    """transformers' Trainer resumed a checkpoint at ``max_steps`` whose step fell inside an epoch (step 6 of 4-step
    epochs: epoch 1.5) and trained a step 7 past it, saving checkpoint-7. Such a checkpoint is refused, naming both
    and the fix, and the folder is left as it was; one that ended an epoch (step 4) loads and trains nothing, as
    transformers does it; an earlier one trains to ``max_steps`` exactly."""
    source, _, _ = full_run
    run = tmp_path / f"run-{at}-{max_steps}"
    shutil.copytree(source / f"checkpoint-{at}", run / f"checkpoint-{at}")
    trainer = _trainer(run, max_steps=max_steps)
    if at >= max_steps and at % 4:
        with pytest.raises(ValueError) as error:
            trainer.train(resume_from_checkpoint=str(run / f"checkpoint-{at}"))
        message = str(error.value)
        assert f"checkpoint-{at} is at step {at}, and this run asks for `max_steps`={max_steps}" in message
        assert f"would train step {at + 1} past it" in message and "Pass a larger `max_steps`" in message
        assert [p.name for p in run.iterdir()] == [f"checkpoint-{at}"]
    else:
        trainer.train(resume_from_checkpoint=str(run / f"checkpoint-{at}"))
        assert trainer.state.global_step == max(at, max_steps)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(at=st.sampled_from([2, 4, 6]), epochs=st.sampled_from([0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0]))
def test_a_checkpoint_at_the_end_of_fractional_epochs_is_refused_not_trained_past(
    tmp_path, full_run, at, epochs
) -> None:
    """Epochs decide (``num_train_epochs=1.5``, ``max_steps=-1``): transformers' Trainer (5.24, measured with a plain
    one) resumed the last checkpoint of such a run (step 6 of 4-step epochs: epoch 1.5) and trained a step 7 past
    the run's end, saving checkpoint-7. A checkpoint inside an epoch at or past ``num_train_epochs`` is refused,
    naming both and the fix, the folder left as it was; an earlier one trains to ``ceil(epochs × 4)`` steps; one
    that ended an epoch loads and trains nothing when the epochs asked for are done."""
    source, _, _ = full_run
    run = tmp_path / f"run-{at}-{epochs}"
    shutil.rmtree(run, ignore_errors=True)  # hypothesis replays a failing example
    shutil.copytree(source / f"checkpoint-{at}", run / f"checkpoint-{at}")
    trainer = _trainer(run, max_steps=-1, num_train_epochs=epochs)
    reached = at / 4  # the checkpoint's epoch
    if at % 4 and reached >= epochs:
        with pytest.raises(ValueError) as error:
            trainer.train(resume_from_checkpoint=str(run / f"checkpoint-{at}"))
        message = str(error.value)
        asked = f"`num_train_epochs`={epochs:g}"
        assert f"checkpoint-{at} is at step {at} (epoch {reached:g}), and this run asks for {asked}" in message
        assert f"would train step {at + 1} past it" in message and "Pass a larger `num_train_epochs`" in message
        assert [p.name for p in run.iterdir()] == [f"checkpoint-{at}"]
    else:
        trainer.train(resume_from_checkpoint=str(run / f"checkpoint-{at}"))
        assert trainer.state.global_step == max(at, math.ceil(epochs * 4))


@pytest.fixture(scope="module")
def accumulated_run(tmp_path_factory) -> Path:
    """One epoch of 5 batches of 4 in optimizer steps of 2 batches: 3 steps (2, 2 and 1 batches), checkpoints at
    epochs 0.4, 0.8 and 1.0."""
    output_dir = tmp_path_factory.mktemp("accumulated")
    torch.manual_seed(0)
    args = tiny_args(output_dir, max_steps=-1, num_train_epochs=1, gradient_accumulation_steps=2, save_steps=1)
    TinyTrainer(model=tiny_timm_encoder(), args=args, train_dataset=RandomImages(n=20)).train()
    return output_dir


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(at=st.sampled_from([1, 2]), epochs=st.sampled_from([0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]))
def test_the_run_end_of_fractional_epochs_counts_optimizer_steps(tmp_path, accumulated_run, at, epochs) -> None:
    """With gradient accumulation an epoch's last optimizer step takes fewer batches, so a checkpoint's epoch is not
    its share of the steps: checkpoint-2 is at epoch 0.8, yet `num_train_epochs=0.7` asks for ``ceil(0.7 × 3)`` = 3
    steps. Refused only when the steps transformers plans are done; otherwise trained to them."""
    run = tmp_path / f"run-{at}-{epochs}"
    shutil.rmtree(run, ignore_errors=True)  # hypothesis replays a failing example
    shutil.copytree(accumulated_run / f"checkpoint-{at}", run / f"checkpoint-{at}")
    torch.manual_seed(0)
    args = tiny_args(run, max_steps=-1, num_train_epochs=epochs, gradient_accumulation_steps=2, save_steps=1)
    trainer = TinyTrainer(model=tiny_timm_encoder(), args=args, train_dataset=RandomImages(n=20))
    planned = math.ceil(epochs * 3)
    if at >= planned:
        with pytest.raises(ValueError, match=rf"checkpoint-{at} is at step {at} \(epoch {at * 0.4:g}\)"):
            trainer.train(resume_from_checkpoint=str(run / f"checkpoint-{at}"))
        assert [p.name for p in run.iterdir()] == [f"checkpoint-{at}"]
    else:
        trainer.train(resume_from_checkpoint=str(run / f"checkpoint-{at}"))
        assert trainer.state.global_step == planned


class _StreamedImages(torch.utils.data.IterableDataset):
    """:class:`RandomImages`' rows as a stream (no length): transformers counts its epochs in ``max_steps``."""

    def __iter__(self):  # noqa: ANN204
        rows = RandomImages(n=64)
        return (rows[index] for index in range(len(rows)))


@pytest.mark.parametrize("value", [5, 1.0, ["checkpoint-2"]])
def test_resume_from_checkpoint_of_another_type_is_refused_naming_it(tmp_path, value) -> None:
    """`resume_from_checkpoint=5` raised Python's "expected str, bytes or os.PathLike object, not int"."""
    with pytest.raises(TypeError, match=r"`resume_from_checkpoint` must be a checkpoint folder .*got "):
        _trainer(tmp_path).train(resume_from_checkpoint=value)
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


def test_a_checkpoint_at_max_steps_of_a_streaming_set_is_refused(tmp_path) -> None:
    """A streaming training set's checkpoint at ``max_steps`` ends "epoch 1.0" as transformers counts it, yet
    transformers trained a step 7 past ``max_steps`` from it (measured, plain Trainer): refused; more steps
    continue it."""
    torch.manual_seed(0)
    build = lambda steps: TinyTrainer(  # noqa: E731
        model=tiny_timm_encoder(), args=tiny_args(tmp_path, max_steps=steps), train_dataset=_StreamedImages()
    )
    build(6).train()
    with pytest.raises(ValueError, match=r"checkpoint-6 is at step 6, .* step 7 past it \(a streaming training set\)"):
        build(6).train(resume_from_checkpoint=True)
    assert sorted(p.name for p in tmp_path.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4", "checkpoint-6"]
    more = build(8)
    more.train(resume_from_checkpoint=True)
    assert more.state.global_step == 8


def test_the_last_checkpoint_of_a_run_that_epochs_decide_loads_and_trains_nothing(tmp_path) -> None:
    """A run that epochs decide ends with an epoch: its last checkpoint, resumed at as many epochs, is loaded and
    trains nothing (as transformers does it), and more epochs continue it."""
    trainer = _trainer(tmp_path, max_steps=-1, num_train_epochs=2)
    trainer.train()
    assert trainer.state.global_step == 8  # 2 epochs of 4 batches
    again = _trainer(tmp_path, max_steps=-1, num_train_epochs=2)
    again.train(resume_from_checkpoint=True)
    assert again.state.global_step == 8 and losses_of(again) == losses_of(trainer)
    more = _trainer(tmp_path, max_steps=-1, num_train_epochs=3)
    more.train(resume_from_checkpoint=True)
    assert more.state.global_step == 12


def test_last_complete_checkpoint_orders_by_step(tmp_path, full_run) -> None:
    source, _, _ = full_run
    for step, name in ((2, "checkpoint-2"), (4, "checkpoint-10"), (6, "tmp-checkpoint-12")):
        shutil.copytree(source / f"checkpoint-{step}", tmp_path / name)
    assert last_complete_checkpoint(tmp_path) == str(tmp_path / "checkpoint-10")  # 10 > 2; tmp-* is never read
    assert last_complete_checkpoint(tmp_path / "missing") is None
    (tmp_path / "checkpoint-10" / "optimizer.pt").unlink()
    assert last_complete_checkpoint(tmp_path) == str(tmp_path / "checkpoint-2")
    assert last_complete_checkpoint(tmp_path, require_optimizer=False) == str(tmp_path / "checkpoint-10")


def test_no_token_in_any_file_written(full_run) -> None:
    output_dir, _, _ = full_run
    files = [path for path in output_dir.rglob("*") if path.is_file()]
    assert len(files) > 20 and any(path.name == "training_args.bin" for path in files)
    for path in files:
        assert TOKEN.encode() not in path.read_bytes(), path
    saved = torch.load(output_dir / "training_args.bin", weights_only=False)
    assert isinstance(saved, TrainingArguments) and saved.hub_token is None and saved.learning_rate == 1e-2


def test_sanitized_training_args_leaves_the_original(tmp_path) -> None:
    args = tiny_args(tmp_path)
    clean = sanitized_training_args(args)
    assert clean.hub_token is None and args.hub_token == TOKEN
    assert clean.include_num_input_tokens_seen == args.include_num_input_tokens_seen  # not a secret


def test_a_killed_save_model_leaves_the_previous_model_loadable(tmp_path, full_run, monkeypatch) -> None:
    output_dir, _, _ = full_run
    target = tmp_path / "model"
    shutil.copytree(output_dir, target, ignore=shutil.ignore_patterns("checkpoint-*"))
    images = RandomImages(n=2).images
    before = ContrastiveEncoder.from_pretrained(target).eval()(pixel_values=images).embeddings

    trainer = _trainer(tmp_path / "other", seed=3)  # different weights
    calls = []

    def killed(self, *args, **kwargs):  # dies half-way: the native files are already written
        calls.append(args)
        raise KeyboardInterrupt("killed while writing")

    monkeypatch.setattr(PreTrainedModel, "save_pretrained", killed)
    with pytest.raises(KeyboardInterrupt):
        trainer.save_model(str(target))
    monkeypatch.undo()
    assert calls
    after = ContrastiveEncoder.from_pretrained(target).eval()(pixel_values=images).embeddings
    assert torch.equal(before, after)
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".model.")]  # staging removed


def test_non_finite_weights_write_no_checkpoint(tmp_path) -> None:
    class Poison(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kwargs):
            if state.global_step == 4:  # after the optimizer step, before the save of step 4
                with torch.no_grad():
                    model.projection_head.layers[-1].weight[0, 0] = float("nan")

    trainer = _trainer(tmp_path)
    trainer.add_callback(Poison())
    with pytest.raises(
        RuntimeError, match=r"Refusing to write checkpoint-4: `projection_head\.layers\.\d+\.weight` .* step 4"
    ):
        trainer.train()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert "checkpoint-2" in names and not [n for n in names if n.endswith("-4")]
    assert last_complete_checkpoint(tmp_path) == str(tmp_path / "checkpoint-2")


def test_first_nonfinite_tensor_checks_parameters_and_buffers() -> None:
    enc = tiny_timm_encoder()
    assert first_nonfinite_tensor(enc) is None
    buffer_name = next(name for name, b in enc.named_buffers() if b.is_floating_point())
    enc.get_buffer(buffer_name).fill_(float("inf"))
    assert first_nonfinite_tensor(enc) == buffer_name


def test_load_best_model_reads_the_encoder_subfolder(tmp_path, full_run) -> None:
    source, _, _ = full_run
    trainer = _trainer(tmp_path, seed=5)
    trainer.state.best_model_checkpoint = str(source / "checkpoint-2")
    trainer._load_best_model()
    want = safetensors.torch.load_file(source / "checkpoint-2" / HUB_SUBFOLDER / "model.safetensors")
    _assert_same_state(trainer.model.state_dict(), want)
    assert trainer.steps.item() == 2  # the contrastive state of that checkpoint
