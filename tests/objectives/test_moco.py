"""CARE-MoCo: queue InfoNCE, momentum encoder (EMA once per optimizer step), queue filling, checkpoints."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from distributed_scripts.trainer_utils import (
    fixed_equivariance_views,
    fixed_views_collator,
    image_dataset,
    parameters,
    training_args,
    vit_encoder,
)

from hf_contrast.losses import moco_info_nce_loss
from hf_contrast.objectives import CAREMoCoObjective
from hf_contrast.objectives.moco import MoCoState
from hf_contrast.training import CARETrainer


def _reference_moco(q: np.ndarray, k: np.ndarray, queue: np.ndarray, temperature: float) -> float:
    """Loop over queries, written from the MoCo v2 formula (float64)."""
    total = 0.0
    for i in range(q.shape[0]):
        qi = q[i] / np.linalg.norm(q[i])
        ki = k[i] / np.linalg.norm(k[i])
        positive = qi @ ki / temperature
        negatives = [qi @ u / temperature for u in queue]
        logits = np.array([positive, *negatives])
        total += -(positive - np.log(np.exp(logits - logits.max()).sum()) - logits.max())
    return total / q.shape[0]


def test_queue_infonce_matches_a_reference_loop() -> None:
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(6, 5, generator=g), torch.randn(6, 5, generator=g)
    queue = torch.nn.functional.normalize(torch.randn(10, 5, generator=g), dim=1)
    got = moco_info_nce_loss(q, k, queue, temperature=0.2)
    want = _reference_moco(q.double().numpy(), k.double().numpy(), queue.double().numpy(), 0.2)
    assert got.item() == pytest.approx(want, rel=1e-5)


def test_queue_infonce_gradient_flows_to_the_queries_only() -> None:
    q = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    k = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    moco_info_nce_loss(q, k, torch.randn(7, 3, dtype=torch.float64)).backward()
    assert q.grad is not None and q.grad.abs().sum() > 0 and k.grad is None


@pytest.mark.parametrize(
    ("q_shape", "k_shape", "queue_shape", "temperature", "match"),
    [
        ((4, 3), (5, 3), (8, 3), 0.2, "`q` and `k` must have the same shape"),
        ((4, 3), (4, 3), (8, 2), 0.2, "`queue` must have D=3"),
        ((4, 3), (4, 3), (8, 3), 0.0, "`temperature`"),
        ((4,), (4,), (8, 3), 0.2, "`q`"),
    ],
)
def test_queue_infonce_errors(q_shape, k_shape, queue_shape, temperature, match) -> None:
    with pytest.raises(ValueError, match=match):
        moco_info_nce_loss(torch.randn(q_shape), torch.randn(k_shape), torch.randn(queue_shape), temperature)


def test_state_momentum_update_and_queue_wrap_around() -> None:
    encoder = torch.nn.Linear(3, 2)
    state = MoCoState(encoder, queue_size=5, momentum=0.9, seed=1)
    key0 = copy.deepcopy(state.key_encoder.weight.detach())
    with torch.no_grad():
        encoder.weight.add_(1.0)
    state.momentum_update(encoder)
    torch.testing.assert_close(state.key_encoder.weight, 0.9 * key0 + 0.1 * encoder.weight.detach())
    assert not state.key_encoder.weight.requires_grad

    first = state.queue_for(2, torch.device("cpu"))
    keys = torch.randn(4, 2)
    state.enqueue(keys)
    state.enqueue(keys[:3] * 2)  # wraps: rows 4, 0, 1
    normed = torch.nn.functional.normalize(keys, dim=1)
    torch.testing.assert_close(state.queue[2:4], normed[2:4])
    torch.testing.assert_close(state.queue[[4, 0, 1]], normed[:3])
    assert (state.queue_ptr, state.num_enqueued) == (2, 7)
    assert not torch.equal(first, state.queue)  # out-of-place: the old tensor is untouched
    torch.testing.assert_close(first.norm(dim=1), torch.ones(5))
    with pytest.raises(ValueError, match="`moco_queue_size`=5"):
        state.enqueue(torch.randn(6, 2))
    with pytest.raises(ValueError, match="`momentum`"):
        MoCoState(encoder, momentum=1.0)


@pytest.fixture(scope="module")
def images():
    return image_dataset(n=16, size=16)


def _trainer(tmp_path, images, **overrides) -> CARETrainer:
    options = dict(train_sampling_strategy="sequential", max_steps=1)
    options.update(overrides)
    objective = CAREMoCoObjective(
        moco_queue_size=12, moco_momentum=0.9, n_splits=2, equivariance_augmentation=fixed_equivariance_views
    )
    return CARETrainer(
        model=vit_encoder(), args=training_args(tmp_path, **options), train_dataset=images, objective=objective,
        data_collator=fixed_views_collator,
    )  # fmt: skip


def test_care_moco_by_name_builds_the_moco_objective(tmp_path, images) -> None:
    trainer = CARETrainer(
        model=vit_encoder(), args=training_args(tmp_path, per_device_train_batch_size=16), train_dataset=images,
        objective="care_moco",
    )  # fmt: skip
    assert isinstance(trainer.objective, CAREMoCoObjective)
    assert (trainer.objective.moco.queue_size, trainer.objective.moco.momentum) == (4096, 0.99)
    assert trainer.objective.loss.temperature == 0.2  # MoCo v2's


def test_momentum_encoder_is_an_ema_once_per_optimizer_step(tmp_path, images) -> None:
    trainer = _trainer(tmp_path, images, per_device_train_batch_size=4, gradient_accumulation_steps=2)
    moco = trainer.objective.moco
    theta0 = parameters(trainer.model)
    key_encoder_0 = parameters(moco.key_encoder)
    for name in theta0:
        assert torch.equal(theta0[name], key_encoder_0[name])  # starts as a copy
    trainer.train()
    theta1 = parameters(trainer.model)
    key = parameters(moco.key_encoder)
    changed = 0
    for name in theta0:  # exactly one update with m = 0.9, despite two micro-batches
        torch.testing.assert_close(key[name], 0.9 * theta0[name] + 0.1 * theta1[name], atol=1e-7, rtol=1e-6)
        changed += not torch.equal(theta0[name], theta1[name])
    assert changed > 0
    assert moco.num_enqueued == 8 and moco.queue_ptr == 8  # both micro-batches' keys


def test_queue_fills_with_the_key_encoders_keys(tmp_path, images) -> None:
    first_eight = images.select(range(8))  # one batch: the step sees these rows, in the sampler's order
    trainer = _trainer(tmp_path, first_eight, per_device_train_batch_size=8)
    moco = trainer.objective.moco
    key_encoder_0 = copy.deepcopy(moco.key_encoder)
    trainer.train()
    batch = fixed_views_collator([first_eight[i] for i in range(8)])
    with torch.no_grad():
        keys = key_encoder_0(pixel_values=batch["pixel_values_2"]).projections  # keys use θ_k before the step
    keys = torch.nn.functional.normalize(keys, dim=1)
    match = (moco.queue[:8] @ keys.T).argmax(dim=1)  # the queue holds these keys, in the order the batch had
    assert sorted(match.tolist()) == list(range(8))
    torch.testing.assert_close(moco.queue[:8], keys[match], atol=1e-6, rtol=1e-5)
    assert moco.queue.shape == (12, 8)


def test_checkpoint_holds_key_encoder_and_queue(tmp_path, images) -> None:
    trainer = _trainer(
        tmp_path / "run", images, per_device_train_batch_size=8, max_steps=2, save_strategy="steps", save_steps=2
    )
    trainer.train()
    moco = trainer.objective.moco
    state = trainer.contrastive_state_dict()["objective"]
    extra = state["moco._extra_state"]
    torch.testing.assert_close(extra["queue"], moco.queue)
    assert int(extra["num_enqueued"]) == 16 and int(extra["queue_ptr"]) == 4
    for name, p in moco.key_encoder.state_dict().items():
        torch.testing.assert_close(state[f"moco.key_encoder.{name}"], p)
    # what the checkpoint holds: a fresh trainer resuming at its step restores queue, pointers and key encoder
    resumed = _trainer(tmp_path / "resumed", images, per_device_train_batch_size=8, max_steps=2)
    resumed.train(resume_from_checkpoint=str(tmp_path / "run" / "checkpoint-2"))
    restored = resumed.objective.moco
    torch.testing.assert_close(restored.queue, moco.queue, atol=0, rtol=0)
    assert (restored.queue_ptr, restored.num_enqueued) == (4, 16)
    for name, p in parameters(restored.key_encoder).items():
        torch.testing.assert_close(p, parameters(moco.key_encoder)[name], atol=0, rtol=0)
