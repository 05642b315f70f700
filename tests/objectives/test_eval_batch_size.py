"""Every objective against the evaluation batch size: ``eval_loss`` is reported at the Trainer's default
``per_device_eval_batch_size`` (so ``load_best_model_at_end=True`` works), or the trainer refuses to start and
names the argument to set."""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from distributed_scripts.trainer_utils import fixed_equivariance_views, image_dataset, training_args, vit_encoder

from hf_contrast.losses import CARELoss, InfoNCELoss
from hf_contrast.objectives import CAREObjective, CustomPairObjective, available_objectives, build_objective
from hf_contrast.training import CARETrainer, ContrastiveTrainer, ContrastiveTrainingArguments

sys.path.insert(0, str(Path(__file__).parents[1]))
from _tiny import tiny_timm_encoder  # noqa: E402

#: The Trainer's default evaluation batch size, read from the arguments class (8 in transformers).
DEFAULT_EVAL_BATCH = {f.name: f.default for f in dataclasses.fields(ContrastiveTrainingArguments)}[
    "per_device_eval_batch_size"
]
N_EVAL = 20  # evaluation batches of 8, 8 and a ragged 4


def _pairs(n: int = 16):  # noqa: ANN202
    import datasets
    from PIL import Image

    rng = np.random.default_rng(0)
    labels = [i % 3 for i in range(n)]
    pre = [rng.integers(0, 256, (32, 32, 3), dtype=np.uint8) for _ in labels]
    post = [np.clip(p.astype(int) + 40 * y, 0, 255).astype(np.uint8) for p, y in zip(pre, labels)]
    return datasets.Dataset.from_dict(
        {
            "image_pre": [Image.fromarray(p) for p in pre],
            "image_post": [Image.fromarray(p) for p in post],
            "label": labels,
        }
    )


def _readme_args(tmp_path, **overrides):  # noqa: ANN001, ANN202
    """The README's training arguments: periodic evaluation, best model by ``eval_loss``, the default eval batch."""
    options = dict(
        eval_strategy="steps", eval_steps=1, save_strategy="steps", save_steps=1, load_best_model_at_end=True,
        per_device_eval_batch_size=DEFAULT_EVAL_BATCH, max_steps=1,
    )  # fmt: skip
    options.update(overrides)
    return training_args(tmp_path, **options)


def _setting(method: str, tmp_path):  # noqa: ANN001, ANN202
    """``(model, args, objective, train set, eval set)`` small enough for a CPU test."""
    if method == "local":
        return (
            tiny_timm_encoder(),
            _readme_args(tmp_path, image_size=32),
            build_objective("local"),
            _pairs(),
            _pairs(N_EVAL),
        )
    objective = {
        "pair": lambda: CustomPairObjective(loss=InfoNCELoss()),
        "simo": lambda: build_objective("simo", classes_per_batch=2, samples_per_class=4),
    }.get(method, lambda: build_objective(method))()
    batch = 2 * objective.batch_multiple if objective.batch_multiple > 1 else 8  # CARE: n_splits=8, chunks of 2
    args = _readme_args(tmp_path, per_device_train_batch_size=batch)
    train = image_dataset(n=max(16, batch), n_classes=6)
    return vit_encoder(), args, objective, train, image_dataset(n=N_EVAL, n_classes=6, seed=1)


@pytest.mark.parametrize("method", available_objectives())
def test_every_objective_reports_eval_loss_at_the_default_eval_batch_or_refuses_to_start(tmp_path, method) -> None:
    assert DEFAULT_EVAL_BATCH == 8
    model, args, objective, train, evaluation = _setting(method, tmp_path)
    if not objective.has_eval_loss:  # SimO: its batches are class-major, not evaluation batches
        with pytest.raises(ValueError, match="`metric_for_best_model`"):
            ContrastiveTrainer(
                model=model, args=args, objective=objective, train_dataset=train, eval_dataset=evaluation
            )
        return
    trainer = ContrastiveTrainer(
        model=model, args=args, objective=objective, train_dataset=train, eval_dataset=evaluation
    )
    metrics = trainer.evaluate()
    assert math.isfinite(metrics["eval_loss"]), metrics


