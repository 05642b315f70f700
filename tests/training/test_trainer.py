"""The shared trainer machinery: arguments, loss plumbing, logging, accumulation, skipping, evaluation, saving."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from distributed_scripts.trainer_utils import (
    fixed_views_collator,
    image_dataset,
    parameters,
    training_args,
    vit_encoder,
)
from transformers import EvalPrediction, HfArgumentParser, TrainerCallback, TrainingArguments

from hf_contrast.losses import InfoNCELoss
from hf_contrast.metrics.geometry import alignment, uniformity
from hf_contrast.metrics.probes import knn_accuracy
from hf_contrast.models import ContrastiveEncoder
from hf_contrast.objectives import (
    AlignUniformObjective,
    BinaryNCEObjective,
    CustomPairObjective,
    OCLObjective,
    SimOObjective,
    SupConObjective,
)
from hf_contrast.training import (
    AlignUniformTrainer,
    ContrastiveTrainer,
    ContrastiveTrainingArguments,
    OCLTrainer,
    SimCLRTrainer,
    SimOTrainer,
    SupConTrainer,
)
from hf_contrast.views import ImageViewCollator

# ---- arguments ---------------------------------------------------------------------------------


def test_arguments_parse_from_the_command_line(tmp_path) -> None:
    parser = HfArgumentParser(ContrastiveTrainingArguments)
    (args,) = parser.parse_args_into_dataclasses(
        ["--output_dir", str(tmp_path), "--image_size", "32", "--gather_distributed", "--nonfinite_policy", "skip",
         "--eval_representation", "projections", "--knn_k", "5"]
    )  # fmt: skip
    assert (args.image_size, args.gather_distributed, args.nonfinite_policy) == (32, True, "skip")
    assert (args.eval_representation, args.knn_k) == ("projections", 5)
    assert args.remove_unused_columns is False  # the collators read columns the encoder does not take
    assert args.logging_nan_inf_filter is False  # a NaN loss is never logged as something else
    assert (
        args.nonfinite_policy == "skip"
        and ContrastiveTrainingArguments(output_dir=str(tmp_path)).nonfinite_policy == "raise"
    )
    assert isinstance(args, TrainingArguments)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("eval_representation", "logits"),
        ("knn_k", 0),
        ("knn_temperature", 0.0),
        ("image_size", 0),
        ("label_column", ""),
        ("max_length", 1),
        ("nonfinite_policy", "ignore"),
    ],
)
def test_arguments_reject_bad_values_naming_the_field(tmp_path, field: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"`{field}`"):
        ContrastiveTrainingArguments(output_dir=str(tmp_path), **{field: value})


def test_method_hyperparameters_are_not_training_arguments(tmp_path) -> None:
    """They moved to the objectives' configs (see tests/objectives/test_objectives.py)."""
    with pytest.raises(TypeError, match="care_weight"):
        ContrastiveTrainingArguments(output_dir=str(tmp_path), care_weight=0.1)


def test_trainer_requires_contrastive_arguments(tmp_path, images) -> None:
    with pytest.raises(ValueError, match="`args` must be a ContrastiveTrainingArguments"):
        SimCLRTrainer(
            model=vit_encoder(), args=TrainingArguments(output_dir=str(tmp_path), use_cpu=True), train_dataset=images
        )


def test_base_trainer_needs_an_objective(tmp_path, images) -> None:
    with pytest.raises(ValueError, match="needs an objective"):
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
        objective=CustomPairObjective(loss=InfoNCELoss(temperature=0.3)), data_collator=fixed_views_collator,
    )  # fmt: skip
    assert trainer.objective.loss.temperature == 0.3
    batch = fixed_views_collator([images[i] for i in range(8)])
    model.train()
    got = trainer.compute_loss(model, batch)
    z1 = model(pixel_values=batch["pixel_values_1"]).projections
    z2 = model(pixel_values=batch["pixel_values_2"]).projections
    assert torch.allclose(got, InfoNCELoss(temperature=0.3)(z1, z2), atol=1e-6)


def test_custom_pair_objective_needs_a_loss(tmp_path, images) -> None:
    with pytest.raises(ValueError, match="needs `loss=`"):
        ContrastiveTrainer(model=vit_encoder(), args=training_args(tmp_path), train_dataset=images, objective="pair")


