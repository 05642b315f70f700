"""The shared trainer machinery: arguments, loss plumbing, logging, accumulation, skipping, eval, saving."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from transformers import HfArgumentParser, TrainerCallback, TrainingArguments

from distributed_scripts.trainer_utils import (
    fixed_views_collator,
    image_dataset,
    parameters,
    training_args,
    vit_encoder,
)
from hf_contrast.losses import BinaryNCELoss, InfoNCELoss
from hf_contrast.metrics.geometry import alignment, uniformity
from hf_contrast.metrics.probes import knn_accuracy
from hf_contrast.models import ContrastiveEncoder
from hf_contrast.training import (
    CONTRASTIVE_STATE_NAME,
    AlignUniformTrainer,
    ContrastiveTrainer,
    ContrastiveTrainingArguments,
    ImageViewCollator,
    OCLTrainer,
    SimCLRTrainer,
    SupConTrainer,
)


@pytest.fixture(scope="module")
def images():
    return image_dataset(n=16, size=16)


# ---- arguments ---------------------------------------------------------------------------------


def test_arguments_parse_from_the_command_line(tmp_path) -> None:
    parser = HfArgumentParser(ContrastiveTrainingArguments)
    (args,) = parser.parse_args_into_dataclasses(
        ["--output_dir", str(tmp_path), "--care_weight", "0.005", "--n_splits", "4", "--temperature", "0.2",
         "--share_views", "--classes_per_batch", "3", "--local_alpha_schedule", "constant"]
    )  # fmt: skip
    assert (args.care_weight, args.n_splits, args.temperature, args.share_views) == (0.005, 4, 0.2, True)
    assert (args.classes_per_batch, args.local_alpha_schedule) == (3, "constant")
    assert args.remove_unused_columns is False  # the collators read columns the encoder does not take
    assert isinstance(args, TrainingArguments)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", 0.0),
        ("care_weight", -1.0),
        ("n_splits", 0),
        ("olean", 1.5),
        ("moco_momentum", 1.0),
        ("moco_queue_size", 0),
        ("moco_temperature", -0.2),
        ("classes_per_batch", 1),
        ("samples_per_class", 1),
        ("local_alpha_schedule", "cosine"),
        ("local_alpha", 2.0),
        ("local_beta", -1.0),
        ("align_weight", float("nan")),
        ("uniform_weight", -0.5),
        ("task_loss_weight", -1.0),
        ("n_views", 3),
        ("eval_representation", "logits"),
        ("knn_k", 0),
        ("image_size", 0),
        ("label_column", ""),
    ],
)
def test_arguments_reject_bad_values_naming_the_field(tmp_path, field: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"`{field}`"):
        ContrastiveTrainingArguments(output_dir=str(tmp_path), **{field: value})


def test_trainer_requires_contrastive_arguments(tmp_path, images) -> None:
    with pytest.raises(ValueError, match="`args` must be a ContrastiveTrainingArguments"):
        SimCLRTrainer(model=vit_encoder(), args=TrainingArguments(output_dir=str(tmp_path), use_cpu=True), train_dataset=images)


def test_base_trainer_needs_a_loss(tmp_path, images) -> None:
    with pytest.raises(ValueError, match="needs a loss"):
        ContrastiveTrainer(model=vit_encoder(), args=training_args(tmp_path), train_dataset=images)


# ---- training loop plumbing --------------------------------------------------------------------


def test_default_views_train_and_log_every_term(tmp_path, images) -> None:
    model = vit_encoder()
    before = parameters(model)
    trainer = AlignUniformTrainer(model=model, args=training_args(tmp_path), train_dataset=images)
    assert trainer.model_accepts_loss_kwargs is False
    assert isinstance(trainer.data_collator, ImageViewCollator)  # default SimCLR views
    trainer.train()
    after = parameters(model)
    assert any(not torch.equal(before[k], after[k]) for k in before)
    steps = [h for h in trainer.state.log_history if "loss" in h]
    assert len(steps) == 2
    for entry in steps:  # the logged total is the sum of the logged terms (nothing divided twice)
        assert entry["loss"] == pytest.approx(entry["loss_align"] + entry["loss_uniform"], abs=1e-5)


def test_base_trainer_with_a_user_loss_is_a_pair_objective(tmp_path, images) -> None:
    model = vit_encoder()
    trainer = ContrastiveTrainer(
        model=model, args=training_args(tmp_path, max_steps=1), train_dataset=images,
        loss=InfoNCELoss(temperature=0.3), data_collator=fixed_views_collator,
    )  # fmt: skip
    batch = fixed_views_collator([images[i] for i in range(8)])
    model.train()
    got = trainer.compute_loss(model, batch)
    z1 = model(pixel_values=batch["pixel_values_1"]).projections
    z2 = model(pixel_values=batch["pixel_values_2"]).projections
    assert torch.allclose(got, InfoNCELoss(temperature=0.3)(z1, z2), atol=1e-6)


def test_gradient_accumulation_equals_one_large_batch(tmp_path, images) -> None:
    """Alignment is a per-sample mean: 2 accumulated half batches must give the full-batch step.
    Dividing the loss twice by the accumulation steps (or not at all) would change the update."""
    common = dict(max_steps=1, learning_rate=0.5, optim="sgd", max_grad_norm=0.0, train_sampling_strategy="sequential")
    results = []
    for batch_size, accumulation in [(8, 1), (4, 2)]:
        model = vit_encoder()
        args = training_args(
            tmp_path / f"ga{accumulation}", per_device_train_batch_size=batch_size,
            gradient_accumulation_steps=accumulation, uniform_weight=0.0, **common,
        )  # fmt: skip
        trainer = AlignUniformTrainer(model=model, args=args, train_dataset=images, data_collator=fixed_views_collator)
        trainer.train()
        results.append((parameters(model), trainer.state.log_history[0]["loss"]))
    (full, full_loss), (accumulated, accumulated_loss) = results
    assert full_loss == pytest.approx(accumulated_loss, rel=1e-5)
    moved = max((full[k] - p).abs().max().item() for k, p in parameters(vit_encoder()).items())
    assert moved > 1e-4  # the step is large enough for a factor 2 to show
    for name in full:
        torch.testing.assert_close(accumulated[name], full[name], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("trainer_cls", [SupConTrainer, OCLTrainer])
def test_a_batch_without_positive_pair_is_skipped_with_a_warning(tmp_path, trainer_cls) -> None:
    # labels 0..3 then 0..3: each batch of 4 has four distinct classes; one view -> no positive pair
    data = image_dataset(n=8, labels=[0, 1, 2, 3, 0, 1, 2, 3])
    model = vit_encoder()
    before = parameters(model)
    args = training_args(tmp_path, per_device_train_batch_size=4, max_steps=3, n_views=1, train_sampling_strategy="sequential")
    trainer = trainer_cls(model=model, args=args, train_dataset=data, data_collator=fixed_views_collator)
    with pytest.warns(RuntimeWarning, match="no positive pair"):
        trainer.train()
    assert trainer.state.global_step == 3 and trainer.skipped_batches == 3
    assert sum(h.get("skipped_batches", 0) for h in trainer.state.log_history) == 3
    after = parameters(model)
    assert all(torch.equal(before[k], after[k]) for k in before)  # zero loss, zero update


def test_a_batch_with_positives_is_not_skipped(tmp_path) -> None:
    data = image_dataset(n=8, labels=[0, 0, 1, 2, 3, 3, 1, 2])
    model = vit_encoder()
    args = training_args(tmp_path, per_device_train_batch_size=4, max_steps=2, n_views=1, train_sampling_strategy="sequential")
    trainer = SupConTrainer(model=model, args=args, train_dataset=data, data_collator=fixed_views_collator)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        trainer.train()
    assert trainer.skipped_batches == 0


def test_loss_owned_parameters_are_optimized_and_checkpointed(tmp_path, images) -> None:
    loss = BinaryNCELoss(learnable_temperature=True, learnable_bias=True)
    model = vit_encoder()
    args = training_args(tmp_path, learning_rate=0.05, save_strategy="steps", save_steps=2)
    trainer = SimCLRTrainer(model=model, args=args, train_dataset=images, loss=loss, data_collator=fixed_views_collator)
    trainer.train()
    in_optimizer = {id(p) for group in trainer.optimizer.param_groups for p in group["params"]}
    assert id(loss.log_temperature) in in_optimizer and id(loss.bias) in in_optimizer
    assert loss.log_temperature.item() != pytest.approx(math.log(0.1))
    assert loss.bias.item() != pytest.approx(-10.0)
    state = torch.load(tmp_path / "checkpoint-2" / CONTRASTIVE_STATE_NAME, weights_only=True)
    assert torch.equal(state["loss"]["bias"], loss.bias.detach())
    # the saved encoder stays a clean ContrastiveEncoder (the loss is not part of it)
    trainer.save_model(str(tmp_path / "final"))
    reloaded = ContrastiveEncoder.from_pretrained(str(tmp_path / "final"))
    assert not any("bias" == k or "log_temperature" in k for k in reloaded.state_dict())
    x = torch.rand(2, 3, 16, 16)
    model.eval()
    torch.testing.assert_close(reloaded(pixel_values=x).projections, model(pixel_values=x).projections)


def test_remove_unused_columns_keeps_what_the_collator_reads(tmp_path, images) -> None:
    data = images.add_column("noise", list(range(len(images))))
    args = training_args(tmp_path, max_steps=1, remove_unused_columns=True)
    trainer = SupConTrainer(model=vit_encoder(), args=args, train_dataset=data)
    kept = trainer._remove_unused_columns(data)
    assert sorted(kept.column_names) == ["image", "label"]
    trainer.train()  # image and label survive


# ---- evaluation --------------------------------------------------------------------------------


class _Recorder(TrainerCallback):
    def __init__(self) -> None:
        self.metrics: list[dict[str, float]] = []

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):  # noqa: ANN001, ANN201
        self.metrics.append(dict(metrics))


def test_evaluate_returns_embedding_metrics(tmp_path, images) -> None:
    model = vit_encoder()
    recorder = _Recorder()
    trainer = SimCLRTrainer(
        model=model, args=training_args(tmp_path, per_device_eval_batch_size=5), train_dataset=images,
        eval_dataset=images, eval_data_collator=fixed_views_collator, callbacks=[recorder],
    )  # fmt: skip
    metrics = trainer.evaluate()
    assert {"eval_alignment", "eval_uniformity", "eval_knn_top1"} <= set(metrics)
    assert recorder.metrics and recorder.metrics[-1]["eval_knn_top1"] == metrics["eval_knn_top1"]
    # independent computation on the same views (batch size 5 does not divide 16: nothing dropped)
    batch = fixed_views_collator([images[i] for i in range(len(images))])
    model.eval()
    with torch.no_grad():
        z = model(pixel_values=batch["pixel_values"]).embeddings
        z1 = model(pixel_values=batch["pixel_values_1"]).embeddings
        z2 = model(pixel_values=batch["pixel_values_2"]).embeddings
    assert metrics["eval_uniformity"] == pytest.approx(uniformity(z), abs=1e-5)
    assert metrics["eval_alignment"] == pytest.approx(alignment(z1, z2), abs=1e-5)
    assert metrics["eval_knn_top1"] == pytest.approx(knn_accuracy(z, batch["labels"], k=15, temperature=0.07))


def test_evaluate_with_projections_and_without_labels(tmp_path, images) -> None:
    unlabelled = images.remove_columns("label")
    trainer = SimCLRTrainer(
        model=vit_encoder(), args=training_args(tmp_path, eval_representation="projections"),
        train_dataset=images, eval_dataset={"a": unlabelled},
    )  # fmt: skip
    metrics = trainer.evaluate()
    assert "eval_a_uniformity" in metrics and "eval_a_alignment" in metrics
    assert "eval_a_knn_top1" not in metrics


# ---- publishing ----------------------------------------------------------------------------------


def test_push_to_hub_sends_the_encoder_and_a_filled_card(tmp_path, images, monkeypatch) -> None:
    calls = {}

    def fake_push(encoder, repo_id, *, card_data=None, **kwargs):  # noqa: ANN001, ANN202, ANN003
        calls.update(encoder=encoder, repo_id=repo_id, card_data=card_data, kwargs=kwargs)
        return "https://hub/commit"

    monkeypatch.setattr("hf_contrast.hub.push.push_encoder_to_hub", fake_push)
    model = vit_encoder()
    trainer = SimCLRTrainer(
        model=model, args=training_args(tmp_path, max_steps=1, temperature=0.2), train_dataset=images,
        eval_dataset=images, data_collator=fixed_views_collator, eval_data_collator=fixed_views_collator,
    )  # fmt: skip
    trainer.train()
    trainer.evaluate()
    assert trainer.push_to_hub("me/tiny") == "https://hub/commit"
    card = calls["card_data"]
    assert calls["encoder"] is model and calls["repo_id"] == "me/tiny"
    assert card.method == "simclr" and card.loss_name == "InfoNCELoss"
    assert card.loss_config["temperature"] == 0.2
    assert card.citations == [InfoNCELoss.citation.strip()]
    assert card.training_args["temperature"] == 0.2
    assert "knn_top1" in card.metrics and card.training_logs
