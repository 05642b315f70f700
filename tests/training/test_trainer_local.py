"""LOCALTrainer: paired inputs, LOCALLoss wiring, alpha schedule, pair-classifier evaluation, resume."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from distributed_scripts.trainer_utils import parameters, training_args
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hf_contrast.errors import InputError
from hf_contrast.losses.local import LOCALLoss, inverse_frequency_weights, pair_difference
from hf_contrast.objectives import LOCALObjective
from hf_contrast.training import LOCALTrainer

sys.path.insert(0, str(Path(__file__).parents[1]))
from _tiny import tiny_text_encoder, tiny_timm_encoder  # noqa: E402


@pytest.fixture(scope="module")
def pairs():
    import datasets
    from PIL import Image

    rng = np.random.default_rng(0)
    labels = [0, 0, 0, 0, 0, 1, 1, 2] * 2
    pre = [rng.integers(0, 256, (32, 32, 3), dtype=np.uint8) for _ in labels]
    post = [np.clip(p.astype(int) + 40 * y, 0, 255).astype(np.uint8) for p, y in zip(pre, labels)]
    features = datasets.Features(
        {
            "image_pre": datasets.Image(),
            "image_post": datasets.Image(),
            "label": datasets.ClassLabel(names=["none", "bright", "brighter"]),
        }
    )
    return datasets.Dataset.from_dict(
        {
            "image_pre": [Image.fromarray(p) for p in pre],
            "image_post": [Image.fromarray(p) for p in post],
            "label": labels,
        },
        features=features,
    )


def _trainer(tmp_path, pairs, args=None, **hyperparameters):  # noqa: ANN001, ANN202
    torch.manual_seed(0)
    hyperparameters.setdefault("beta", 0.5)
    args = training_args(tmp_path, image_size=32, **(args or {}))
    return LOCALTrainer(
        model=tiny_timm_encoder(), args=args, train_dataset=pairs, eval_dataset=pairs,
        objective=LOCALObjective(**hyperparameters),
    )  # fmt: skip


def test_local_trains_encoder_and_classifier_and_logs_terms(tmp_path, pairs) -> None:
    # alpha_0 = 1 would switch the classifier off in epoch 0: a constant alpha trains every part
    trainer = _trainer(tmp_path, pairs, alpha_schedule="constant", alpha=0.5)
    loss = trainer.objective.loss
    assert isinstance(loss, LOCALLoss) and loss.contrastive == "ocl"
    torch.testing.assert_close(loss.class_weights, inverse_frequency_weights([10, 4, 2]))
    encoder_before, classifier_before = parameters(trainer.model), parameters(loss)
    assert classifier_before and {id(p) for p in trainer.objective_parameters()} == {id(p) for p in loss.parameters()}
    trainer.train()
    assert any(not torch.equal(v, parameters(trainer.model)[k]) for k, v in encoder_before.items())
    assert all(not torch.equal(v, parameters(loss)[k]) for k, v in classifier_before.items())
    logged = [h for h in trainer.state.log_history if "loss" in h]
    assert logged
    for entry in logged:
        terms = entry["loss_contrastive"] + entry["loss_latent"] + entry["loss_classification"]
        assert entry["loss"] == pytest.approx(terms, rel=1e-4, abs=1e-5)
        assert entry["loss_latent"] > 0 and entry["loss_classification"] > 0


def test_local_loss_gets_both_images_maps_and_the_scheduled_alpha(tmp_path, pairs) -> None:
    trainer = _trainer(tmp_path, pairs)
    batch = trainer.data_collator([pairs[i] for i in range(8)])
    assert batch["pixel_values_pre"].shape == (8, 3, 32, 32) and batch["labels"].tolist() == [0, 0, 0, 0, 0, 1, 1, 2]
    trainer.state.epoch = 3.6  # alpha = 1 / (1 + 3)
    assert trainer.objective.alpha(trainer.views) == 0.25
    model = trainer.model.eval()
    got = trainer.objective(model, batch, trainer.views)
    pre = model(pixel_values=batch["pixel_values_pre"], output_feature_maps=True)
    post = model(pixel_values=batch["pixel_values_post"], output_feature_maps=True)
    expected = trainer.objective.loss(
        pre.embeddings, post.embeddings, pre.projections, post.projections, batch["labels"],
        pre.feature_maps, post.feature_maps, alpha=0.25,
    )  # fmt: skip
    for key in expected:
        torch.testing.assert_close(got[key], expected[key], rtol=1e-4, atol=1e-5)


def test_local_evaluation_and_the_pair_classifier(tmp_path, pairs) -> None:
    trainer = _trainer(tmp_path, pairs, contrastive="supcon")
    assert trainer.objective.loss.contrastive == "supcon"  # L-SCL
    metrics = trainer.evaluate()
    for key in ("eval_knn_loo_accuracy", "eval_class_orthogonality"):
        assert 0.0 <= metrics[key] <= 1.0, key
    assert "eval_loss" in metrics
    # the names it says before an evaluation (checked against `metric_for_best_model`): those it reports
    said = ["loss", *trainer.compute_metrics.possible_metrics()]
    assert [key.removeprefix("eval_") for key in metrics if key.removeprefix("eval_") in said] == said
    # predict: the pair representation z = n(n(e_pre) - n(e_post)) of every row
    output = trainer.predict(pairs)
    z = output.predictions[0]
    assert z.shape == (16, 16) and np.asarray(output.label_ids).tolist() == pairs["label"]
    changed = np.asarray(pairs["label"]) > 0  # class 0 pairs are identical images: z = 0
    np.testing.assert_allclose(np.linalg.norm(z[changed], axis=1), 1.0, atol=1e-5)
    # the pair classifier's logits on the evaluation views, checked against the classifier itself
    model = trainer.model.eval()
    batch = trainer.eval_data_collator([pairs[i] for i in range(len(pairs))])
    logits = trainer.objective.classify(model, batch, trainer.views)
    assert logits.shape == (16, 3)
    with torch.no_grad():
        pre, post = model(pixel_values=batch["pixel_values_pre"]), model(pixel_values=batch["pixel_values_post"])
        torch.testing.assert_close(logits, trainer.objective.loss.classify(pre.embeddings, post.embeddings))
        torch.testing.assert_close(
            torch.from_numpy(z), pair_difference(pre.projections, post.projections), atol=1e-5, rtol=1e-5
        )
    # evaluate() reports the classifier: its accuracy and macro-F1 match the predictions' logits
    torch.testing.assert_close(torch.from_numpy(output.predictions[1]), logits, atol=1e-5, rtol=1e-5)
    labels = torch.tensor(pairs["label"])
    predicted = logits.argmax(dim=1)
    assert metrics["eval_accuracy"] == pytest.approx(float((predicted == labels).float().mean()))
    from sklearn.metrics import f1_score

    assert metrics["eval_macro_f1"] == pytest.approx(f1_score(labels.numpy(), predicted.numpy(), average="macro"))


def test_local_resumes_mid_epoch_like_the_uninterrupted_run(tmp_path, pairs) -> None:
    """The pair collator's random crops are seeded per batch: resuming reproduces the losses, the encoder and
    the pair classifier (part of the objective's state in the checkpoint)."""
    args = {"per_device_train_batch_size": 4, "max_steps": 3, "save_strategy": "steps", "save_steps": 1,
            "learning_rate": 1e-2, "full_determinism": True}  # fmt: skip
    full = _trainer(tmp_path / "full", pairs, args=args, alpha_schedule="constant", alpha=0.5)
    full.train()
    resumed = _trainer(tmp_path / "resumed", pairs, args=args, alpha_schedule="constant", alpha=0.5)
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-1"))
    losses = [[h["loss"] for h in t.state.log_history if "loss" in h] for t in (full, resumed)]
    assert resumed.state.global_step == 3 and len(set(losses[0])) == 3
    assert losses[1][-2:] == pytest.approx(losses[0][-2:], rel=1e-5, abs=1e-6)
    for mine, theirs in ((resumed.model, full.model), (resumed.objective, full.objective)):
        want = parameters(theirs)
        for key, value in parameters(mine).items():
            torch.testing.assert_close(value, want[key], atol=1e-6, rtol=1e-5, msg=key)


def test_local_rejects_bad_configurations(tmp_path, pairs) -> None:
    with pytest.raises(ValueError, match="`contrastive`"):
        _trainer(tmp_path, pairs, contrastive="triplet")
    with pytest.raises(ValueError, match="`label_column`"):
        _trainer(tmp_path, pairs.remove_columns("label"))
    with pytest.raises(ValueError, match="timm image encoder"):
        LOCALTrainer(model=tiny_text_encoder(), args=training_args(tmp_path), train_dataset=pairs)
    with pytest.raises(ValueError, match="`num_labels`=2 is smaller"):
        _trainer(tmp_path, pairs, num_labels=2)


def _pairs_labelled(pairs, labels):  # noqa: ANN001, ANN202
    """``pairs``' first ``len(labels)`` rows relabelled, as plain integers (no ``ClassLabel``)."""
    import datasets

    rows = pairs.select(range(len(labels))).cast_column("label", datasets.Value("int64"))
    return rows.remove_columns("label").add_column("label", labels)


@settings(max_examples=16, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    train_labels=st.lists(st.integers(0, 3), min_size=8, max_size=8).filter(lambda labels: len(set(labels)) > 1),
    eval_labels=st.lists(st.integers(0, 5), min_size=2, max_size=6),
    num_labels=st.one_of(st.none(), st.integers(4, 5)),
)
def test_local_classifier_classes_cover_the_training_and_evaluation_labels(
    tmp_path, pairs, train_labels, eval_labels, num_labels
) -> None:
    """The pair classifier's classes (`num_labels`, else the training set's largest label + 1) each need training
    rows (class weights 1/frequency), and every evaluation label needs a logit: otherwise the trainer refuses when it
    is built, naming the dataset, the classes and the fix (the first stopped in `LOCALLoss`, naming its internal
    `class_counts`; the second at the first evaluation). Anything else is accepted."""
    width = num_labels or max(train_labels) + 1
    untrained = sorted(set(range(width)) - set(train_labels))
    outside = sorted({label for label in eval_labels if label >= width})
    build = functools.partial(
        LOCALTrainer,
        model=tiny_timm_encoder(),
        args=training_args(tmp_path, image_size=32),
        train_dataset=_pairs_labelled(pairs, train_labels),
        eval_dataset={"held_out": _pairs_labelled(pairs, eval_labels)},
        objective=LOCALObjective(beta=0.0, num_labels=num_labels),
    )
    source = "`num_labels`" if num_labels else "its largest label + 1"
    if untrained:
        expected = (
            f"`train_dataset`'s `label_column`='label' has no rows of the classes {untrained} of 0..{width - 1} "
            f"({source}); LOCAL weights each class by 1/its training frequency"
        )
    elif outside:
        expected = (
            f"`eval_dataset['held_out']`'s `label_column`='label' holds the labels {outside}, which LOCALObjective's "
            f"classifier (`num_labels`={width}{', from `train_dataset`' if num_labels is None else ''}: classes "
            f"0..{width - 1}) has no logit for; the first evaluation would stop training."
        )
    else:
        assert build().objective.classifier_classes() == width
        return
    with pytest.raises(InputError) as raised:
        build()
    assert str(raised.value).startswith(expected)


def test_local_evaluates_every_class_of_its_classifier(tmp_path, pairs) -> None:
    """At the boundary the check draws, an evaluation set holding the largest class the classifier has runs its
    evaluations (no label outside it reaches the loss)."""
    trainer = _trainer(
        tmp_path, _pairs_labelled(pairs, [0, 1, 2, 0] * 2), args={"eval_strategy": "steps", "eval_steps": 1}
    )
    trainer.eval_dataset = _pairs_labelled(pairs, [2, 2, 1, 0])
    trainer.train()
    evaluated = [h for h in trainer.state.log_history if "eval_loss" in h]
    assert len(evaluated) == 2 and all(np.isfinite(h["eval_loss"]) and 0 <= h["eval_accuracy"] <= 1 for h in evaluated)