def test_gradient_accumulation_equals_one_large_batch(tmp_path, images) -> None:
    """Alignment is a per-sample mean: 2 accumulated half batches must give the full-batch step.
    Dividing the loss twice by the accumulation steps (or not at all) would change the update.
    The data is one batch of 8, so both runs see the same samples in any sampling order."""
    common = dict(max_steps=1, learning_rate=0.5, optim="sgd", max_grad_norm=0.0)
    results = []
    for batch_size, accumulation in [(8, 1), (4, 2)]:
        model = vit_encoder()
        args = training_args(
            tmp_path / f"ga{accumulation}", per_device_train_batch_size=batch_size,
            gradient_accumulation_steps=accumulation, **common,
        )  # fmt: skip
        trainer = AlignUniformTrainer(
            model=model, args=args, train_dataset=images.select(range(8)), data_collator=fixed_views_collator,
            objective=AlignUniformObjective(uniform_weight=0.0),
        )  # fmt: skip
        trainer.train()
        results.append((parameters(model), trainer.state.log_history[0]["loss"]))
    (full, full_loss), (accumulated, accumulated_loss) = results
    assert full_loss == pytest.approx(accumulated_loss, rel=1e-5)
    moved = max((full[k] - p).abs().max().item() for k, p in parameters(vit_encoder()).items())
    assert moved > 1e-4  # the step is large enough for a factor 2 to show
    for name in full:
        torch.testing.assert_close(accumulated[name], full[name], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize(
    ("trainer_cls", "objective_cls"), [(SupConTrainer, SupConObjective), (OCLTrainer, OCLObjective)]
)
def test_a_batch_without_positive_pair_is_skipped_with_a_warning(tmp_path, trainer_cls, objective_cls) -> None:
    # one batch of 4 distinct classes (in any sampling order); one view -> no positive pair
    data = image_dataset(n=4, labels=[0, 1, 2, 3])
    model = vit_encoder()
    before = parameters(model)
    args = training_args(tmp_path, per_device_train_batch_size=4, max_steps=3)
    trainer = trainer_cls(
        model=model,
        args=args,
        train_dataset=data,
        data_collator=fixed_views_collator,
        objective=objective_cls(n_views=1),
    )
    assert trainer.objective.name == trainer_cls.default_objective
    with pytest.warns(RuntimeWarning, match="no positive pair"):
        trainer.train()
    assert trainer.state.global_step == 3 and trainer.objective.skipped_batches == 3
    assert sum(h.get("skipped_batches", 0) for h in trainer.state.log_history) == 3
    after = parameters(model)
    assert all(torch.equal(before[k], after[k]) for k in before)  # zero loss, zero update


def test_a_batch_with_positives_is_not_skipped(tmp_path) -> None:
    data = image_dataset(n=4, labels=[0, 0, 1, 2])  # one batch, with a positive pair in any sampling order
    model = vit_encoder()
    args = training_args(tmp_path, per_device_train_batch_size=4, max_steps=2)
    trainer = SupConTrainer(
        model=model,
        args=args,
        train_dataset=data,
        data_collator=fixed_views_collator,
        objective=SupConObjective(n_views=1),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        trainer.train()
    assert trainer.objective.skipped_batches == 0


def test_objective_owned_parameters_are_optimized_and_checkpointed(tmp_path, images) -> None:
    def build(output_dir, **overrides):  # noqa: ANN001, ANN202
        args = training_args(output_dir, learning_rate=0.05, save_strategy="steps", save_steps=2, **overrides)
        objective = BinaryNCEObjective(learnable_temperature=True, learnable_bias=True)
        return SimCLRTrainer(
            model=vit_encoder(),
            args=args,
            train_dataset=images,
            objective=objective,
            data_collator=fixed_views_collator,
        )

    trainer = build(tmp_path / "run")
    loss = trainer.objective.loss
    assert {id(p) for p in trainer.objective_parameters()} == {id(loss.log_temperature), id(loss.bias)}
    trainer.train()
    in_optimizer = {id(p) for group in trainer.optimizer.param_groups for p in group["params"]}
    assert id(loss.log_temperature) in in_optimizer and id(loss.bias) in in_optimizer
    assert loss.log_temperature.item() != pytest.approx(math.log(0.1))
    assert loss.bias.item() != pytest.approx(-10.0)
    # the objective's state is part of the checkpoint: a fresh trainer resuming at the last step holds it
    resumed = build(tmp_path / "resumed")
    assert resumed.objective.loss.bias.item() == pytest.approx(-10.0)
    resumed.train(resume_from_checkpoint=str(tmp_path / "run" / "checkpoint-2"))
    torch.testing.assert_close(resumed.objective.loss.bias.detach(), loss.bias.detach(), atol=0, rtol=0)
    torch.testing.assert_close(
        resumed.objective.loss.log_temperature.detach(), loss.log_temperature.detach(), atol=0, rtol=0
    )
    # the saved encoder stays a clean ContrastiveEncoder (the objective is not part of it)
    trainer.save_model(str(tmp_path / "final"))
    reloaded = ContrastiveEncoder.from_pretrained(str(tmp_path / "final"))
    assert not any(k == "bias" or "log_temperature" in k for k in reloaded.state_dict())
    x = torch.rand(2, 3, 16, 16)
    trainer.model.eval()
    torch.testing.assert_close(reloaded(pixel_values=x).projections, trainer.model(pixel_values=x).projections)


def test_remove_unused_columns_is_refused_with_the_fix(tmp_path, images) -> None:
    data = images.add_column("noise", list(range(len(images))))
    args = training_args(tmp_path, max_steps=1, remove_unused_columns=True)
    with pytest.raises(
        ValueError, match=r"remove_unused_columns=True.*'image'.*remove_unused_columns=False.*select_columns"
    ):
        SupConTrainer(model=vit_encoder(), args=args, train_dataset=data)
    # the fix the message gives: keep the columns the objective reads, nothing else reaches the collator
    seen: list[set[str]] = []

    def collator(features):  # noqa: ANN001, ANN202
        seen.append(set(features[0]))
        return fixed_views_collator(features)

    kept = data.select_columns(["image", "label"])
    trainer = SupConTrainer(
        model=vit_encoder(), args=training_args(tmp_path, max_steps=1), train_dataset=kept, data_collator=collator
    )
    trainer.train()
    assert seen and all(columns == {"image", "label"} for columns in seen)


def test_a_batch_sampler_loader_keeps_every_trainer_dataloader_option(tmp_path) -> None:
    """SimO's class-major batch sampler needs its own DataLoader.

    It gets every option the Trainer's own loader gets.
    """
    from transformers import Trainer
    from transformers.trainer_utils import seed_worker

    options = {"dataloader_num_workers": 2, "dataloader_prefetch_factor": 3, "dataloader_persistent_workers": True}
    fields = TrainingArguments.__dataclass_fields__
    if "dataloader_multiprocessing_context" in fields:
        options["dataloader_multiprocessing_context"] = "spawn"
    if "dataloader_in_order" in fields:
        options["dataloader_in_order"] = False
    data = image_dataset(n=30, size=16, n_classes=5)
    args = training_args(tmp_path, per_device_train_batch_size=6, **options)
    trainer = SimOTrainer(
        model=vit_encoder(),
        args=args,
        train_dataset=data,
        objective=SimOObjective(classes_per_batch=2, samples_per_class=3),
    )
    ours, reference = trainer.get_train_dataloader(), Trainer.get_train_dataloader(trainer)  # the Trainer's own loader
    assert type(ours.batch_sampler).__name__ == "AFCLBatchSampler" != type(reference.batch_sampler).__name__
    for name in (
        "num_workers",
        "prefetch_factor",
        "persistent_workers",
        "pin_memory",
        "multiprocessing_context",
        "in_order",
        "timeout",
    ):
        assert getattr(ours, name, None) == getattr(reference, name, None), name
    assert ours.num_workers == 2 and ours.prefetch_factor == 3 and ours.persistent_workers
    assert (
        ours.worker_init_fn.func is seed_worker and ours.worker_init_fn.keywords == reference.worker_init_fn.keywords
    )


def test_auto_find_batch_size_is_refused_for_a_batch_sampler(tmp_path) -> None:
    data = image_dataset(n=30, size=16, n_classes=5)
    args = training_args(tmp_path, per_device_train_batch_size=6, auto_find_batch_size=True)
    trainer = SimOTrainer(
        model=vit_encoder(),
        args=args,
        train_dataset=data,
        objective=SimOObjective(classes_per_batch=2, samples_per_class=3),
    )
    with pytest.raises(ValueError, match="auto_find_batch_size=True` cannot resize the batches of SimOObjective"):
        trainer.get_train_dataloader()


# ---- evaluation --------------------------------------------------------------------------------


class _Recorder(TrainerCallback):
    def __init__(self) -> None:
        self.metrics: list[dict[str, float]] = []

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):  # noqa: ANN001, ANN201
        self.metrics.append(dict(metrics))


def _eval_views(model, images):  # noqa: ANN001, ANN202
    batch = fixed_views_collator([images[i] for i in range(len(images))])
    model.eval()
    with torch.no_grad():
        outputs = {k: model(pixel_values=batch[k]) for k in ("pixel_values", "pixel_values_1", "pixel_values_2")}
    return batch, outputs


def test_evaluate_returns_embedding_metrics(tmp_path, images) -> None:
    model = vit_encoder()
    recorder = _Recorder()
    trainer = SimCLRTrainer(
        model=model, args=training_args(tmp_path, per_device_eval_batch_size=5, knn_k=15), train_dataset=images,
        eval_dataset=images, eval_data_collator=fixed_views_collator, callbacks=[recorder],
    )  # fmt: skip
    metrics = trainer.evaluate()
    assert {"eval_alignment", "eval_uniformity", "eval_knn_loo_accuracy", "eval_loss"} <= set(metrics)
    assert "eval_knn_top1" not in metrics  # one name per metric
    assert recorder.metrics and recorder.metrics[-1]["eval_knn_loo_accuracy"] == metrics["eval_knn_loo_accuracy"]
    # independent computation on the same views (batch size 5 does not divide 16: nothing dropped)
    batch, out = _eval_views(model, images)
    z = out["pixel_values"].embeddings
    assert metrics["eval_uniformity"] == pytest.approx(uniformity(z), abs=1e-5)
    assert metrics["eval_alignment"] == pytest.approx(
        alignment(out["pixel_values_1"].embeddings, out["pixel_values_2"].embeddings), abs=1e-5
    )
    assert metrics["eval_knn_loo_accuracy"] == pytest.approx(knn_accuracy(z, batch["labels"], k=15, temperature=0.07))


def test_eval_loss_is_the_objective_on_the_evaluation_views(tmp_path, images) -> None:
    model = vit_encoder()
    trainer = SimCLRTrainer(
        model=model, args=training_args(tmp_path, per_device_eval_batch_size=8), train_dataset=images,
        eval_dataset=images, eval_data_collator=fixed_views_collator,
    )  # fmt: skip
    metrics = trainer.evaluate()
    _, out = _eval_views(model, images)
    z1, z2 = out["pixel_values_1"].projections, out["pixel_values_2"].projections
    loss = InfoNCELoss(temperature=0.5)
    want = (loss(z1[:8], z2[:8]) + loss(z1[8:], z2[8:])) / 2  # two batches of 8
    assert metrics["eval_loss"] == pytest.approx(want.item(), rel=1e-5)


def test_evaluate_with_projections_and_without_labels(tmp_path, images) -> None:
    unlabelled = images.remove_columns("label")
    trainer = SimCLRTrainer(
        model=vit_encoder(), args=training_args(tmp_path, eval_representation="projections"),
        train_dataset=images, eval_dataset={"a": unlabelled},
    )  # fmt: skip
    metrics = trainer.evaluate()
    assert "eval_a_uniformity" in metrics and "eval_a_alignment" in metrics and "eval_a_loss" in metrics
    assert "eval_a_knn_loo_accuracy" not in metrics and "eval_a_linear_probe_holdout_accuracy" not in metrics


def test_load_best_model_at_end_uses_eval_loss_by_default(tmp_path, images) -> None:
    args = training_args(
        tmp_path, max_steps=4, per_device_train_batch_size=4, eval_strategy="steps", eval_steps=2,
        save_strategy="steps", save_steps=2, load_best_model_at_end=True,
    )  # fmt: skip
    trainer = SimCLRTrainer(model=vit_encoder(), args=args, train_dataset=images, eval_dataset=images)
    trainer.train()
    evals = [h for h in trainer.state.log_history if "eval_loss" in h]
    assert len(evals) == 2
    best = min(evals, key=lambda h: h["eval_loss"])
    assert trainer.state.best_metric == pytest.approx(best["eval_loss"])
    assert trainer.state.best_model_checkpoint.endswith(f"checkpoint-{best['step']}")


def test_load_best_model_without_eval_loss_is_rejected_before_training(tmp_path) -> None:
    data = image_dataset(n=16, size=16, n_classes=8)
    args = training_args(
        tmp_path,
        per_device_train_batch_size=4,
        eval_strategy="steps",
        save_strategy="steps",
        load_best_model_at_end=True,
    )
    with pytest.raises(ValueError, match="metric_for_best_model"):
        SimOTrainer(model=vit_encoder(), args=args, train_dataset=data, eval_dataset=data, objective="simo")
    # with a metric it is accepted
    args = training_args(
        tmp_path, per_device_train_batch_size=4, eval_strategy="steps", save_strategy="steps",
        load_best_model_at_end=True,
        metric_for_best_model="eval_knn_loo_accuracy",
    )  # fmt: skip
    trainer = SimOTrainer(
        model=vit_encoder(), args=args, train_dataset=data, eval_dataset=data,
        objective=SimOObjective(classes_per_batch=2, samples_per_class=2),
    )  # fmt: skip
    metrics = trainer.evaluate()
    assert "eval_loss" not in metrics and "eval_knn_loo_accuracy" in metrics


def test_compute_metrics_is_called_with_the_embeddings(tmp_path, images) -> None:
    model = vit_encoder()
    seen: list[EvalPrediction] = []

    def compute_metrics(prediction: EvalPrediction) -> dict[str, float]:
        seen.append(prediction)
        return {"mine": float(np.asarray(prediction.predictions[0]).shape[0])}

    trainer = SimCLRTrainer(
        model=model, args=training_args(tmp_path), train_dataset=images, eval_dataset=images,
        eval_data_collator=fixed_views_collator, compute_metrics=compute_metrics,
    )  # fmt: skip
    metrics = trainer.evaluate()
    assert metrics["eval_mine"] == 16.0 and "eval_uniformity" not in metrics and "eval_loss" in metrics
    (prediction,) = seen
    embeddings, view1, view2 = prediction.predictions
    batch, out = _eval_views(model, images)
    np.testing.assert_allclose(embeddings, out["pixel_values"].embeddings.numpy(), atol=1e-5)
    np.testing.assert_allclose(view2, out["pixel_values_2"].embeddings.numpy(), atol=1e-5)
    np.testing.assert_array_equal(prediction.label_ids, batch["labels"].numpy())


def test_predict_returns_the_embeddings(tmp_path, images) -> None:
    model = vit_encoder()
    trainer = SimCLRTrainer(
        model=model, args=training_args(tmp_path, per_device_eval_batch_size=5), train_dataset=images,
        eval_data_collator=fixed_views_collator,
    )  # fmt: skip
    output = trainer.predict(images)
    embeddings = output.predictions[0]
    _, out = _eval_views(model, images)
    assert embeddings.shape == (16, model.embedding_dim)
    np.testing.assert_allclose(embeddings, out["pixel_values"].embeddings.numpy(), atol=1e-5)
    assert "test_loss" in output.metrics and "test_uniformity" in output.metrics
    # with the default evaluation views: the deterministic view is the encoder's evaluation transform
    default = SimCLRTrainer(model=model, args=training_args(tmp_path), train_dataset=images)
    predicted = default.predict(images)
    transform = default.views.deterministic_transform()
    with torch.no_grad():
        want = model(pixel_values=torch.stack([transform(image) for image in images["image"]])).embeddings
    np.testing.assert_allclose(predicted.predictions[0], want.numpy(), atol=1e-5)
    assert np.asarray(predicted.label_ids).tolist() == images["label"]


class _CountingEvaluator:
    """An evaluator whose score peaks at its second call."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, model) -> dict[str, float]:  # noqa: ANN001
        self.calls += 1
        assert isinstance(model, ContrastiveEncoder)
        return {"probe_score": [0.1, 0.9, 0.3][self.calls - 1]}


def test_evaluator_metrics_are_reported_and_choose_the_best_checkpoint(tmp_path, images) -> None:
    evaluator = _CountingEvaluator()
    args = training_args(
        tmp_path, max_steps=6, per_device_train_batch_size=4, eval_strategy="steps", eval_steps=2,
        save_strategy="steps", save_steps=2, load_best_model_at_end=True, metric_for_best_model="eval_probe_score",
        greater_is_better=True,
    )  # fmt: skip
    trainer = SimCLRTrainer(
        model=vit_encoder(), args=args, train_dataset=images, eval_dataset=images, evaluator=evaluator
    )
    trainer.train()
    scores = [h["eval_probe_score"] for h in trainer.state.log_history if "eval_probe_score" in h]
    assert scores == [0.1, 0.9, 0.3]
    assert trainer.state.best_metric == 0.9
    assert trainer.state.best_model_checkpoint.endswith("checkpoint-4")
