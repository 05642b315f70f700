"""A non-finite step never costs the run: it is reported (step and term), never logged as a number, never
checkpointed; ``nonfinite_policy="skip"`` drops it instead."""

from __future__ import annotations

import math

import pytest
import torch
from distributed_scripts.trainer_utils import (
    fixed_views_collator,
    parameters,
    training_args,
    vit_encoder,
)
from torch import nn
from transformers import TrainerCallback

from hf_contrast.losses import InfoNCELoss
from hf_contrast.models import ContrastiveEncoder
from hf_contrast.objectives import CustomPairObjective
from hf_contrast.training import ContrastiveTrainer, NonFiniteLossError, SimCLRTrainer


class _NaNTermAt(nn.Module):
    """InfoNCE as ``invariance`` plus an ``equivariance`` term that is NaN at the ``bad_call``-th call."""

    def __init__(self, bad_call: int) -> None:
        super().__init__()
        self.bad_call, self.calls = bad_call, 0
        self.info_nce = InfoNCELoss(temperature=0.5)

    def forward(self, z1: torch.Tensor, z2: torch.Tensor) -> dict[str, torch.Tensor]:
        self.calls += 1
        invariance = self.info_nce(z1, z2)
        equivariance = (z1 - z2).pow(2).mean()
        if self.calls == self.bad_call:
            equivariance = equivariance * float("nan")
        return {"invariance": invariance, "equivariance": equivariance, "loss": invariance + equivariance}


class _PoisonWeights(TrainerCallback):
    """Set every weight of the model to NaN at ``when`` ("step_begin"/"step_end") of optimizer step ``step``."""

    def __init__(self, step: int, when: str = "step_begin") -> None:
        self.step, self.when = step, when

    def _poison(self, state, model) -> None:  # noqa: ANN001
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(float("nan"))

    def on_step_begin(self, args, state, control, model=None, **kwargs):  # noqa: ANN001, ANN201
        if self.when == "step_begin" and state.global_step + 1 == self.step:
            self._poison(state, model)

    def on_step_end(self, args, state, control, model=None, **kwargs):  # noqa: ANN001, ANN201
        if self.when == "step_end" and state.global_step == self.step:
            self._poison(state, model)


def _checkpoints(folder) -> list[int]:  # noqa: ANN001
    return sorted(int(p.name.split("-")[1]) for p in folder.glob("checkpoint-*") if p.is_dir())


def _assert_finite_checkpoints(folder, steps: list[int]) -> None:  # noqa: ANN001
    assert _checkpoints(folder) == steps
    for step in steps:  # every written checkpoint holds finite weights
        encoder = ContrastiveEncoder.from_pretrained(str(folder / f"checkpoint-{step}"))
        assert all(torch.isfinite(p).all() for p in encoder.parameters()), step


def _losses(trainer) -> list[float]:  # noqa: ANN001
    return [h["loss"] for h in trainer.state.log_history if "loss" in h]


def test_poisoned_weights_stop_training_naming_the_step(tmp_path, images) -> None:
    args = training_args(tmp_path, max_steps=5, per_device_train_batch_size=4, save_strategy="steps", save_steps=1)
    trainer = SimCLRTrainer(
        model=vit_encoder(), args=args, train_dataset=images, data_collator=fixed_views_collator,
        callbacks=[_PoisonWeights(step=3)],
    )  # fmt: skip
    with pytest.raises(NonFiniteLossError, match=r"at step 3 \(terms: loss\)"):
        trainer.train()
    _assert_finite_checkpoints(tmp_path, [1, 2])
    losses = _losses(trainer)
    assert len(losses) == 2 and all(math.isfinite(x) and x != 0.0 for x in losses)  # NaN was never logged


