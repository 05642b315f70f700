"""Chunked objectives on any dataset size: a ragged last batch never crashes, over several epochs, for images,
text and streaming data; a batch size the chunks cannot fit is refused before training."""

from __future__ import annotations

import math

import pytest
import torch
from _tiny import tiny_text_encoder, tiny_tokenizer
from distributed_scripts.trainer_utils import (
    fixed_equivariance_views,
    fixed_views_collator,
    image_dataset,
    parameters,
    training_args,
    vit_encoder,
)

from hf_contrast.losses import CARELoss
from hf_contrast.objectives import CAREObjective
from hf_contrast.training import CARETrainer, SimCLRTrainer, SupConTrainer

N_IMAGES = 22  # batches of 8: 8 + 8 + a ragged 6 (not a multiple of n_splits=4)


@pytest.fixture(scope="module")
def images():
    return image_dataset(n=N_IMAGES, size=16)


@pytest.fixture(scope="module")
def sentences():
    import datasets

    texts = [
        "the cat sat on the mat", "a dog is red", "hello world", "the man and the woman", "a red car",
        "the dog sat", "hello cat", "a world of dogs", "the woman is on the mat", "a man and a car",
    ]  # fmt: skip
    return datasets.Dataset.from_dict({"text": texts, "label": [i % 2 for i in range(len(texts))]})


def _finite_losses(trainer) -> list[float]:  # noqa: ANN001
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert losses and all(math.isfinite(x) for x in losses)
    return losses


def test_care_images_drop_the_ragged_last_batch_of_every_epoch(tmp_path, images) -> None:
    seen: list[int] = []

    class Recording(CAREObjective):
        def forward(self, model, inputs, views):  # noqa: ANN001, ANN202
            if model.training:
                seen.append(inputs["pixel_values_eq"].shape[0])
            return super().forward(model, inputs, views)

    model = vit_encoder()
    before = parameters(model)
    args = training_args(tmp_path, max_steps=-1, num_train_epochs=3, per_device_train_batch_size=8, logging_steps=1)
    trainer = CARETrainer(model=model, args=args, train_dataset=images, objective=Recording(n_splits=4))
    trainer.train()
    # 22 rows: two whole batches per epoch; the ragged 6 rows are dropped (a different 6 each epoch: shuffled)
    assert seen == [8] * 6 and trainer.state.global_step == 6 and trainer.state.epoch == pytest.approx(3.0)
    assert len(_finite_losses(trainer)) == 6
    assert any(not torch.equal(before[k], p) for k, p in parameters(model).items())


def test_care_eval_loss_scores_the_whole_batches_only(tmp_path, images) -> None:
    model = vit_encoder()
    objective = CAREObjective(n_splits=4, care_weight=0.5, equivariance_augmentation=fixed_equivariance_views)
    args = training_args(tmp_path, per_device_eval_batch_size=8)
    trainer = CARETrainer(
        model=model, args=args, train_dataset=images, eval_dataset=images, objective=objective,
        eval_data_collator=fixed_views_collator,
    )  # fmt: skip
    metrics = trainer.evaluate()
    assert math.isfinite(metrics["eval_loss"]) and math.isfinite(metrics["eval_uniformity"])
    model.eval()
    loss = CARELoss(temperature=0.5, care_weight=0.5, n_splits=4)
    want = []
    with torch.no_grad():
        for start in (0, 8):  # the ragged last batch (6 rows) has no whole chunks: not scored
            batch = fixed_views_collator([images[i] for i in range(start, start + 8)])
            eq1, eq2 = fixed_equivariance_views(batch["pixel_values_eq"])
            z = [
                model(pixel_values=v).projections for v in (batch["pixel_values_1"], batch["pixel_values_2"], eq1, eq2)
            ]
            want.append(loss(*z)["loss"].item())
    assert metrics["eval_loss"] == pytest.approx(sum(want) / 2, rel=1e-5)
    # the embedding metrics use every row, the ragged batch included
    assert trainer.predict(images).predictions[0].shape[0] == N_IMAGES


