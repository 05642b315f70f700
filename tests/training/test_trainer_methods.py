"""Each method trainer: trains, logs its terms, and wires its views to its loss as docs/methods.md says."""

from __future__ import annotations

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

from hf_contrast.losses import AFCLLoss, CARELoss
from hf_contrast.objectives import (
    AlignUniformObjective,
    CAREMoCoObjective,
    CAREObjective,
    SimOObjective,
)
from hf_contrast.training import (
    AlignUniformTrainer,
    CARETrainer,
    OCLTrainer,
    SimCLRTrainer,
    SimOTrainer,
    SupConTrainer,
)


@pytest.fixture(scope="module")
def images():
    return image_dataset(n=16, size=16, n_classes=6)


@pytest.fixture(scope="module")
def sentences():
    import datasets

    texts = [
        "the cat sat on the mat", "a dog is red", "hello world", "the man and the woman",
        "a red car", "the dog sat", "hello cat", "a world of dogs",
    ]  # fmt: skip
    return datasets.Dataset.from_dict({"text": texts, "pair": texts[::-1], "label": [0, 1, 0, 1, 0, 1, 0, 1]})


# (name, trainer, objective, extra args, logged terms). "simclr" and "care" use the default random views
# (CPU SimCLR augmentation, on-device chunked augmentation); the others fixed views.
DEFAULT_VIEWS = ("simclr", "care")
CASES = [
    ("simclr", SimCLRTrainer, None, {}, set()),
    ("spectral", SimCLRTrainer, "spectral", {}, set()),
    ("vicreg", SimCLRTrainer, "vicreg", {}, {"loss_invariance", "loss_variance", "loss_covariance"}),
    ("binary_nce", SimCLRTrainer, "binary_nce", {}, set()),
    ("care", CARETrainer, lambda: CAREObjective(n_splits=2), {}, {"loss_invariance", "loss_equivariance"}),
    (
        "care_shared",
        CARETrainer,
        lambda: CAREObjective(n_splits=2, share_views=True),
        {},
        {"loss_invariance", "loss_equivariance"},
    ),
    (
        "care_moco",
        CARETrainer,
        lambda: CAREMoCoObjective(n_splits=2, moco_queue_size=32),
        {},
        {"loss_invariance", "loss_equivariance"},
    ),
    ("supcon", SupConTrainer, None, {}, set()),
    ("ocl", OCLTrainer, None, {}, set()),
    (
        "simo",
        SimOTrainer,
        lambda: SimOObjective(classes_per_batch=2, samples_per_class=2),
        {"per_device_train_batch_size": 4},
        {"loss_same", "loss_mean", "loss_diff"},
    ),
    (
        "align_uniform",
        AlignUniformTrainer,
        lambda: AlignUniformObjective(simcse_weight=0.5),
        {},
        {"loss_align", "loss_uniform", "loss_simcse"},
    ),
]


@pytest.mark.parametrize(("name", "trainer_cls", "objective", "extra", "terms"), CASES, ids=[c[0] for c in CASES])
def test_each_image_trainer_trains_and_logs_its_terms(
    tmp_path, images, name, trainer_cls, objective, extra, terms
) -> None:
    model = vit_encoder()
    before = parameters(model)
    objective = objective() if callable(objective) else objective
    kwargs = {}
    if name not in DEFAULT_VIEWS:
        kwargs["data_collator"] = fixed_views_collator
        if trainer_cls is CARETrainer:
            objective.equivariance_augmentation = fixed_equivariance_views
    trainer = trainer_cls(
        model=model, args=training_args(tmp_path, **extra), train_dataset=images, objective=objective, **kwargs
    )
    assert trainer.objective.name == name.replace("care_shared", "care")
    trainer.train()
    after = parameters(model)
    assert any(not torch.equal(before[k], after[k]) for k in before), "no parameter changed"
    logged = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logged) == 2 and all(torch.isfinite(torch.tensor(h["loss"])) for h in logged)
    for entry in logged:
        assert terms <= set(entry), f"missing terms {terms - set(entry)}"
        if terms:
            assert entry["loss"] == pytest.approx(sum(entry[t] for t in terms), rel=1e-4, abs=1e-5)


def test_care_feeds_the_four_views_to_care_loss(tmp_path, images) -> None:
    model = vit_encoder()
    objective = CAREObjective(
        care_weight=0.5, temperature=0.3, n_splits=2, equivariance_augmentation=fixed_equivariance_views
    )
    trainer = CARETrainer(
        model=model, args=training_args(tmp_path), train_dataset=images, data_collator=fixed_views_collator,
        objective=objective,
    )  # fmt: skip
    batch = fixed_views_collator([images[i] for i in range(8)])
    got = trainer.compute_loss(model, batch, return_outputs=True)[1]
    eq1, eq2 = fixed_equivariance_views(batch["pixel_values_eq"])
    z = [model(pixel_values=v).projections for v in (batch["pixel_values_1"], batch["pixel_values_2"], eq1, eq2)]
    want = CARELoss(temperature=0.3, care_weight=0.5, n_splits=2)(*z)
    for key in ("invariance", "equivariance", "loss"):
        torch.testing.assert_close(got[key], want[key], atol=1e-6, rtol=1e-5)
    assert want["equivariance"] > 0