def test_care_readme_snippet_trains_with_load_best_model_at_end_at_the_default_eval_batch(tmp_path) -> None:
    # the README's arguments: a large training batch (chunks of 4 for n_splits=8), evaluation at the default batch
    args = _readme_args(tmp_path, per_device_train_batch_size=32, max_steps=2)
    trainer = CARETrainer(
        model=vit_encoder(), args=args, train_dataset=image_dataset(n=32), eval_dataset=image_dataset(n=N_EVAL, seed=1)
    )
    trainer.train()
    evals = [h["eval_loss"] for h in trainer.state.log_history if "eval_loss" in h]
    assert len(evals) == 2 and all(math.isfinite(x) for x in evals)
    assert trainer.state.best_metric == pytest.approx(min(evals))


def test_care_eval_chunks_keep_the_training_chunk_size_where_the_batch_allows(tmp_path) -> None:
    trainer = CARETrainer(
        model=vit_encoder(), args=training_args(tmp_path, per_device_train_batch_size=32),
        train_dataset=image_dataset(n=32), objective=CAREObjective(n_splits=8),
    )  # fmt: skip
    objective = trainer.objective  # training chunks of m = 32 / 8 = 4
    # (batch, chunks): multiples of 4 give chunks of exactly 4; fewer than 4 samples: one chunk; else the most
    # equal chunks of at least 4 samples; a single sample has no pair
    want = {32: 8, 8: 2, 12: 3, 4: 1, 3: 1, 2: 1, 6: 1, 10: 2, 7: 1, 1: None}
    assert {b: objective.eval_chunks(b) for b in want} == want


def test_care_eval_loss_on_a_small_batch_is_the_loss_with_one_chunk(tmp_path) -> None:
    # an evaluation batch of 8 when training chunks hold 16: one chunk, its own augmentation pair
    images = image_dataset(n=8)
    trainer = CARETrainer(
        model=vit_encoder(),
        args=training_args(tmp_path, per_device_train_batch_size=32, per_device_eval_batch_size=8),
        train_dataset=image_dataset(n=32), eval_dataset=images, objective=CAREObjective(n_splits=2, care_weight=0.5),
    )  # fmt: skip
    objective, views = trainer.objective, trainer.views
    batch = trainer._prepare_inputs(next(iter(trainer.get_eval_dataloader())))
    model = trainer.model.eval()
    torch.manual_seed(3)
    got = objective.eval_loss(model, batch, views)
    augmentation = views.chunked_augmentation(1)
    torch.manual_seed(3)
    eq1, eq2 = views.chunked_views(augmentation, batch)
    with torch.no_grad():
        z = views.projections(model, [*views.augmented(batch, 2), eq1, eq2])
    want = CARELoss(temperature=0.5, care_weight=0.5, n_splits=1)(*z)["loss"]
    assert got.item() == pytest.approx(want.item(), rel=1e-5)


def test_care_with_a_custom_augmentation_names_the_eval_batch_size_to_set(tmp_path) -> None:
    objective = CAREObjective(n_splits=4, equivariance_augmentation=fixed_equivariance_views)
    args = training_args(tmp_path, per_device_eval_batch_size=DEFAULT_EVAL_BATCH - 2)
    with pytest.raises(ValueError, match=r"`per_device_eval_batch_size`=6 .*multiple of 4 of at least 8 \(e\.g\. 8\)"):
        CARETrainer(
            model=vit_encoder(),
            args=args,
            train_dataset=image_dataset(n=16),
            eval_dataset=image_dataset(),
            objective=objective,
        )


@pytest.mark.parametrize("method", ["simclr", "supcon", "care"])
def test_an_eval_batch_of_one_sample_is_refused_naming_the_argument(tmp_path, method) -> None:
    args = training_args(tmp_path, per_device_eval_batch_size=1, per_device_train_batch_size=16)
    with pytest.raises(ValueError, match=r"`per_device_eval_batch_size`=1 is too small.*>= 2"):
        ContrastiveTrainer(
            model=vit_encoder(),
            args=args,
            objective=method,
            train_dataset=image_dataset(n=16),
            eval_dataset=image_dataset(),
        )


def test_an_eval_set_too_small_for_eval_loss_is_refused_naming_it(tmp_path) -> None:
    args = training_args(tmp_path, eval_strategy="steps", eval_steps=1)
    with pytest.raises(ValueError, match=r"`eval_dataset` has 1 row, fewer than the 2 needed"):
        ContrastiveTrainer(
            model=vit_encoder(),
            args=args,
            objective="simclr",
            train_dataset=image_dataset(),
            eval_dataset=image_dataset(n=1),
        )