def test_care_text_drops_the_ragged_last_batch_of_every_epoch(tmp_path, sentences) -> None:
    model = tiny_text_encoder(tiny_tokenizer())
    before = parameters(model)
    args = training_args(
        tmp_path, max_steps=-1, num_train_epochs=3, per_device_train_batch_size=4, per_device_eval_batch_size=4
    )
    trainer = CARETrainer(
        model=model, args=args, train_dataset=sentences, eval_dataset=sentences, objective=CAREObjective(n_splits=2)
    )
    trainer.train()
    assert trainer.state.global_step == 6  # 10 sentences: 4 + 4 per epoch, the ragged 2 dropped
    assert len(_finite_losses(trainer)) == 6
    assert any(not torch.equal(before[k], p) for k, p in parameters(model).items())
    metrics = trainer.evaluate()  # eval batches 4, 4, 2: the last has chunks of one sentence
    assert math.isfinite(metrics["eval_loss"]) and "eval_knn_loo_accuracy" in metrics


def test_care_streaming_dataset_with_a_ragged_end(tmp_path, images) -> None:
    stream = images.to_iterable_dataset()
    args = training_args(tmp_path, max_steps=4, per_device_train_batch_size=8)
    trainer = CARETrainer(model=vit_encoder(), args=args, train_dataset=stream, objective=CAREObjective(n_splits=4))
    trainer.train()  # 22 rows per pass: 8 + 8, the ragged 6 dropped, then the next pass
    assert trainer.state.global_step == 4
    assert len(_finite_losses(trainer)) == 4


@pytest.mark.parametrize("text", [False, True], ids=["image", "text"])
def test_batch_size_not_a_multiple_of_n_splits_is_refused_before_training(tmp_path, images, sentences, text) -> None:
    model = tiny_text_encoder(tiny_tokenizer()) if text else vit_encoder()
    data = sentences if text else images
    args = training_args(tmp_path, per_device_train_batch_size=6)
    with pytest.raises(ValueError, match=r"`per_device_train_batch_size`=6 must be a multiple of 4.*use 4"):
        CARETrainer(model=model, args=args, train_dataset=data, objective=CAREObjective(n_splits=4))


def test_streaming_datasets_train_and_evaluate(tmp_path, images) -> None:
    # accelerate's dispatcher concatenates every batch value: all collator outputs are tensors; the eval set is
    # streamed too and its metrics equal those of the same rows as a map-style dataset.
    args = training_args(tmp_path, max_steps=3, per_device_train_batch_size=8, per_device_eval_batch_size=8)
    trainer = SupConTrainer(
        model=vit_encoder(), args=args, train_dataset=images.to_iterable_dataset(), eval_dataset=images
    )  # fmt: skip
    trainer.train()
    assert trainer.state.global_step == 3 and len(_finite_losses(trainer)) == 3
    mapped = trainer.evaluate()
    streamed = trainer.evaluate(images.to_iterable_dataset())
    for key in ("eval_loss", "eval_knn_loo_accuracy", "eval_uniformity", "eval_alignment"):
        assert streamed[key] == pytest.approx(mapped[key], abs=1e-5), key


def test_a_ragged_batch_of_one_sample_is_skipped_and_counted_not_scored_as_zero(tmp_path) -> None:
    trainer = SimCLRTrainer(model=vit_encoder(), args=training_args(tmp_path), train_dataset=image_dataset(n=9))
    with pytest.warns(RuntimeWarning, match="skipped a batch of 1 sample"):
        trainer.train()  # 2 steps: a batch of 8, then the epoch's last row alone
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert [entry.get("skipped_batches", 0) for entry in logged] == [0, 1]
    # a batch of one row, as the last batch of an evaluation set holds (`evaluate` refuses a set of one row)
    batch = trainer._prepare_inputs(trainer.eval_data_collator([image_dataset(n=1)[0]]))
    with pytest.warns(RuntimeWarning, match="skipped a batch of 1 sample"):
        assert trainer.objective.eval_loss(trainer.model.eval(), batch, trainer.views) is None
