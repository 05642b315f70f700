"""Resuming from a checkpoint continues exactly like the uninterrupted run (random views included)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from distributed_scripts.trainer_utils import parameters, training_args, vit_encoder

from hf_contrast.objectives import BinaryNCEObjective, CAREMoCoObjective
from hf_contrast.training import CARETrainer, SimCLRTrainer

CASES = {
    # default random per-sample views on the CPU: the RNG state must be restored
    "simclr": (SimCLRTrainer, lambda: None),
    # key encoder + queue + on-device chunked views
    "care_moco": (CARETrainer, lambda: CAREMoCoObjective(moco_queue_size=16, n_splits=2)),
    # objective-owned parameters (learnable temperature and bias)
    "binary_nce": (SimCLRTrainer, lambda: BinaryNCEObjective(learnable_temperature=True, learnable_bias=True)),
}


def _run(tmp_path, images, name: str, resume: str | None = None) -> tuple[Any, list[float]]:
    trainer_cls, objective = CASES[name]
    args = training_args(
        tmp_path, per_device_train_batch_size=4, max_steps=4, save_strategy="steps", save_steps=2,
        learning_rate=1e-2, full_determinism=True,
    )  # fmt: skip
    trainer = trainer_cls(
        model=vit_encoder(seed=1 if resume else 0), args=args, train_dataset=images, objective=objective()
    )
    trainer.train(resume_from_checkpoint=resume)
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return trainer, losses


@pytest.mark.parametrize("name", list(CASES))
def test_resume_from_the_middle_checkpoint_matches_the_uninterrupted_run(tmp_path, images, name: str) -> None:
    full, full_losses = _run(tmp_path / "full", images, name)
    assert len(full_losses) == 4 and len(set(full_losses)) == 4
    checkpoint = str(tmp_path / "full" / "checkpoint-2")
    resumed, resumed_losses = _run(tmp_path / "resumed", images, name, resume=checkpoint)
    assert resumed.state.global_step == 4
    assert resumed_losses[-2:] == pytest.approx(full_losses[-2:], rel=1e-5, abs=1e-6)
    want = parameters(full.model)
    for key, value in parameters(resumed.model).items():
        torch.testing.assert_close(value, want[key], atol=1e-6, rtol=1e-5)
    if name == "care_moco":
        torch.testing.assert_close(resumed.objective.moco.queue, full.objective.moco.queue, atol=1e-6, rtol=1e-5)
        assert resumed.objective.moco.num_enqueued == full.objective.moco.num_enqueued == 16
        want_key = parameters(full.objective.moco.key_encoder)
        for key, value in parameters(resumed.objective.moco.key_encoder).items():
            torch.testing.assert_close(value, want_key[key], atol=1e-6, rtol=1e-5)
    if name == "binary_nce":
        for (n1, p1), (n2, p2) in zip(resumed.objective.named_parameters(), full.objective.named_parameters()):
            assert n1 == n2
            torch.testing.assert_close(p1, p2, atol=1e-6, rtol=1e-5)