def test_care_share_views_uses_the_equivariance_views_for_infonce(tmp_path, images) -> None:
    model = vit_encoder()
    objective = CAREObjective(share_views=True, n_splits=2, equivariance_augmentation=fixed_equivariance_views)
    trainer = CARETrainer(model=model, args=training_args(tmp_path), train_dataset=images, objective=objective)
    batch = trainer.data_collator([images[i] for i in range(8)])
    assert "pixel_values_1" not in batch and batch["pixel_values_eq"].dtype == torch.uint8
    got = trainer.compute_loss(model, batch, return_outputs=True)[1]
    eq1, eq2 = fixed_equivariance_views(batch["pixel_values_eq"])
    want = CARELoss(n_splits=2)(model(pixel_values=eq1).projections, model(pixel_values=eq2).projections)
    torch.testing.assert_close(got["loss"], want["loss"], atol=1e-6, rtol=1e-5)


def test_care_default_equivariance_views_are_chunk_shared_on_the_device(tmp_path, images) -> None:
    trainer = CARETrainer(
        model=vit_encoder(), args=training_args(tmp_path), train_dataset=images, objective=CAREObjective(n_splits=2)
    )
    batch = trainer.data_collator([images[0]] * 8)  # 8 copies of one image
    torch.manual_seed(3)
    v1, v2 = [v["pixel_values"] for v in trainer.objective.equivariance_views(batch, trainer.views)]
    assert v1.shape == (8, 3, 16, 16)
    for view in (v1, v2):  # identical inputs: rows equal within a chunk, chunks differ
        assert torch.allclose(view[:4], view[0].expand(4, -1, -1, -1))
        assert not torch.allclose(view[0], view[4])


def test_care_batch_geometry_is_checked_before_training(tmp_path, images) -> None:
    with pytest.raises(ValueError, match="`per_device_train_batch_size`=6 must be a multiple of 4"):
        CARETrainer(
            model=vit_encoder(), args=training_args(tmp_path, per_device_train_batch_size=6), train_dataset=images,
            objective=CAREObjective(n_splits=4),
        )  # fmt: skip
    with pytest.raises(ValueError, match="chunks of 1 sample"):  # default n_splits=8 on a batch of 8
        CARETrainer(model=vit_encoder(), args=training_args(tmp_path), train_dataset=images)


def test_simo_batches_are_class_major_and_views_are_grouped(tmp_path) -> None:
    data = image_dataset(n=30, size=16, n_classes=5)
    seen: list[torch.Tensor] = []

    class Recording(SimOObjective):
        def forward(self, model, inputs, views):  # noqa: ANN001, ANN202
            seen.append(inputs["labels"].clone())
            return super().forward(model, inputs, views)

    args = training_args(tmp_path, per_device_train_batch_size=6, max_steps=3)
    objective = Recording(classes_per_batch=2, samples_per_class=3, n_views=2)
    trainer = SimOTrainer(
        model=vit_encoder(), args=args, train_dataset=data, data_collator=fixed_views_collator, objective=objective
    )
    trainer.train()
    assert len(seen) == 3
    for labels in seen:
        groups = labels.view(2, 3)
        assert (groups == groups[:, :1]).all() and groups[0, 0] != groups[1, 0]
    # n_views=2: each class's group holds both views of its 3 samples
    model = trainer.model
    batch = fixed_views_collator([data[i] for i in [0, 5, 10, 1, 6, 11]])  # classes 0,0,0,1,1,1
    got = trainer.compute_loss(model, batch, return_outputs=True)[1]
    z1 = model(pixel_values=batch["pixel_values_1"]).projections.view(2, 3, -1)
    z2 = model(pixel_values=batch["pixel_values_2"]).projections.view(2, 3, -1)
    want = AFCLLoss(n_classes=2)(torch.cat([z1, z2], dim=1).reshape(12, -1))
    torch.testing.assert_close(got["loss"], want["loss"], atol=1e-5, rtol=1e-5)


