"""A resume continues the run that wrote the checkpoint, or is refused naming what changed (issue 29).

Each checkpoint holds ``run_settings.json`` (the method and its hyperparameters, the encoder's architecture, the
weight-shaping training arguments); resuming with another method, hyperparameter, model or learning rate is
refused before any step, unless ``resume_with_changes=True``, which logs the changes and writes them in the
model card. A longer schedule, or other evaluation / logging settings, resume as before.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from distributed_scripts.trainer_utils import training_args, vit_encoder
from hypothesis import given
from hypothesis import strategies as st

from hf_contrast.errors import InputError
from hf_contrast.objectives import CAREObjective, SimCLRObjective
from hf_contrast.training import ContrastiveTrainer
from hf_contrast.training.checkpointing import RUN_SETTINGS_NAME, changed_settings


def first_run(folder: Path, images, objective=None, **args) -> ContrastiveTrainer:
    options = dict(per_device_train_batch_size=4, max_steps=2, save_strategy="steps", save_steps=2) | args
    trainer = ContrastiveTrainer(
        model=vit_encoder(), args=training_args(folder, **options), train_dataset=images,
        objective=objective or SimCLRObjective(),
    )  # fmt: skip
    trainer.train()
    return trainer


def resume(folder: Path, images, objective=None, model=None, **args) -> ContrastiveTrainer:
    options = dict(per_device_train_batch_size=4, max_steps=4, save_strategy="steps", save_steps=2) | args
    trainer = ContrastiveTrainer(
        model=model or vit_encoder(seed=1), args=training_args(folder, **options), train_dataset=images,
        objective=objective or SimCLRObjective(),
    )  # fmt: skip
    trainer.train(resume_from_checkpoint=True)
    return trainer


def test_each_checkpoint_keeps_the_settings_a_resume_must_match(tmp_path: Path, images) -> None:
    first_run(tmp_path, images)
    saved = json.loads((tmp_path / "checkpoint-2" / RUN_SETTINGS_NAME).read_text())
    assert saved["method"] == {"name": "simclr", "temperature": 0.5}
    assert saved["model"]["backbone"] == "test_vit" and saved["model"]["projection_dim"] == 8
    assert saved["training"]["learning_rate"] == 1e-3 and saved["training"]["per_device_train_batch_size"] == 4
    assert saved["training"]["image_size"] == [16, 16]  # the size trained at, given or chosen
    # a longer run, other logging, the same size now given explicitly: the same run
    trainer = resume(tmp_path, images, eval_strategy="no", logging_steps=2, image_size=16)
    assert trainer.state.global_step == 4
    assert "resumed with changes" not in trainer.run_setup


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"objective": CAREObjective(n_splits=2)}, r"`name` \(method\): 'simclr' in the checkpoint, 'care' now"),
        ({"objective": SimCLRObjective(temperature=0.1)}, r"`temperature` \(method\): 0.5 in the checkpoint, 0.1"),
        ({"learning_rate": 5e-3}, r"`learning_rate` \(training\): 0.001 in the checkpoint, 0.005 now"),
        ({"per_device_train_batch_size": 8}, r"`per_device_train_batch_size` \(training\): 4 in the checkpoint, 8"),
        ({"seed": 3}, r"`seed` \(training\): 0 in the checkpoint, 3 now"),
        ({"model": vit_encoder(projection_dim=16)}, r"`projection_dim` \(model\): 8 in the checkpoint, 16 now"),
        (
            {"image_size": 32, "model": vit_encoder(img_size=32)},
            r"`image_size` \(training\): \[16, 16\] in the checkpoint, \[32, 32\] now",
        ),
    ],
    ids=["method", "hyperparameter", "learning_rate", "batch", "seed", "model", "image_size"],
)
def test_resuming_another_run_is_refused_naming_the_change(tmp_path: Path, images, change, said) -> None:
    first_run(tmp_path, images)
    before = (tmp_path / "checkpoint-2" / "model.safetensors").read_bytes()
    with pytest.raises(InputError, match=said) as caught:
        resume(tmp_path, images, **change)
    assert "--resume_with_changes" in str(caught.value) and "--overwrite_output_dir" in str(caught.value)
    assert sorted(p.name for p in tmp_path.glob("checkpoint-*")) == ["checkpoint-2"]  # nothing trained or written
    assert (tmp_path / "checkpoint-2" / "model.safetensors").read_bytes() == before


def test_resume_with_changes_continues_logs_and_cards_them(tmp_path: Path, images) -> None:
    first_run(tmp_path, images)
    trainer = resume(tmp_path, images, learning_rate=5e-3, resume_with_changes=True)
    assert trainer.state.global_step == 4
    assert trainer.run_setup["resumed with changes"] == (
        "at step 2: `learning_rate` (training): 0.001 in the checkpoint, 0.005 now"
    )
    trainer.create_model_card()
    card = (tmp_path / "README.md").read_text()
    assert (
        "- **Resumed with changes:** at step 2: `learning_rate` (training): 0.001 in the checkpoint, 0.005 now" in card
    )


def test_a_model_only_checkpoint_resumes_with_a_fresh_optimizer_said_in_the_log_and_the_card(
    tmp_path: Path, images, caplog
) -> None:
    """`save_only_model=True` checkpoints hold no optimizer, scheduler or random states: the Trainer resumed one
    silently, restarting the learning-rate schedule (its warm-up at the resumed step) with fresh Adam moments. Said
    once, and in the model card; a full checkpoint's resume says nothing of it."""
    schedule = dict(save_only_model=True, warmup_steps=2, lr_scheduler_type="linear", logging_steps=1)
    first_run(tmp_path, images, **schedule)
    assert not (tmp_path / "checkpoint-2" / "optimizer.pt").exists()
    with caplog.at_level("WARNING", logger="hf_contrast.training.checkpointing"):
        trainer = resume(tmp_path, images, **schedule)
    assert trainer.state.global_step == 4
    assert "holds the model only (`save_only_model=True`)" in caplog.text
    assert "learning-rate schedule starts again from its first step" in caplog.text
    rates = {h["step"]: h["learning_rate"] for h in trainer.state.log_history if "learning_rate" in h}
    assert rates[3] == 0.0  # the warm-up began again at the resumed step: what the message says
    assert trainer.run_setup["resumed from a model-only checkpoint"].startswith("at step 2: the optimizer and")
    trainer.create_model_card()
    assert "- **Resumed from a model-only checkpoint:** at step 2" in (tmp_path / "README.md").read_text()
    caplog.clear()
    full = tmp_path / "full"
    first_run(full, images)
    with caplog.at_level("WARNING", logger="hf_contrast.training.checkpointing"):
        trainer = resume(full, images)
    assert "model only" not in caplog.text and "resumed from a model-only checkpoint" not in trainer.run_setup


