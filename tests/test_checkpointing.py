"""CheckpointingMixin: atomic checkpoints, resume past an incomplete one, no token on disk, no NaN checkpoint."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
import torch
from _tiny import tiny_timm_encoder
from _tiny_trainer import TOKEN, RandomImages, TinyTrainer, losses_of, tiny_args
from transformers import PreTrainedModel, TrainerCallback, TrainingArguments

from hf_contrast.models import HUB_SUBFOLDER, ContrastiveEncoder
from hf_contrast.training.checkpoint_validation import CONTRASTIVE_STATE_NAME, checkpoint_problem, last_complete_checkpoint
from hf_contrast.training.checkpointing import first_nonfinite_tensor, sanitized_training_args


def _trainer(output_dir: Path, seed: int = 0, **overrides) -> TinyTrainer:
    torch.manual_seed(seed)
    return TinyTrainer(model=tiny_timm_encoder(), args=tiny_args(output_dir, **overrides), train_dataset=RandomImages())


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


@pytest.mark.parametrize("damage", ["truncated_weights", "no_trainer_state", "broken_trainer_state", "no_optimizer"])
def test_resume_true_skips_an_incomplete_newest_checkpoint(tmp_path, full_run, damage: str, caplog) -> None:
    source, full_losses, full_state = full_run
    for step in (2, 4, 6):
        shutil.copytree(source / f"checkpoint-{step}", tmp_path / f"checkpoint-{step}")
    newest = tmp_path / "checkpoint-6"  # what a process killed while writing step 6 leaves (without atomic saves)
    if damage == "truncated_weights":
        _truncate(newest / HUB_SUBFOLDER / "model.safetensors")
    elif damage == "no_trainer_state":
        (newest / "trainer_state.json").unlink()
    elif damage == "broken_trainer_state":
        (newest / "trainer_state.json").write_text('{"global_step": 6, "log_hi')
    else:
        (newest / "optimizer.pt").unlink()
    assert checkpoint_problem(newest) is not None
    (tmp_path / "checkpoint-4" / "extra").mkdir()  # unrelated content does not matter

    trainer = _trainer(tmp_path, seed=1)  # other initial weights: everything must come from checkpoint-4
    with caplog.at_level(logging.WARNING, logger="hf_contrast.training.checkpointing"):
        trainer.train(resume_from_checkpoint=True)
    assert "checkpoint-6" in caplog.text and "incomplete" in caplog.text
    resumed = losses_of(trainer)
    assert trainer.state.global_step == 6 and sorted(resumed) == [1, 2, 3, 4, 5, 6]  # 1-4 from checkpoint-4's state
    assert [resumed[5], resumed[6]] == pytest.approx([full_losses[5], full_losses[6]], rel=1e-5, abs=1e-7)
    _assert_same_state(trainer.model.state_dict(), full_state)
    assert checkpoint_problem(newest) is None  # rewritten by the resumed run


def test_resume_from_an_explicit_incomplete_checkpoint_is_refused(tmp_path, full_run) -> None:
    source, _, _ = full_run
    shutil.copytree(source / "checkpoint-4", tmp_path / "checkpoint-4")
    (tmp_path / "checkpoint-4" / "trainer_state.json").unlink()
    trainer = _trainer(tmp_path / "out")
    with pytest.raises(ValueError, match=r"checkpoint-4.*not a complete checkpoint \(trainer_state.json is missing\)"):
        trainer.train(resume_from_checkpoint=str(tmp_path / "checkpoint-4"))
    with pytest.raises(ValueError, match="found no complete checkpoint"):
        _trainer(tmp_path).train(resume_from_checkpoint=True)


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
    with pytest.raises(RuntimeError, match=r"Refusing to write checkpoint-4: `projection_head\.layers\.\d+\.weight` .* step 4"):
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
    want = ContrastiveEncoder.from_pretrained(source / "checkpoint-2").state_dict()
    _assert_same_state(trainer.model.state_dict(), want)
    assert trainer.steps.item() == 2  # the contrastive state of that checkpoint
