"""What the geometry did: SupCon/OCL log the fraction of negative pairs with a negative cosine, SimO the
class-mean orthogonality; OCL warns once when it has trained exactly as SupCon (no negative cosine)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from distributed_scripts.trainer_utils import fixed_views_collator, image_dataset, training_args, vit_encoder

from hf_contrast.objectives import OCLObjective, SimOObjective
from hf_contrast.objectives.geometry import GeometryMonitor, class_mean_abs_cosine, negative_cosine_counts
from hf_contrast.training import OCLTrainer, SimOTrainer, SupConTrainer


def _reference_fraction(z: np.ndarray, labels: np.ndarray) -> float:
    unit = z / np.linalg.norm(z, axis=1, keepdims=True)
    cos = unit @ unit.T
    negative = labels[:, None] != labels[None, :]
    return float((cos[negative] < 0).mean())


def test_negative_cosine_counts_match_an_independent_computation() -> None:
    generator = torch.Generator().manual_seed(0)
    z = torch.randn(37, 5, generator=generator) + 0.3
    labels = torch.randint(0, 4, (37,), generator=generator)
    below, total = negative_cosine_counts(z, labels)
    want_total = int((labels[:, None] != labels[None, :]).sum())
    assert int(total) == want_total
    assert int(below) / int(total) == pytest.approx(_reference_fraction(z.numpy(), labels.numpy()))
    assert 0 < int(below) < int(total)
    blocked = negative_cosine_counts(z, labels, block_size=5)  # blocks of rows give the same counts
    assert [int(x) for x in blocked] == [int(below), int(total)]


def test_class_mean_abs_cosine_matches_an_independent_computation() -> None:
    generator = torch.Generator().manual_seed(1)
    e = torch.randn(3 * 4, 6, generator=generator)
    means = e.numpy().reshape(3, 4, 6).mean(axis=1)
    means /= np.linalg.norm(means, axis=1, keepdims=True)
    cos = np.abs(means @ means.T)
    want = (cos.sum() - np.trace(cos)) / 6
    assert float(class_mean_abs_cosine(e, 3)) == pytest.approx(want, rel=1e-6)


def test_geometry_monitor_is_a_ratio_of_sums_over_the_interval() -> None:
    monitor = GeometryMonitor()
    monitor.add("x", torch.tensor(1), torch.tensor(4))
    monitor.add("x", torch.tensor(3), torch.tensor(4))
    assert monitor.drain() == {"x": 0.5} and monitor.drain() == {}
    monitor.add("x", torch.tensor(0), torch.tensor(2))
    assert monitor.totals() == {"x": (4.0, 10.0)}


def test_supcon_logs_the_fraction_of_negative_pairs_below_zero_of_its_batches(tmp_path) -> None:
    images = image_dataset(n=8)
    trainer = SupConTrainer(
        model=vit_encoder(), args=training_args(tmp_path), train_dataset=images, data_collator=fixed_views_collator
    )
    model = trainer.model.train()
    batch = fixed_views_collator([images[i] for i in range(8)])
    trainer.compute_loss(model, dict(batch))
    with torch.no_grad():
        z = torch.cat([model(pixel_values=batch[f"pixel_values_{v}"]).projections for v in (1, 2)])
    labels = batch["labels"].repeat(2)
    logged = trainer.objective.log_statistics()
    assert logged["negative_cos_below_zero"] == pytest.approx(_reference_fraction(z.numpy(), labels.numpy()))
    assert trainer.objective.log_statistics() == {}  # read and reset at each log
    trainer.train()
    entries = [h for h in trainer.state.log_history if "loss" in h]
    assert len(entries) == 2 and all(0.0 <= h["negative_cos_below_zero"] <= 1.0 for h in entries)


def _ocl_run(tmp_path, nonnegative: bool, max_steps: int):  # noqa: ANN001, ANN202
    model = vit_encoder()
    if nonnegative:  # every projection in the positive orthant: no pair can have a negative cosine
        model.projection_head.register_forward_hook(lambda module, inputs, output: output.abs() + 1e-3)
    else:  # centred on the batch (a random encoder's projections start collapsed, all cosines >= 0)
        model.projection_head.register_forward_hook(
            lambda module, inputs, output: output - output.mean(0, keepdim=True)
        )
    args = training_args(tmp_path, max_steps=max_steps, logging_steps=1)
    trainer = OCLTrainer(model=model, args=args, train_dataset=image_dataset(n=16), data_collator=fixed_views_collator)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    said = [w for w in caught if "trains exactly as objective='supcon'" in str(w.message)]
    fractions = [h["negative_cos_below_zero"] for h in trainer.state.log_history if "loss" in h]
    return said, fractions


@pytest.mark.parametrize("max_steps", [OCLObjective.identical_warning_steps + 2, 2], ids=["at-a-log", "at-the-end"])
def test_ocl_warns_once_when_no_negative_pair_ever_had_a_negative_cosine(tmp_path, max_steps) -> None:
    said, fractions = _ocl_run(tmp_path, nonnegative=True, max_steps=max_steps)
    assert fractions == [0.0] * max_steps
    assert len(said) == 1
    assert "lower `temperature`" in str(said[0].message) and "`projection_dim`" in str(said[0].message)


def test_ocl_does_not_warn_when_negative_cosines_occur(tmp_path) -> None:
    said, fractions = _ocl_run(tmp_path, nonnegative=False, max_steps=2)
    assert fractions and fractions[0] > 0  # the random encoder has negative pairs below zero
    assert said == []


def test_simo_logs_class_mean_orthogonality(tmp_path) -> None:
    objective = SimOObjective(classes_per_batch=2, samples_per_class=4)
    trainer = SimOTrainer(
        model=vit_encoder(),
        args=training_args(tmp_path),
        train_dataset=image_dataset(n=24, n_classes=6),
        objective=objective,
    )
    trainer.train()
    entries = [h for h in trainer.state.log_history if "loss" in h]
    assert len(entries) == 2 and all(0.0 <= h["class_mean_abs_cos"] <= 1.0 for h in entries)