def test_weights_poisoned_after_the_optimizer_step_are_never_checkpointed(tmp_path, images) -> None:
    args = training_args(tmp_path, max_steps=5, per_device_train_batch_size=4, save_strategy="steps", save_steps=1)
    trainer = SimCLRTrainer(
        model=vit_encoder(), args=args, train_dataset=images, data_collator=fixed_views_collator,
        callbacks=[_PoisonWeights(step=2, when="step_end")],
    )  # fmt: skip
    with pytest.raises(NonFiniteLossError, match="step 2"):
        trainer.train()
    _assert_finite_checkpoints(tmp_path, [1])


def test_a_nan_term_is_named_and_caught_at_the_next_log(tmp_path, images) -> None:
    args = training_args(tmp_path, max_steps=5, per_device_train_batch_size=4, save_strategy="steps", save_steps=1)
    trainer = ContrastiveTrainer(
        model=vit_encoder(), args=args, train_dataset=images, data_collator=fixed_views_collator,
        objective=CustomPairObjective(loss=_NaNTermAt(bad_call=3)),
    )  # fmt: skip
    with pytest.raises(NonFiniteLossError, match=r"at step 3 \(terms: equivariance\)"):
        trainer.train()
    _assert_finite_checkpoints(tmp_path, [1, 2])
    for entry in trainer.state.log_history:  # no NaN and no 0.0 in the logs
        if "loss" in entry:
            assert math.isfinite(entry["loss"]) and entry["loss"] != 0.0
            assert math.isfinite(entry["loss_equivariance"])


@pytest.mark.parametrize(("logging_steps", "save_steps"), [(100, 4), (100, 100)], ids=["at_save", "at_end"])
def test_a_nan_step_is_caught_without_a_log_at_that_step(tmp_path, images, logging_steps, save_steps) -> None:
    """The check runs at every log, before every checkpoint and at the end of training."""
    args = training_args(
        tmp_path, max_steps=5, per_device_train_batch_size=4, logging_steps=logging_steps, save_strategy="steps",
        save_steps=save_steps,
    )  # fmt: skip
    trainer = ContrastiveTrainer(
        model=vit_encoder(), args=args, train_dataset=images, data_collator=fixed_views_collator,
        objective=CustomPairObjective(loss=_NaNTermAt(bad_call=2)),
    )  # fmt: skip
    with pytest.raises(NonFiniteLossError, match=r"at step 2 \(terms: equivariance"):
        trainer.train()
    assert _checkpoints(tmp_path) == []


def test_skip_policy_drops_the_step_and_counts_it(tmp_path, images) -> None:
    snapshots: dict[str, dict[str, torch.Tensor]] = {}

    class Snapshot(TrainerCallback):
        def on_step_begin(self, args, state, control, model=None, **kwargs):  # noqa: ANN001, ANN201
            if state.global_step + 1 == 3:
                snapshots["before"] = parameters(model)

        def on_step_end(self, args, state, control, model=None, **kwargs):  # noqa: ANN001, ANN201
            if state.global_step == 3:
                snapshots["after"] = parameters(model)

    model = vit_encoder()
    initial = parameters(model)
    args = training_args(
        tmp_path,
        max_steps=5,
        per_device_train_batch_size=4,
        nonfinite_policy="skip",
        save_strategy="steps",
        save_steps=1,
    )
    trainer = ContrastiveTrainer(
        model=model, args=args, train_dataset=images, data_collator=fixed_views_collator,
        objective=CustomPairObjective(loss=_NaNTermAt(bad_call=3)), callbacks=[Snapshot()],
    )  # fmt: skip
    with pytest.warns(RuntimeWarning, match="Step 3: non-finite"):
        trainer.train()
    assert trainer.state.global_step == 5 and trainer.skipped_steps == 1
    for name, value in snapshots["before"].items():  # the NaN step changed nothing
        assert torch.equal(snapshots["after"][name], value), name
    final = parameters(model)
    assert all(torch.isfinite(p).all() for p in final.values())
    assert any(not torch.equal(final[k], initial[k]) for k in final)  # the other steps trained
    logged = [h for h in trainer.state.log_history if "loss" in h]
    assert [h["step"] for h in logged] == [1, 2, 3, 4, 5]
    assert logged[-1]["skipped_steps"] == 1
    step3 = logged[2]
    assert step3.get("skipped_steps") == 1
    assert math.isnan(step3["loss"])  # a dropped step is not logged as 0.0
    assert all(math.isfinite(h["loss"]) and h["loss"] != 0.0 for i, h in enumerate(logged) if i != 2)
    _assert_finite_checkpoints(tmp_path, [1, 2, 3, 4, 5])


