"""``views_on_device=True``: the trainer makes every random image view per batch on the batch's device.

Collators pass uint8 images only; SimCLR/SupCon's per-sample views and CARE's chunk-shared views come from
``BatchedSimCLRViews`` seeded by (seed, batch number); the batch number is checkpointed, so resuming is
bit-exact on the CPU.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from distributed_scripts.trainer_utils import image_dataset, parameters, training_args, vit_encoder
from transformers import HfArgumentParser

from hf_contrast.objectives import CAREObjective, LOCALObjective, SupConObjective
from hf_contrast.training import CARETrainer, ContrastiveTrainingArguments, LOCALTrainer, SimCLRTrainer, SupConTrainer
from hf_contrast.training.checkpointing import CONTRASTIVE_STATE_NAME
from hf_contrast.views import BatchedSimCLRViews, ChunkSharedDeviceViews, DeviceViews, ImageViewCollator

sys.path.insert(0, str(Path(__file__).parents[1]))
from _tiny import tiny_text_encoder  # noqa: E402


@pytest.fixture(scope="module")
def images():
    return image_dataset(n=16, size=20)


CASES = {
    "simclr": (SimCLRTrainer, lambda: None),
    # per-sample invariance views + chunk-shared equivariance views, all on the device
    "care": (CARETrainer, lambda: CAREObjective(n_splits=2, care_weight=1.0)),
}


def _trainer(tmp_path, images, name="simclr", model_seed=0, **overrides):  # noqa: ANN001, ANN202
    """4 steps of batch 4, a checkpoint every 2, device views; ``overrides``: training arguments."""
    trainer_cls, objective = CASES[name]
    options = {
        "per_device_train_batch_size": 4, "max_steps": 4, "save_strategy": "steps", "save_steps": 2,
        "learning_rate": 1e-2, "full_determinism": True, "views_on_device": True,
    }  # fmt: skip
    args = training_args(tmp_path, **{**options, **overrides})
    return trainer_cls(model=vit_encoder(seed=model_seed), args=args, train_dataset=images, objective=objective())


def _equal_weights(a, b) -> bool:  # noqa: ANN001
    """Bit-identical parameters (models or ``parameters()`` dicts)."""
    pa, pb = (m if isinstance(m, dict) else parameters(m) for m in (a, b))
    return pa.keys() == pb.keys() and all(torch.equal(pa[k], pb[k]) for k in pa)


# --------------------------------------------------------------------------------------- resume


@pytest.mark.parametrize("name", list(CASES))
def test_resume_with_device_views_is_bit_exact(tmp_path, images, name) -> None:
    full = _trainer(tmp_path / "full", images, name)
    full.train()
    checkpoint = tmp_path / "full" / "checkpoint-2"
    state = torch.load(checkpoint / CONTRASTIVE_STATE_NAME, weights_only=True)
    assert int(state["device_views"]["next_batch"]) == 2  # two training batches drawn before the checkpoint
    resumed = _trainer(
        tmp_path / "resumed", images, name, model_seed=1
    )  # other initial weights: the checkpoint's must win
    resumed.train(resume_from_checkpoint=str(checkpoint))
    assert resumed.state.global_step == 4 and resumed._train_view_batches == 4
    assert _equal_weights(resumed.model, full.model)

    # control: the same resume with the batch counter lost draws other views, and other weights come out
    del state["device_views"]
    torch.save(state, checkpoint / CONTRASTIVE_STATE_NAME)
    restarted = _trainer(tmp_path / "restarted", images, name, model_seed=1)
    with pytest.warns(UserWarning, match="restart at batch 0"):
        restarted.train(resume_from_checkpoint=str(checkpoint))
    assert not _equal_weights(restarted.model, full.model)


def test_device_views_change_training_and_follow_the_seed(tmp_path, images) -> None:
    runs = {}
    for key, options in {
        "cpu": {"views_on_device": False},
        "device": {},
        "device_again": {},
        "other_seed": {"seed": 1},
    }.items():
        trainer = _trainer(tmp_path / key, images, save_strategy="no", **options)
        trainer.train()
        runs[key] = trainer.model
    assert _equal_weights(runs["device"], runs["device_again"])  # deterministic
    assert not _equal_weights(runs["device"], runs["cpu"])  # really another pipeline
    assert not _equal_weights(runs["device"], runs["other_seed"])  # the views follow args.seed


# --------------------------------------------------------------------------------------- views and collators


def test_collator_with_device_views_returns_uint8_images_and_labels(tmp_path, images) -> None:
    trainer = _trainer(tmp_path, images, "care")
    rows = [images[i] for i in range(4)]
    batch = trainer.data_collator(rows)
    assert isinstance(trainer.data_collator, ImageViewCollator)
    assert set(batch) == {"pixel_values_eq", "labels"}  # no random view made on the CPU, no view_batch_index
    assert batch["pixel_values_eq"].dtype == torch.uint8 and batch["pixel_values_eq"].shape == (4, 3, 16, 16)
    assert batch["labels"].tolist() == [r["label"] for r in rows]
    again = trainer.data_collator(rows)  # nothing random left in the collator
    assert torch.equal(again["pixel_values_eq"], batch["pixel_values_eq"])
    evaluation = trainer.eval_data_collator(rows)
    assert set(evaluation) == {"pixel_values", "pixel_values_eq", "labels"}
    assert evaluation["pixel_values"].dtype == torch.float32 and evaluation["pixel_values_eq"].dtype == torch.uint8
    # SimCLR's collator too: the uint8 images its two views are made from
    simclr = _trainer(tmp_path / "simclr", images, "simclr")
    assert set(simclr.data_collator(rows)) == {"pixel_values_eq", "labels"}


def test_objective_views_are_made_on_the_device_from_the_batch_generator(tmp_path, images) -> None:
    trainer = _trainer(tmp_path, images, "care")
    batch = trainer.data_collator([images[i] for i in range(4)])
    device_views = trainer.views.device_views()
    assert isinstance(device_views, DeviceViews)
    assert isinstance(trainer.objective.equivariance_augmentation, ChunkSharedDeviceViews)
    trainer.views.start_batch(3, training=True)
    v1, v2 = trainer.views.augmented(batch, 2)
    e1, e2 = trainer.views.chunked_views(trainer.objective.equivariance_augmentation, batch)
    # the same draws, in the same order, from the generator of training batch 3
    reference = BatchedSimCLRViews.from_data_config(trainer.views.data_config(), seed=trainer.args.seed)
    g = reference.generator(3, stream=0)
    want = [reference(batch["pixel_values_eq"], g) for _ in range(2)]
    want += [reference(batch["pixel_values_eq"], g, chunk_size=2) for _ in range(2)]
    for got, expected in zip([v1, v2, e1, e2], want):
        assert torch.equal(got["pixel_values"], expected)
    assert v1["pixel_values"].dtype == torch.float32 and v1["pixel_values"].shape == (4, 3, 16, 16)
    # evaluation batches draw from their own stream
    trainer.views.start_batch(3, training=False)
    assert not torch.equal(trainer.views.augmented(batch, 1)[0]["pixel_values"], v1["pixel_values"])


def test_chunk_shared_device_views_share_parameters_per_chunk(tmp_path, images) -> None:
    trainer = _trainer(tmp_path, images, "care")
    augment = trainer.views.chunked_augmentation(2)
    image = trainer.data_collator([images[0]])["pixel_values_eq"]
    same = image.expand(8, -1, -1, -1)  # identical rows: a shared parameter set gives identical views
    trainer.views.start_batch(0, training=True)
    view1, view2 = augment(same)
    for view in (view1, view2):
        for chunk in view.split(4):
            assert all(torch.equal(chunk[0], row) for row in chunk[1:])  # every sample of a chunk: the same params
        assert not torch.equal(view[0], view[4])  # the two chunks: different params
    assert not torch.equal(view1[0], view2[0])  # the two views: different params
    # distinct images: the parameters are B / m draws, each repeated m times
    distinct = trainer.data_collator([images[i] for i in range(8)])["pixel_values_eq"]
    trainer.views.start_batch(5, training=True)
    got, _ = augment(distinct)
    recipe = trainer.views.device_views().views
    params = recipe.sample(2, (16, 16), recipe.generator(5)).repeat_interleave(4)
    assert torch.equal(got, recipe.apply(distinct, params))
    with pytest.raises(ValueError, match="multiple of `n_splits`=2"):
        augment(distinct[:3])


def test_evaluation_with_device_views_is_repeatable_and_leaves_training_views_alone(tmp_path, images) -> None:
    trainer = _trainer(tmp_path, images, "simclr", save_strategy="no", max_steps=1)
    trainer.eval_dataset = images
    first = trainer.evaluate()
    second = trainer.evaluate()
    assert first["eval_loss"] == second["eval_loss"]  # every evaluation restarts its view stream at batch 0
    assert trainer._train_view_batches == 0
    trainer.train()
    assert trainer._train_view_batches == 1


# --------------------------------------------------------------------------------------- errors and flags


def test_the_flag_reaches_every_script_through_hf_argument_parser(tmp_path) -> None:
    (args,) = HfArgumentParser(ContrastiveTrainingArguments).parse_args_into_dataclasses(
        ["--output_dir", str(tmp_path), "--views_on_device", "--use_cpu"]
    )
    assert args.views_on_device is True
    (args,) = HfArgumentParser(ContrastiveTrainingArguments).parse_args_into_dataclasses(
        ["--output_dir", str(tmp_path), "--views_on_device", "false", "--use_cpu"]
    )
    assert args.views_on_device is False
    # no flag: None, decided by the trainer for its device and modality (False on a CPU)
    assert ContrastiveTrainingArguments(output_dir=str(tmp_path)).views_on_device is None
    with pytest.raises(ValueError, match="`views_on_device` must be True or False"):
        ContrastiveTrainingArguments(output_dir=str(tmp_path), views_on_device="yes")


def test_views_on_device_with_a_text_model_is_a_clear_error(tmp_path) -> None:
    encoder = tiny_text_encoder()
    with pytest.raises(ValueError, match="views_on_device=True.*TextViews.*set `views_on_device=False`"):
        SimCLRTrainer(model=encoder, args=training_args(tmp_path, views_on_device=True))


def test_views_on_device_with_local_pairs_is_a_clear_error(tmp_path, images) -> None:
    with pytest.raises(ValueError, match="views_on_device=True.*pairs.*LOCAL"):
        LOCALTrainer(
            model=vit_encoder(), args=training_args(tmp_path, views_on_device=True), train_dataset=images,
            objective=LOCALObjective(pre_column="image", post_column="image"),
        )  # fmt: skip


def test_a_batch_without_uint8_images_names_the_fix(tmp_path, images) -> None:
    trainer = _trainer(tmp_path, images, "simclr")
    trainer.views.start_batch(0, training=True)
    with pytest.raises(ValueError, match="pixel_values_eq.*leave `data_collator` unset"):
        trainer.views.augmented({"pixel_values_1": torch.zeros(2, 3, 16, 16)}, 2)
    fresh = DeviceViews(BatchedSimCLRViews(16, (0.5,) * 3, (0.2,) * 3, seed=0))
    with pytest.raises(RuntimeError, match="start_batch"):
        fresh.per_sample(torch.zeros(2, 3, 16, 16, dtype=torch.uint8), 1)


def test_supcon_views_on_device_trains(tmp_path, images) -> None:
    args = training_args(tmp_path, per_device_train_batch_size=4, max_steps=2, views_on_device=True)
    trainer = SupConTrainer(model=vit_encoder(), args=args, train_dataset=images, objective=SupConObjective(n_views=1))
    before = parameters(trainer.model)
    trainer.train()
    assert trainer._train_view_batches == 2
    assert not _equal_weights(trainer.model, before)