def test_where_negatives_come_from_is_a_setting_of_the_run_and_older_checkpoints_resume() -> None:
    """Multi-process runs record whether the loss compared with every process's batch: resuming with the flag
    toggled changes the method's negatives mid-run (refused, like another batch size). One process, or a method that
    ignores the flag, records False either way; a checkpoint written before the setting was recorded resumes."""
    from types import SimpleNamespace

    from hf_contrast.objectives import VICRegObjective
    from hf_contrast.training.checkpointing import run_settings

    def settings(gather: bool, world_size: int = 2, objective=None):  # noqa: ANN001, ANN202
        args = SimpleNamespace(gather_distributed=gather, world_size=world_size)
        return run_settings(objective or SimCLRObjective(), vit_encoder(), args)

    assert settings(True)["training"]["gather_distributed"] is True
    assert changed_settings(settings(False), settings(True)) == [
        "`gather_distributed` (training): False in the checkpoint, True now"
    ]
    assert changed_settings(settings(False, world_size=1), settings(True, world_size=1)) == []  # nothing to gather
    vicreg = VICRegObjective()  # its loss never gathers: the flag is ignored (with a warning)
    assert changed_settings(settings(False, objective=vicreg), settings(True, objective=vicreg)) == []
    older = settings(False)
    del older["training"]["gather_distributed"]  # a checkpoint of a version that did not record it
    assert changed_settings(older, settings(True)) == []


def test_a_checkpoint_written_without_the_settings_resumes_as_before(tmp_path: Path, images) -> None:
    first_run(tmp_path, images)
    (tmp_path / "checkpoint-2" / RUN_SETTINGS_NAME).unlink()
    assert resume(tmp_path, images, learning_rate=5e-3).state.global_step == 4


values = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.floats(-2, 2), st.text(max_size=3))
settings = st.dictionaries(
    st.sampled_from(["method", "model", "training"]), st.dictionaries(st.text(max_size=4), values)
)


@given(settings, st.sampled_from(["method", "model", "training"]), st.text(min_size=1, max_size=4), values)
def test_changed_settings_names_exactly_the_settings_that_differ(saved, group, key, value) -> None:
    assert changed_settings(saved, saved) == []
    current = {g: dict(v) for g, v in saved.items()}
    current.setdefault(group, {})
    had = key in current[group]
    old = current[group].get(key)
    current[group][key] = value
    changes = changed_settings(saved, current)
    if had and old == value or not had and value is None:  # equal, or None against a missing key: no change
        assert changes == []
    else:
        assert changes == [f"`{key}` ({group}): {old!r} in the checkpoint, {value!r} now"]


def test_a_resumed_runs_card_keeps_the_training_log_from_step_one(tmp_path: Path, images) -> None:
    first_run(tmp_path, images, logging_steps=1)
    trainer = resume(tmp_path, images, logging_steps=1)
    trainer.create_model_card()
    card = (tmp_path / "README.md").read_text()
    table = card[card.index("## Training logs") :].split("\n\n")[1].splitlines()[2:]
    history = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert [int(row.split("|")[2]) for row in table] == [entry["step"] for entry in history] == [1, 2, 3, 4]
    assert [float(row.split("|")[3]) for row in table] == pytest.approx([e["loss"] for e in history], rel=1e-3)