class _NaNPixelsAt:
    """``fixed_views_collator`` with NaN pixels in the ``bad_call``-th training batch (a broken image file)."""

    def __init__(self, bad_call: int) -> None:
        self.bad_call, self.calls = bad_call, 0

    def __call__(self, features):  # noqa: ANN001, ANN204
        batch = fixed_views_collator(features)
        self.calls += 1
        if self.calls == self.bad_call:
            for key in ("pixel_values_1", "pixel_values_2"):
                batch[key] = batch[key].clone()
                batch[key][0, :, :4, :4] = float("nan")
        return batch


def _resnet_encoder() -> ContrastiveEncoder:
    torch.manual_seed(0)
    return ContrastiveEncoder.from_backbone("resnet10t", pretrained=False, projection_dim=8)


def test_skip_keeps_batchnorm_statistics_and_reports_the_mean_of_the_kept_steps(tmp_path, images) -> None:
    """NaN input pixels write NaN into BatchNorm running statistics during the forward pass, before the loss
    is seen: a skipped step must put them back, or the next checkpoint (and the saved model) holds NaN."""
    buffers: dict[str, dict[str, torch.Tensor]] = {}

    class Snapshot(TrainerCallback):
        def on_step_begin(self, args, state, control, model=None, **kwargs):  # noqa: ANN001, ANN201
            if state.global_step + 1 == 2:
                buffers["before"] = {k: v.clone() for k, v in model.named_buffers()}

        def on_step_end(self, args, state, control, model=None, **kwargs):  # noqa: ANN001, ANN201
            if state.global_step == 2:
                buffers["after"] = {k: v.clone() for k, v in model.named_buffers()}

    args = training_args(
        tmp_path, max_steps=4, per_device_train_batch_size=4, nonfinite_policy="skip", save_strategy="no"
    )
    trainer = SimCLRTrainer(
        model=_resnet_encoder(), args=args, train_dataset=images, data_collator=_NaNPixelsAt(bad_call=2),
        callbacks=[Snapshot()],
    )  # fmt: skip
    with pytest.warns(RuntimeWarning, match="Step 2: non-finite"):
        output = trainer.train()
    assert trainer.skipped_steps == 1
    running = [k for k in buffers["before"] if "running_mean" in k]
    assert running  # the encoder has BatchNorm
    for name, value in buffers["before"].items():  # the NaN step left every buffer as it was
        assert torch.equal(buffers["after"][name], value), name
    trainer.save_model(str(tmp_path / "model"))  # finite: no error
    assert all(torch.isfinite(b).all() for b in trainer.model.buffers() if b.is_floating_point())
    kept = [h["loss"] for h in trainer.state.log_history if "loss" in h and math.isfinite(h["loss"])]
    assert len(kept) == 3
    final = trainer.state.log_history[-1]
    assert final["train_loss"] == pytest.approx(sum(kept) / 3, rel=1e-5)  # not (sum + 0) / 4
    assert final["skipped_steps"] == 1 and output.metrics["train_loss"] == final["train_loss"]


class _NaNGradientAt(nn.Module):
    """InfoNCE plus a term that is finite at every call but has a NaN gradient at the ``bad_call``-th call."""

    def __init__(self, bad_call: int) -> None:
        super().__init__()
        self.bad_call, self.calls = bad_call, 0
        self.info_nce = InfoNCELoss(temperature=0.5)

    def forward(self, z1: torch.Tensor, z2: torch.Tensor) -> dict[str, torch.Tensor]:
        self.calls += 1
        invariance = self.info_nce(z1, z2)
        extra = (z1 - z2).pow(2).mean()
        if self.calls == self.bad_call:  # sqrt(0) is 0 but its derivative is inf: 0 * inf = NaN in backward
            extra = extra + 0.0 * torch.sqrt(z1[:, 0] * 0.0).sum()
        return {"invariance": invariance, "extra": extra, "loss": invariance + extra}


