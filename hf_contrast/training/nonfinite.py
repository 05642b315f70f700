"""``nonfinite_policy``: what a training step with a NaN/inf loss or gradient does to the run.

:class:`NonFinitePolicy` owns the policy's state (steps skipped, where this ``train()`` call and the last
logged loss began, the snapshot of running statistics taken before an optimizer step) and is consulted by
the trainer at four points: each micro-batch (:meth:`~NonFinitePolicy.before_micro_batch`,
:meth:`~NonFinitePolicy.after_micro_batch`), each optimizer step (its callback hooks), each log
(:meth:`~NonFinitePolicy.check`, :meth:`~NonFinitePolicy.kept_step_means`,
:meth:`~NonFinitePolicy.loss_logged`) and the end of ``train()`` (:meth:`~NonFinitePolicy.train_output`).

- ``"raise"``: every step's loss terms and gradients are watched on the device (no extra host sync);
  :meth:`~NonFinitePolicy.check`, where the Trainer syncs anyway, raises
  :class:`~hf_contrast.training.loss_terms.NonFiniteLossError` naming the first bad step and terms.
- ``"skip"``: an optimizer step whose loss or a gradient is not finite is dropped (gradients set to
  ``None``, running statistics restored, a ``RuntimeWarning``; one host sync per step); the logged ``loss``
  / ``train_loss`` are means over the kept steps, and ``skipped_steps`` counts the dropped ones.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn
from transformers import TrainerCallback
from transformers.trainer_utils import TrainOutput

from .loss_terms import LossTermTracker

__all__ = ["NonFinitePolicy"]


class NonFinitePolicy(TrainerCallback):
    """The ``nonfinite_policy`` of one trainer (a callback: add it with ``trainer.add_callback``).

    Args:
        policy: ``"raise"`` or ``"skip"`` (``ContrastiveTrainingArguments.nonfinite_policy``).
        loss_terms: The trainer's tracker of the loss terms (it holds a step's terms until the verdict).
        watched: Returns the modules whose gradients and running statistics a step changes (the model and the
            objective), read at each use (the Trainer may replace its model).
    """

    def __init__(self, policy: str, loss_terms: LossTermTracker, watched: Callable[[], tuple[nn.Module, ...]]) -> None:
        self.policy = policy
        self.loss_terms = loss_terms
        self.watched = watched
        #: Optimizer steps dropped so far (``"skip"``), logged as ``skipped_steps``.
        self.skipped_steps = 0
        self._log_start = (0, 0)  # (global step, skipped steps) at the last logged loss
        self._run_start = (0, 0)  # (global step, skipped steps) when this `train()` call began
        self._state_before_step: list[tuple[Tensor, Tensor]] | None = None

    # ---- the Trainer's events --------------------------------------------------------------------

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._log_start = self._run_start = (state.global_step, self.skipped_steps)
        self.loss_terms.start_run()

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.policy == "skip":
            self._skip_step_if_nonfinite(args.device, state.global_step + 1)
        else:  # "raise": remember, on the device, the first step whose gradients were not finite
            self.loss_terms.record_gradients(self._gradients_finite(args.device), step=state.global_step + 1)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._state_before_step = None  # the next optimizer step takes its own snapshot

    # ---- consulted by the trainer ------------------------------------------------------------------

    def before_micro_batch(self) -> None:
        """Under ``"skip"``, snapshot the running statistics at an optimizer step's first micro-batch."""
        if self.policy == "skip" and self._state_before_step is None:
            self._state_before_step = self._statistics_snapshot()  # restored if this optimizer step is dropped

    def after_micro_batch(self, loss: Tensor) -> Tensor:
        """The micro-batch loss the Trainer sums for its logs: under ``"skip"`` held until the step's verdict
        and reported as 0 when not finite (the step itself is dropped)."""
        if self.policy != "skip":
            return loss
        self.loss_terms.add_step_loss(loss)  # counted in the logged losses only if the step is kept
        return torch.where(torch.isfinite(loss), loss, torch.zeros_like(loss))

    def check(self, global_step: int) -> None:
        """Under ``"raise"``: :meth:`LossTermTracker.check <hf_contrast.training.loss_terms.LossTermTracker.check>`
        (``global_step`` is named when the first bad step is unknown)."""
        if self.policy == "raise":
            self.loss_terms.check(fallback_step=global_step)

    def kept_step_means(self, logs: dict[str, float], global_step: int, args: Any, accelerator: Any) -> None:
        """Under ``"skip"``: ``train_loss`` (this ``train()`` call) and ``loss`` (since the last logged loss)
        become the means of the kept steps' losses, in place (``train()``'s returned metrics are this dict),
        plus ``skipped_steps``. The Trainer's own means count a dropped step as its loss, or as 0 when the loss
        was not finite; these sums hold only the kept steps (:class:`LossTermTracker`)."""
        if self.policy != "skip":
            return
        for key, scope, start in (("train_loss", "run", self._run_start), ("loss", "log", self._log_start)):
            if key not in logs:
                continue
            kept_sum = self.loss_terms.kept_loss_sum(scope)
            steps, skipped = global_step - start[0], self.skipped_steps - start[1]
            if skipped:  # every process skips the same steps (their gradients are all-reduced)
                total = torch.zeros((), device=args.device) if kept_sum is None else kept_sum.to(args.device)
                if args.world_size > 1:
                    total = accelerator.reduce(total, reduction="mean")
                logs[key] = float(total) / (steps - skipped) if steps > skipped else float("nan")
            if self.skipped_steps:
                logs["skipped_steps"] = self.skipped_steps

    def loss_logged(self, global_step: int) -> dict[str, int]:
        """A ``loss`` is logged at ``global_step``: the next log's mean starts here. Returns what to add to that
        log (``skipped_steps`` once any step was dropped)."""
        self._log_start = (global_step, self.skipped_steps)
        return {"skipped_steps": self.skipped_steps} if self.skipped_steps else {}

    def train_output(self, output: TrainOutput) -> TrainOutput:
        """``train()``'s output with ``training_loss`` the mean over the kept steps when this call dropped some
        (as its ``train_loss`` metric, :meth:`kept_step_means`)."""
        if self.skipped_steps > self._run_start[1] and "train_loss" in output.metrics:
            return TrainOutput(output.global_step, output.metrics["train_loss"], output.metrics)
        return output

    # ---- the step's verdict ------------------------------------------------------------------------

    def _gradients_finite(self, device: torch.device) -> Tensor:
        """Whether every gradient of the watched modules is finite: a device bool (no host sync), from ONE
        reduction over all of them (the largest absolute gradient, which is NaN or inf exactly when one is;
        ``torch.nn.utils.get_total_norm``'s fused per-device kernels) rather than a few kernels per tensor."""
        grads = [p.grad for module in self.watched() for p in module.parameters() if p.grad is not None]
        if not grads:
            return torch.tensor(True, device=device)
        total_norm = getattr(torch.nn.utils, "get_total_norm", None)  # torch >= 2.6
        if total_norm is None:  # pragma: no cover - older torch: the largest |gradient| of each tensor
            return torch.isfinite(torch.stack([torch.linalg.vector_norm(g, float("inf")) for g in grads]).amax())
        return torch.isfinite(total_norm(grads, norm_type=float("inf"), foreach=True))

    def _statistics_snapshot(self) -> list[tuple[Tensor, Tensor]]:
        """Copies of what a forward pass changes outside the optimizer: the model's buffers (BatchNorm running
        statistics) and the objective's buffers and frozen parameters (a MoCo queue and key encoder), on their
        devices; ``"skip"`` puts them back when it drops a step (NaN inputs write NaN into running statistics
        before the loss is seen)."""
        model, objective = self.watched()
        tensors = [*model.buffers(), *objective.buffers()]
        tensors += [p for p in objective.parameters() if not p.requires_grad]
        return [(t, t.detach().clone()) for t in tensors]

    def _skip_step_if_nonfinite(self, device: torch.device, step: int) -> None:
        """Drop optimizer step ``step`` (gradients set to None, running statistics restored) when its loss or a
        gradient is not finite."""
        finite = self._gradients_finite(device)
        for flag in (self.loss_terms.last_loss_finite, self.loss_terms.step_loss_finite()):
            if flag is not None:
                finite = finite & flag.to(finite.device)
        if bool(finite):  # the one host sync per step of the "skip" policy
            self.loss_terms.commit()
            return
        for module in self.watched():
            for p in module.parameters():
                p.grad = None
        with torch.no_grad():
            for tensor, saved in self._state_before_step or []:
                tensor.copy_(saved)
        self.loss_terms.discard()
        self.skipped_steps += 1
        warnings.warn(
            f"Step {step}: non-finite loss or gradients; the optimizer step was skipped "
            f"(`nonfinite_policy='skip'`, {self.skipped_steps} skipped so far, logged as `skipped_steps`).",
            RuntimeWarning,
            stacklevel=2,
        )
