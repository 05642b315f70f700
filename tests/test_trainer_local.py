"""LOCALTrainer: paired inputs, LOCALLoss wiring, alpha schedule, pair-classifier evaluation."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from distributed_scripts.trainer_utils import parameters, training_args
from hf_contrast.losses.local import LOCALLoss, inverse_frequency_weights
from hf_contrast.training import LOCALTrainer

sys.path.insert(0, str(Path(__file__).parent))
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
        {"image_pre": [Image.fromarray(p) for p in pre], "image_post": [Image.fromarray(p) for p in post], "label": labels},
        features=features,
    )


def _trainer(tmp_path, pairs, **kwargs):
    torch.manual_seed(0)
    args = training_args(tmp_path, image_size=32, local_beta=0.5, **kwargs.pop("args", {}))
    return LOCALTrainer(model=tiny_timm_encoder(), args=args, train_dataset=pairs, eval_dataset=pairs, **kwargs)


def test_local_trains_encoder_and_classifier_and_logs_terms(tmp_path, pairs) -> None:
    # alpha_0 = 1 would switch the classifier off in epoch 0: a constant alpha trains every part
    trainer = _trainer(tmp_path, pairs, args={"local_alpha_schedule": "constant", "local_alpha": 0.5})
    assert isinstance(trainer.loss, LOCALLoss) and trainer.loss.contrastive == "ocl"
    torch.testing.assert_close(trainer.loss.class_weights, inverse_frequency_weights([10, 4, 2]))
    encoder_before, classifier_before = parameters(trainer.model), parameters(trainer.loss)
    trainer.train()
    assert any(not torch.equal(v, parameters(trainer.model)[k]) for k, v in encoder_before.items())
    assert all(not torch.equal(v, parameters(trainer.loss)[k]) for k, v in classifier_before.items())
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
    assert trainer.current_alpha() == 0.25
    model = trainer.model.eval()
    got = trainer.compute_contrastive_loss(model, batch)
    pre = model(pixel_values=batch["pixel_values_pre"], output_feature_maps=True)
    post = model(pixel_values=batch["pixel_values_post"], output_feature_maps=True)
    expected = trainer.loss(
        pre.embeddings, post.embeddings, pre.projections, post.projections, batch["labels"],
        pre.feature_maps, post.feature_maps, alpha=0.25,
    )  # fmt: skip
    for key in expected:
        torch.testing.assert_close(got[key], expected[key], rtol=1e-4, atol=1e-5)


def test_local_evaluation_reports_the_pair_classifier(tmp_path, pairs) -> None:
    trainer = _trainer(tmp_path, pairs, loss="supcon")
    assert trainer.method == "l_scl" and trainer.loss.contrastive == "supcon"
    metrics = trainer.evaluate()
    for key in ("eval_accuracy", "eval_macro_f1", "eval_knn_top1", "eval_class_orthogonality"):
        assert 0.0 <= metrics[key] <= 1.0, key
    predictions = trainer.predict_pairs(pairs)
    assert predictions["logits"].shape == (16, 3) and predictions["labels"].tolist() == pairs["label"]
    accuracy = float((predictions["logits"].argmax(1) == predictions["labels"]).float().mean())
    assert metrics["eval_accuracy"] == pytest.approx(accuracy)


def test_local_rejects_bad_configurations(tmp_path, pairs) -> None:
    with pytest.raises(ValueError, match="`loss` must be one of"):
        _trainer(tmp_path, pairs, loss="triplet")
    with pytest.raises(ValueError, match="`label_column`"):
        _trainer(tmp_path, pairs.remove_columns("label"))
    with pytest.raises(ValueError, match="timm image encoder"):
        LOCALTrainer(model=tiny_text_encoder(), args=training_args(tmp_path), train_dataset=pairs)