def test_raise_names_the_step_whose_gradients_were_not_finite(tmp_path, images) -> None:
    args = training_args(tmp_path, max_steps=6, per_device_train_batch_size=4, logging_steps=6, save_strategy="no")
    trainer = ContrastiveTrainer(
        model=vit_encoder(), args=args, train_dataset=images, data_collator=fixed_views_collator,
        objective=CustomPairObjective(loss=_NaNGradientAt(bad_call=3)),
    )  # fmt: skip
    with pytest.raises(NonFiniteLossError, match="Non-finite gradients at step 3 \\(its loss was finite"):
        trainer.train()
    with pytest.raises(NonFiniteLossError, match="allow_nonfinite=True"):
        trainer.save_model(str(tmp_path / "model"))  # the weights are NaN now: nothing is written silently
    assert not (tmp_path / "model").exists()


class _Recording(nn.Module):
    """``_NaNTermAt`` or ``_NaNGradientAt`` that also records the total loss of every call (a float, read here:
    the independent reference for the trainer's means)."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner, self.values = inner, []

    def forward(self, z1: torch.Tensor, z2: torch.Tensor) -> dict[str, torch.Tensor]:
        terms = self.inner(z1, z2)
        self.values.append(float(terms["loss"].detach()))
        return terms


@pytest.mark.parametrize("fault", ["nan_loss", "nan_gradient"])
@pytest.mark.parametrize("accumulation", [1, 2])
def test_skip_reports_the_mean_of_the_kept_steps_everywhere(tmp_path, images, fault: str, accumulation: int) -> None:
    """``TrainOutput.training_loss``, the returned and logged ``train_loss`` and each logged ``loss`` are means over
    the kept optimizer steps, computed here from the losses the objective returned: a skipped step counts
    neither as 0 (a NaN loss) nor as its finite loss (a NaN gradient)."""
    bad_call = 2 * accumulation + 1  # the first micro-batch of step 3
    inner = _NaNTermAt(bad_call) if fault == "nan_loss" else _NaNGradientAt(bad_call)
    loss = _Recording(inner)
    args = training_args(
        tmp_path, max_steps=5, per_device_train_batch_size=4, gradient_accumulation_steps=accumulation,
        nonfinite_policy="skip", logging_steps=2,
    )  # fmt: skip
    trainer = ContrastiveTrainer(
        model=vit_encoder(), args=args, train_dataset=images, data_collator=fixed_views_collator,
        objective=CustomPairObjective(loss=loss),
    )  # fmt: skip
    with pytest.warns(RuntimeWarning, match="Step 3: non-finite"):
        output = trainer.train()
    assert trainer.skipped_steps == 1 and len(loss.values) == 5 * accumulation
    # a step's loss as the Trainer sums it: the mean of its micro-batches' losses
    steps = [sum(loss.values[i : i + accumulation]) / accumulation for i in range(0, 5 * accumulation, accumulation)]
    assert math.isfinite(steps[2]) == (fault == "nan_gradient")
    kept = [value for step, value in enumerate(steps, 1) if step != 3]
    expected = sum(kept) / 4
    assert output.training_loss == pytest.approx(expected, rel=1e-5)
    assert output.metrics["train_loss"] == pytest.approx(expected, rel=1e-5)
    final = trainer.state.log_history[-1]
    assert final["train_loss"] == pytest.approx(expected, rel=1e-5) and final["skipped_steps"] == 1
    logged = {h["step"]: h["loss"] for h in trainer.state.log_history if "loss" in h}
    assert logged[2] == pytest.approx((steps[0] + steps[1]) / 2, rel=1e-5)
    assert logged[4] == pytest.approx(steps[3], rel=1e-5)  # steps 3 (skipped) and 4: step 4 alone