def test_simo_validates_its_batch_geometry(tmp_path, images) -> None:
    objective = SimOObjective(classes_per_batch=2, samples_per_class=3)
    with pytest.raises(ValueError, match="`per_device_train_batch_size`=8 must equal"):
        SimOTrainer(model=vit_encoder(), args=training_args(tmp_path), train_dataset=images, objective=objective)
    with pytest.raises(ValueError, match=r"4 × 8 = 32"):  # the defaults C=4, k=8
        SimOTrainer(model=vit_encoder(), args=training_args(tmp_path), train_dataset=images)
    rows = [images[i] for i in range(len(images))]  # a plain list: no labels column to sample from
    trainer = SimOTrainer(
        model=vit_encoder(), args=training_args(tmp_path), train_dataset=rows,
        objective=SimOObjective(classes_per_batch=2, samples_per_class=4),
    )  # fmt: skip
    with pytest.raises(ValueError, match="of a `datasets.Dataset`"):
        trainer.get_train_dataloader()


def test_supervised_trainers_need_labels(tmp_path, images) -> None:
    with pytest.raises(ValueError, match=r"no column .*'label'.*`label_column`"):  # at construction, before any work
        SupConTrainer(model=vit_encoder(), args=training_args(tmp_path), train_dataset=images.remove_columns("label"))


def test_supcon_and_ocl_differ_only_in_the_negatives(tmp_path, images) -> None:
    from hf_contrast.losses import OCLoss, SupConLoss

    model = vit_encoder()
    batch = fixed_views_collator([images[i] for i in range(8)])
    z = torch.cat([model(pixel_values=batch[k]).projections for k in ("pixel_values_1", "pixel_values_2")])
    y = batch["labels"].repeat(2)
    for cls, loss in [(SupConTrainer, SupConLoss()), (OCLTrainer, OCLoss())]:
        trainer = cls(
            model=model, args=training_args(tmp_path), train_dataset=images, data_collator=fixed_views_collator
        )
        torch.testing.assert_close(trainer.compute_loss(model, batch), loss(z, y), atol=1e-6, rtol=1e-5)


def test_bad_method_names_are_rejected(tmp_path, images) -> None:
    with pytest.raises(ValueError, match="Unknown method 'triplet'; registered objectives: .*simclr"):
        SimCLRTrainer(model=vit_encoder(), args=training_args(tmp_path), train_dataset=images, objective="triplet")
    with pytest.raises(ValueError, match="Unknown method 'byol'"):
        CARETrainer(model=vit_encoder(), args=training_args(tmp_path), train_dataset=images, objective="byol")
    with pytest.raises(ValueError, match="no hyperparameter"):
        CAREObjective(n_split=4)


# ---- text --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("trainer_cls", "objective", "extra", "terms"),
    [
        (SimCLRTrainer, None, {}, set()),
        (CARETrainer, lambda: CAREObjective(n_splits=2), {}, {"loss_invariance", "loss_equivariance"}),
        (SupConTrainer, None, {"text_pair_column": "pair"}, set()),
        (
            AlignUniformTrainer,
            lambda: AlignUniformObjective(simcse_weight=1.0),
            {},
            {"loss_align", "loss_uniform", "loss_simcse", "loss_task"},
        ),
    ],
    ids=["simcse", "care_text", "supcon_pairs", "equibert"],
)
def test_text_trainers(tmp_path, sentences, trainer_cls, objective, extra, terms) -> None:
    tokenizer = tiny_tokenizer()
    model = tiny_text_encoder(tokenizer, num_labels=2 if trainer_cls is AlignUniformTrainer else 0)
    before = parameters(model)
    args = training_args(tmp_path, per_device_train_batch_size=4, **extra)
    objective = objective() if objective else None
    trainer = trainer_cls(model=model, args=args, train_dataset=sentences, eval_dataset=sentences, objective=objective)
    assert trainer.processing_class is tokenizer  # taken from the encoder
    trainer.train()
    assert any(not torch.equal(before[k], p) for k, p in parameters(model).items())
    logged = [h for h in trainer.state.log_history if "loss" in h]
    assert logged
    for entry in logged:
        assert terms <= set(entry)
    metrics = trainer.evaluate()
    assert {"eval_uniformity", "eval_knn_loo_accuracy"} <= set(metrics)
    assert ("eval_alignment" in metrics) == ("text_pair_column" in extra)


def test_simcse_views_are_the_same_sentence_under_dropout(tmp_path, sentences) -> None:
    model = tiny_text_encoder(tiny_tokenizer())
    trainer = SimCLRTrainer(model=model, args=training_args(tmp_path), train_dataset=sentences)
    batch = trainer.data_collator([sentences[i] for i in range(4)])
    view1, view2 = trainer.views.augmented(batch, 2)
    assert torch.equal(view1["input_ids"], view2["input_ids"])
    model.train()
    z1, z2 = trainer.views.projections(model, [view1, view2])
    assert not torch.allclose(z1, z2)  # dropout differs between the two copies
    model.eval()
    z1, z2 = trainer.views.projections(model, [view1, view2])
    torch.testing.assert_close(z1, z2)
