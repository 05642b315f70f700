"""The trainer's per-step features: loss-term tracking, the non-finite policy, rows left out, the objective's own
parameters, the run's sessions and cached-gradient steps.

Formerly also the modules ``loss_terms``, ``nonfinite``, ``left_out_rows``, ``objective_parameters``,
``run_sessions``, ``gradient_cache`` of ``hf_contrast.training`` (their import paths still work, with a
``FutureWarning``). Their parts follow.

``LossTermTracker``: the running mean of each loss term and the non-finite watch, without host syncs.

The trainer records every step's named terms (tensors, kept on the device); the tracker

- sums them for the logs (``loss_<term>``, averaged over the logging interval and over processes);
- remembers, on the device, whether a term was NaN/inf and the first step where the total was, so
  :meth:`check` — called where the Trainer syncs anyway (each log, each checkpoint, the end of training) —
  can raise :class:`NonFiniteLossError` naming the step and the terms;
- under ``nonfinite_policy="skip"`` holds a step's terms as *pending* until the step's verdict
  (:meth:`commit` or :meth:`discard`), so a dropped step never reaches the logs; the total loss the
  ``Trainer`` sums for a step (:meth:`add_step_loss`) is held the same way, so the logged ``loss`` /
  ``train_loss`` and ``TrainOutput.training_loss`` are means over the kept steps (:meth:`kept_loss_sum`),
  whether a step was dropped for its loss or for a gradient.

``nonfinite_policy``: what a training step with a NaN/inf loss or gradient does to the run.

:class:`NonFinitePolicy` owns the policy's state (steps skipped, where this ``train()`` call and the last
logged loss began, the snapshot of running statistics taken before an optimizer step) and is consulted at
four points: each micro-batch's loss (:meth:`~NonFinitePolicy.micro_batch_loss`, from ``compute_loss``), each
optimizer step (its callback hooks: the snapshot at ``on_step_begin``, the verdict at ``on_pre_optimizer_step``),
each log
(:meth:`~NonFinitePolicy.check`, :meth:`~NonFinitePolicy.kept_step_means`,
:meth:`~NonFinitePolicy.loss_logged`) and the end of ``train()`` (:meth:`~NonFinitePolicy.train_output`).

- ``"raise"``: every step's loss terms and gradients are watched on the device (no extra host sync);
  :meth:`~NonFinitePolicy.check`, where the Trainer syncs anyway, raises
  :class:`~hf_contrast.training.callbacks.NonFiniteLossError` naming the first bad step and terms.
- ``"skip"``: an optimizer step whose loss or a gradient is not finite is dropped (gradients set to
  ``None``, running statistics restored, a ``RuntimeWarning``; one host sync per step); the logged ``loss``
  / ``train_loss`` are means over the kept steps, and ``skipped_steps`` counts the dropped ones.

The rows the collators left out of their batches (``on_bad_image="skip"``), counted and reported per stage.

The collators mark each batch with the unreadable rows they left out (``skipped_images``) and the readable
rows they left out with them to keep the objective's chunks or class groups whole (``dropped_rows``,
:mod:`hf_contrast.views.whole_rows`). :class:`LeftOutRows` sums both on the device (no host sync per step),
separately for ``"train"`` (one ``train()`` call) and ``"eval"`` (one evaluation), and :meth:`LeftOutRows.report`
sums them over the processes once, warning when they are not zero; the trainer reports them as
``train_skipped_images`` / ``train_dropped_rows`` and ``<prefix>_skipped_images`` / ``<prefix>_dropped_rows``.

The objective's own trainable parameters (a learnable temperature, LOCAL's classifier) in the optimizer.

They live in ``trainer.objective``, not in the model, so the Trainer neither puts them in its optimizer nor
averages their gradients (DDP averages the model's): :func:`add_objective_parameter_groups` adds them (after
making them identical on every process), and the callback :class:`ObjectiveGradients` averages their gradients
over the processes before each optimizer step (:func:`average_gradients`) and zeroes them after it.

``RunSessions``: a run trained in several ``train()`` calls (resumed after a stop, or continued to a larger
``max_steps``) reports its results over the whole run, not over the last call.

Each call of ``train()`` is a *session*: it starts at the step it resumed from (0 for a fresh run) and
runs until it ends or is stopped. The sessions that made the current weights, with the seconds each
trained until its last checkpoint (or its end), travel in every checkpoint (``contrastive_state.pt``),
so a resumed run knows them. At the end of a resumed call, ``train()``'s metrics describe the whole run:

- ``train_runtime``: the seconds of every session that made these weights (an interrupted session counts
  until its last checkpoint: its later steps were trained again);
- ``train_loss``: the mean training loss over the run's steps: this session's own mean, and for earlier
  sessions the losses logged in ``log_history`` within their steps (the few steps an earlier session ran
  after its last logged loss have no recorded loss and are not counted; ``train_loss_steps`` says how
  many steps the mean covers);
- ``train_steps_per_second`` / ``train_samples_per_second``: the run's steps (and samples, steps × the
  global batch) over that runtime;
- ``train_sessions``: how many sessions; this call's own values as ``session_train_runtime``,
  ``session_train_loss`` and ``session_train_steps``.

A run trained in one call keeps ``Trainer.train``'s metrics as they are.

Cached-gradient training (GradCache, Gao et al. 2021, https://arxiv.org/abs/2101.06983): batches beyond memory.

The objective sees the whole batch — all negatives, whole CARE chunks, MoCo's queue once — while the
encoder only ever holds the activations of ``mini_batch_size`` rows:

1. every encoder call of the objective's forward (:meth:`GradientCache.encode`) runs the encoder in
   mini-batches **without a graph** and returns the outputs as leaf tensors that require gradients;
2. the objective's loss is computed on the whole batch and the Trainer back-propagates it as any loss: the
   leaves receive ``∂loss/∂outputs`` (and objective-owned parameters their gradients);
3. as soon as every leaf has its gradient, inside that same backward (:meth:`GradientCache.attach`: a
   multi-gradient hook on the leaves, as sentence-transformers' cached losses hook their loss),
   :meth:`GradientCache.backward` re-runs each mini-batch **with a graph**, under the RNG state it had in
   step 1 (so dropout — SimCSE's views — and any randomness inside the encoder are the same), and
   back-propagates ``Σ outputs · cached gradient``, which gives each parameter exactly the full-batch
   gradient (a gradient scaler's factor included: it is in the cached gradients).

Exactness: equal to the direct step (to float rounding) for encoders without batch statistics
(LayerNorm, GroupNorm, BERT). With BatchNorm the normalisation statistics are per mini-batch, as with
any micro-batching (the running statistics are updated by the graph pass only, once per mini-batch);
the usual remedies are a larger ``mini_batch_size``, ``GroupNorm``/``LayerNorm`` backbones, or frozen BN
statistics. Cost: one extra forward pass of the encoder per step.
"""

from __future__ import annotations

import contextlib
import math
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn
from transformers import TrainerCallback
from transformers.trainer_utils import TrainOutput
from transformers.utils import logging

import hf_contrast.distributed as distributed
from hf_contrast.tensor_checks import check_int
from hf_contrast.views import pop_dropped_rows, pop_skipped_images

__all__ = [
    "add_objective_parameter_groups",
    "average_gradients",
    "GradientCache",
    "LeftOutRows",
    "LossTermTracker",
    "NonFiniteLossError",
    "NonFinitePolicy",
    "RunSessions",
    "ObjectiveGradients",
    "summed_loss",
    "whole_run_loss",
]


# ==================== loss terms ======================================================================


class NonFiniteLossError(FloatingPointError, RuntimeError):
    """A training loss, gradient or weight was NaN/inf: training stops before a checkpoint is written
    (``nonfinite_policy="raise"``; raised by :class:`LossTermTracker` and by the checkpointing mixin)."""


class LossTermTracker:
    """Per-term sums for logging and device-side non-finite flags.

    Args:
        defer: Hold each step's terms until :meth:`commit` / :meth:`discard` (``nonfinite_policy="skip"``).
    """

    def __init__(self, defer: bool = False) -> None:
        self.defer = defer
        self._sums: dict[str, Tensor] = {}
        self._counts: dict[str, int] = {}
        self._pending: dict[str, Tensor] = {}
        self._pending_counts: dict[str, int] = {}
        self._nonfinite: dict[str, Tensor] = {}
        self._first_bad_step: Tensor | None = None
        self._first_bad_gradient_step: Tensor | None = None
        #: Whether the last recorded total loss was finite (a device bool), for the step's verdict.
        self.last_loss_finite: Tensor | None = None
        self.skipped_batches = 0
        self._step_loss: Tensor | None = None  # this optimizer step's summed micro-batch losses (pending)
        self._kept_loss: dict[str, Tensor] = {}  # "log": since the last logged loss, "run": this `train()` call
        self._host_sums: dict[str, float] | None = None  # the sums as `check` read them (one transfer per log)

    def _read_sums(self) -> dict[str, float]:
        """The terms' sums on the host, in one transfer."""
        if not self._sums:
            return {}
        values = torch.stack([t.detach().float().reshape(()) for t in self._sums.values()]).tolist()
        return dict(zip(self._sums, values))

    def record(self, terms: Mapping[str, Tensor], step: int) -> None:
        """Add one micro-batch's terms (``"loss"`` is the total; it is watched, not logged as a term)."""
        self._host_sums = None  # the sums change: what `check` read is stale
        sums, counts = (self._pending, self._pending_counts) if self.defer else (self._sums, self._counts)
        for name, value in terms.items():
            if not isinstance(value, Tensor):
                continue
            value = value.detach().float()
            bad = ~torch.isfinite(value)
            self._nonfinite[name] = self._nonfinite[name] | bad if name in self._nonfinite else bad
            if name == "loss":
                self.last_loss_finite = ~bad
                first = self._first_bad_step
                here = torch.full_like(value, step, dtype=torch.long)
                none = torch.full_like(here, -1)
                self._first_bad_step = (
                    torch.where(bad, here, none) if first is None else torch.where((first < 0) & bad, here, first)
                )
                continue
            sums[name] = sums[name] + value if name in sums else value
            counts[name] = counts.get(name, 0) + 1

    def record_gradients(self, finite: Tensor, step: int) -> None:
        """Remember (on the device) ``step`` if it is the first whose gradients were not finite."""
        here = torch.full((), step, dtype=torch.long, device=finite.device)
        first = self._first_bad_gradient_step
        if first is None:
            first = torch.full((), -1, dtype=torch.long, device=finite.device)
        self._first_bad_gradient_step = torch.where((first < 0) & ~finite, here, first)

    def add_step_loss(self, loss: Tensor) -> None:
        """Add a micro-batch's loss as the ``Trainer`` sums it (already divided by the accumulation steps) to the
        pending optimizer step (``defer``: counted by :meth:`commit`, forgotten by :meth:`discard`)."""
        loss = loss.detach().float()
        self._step_loss = loss if self._step_loss is None else self._step_loss + loss

    def step_loss_finite(self) -> Tensor | None:
        """Whether the pending step's summed loss is finite (a device bool), ``None`` before any."""
        return None if self._step_loss is None else torch.isfinite(self._step_loss)

    def kept_loss_sum(self, scope: str) -> Tensor | None:
        """The summed loss of the kept steps (this process) since the last call for ``scope`` ("log": since the
        last logged loss; "run": since :meth:`start_run`), ``None`` if none was kept; resets that scope."""
        return self._kept_loss.pop(scope, None)

    def start_run(self) -> None:
        """A ``train()`` call begins: its kept-loss sums start at zero."""
        self._kept_loss.clear()
        self._step_loss = None

    def commit(self) -> None:
        """The step was kept: its pending terms count in the logs."""
        self._host_sums = None
        if self._step_loss is not None:
            for scope in ("log", "run"):
                kept = self._kept_loss.get(scope)
                self._kept_loss[scope] = self._step_loss if kept is None else kept + self._step_loss
            self._step_loss = None
        for name, total in self._pending.items():
            self._sums[name] = self._sums[name] + total if name in self._sums else total
            self._counts[name] = self._counts.get(name, 0) + self._pending_counts[name]
        self._pending, self._pending_counts = {}, {}

    def discard(self) -> None:
        """The step was dropped: forget its terms and its non-finite flags."""
        self._pending, self._pending_counts = {}, {}
        self._step_loss = None
        self._nonfinite.clear()
        self._first_bad_step = None
        self.last_loss_finite = None

    def check(self, fallback_step: int) -> None:
        """Raise :class:`NonFiniteLossError` if a term since the last check was NaN/inf (one host sync).

        Args:
            fallback_step: The step named when the first bad step is unknown (a NaN term with a finite total).
        """
        advice = (
            "Training stopped before writing a checkpoint with these weights; the last checkpoint is intact. Lower "
            "the learning rate, enable gradient clipping (`max_grad_norm`), check the inputs, or set "
            "`nonfinite_policy='skip'` to drop such steps (`save_model(..., allow_nonfinite=True)` writes these "
            "weights anyway)."
        )
        first_grad, first_loss, flags = self._read()
        if first_grad >= 0 and (first_loss < 0 or first_grad < first_loss):  # the fault began in a backward pass
            raise NonFiniteLossError(
                f"Non-finite gradients at step {first_grad} (its loss was finite: the backward pass of a loss term "
                f"overflowed, or an input gave an infinite derivative). {advice}"
            )
        if not flags:
            return
        if not any(flags.values()):
            self._nonfinite.clear()
            return
        step = first_loss if first_loss >= 0 else fallback_step
        bad = sorted(name for name, flag in flags.items() if flag and name != "loss") or ["loss"]
        raise NonFiniteLossError(f"Non-finite training loss at step {step} (terms: {', '.join(bad)}). {advice}")

    def _read(self) -> tuple[int, int, dict[str, bool]]:
        """The first bad gradient and loss steps (-1: none), the non-finite flags, and (kept for :meth:`drain`) the
        terms' sums, read from the device in ONE transfer."""
        flag_names, sum_names = list(self._nonfinite), list(self._sums)
        tensors = [self._first_bad_gradient_step, self._first_bad_step]
        tensors += [self._nonfinite[name] for name in flag_names] + [self._sums[name] for name in sum_names]
        present = [t for t in tensors if t is not None]
        if not present:
            self._host_sums = {}
            return -1, -1, {}
        wide = torch.float32 if present[0].device.type == "mps" else torch.float64  # steps stay exact
        values = torch.stack([t.detach().reshape(()).to(present[0].device, wide) for t in present]).tolist()
        it = iter(values)
        first_grad, first_loss = (int(next(it)) if t is not None else -1 for t in tensors[:2])
        flags = {name: bool(next(it)) for name in flag_names}
        self._host_sums = {name: next(it) for name in sum_names}
        return first_grad, first_loss, flags

    def drain(self) -> dict[str, float]:
        """``{"loss_<term>": mean}`` since the last call (over all processes) and ``skipped_batches``; resets."""
        host = self._host_sums if self._host_sums is not None else self._read_sums()  # read by `check`, if it ran
        local = {name: (host[name], self._counts[name]) for name in self._sums}
        self._host_sums = None
        skipped = self.skipped_batches
        self._sums, self._counts, self.skipped_batches = {}, {}, 0
        if distributed.world_size() > 1:  # `log` runs on every process at the same steps
            gathered: list[Any] = [None] * distributed.world_size()
            dist.all_gather_object(gathered, (local, skipped))
            merged: dict[str, tuple[float, int]] = {}
            skipped = 0
            for terms, n_skipped in gathered:
                skipped += n_skipped
                for name, (total, count) in terms.items():
                    old_total, old_count = merged.get(name, (0.0, 0))
                    merged[name] = (old_total + total, old_count + count)
            local = merged
        logs = {f"loss_{name}": total / count for name, (total, count) in local.items() if count > 0}
        if skipped:
            logs["skipped_batches"] = skipped
        return logs


# ==================== nonfinite =======================================================================


def summed_loss(loss: Tensor, accumulation_steps: int) -> Tensor:
    """A micro-batch's loss as the Trainer sums it for its logs: detached, divided by the accumulation steps (no
    division, so no kernel, for one)."""
    return loss.detach() if accumulation_steps == 1 else loss.detach() / accumulation_steps


_FUSED_CHECK_ON_CPU = False
"""Whether :func:`all_finite` takes the fused path on the CPU too (benchmarks/bench_step_overhead.py counts the
operations of the path a GPU runs)."""


def all_finite(tensors: Sequence[Tensor], device: torch.device, fused: bool | None = None) -> Tensor:
    """Whether every element of ``tensors`` is finite, as a bool tensor on their device (``device`` when none has
    an element; no host read).

    ``fused`` (default: a tensor is not on the CPU): ONE reduction over all of them, the largest absolute value
    (NaN or inf exactly when one element is), by ``torch.nn.utils.get_total_norm``'s fused per-device kernels: a few
    kernel launches whatever the number of tensors, where the launches bound a GPU step. Otherwise each tensor's
    minimum and maximum (NaN or ±inf exactly when one element is), which a CPU computes ~14x faster than the
    order-∞ norm (ResNet-18's gradients: 1.2 against 15.7 ms on 2 cores).
    """
    tensors = [t for t in tensors if t.numel()]  # an empty one (a zero-size parameter) has no element to check
    if not tensors:
        return torch.tensor(True, device=device)
    if fused is None:
        fused = _FUSED_CHECK_ON_CPU or any(t.device.type != "cpu" for t in tensors)
    total_norm = getattr(torch.nn.utils, "get_total_norm", None)  # torch >= 2.6
    if fused and total_norm is not None:
        return torch.isfinite(total_norm(tensors, norm_type=float("inf"), foreach=True))
    extremes = [torch.stack(torch.aminmax(t.abs() if t.is_complex() else t)) for t in tensors]
    return torch.isfinite(torch.stack(extremes)).all()


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
        self._parameters: tuple[tuple[int, ...], list[nn.Parameter]] | None = None  # (module ids, their parameters)

    # ---- the Trainer's events --------------------------------------------------------------------

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._log_start = self._run_start = (state.global_step, self.skipped_steps)
        self._parameters = None  # listed again at this run's first check (the modules may have changed)
        self.loss_terms.start_run()

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.policy == "skip":
            self._skip_step_if_nonfinite(args.device, state.global_step + 1)
        else:  # "raise": remember, on the device, the first step whose gradients were not finite
            self.loss_terms.record_gradients(self._gradients_finite(args.device), step=state.global_step + 1)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        # before an optimizer step's first micro-batch: under "skip", snapshot what its forward passes change
        if self.policy == "skip" and self._state_before_step is None:
            self._state_before_step = self._statistics_snapshot()  # restored if this optimizer step is dropped

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._state_before_step = None  # the next optimizer step takes its own snapshot

    # ---- consulted by the trainer ------------------------------------------------------------------

    def micro_batch_loss(self, loss: Tensor, accumulation_steps: int) -> Tensor:
        """The loss ``compute_loss`` returns for a training micro-batch. Under ``"skip"`` its value as the Trainer
        sums it for its logs (divided by ``accumulation_steps``) is held until the step's verdict, and a loss that
        is not finite is returned as 0 (the step itself is dropped: its gradients never reach the optimizer), so
        the Trainer's sum stays finite; under ``"raise"`` it is returned as it is."""
        if self.policy != "skip":
            return loss
        self.loss_terms.add_step_loss(summed_loss(loss, accumulation_steps))  # logged only if the step is kept
        return torch.where(torch.isfinite(loss), loss, torch.zeros_like(loss))

    def check(self, global_step: int) -> None:
        """Under ``"raise"``: :meth:`LossTermTracker.check <hf_contrast.training.callbacks.LossTermTracker.check>`
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

    @property
    def skipped_this_call(self) -> int:
        """Optimizer steps dropped since this ``train()`` call began."""
        return self.skipped_steps - self._run_start[1]

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
        """Whether every gradient of the watched modules is finite: a device bool (no host sync)
        (:func:`all_finite`)."""
        grads = [p.grad for p in self._watched_parameters() if p.grad is not None]
        return all_finite(grads, device)

    def _watched_parameters(self) -> list[nn.Parameter]:
        """The watched modules' parameters, listed once per ``train()`` call and again if the Trainer replaces a
        module (walking every module at every step is host time a GPU step waits for). Parameters are fixed by
        then: the optimizer was built with them."""
        modules = self.watched()
        key = tuple(id(module) for module in modules)
        if self._parameters is None or self._parameters[0] != key:
            self._parameters = (key, [p for module in modules for p in module.parameters()])
        return self._parameters[1]

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
        for p in self._watched_parameters():
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


# ==================== left out rows ===================================================================


logger = logging.get_logger(__name__)  # follows the Trainer's log level (hf_contrast.progress)


class LeftOutRows:
    """Device counts of the rows left out of the ``"train"`` and ``"eval"`` batches (scalar tensors or None)."""

    def __init__(self) -> None:
        self.skipped_images: dict[str, Tensor | None] = {"train": None, "eval": None}
        self.dropped_rows: dict[str, Tensor | None] = {"train": None, "eval": None}

    def start(self, stage: str) -> None:
        """A ``train()`` call or an evaluation begins: its counts start at zero."""
        self.skipped_images[stage] = self.dropped_rows[stage] = None

    def count(self, inputs: dict[str, Any], stage: str) -> None:
        """Add the rows this batch's collator left out (popped from ``inputs``) to the ``stage`` counts."""
        for counts, value in (
            (self.skipped_images, pop_skipped_images(inputs)),
            (self.dropped_rows, pop_dropped_rows(inputs)),
        ):
            if value is not None:
                count = counts.get(stage)
                counts[stage] = value if count is None else count + value.to(count.device)

    def report(self, stage: str, what: str, args: Any, accelerator: Any) -> tuple[int, int]:
        """The ``stage`` counts of ``skipped_images`` and ``dropped_rows`` summed over the processes (every process
        calls this: one all-reduce for both), each with a warning naming ``what`` when it is not zero (by the main
        process)."""
        local = torch.zeros(2, dtype=torch.long, device=args.device)
        for i, counts in enumerate((self.skipped_images, self.dropped_rows)):
            count = counts.get(stage)
            if count is not None:
                local[i] += count.to(local.device)
        if args.world_size > 1:
            local = accelerator.reduce(local, reduction="sum")
        skipped, dropped = (int(v) for v in local.tolist())
        if not getattr(accelerator, "is_main_process", True):  # the sums are every process's: said once
            return skipped, dropped
        if skipped:
            logger.warning(
                "%d unreadable image row(s) were left out of the %s batches (on_bad_image='skip'); the warnings "
                "above name their files.", skipped, what,
            )  # fmt: skip
        if dropped:
            logger.warning(
                "%d readable row(s) were left out of the %s batches that lost bad images, to keep the objective's "
                "chunks or class groups whole (on_bad_image='skip'; reported as `dropped_rows`).", dropped, what,
            )  # fmt: skip
        return skipped, dropped


# ==================== objective parameters ============================================================


class ObjectiveGradients(TrainerCallback):
    """The gradients of the objective's own trainable parameters, which ``Trainer`` neither averages (DDP averages
    the model's) nor zeroes: averaged over the processes before every optimizer step (before the callbacks added
    after this one, such as :class:`NonFinitePolicy`, read them), zeroed before training and after every step."""

    def __init__(self, objective: nn.Module) -> None:
        self.objective = objective

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.objective.zero_grad(set_to_none=True)

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        average_gradients([p for p in self.objective.parameters() if p.requires_grad])

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.objective.zero_grad(set_to_none=True)


def average_gradients(params: list[nn.Parameter]) -> None:
    """Replace each parameter's gradient by its mean over the processes (a missing gradient counts as 0)."""
    world = distributed.world_size()
    if not params or world == 1:
        return
    for p in params:
        grad = p.grad if p.grad is not None else torch.zeros_like(p)
        dist.all_reduce(grad, op=dist.ReduceOp.SUM)
        p.grad = grad / world


def add_objective_parameter_groups(
    optimizer: torch.optim.Optimizer,
    objective: nn.Module,
    params: list[nn.Parameter],
    weight_decay: float,
    created: bool,
) -> None:
    """Give ``params`` (the objective's trainable parameters) their optimizer groups.

    When the trainer ``created`` the optimizer: the objective's parameters and buffers are broadcast from
    process 0, then matrices get ``weight_decay`` and vectors and scalars (temperatures, biases) none. A
    user-given optimizer is left as it is; a warning says when it misses some of ``params``.
    """
    if not params:
        return
    if created:
        if distributed.world_size() > 1:
            for tensor in [*objective.parameters(), *objective.buffers()]:
                dist.broadcast(tensor.data, src=0)
        decay = [p for p in params if p.ndim >= 2]
        no_decay = [p for p in params if p.ndim < 2]
        target = getattr(optimizer, "optimizer", optimizer)
        if decay:
            target.add_param_group({"params": decay, "weight_decay": weight_decay})
        if no_decay:
            target.add_param_group({"params": no_decay, "weight_decay": 0.0})
        return
    known = {id(p) for group in optimizer.param_groups for p in group["params"]}
    if any(id(p) not in known for p in params):
        warnings.warn(
            f"The given optimizer does not hold the trainable parameters of {type(objective).__name__}; "
            "they will not be trained. Add `trainer.objective_parameters()`.",
            UserWarning,
            stacklevel=3,
        )


# ==================== run sessions ====================================================================


class RunSessions(TrainerCallback):
    """The sessions of a run: ``[{"start_step": int, "runtime_s": float}, ...]``, oldest first."""

    def __init__(self) -> None:
        self.sessions: list[dict[str, float]] = []
        self._started: float | None = None
        self._loss_sum: Tensor | None = None  # this session's summed step losses, on the device

    def state_dict(self) -> dict[str, Any]:
        """The sessions so far, the current one timed until now (saved with every checkpoint)."""
        self._clock()
        return {"sessions": [dict(session) for session in self.sessions]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the sessions of the checkpoint a run resumes from (before its ``train()`` begins)."""
        self.sessions = [
            {"start_step": int(s["start_step"]), "runtime_s": float(s["runtime_s"])} for s in state["sessions"]
        ]

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        # sessions that began at or after the resumed step belong to a branch these weights are not from
        self.sessions = [s for s in self.sessions if s["start_step"] < state.global_step]
        self.sessions.append({"start_step": state.global_step, "runtime_s": 0.0})
        self._started = time.monotonic()
        self._loss_sum = None

    def add_loss(self, loss: Tensor) -> None:
        """Add a micro-batch's loss as the Trainer sums it (divided by the accumulation steps, 0 for a step
        ``nonfinite_policy="skip"`` drops): kept on the device, read once at the end of a resumed run."""
        loss = loss.detach().float()
        self._loss_sum = loss if self._loss_sum is None else self._loss_sum + loss

    def session_loss(self, kept_steps: int, accelerator: Any = None) -> float | None:
        """This session's mean training loss over its ``kept_steps`` (averaged over the processes), from this
        object's own sum: ``Trainer``'s ``train_loss`` of a resumed call divides by the session's steps in recent
        transformers and by the run's in older ones (5.0), so it is not used. ``None`` before any step."""
        if self._loss_sum is None or kept_steps <= 0:
            return None
        total = self._loss_sum
        if accelerator is not None and accelerator.num_processes > 1:
            total = accelerator.reduce(total, reduction="mean")
        return float(total) / kept_steps

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._clock()
        self._started = None

    def _clock(self) -> None:
        if self._started is not None and self.sessions:
            self.sessions[-1]["runtime_s"] = time.monotonic() - self._started

    def whole_run(
        self,
        output: TrainOutput,
        log_history: Sequence[Mapping[str, Any]],
        global_batch: int,
        skipped_steps: int = 0,
        accelerator: Any = None,
    ) -> TrainOutput:
        """``train()``'s output over the whole run when it had earlier sessions (see the module), else as is.

        Args:
            output: What ``Trainer.train`` returned for this call.
            log_history: ``trainer.state.log_history`` (it holds the earlier sessions' logged losses).
            global_batch: Samples per optimizer step over all processes.
            skipped_steps: Steps of this session that ``nonfinite_policy="skip"`` dropped.
            accelerator: The trainer's ``Accelerator`` (the session's loss is averaged over its processes).
        """
        if len(self.sessions) < 2 or "train_runtime" not in output.metrics:
            return output
        metrics = dict(output.metrics)
        start = int(self.sessions[-1]["start_step"])
        session_steps = output.global_step - start
        kept = session_steps - skipped_steps
        session_loss = self.session_loss(kept, accelerator)
        bounds = [(int(s["start_step"]), int(t["start_step"])) for s, t in zip(self.sessions, self.sessions[1:])]
        loss, loss_steps = whole_run_loss(log_history, bounds, session_loss, kept)
        runtime = sum(s["runtime_s"] for s in self.sessions)
        per_second = 1.0 / runtime if runtime > 0 else float("nan")
        metrics.update(
            session_train_runtime=metrics["train_runtime"],
            session_train_loss=session_loss if session_loss is not None else float("nan"),
            session_train_steps=session_steps,
            train_sessions=len(self.sessions),
            train_runtime=round(runtime, 4),
            train_loss=loss,
            train_loss_steps=loss_steps,
            train_steps_per_second=round(output.global_step * per_second, 3),
            train_samples_per_second=round(output.global_step * global_batch * per_second, 3),
        )
        return TrainOutput(output.global_step, loss, metrics)


def whole_run_loss(
    log_history: Sequence[Mapping[str, Any]],
    earlier: Sequence[tuple[int, int]],
    session_loss: float | None,
    session_steps: int,
) -> tuple[float, int]:
    """The step-weighted mean training loss of a run: the logged losses of its earlier sessions and the last
    session's own mean.

    Args:
        log_history: Entries with ``loss`` and ``step`` (a logged loss is the mean over the steps since the
            previous log of its session).
        earlier: ``(start, end)`` steps of each earlier session (it trained steps ``start + 1 .. end``).
        session_loss: The last session's mean loss (``None``: not known).
        session_steps: Steps of the last session.

    Returns:
        ``(mean, steps)``: the mean and how many steps it covers.
    """
    total, steps = 0.0, 0
    for start, end in earlier:
        previous = start
        for entry in log_history:
            step = entry.get("step")
            if "loss" in entry and isinstance(step, int) and start < step <= end:
                if math.isfinite(entry["loss"]):
                    total += float(entry["loss"]) * (step - previous)
                    steps += step - previous
                previous = step
    if session_loss is not None and session_steps > 0 and math.isfinite(session_loss):
        total += float(session_loss) * session_steps
        steps += session_steps
    return (total / steps if steps else float("nan")), steps


# ==================== gradient cache ==================================================================


@dataclass
class _RNGState:
    """The CPU and accelerator generator states at one point (to replay dropout)."""

    cpu: Tensor
    cuda: list[Tensor] | None = None
    devices: list[int] = field(default_factory=list)

    @classmethod
    def capture(cls, tensors: list[Tensor]) -> _RNGState:
        devices = sorted({t.device.index or 0 for t in tensors if t.device.type == "cuda"})
        cuda = [torch.cuda.get_rng_state(d) for d in devices] if devices else None
        return cls(torch.get_rng_state(), cuda, devices)

    @contextlib.contextmanager
    def replay(self) -> Iterator[None]:
        with torch.random.fork_rng(devices=self.devices):
            torch.set_rng_state(self.cpu)
            for device, state in zip(self.devices, self.cuda or []):
                torch.cuda.set_rng_state(state, device)
            yield


def _rows(inputs: Mapping[str, Any]) -> int:
    return next(v.shape[0] for v in inputs.values() if isinstance(v, Tensor) and v.ndim > 0)


def _slice(inputs: Mapping[str, Any], start: int, stop: int, n: int) -> dict[str, Any]:
    return {
        k: v[start:stop] if isinstance(v, Tensor) and v.ndim > 0 and v.shape[0] == n else v for k, v in inputs.items()
    }


def _leaf(value: Tensor) -> Tensor:
    return value.detach().requires_grad_(value.is_floating_point())


def _record_leaves(record: _Record) -> list[Tensor]:
    return [leaf for value in record.outputs.values() for leaf in (value if isinstance(value, tuple) else (value,))]


@dataclass
class _Record:
    model: nn.Module
    chunks: list[dict[str, Any]]
    forward_kwargs: dict[str, Any]
    rng: list[_RNGState]
    outputs: dict[str, Any]
    bounds: list[tuple[int, int]]


class GradientCache:
    """Run the encoder in mini-batches for one training step (see the module docstring).

    Args:
        mini_batch_size: Rows per encoder pass (``args.gradient_cache_size``).

    Raises:
        ValueError: if ``mini_batch_size`` is not a positive int.
    """

    def __init__(self, mini_batch_size: int) -> None:
        self.mini_batch_size = check_int("gradient_cache_size", mini_batch_size, 1)
        self.records: list[_Record] = []

    def encode(self, model: nn.Module, inputs: Mapping[str, Any], **forward_kwargs: Any) -> dict[str, Any]:
        """The model's outputs for ``inputs``, computed in mini-batches without a graph, as leaves.

        Returns:
            A dict like the model output: each batched tensor (and tuple of tensors) concatenated over the
            mini-batches, detached and requiring gradients.
        """
        n = _rows(inputs)
        bounds = [(s, min(s + self.mini_batch_size, n)) for s in range(0, n, self.mini_batch_size)]
        chunks = [_slice(inputs, a, b, n) for a, b in bounds]
        rng: list[_RNGState] = []
        parts: list[Mapping[str, Any]] = []
        # BatchNorm running statistics move in the graph pass only (once per row, as in a direct step).
        norms = [
            m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats
        ]
        saved = [
            [b.clone() for b in (m.running_mean, m.running_var, m.num_batches_tracked) if b is not None] for m in norms
        ]
        for chunk in chunks:
            rng.append(_RNGState.capture([v for v in chunk.values() if isinstance(v, Tensor)]))
            with torch.no_grad():
                parts.append(model(**chunk, **forward_kwargs))
        with torch.no_grad():
            for module, buffers in zip(norms, saved):
                current = [
                    b for b in (module.running_mean, module.running_var, module.num_batches_tracked) if b is not None
                ]
                for target, value in zip(current, buffers):
                    target.copy_(value)
        outputs: dict[str, Any] = {}
        for key, value in parts[0].items():
            if isinstance(value, Tensor) and value.ndim > 0:
                outputs[key] = _leaf(torch.cat([p[key] for p in parts]))
            elif isinstance(value, (tuple, list)) and value and all(isinstance(v, Tensor) for v in value):
                outputs[key] = tuple(_leaf(torch.cat([p[key][i] for p in parts])) for i in range(len(value)))
        self.records.append(_Record(model, chunks, dict(forward_kwargs), rng, outputs, bounds))
        return outputs

    def attach(self) -> None:
        """Run :meth:`backward` inside the backward of the loss made from this step's outputs, as soon as every
        output has its gradient (``torch.autograd.graph.register_multi_grad_hook``): whoever back-propagates the
        loss — the Trainer's ``accelerator.backward``, with its gradient scaler — also back-propagates the
        encoder. An output the loss does not use is left out."""
        leaves = [leaf for record in self.records for leaf in _record_leaves(record) if leaf.requires_grad]
        if not leaves:
            return

        def replay(grads: Sequence[Tensor | None]) -> None:
            with torch.enable_grad():  # a backward runs its hooks without a graph
                self.backward({id(leaf): grad for leaf, grad in zip(leaves, grads) if grad is not None})

        torch.autograd.graph.register_multi_grad_hook(leaves, replay, mode="all")

    def backward(self, grads: Mapping[int, Tensor] | None = None) -> None:
        """Re-run every recorded mini-batch with a graph and back-propagate the cached output gradients
        (``grads``: by ``id`` of the output leaf; default each leaf's ``.grad``).

        Under DDP the gradient all-reduce runs once, with the last mini-batch.
        """
        work = [(r, i) for r in self.records for i in range(len(r.chunks))]
        for position, (record, i) in enumerate(work):
            last = position == len(work) - 1
            sync = contextlib.nullcontext() if last or not hasattr(record.model, "no_sync") else record.model.no_sync()
            a, b = record.bounds[i]
            with sync, record.rng[i].replay():
                out = record.model(**record.chunks[i], **record.forward_kwargs)
                surrogate = None
                for key, leaf in record.outputs.items():
                    pairs = zip(out[key], leaf) if isinstance(leaf, tuple) else [(out[key], leaf)]
                    for value, cached in pairs:
                        grad = cached.grad if grads is None else grads.get(id(cached))
                        if grad is not None:
                            term = (value * grad[a:b].to(value.dtype)).sum()
                            surrogate = term if surrogate is None else surrogate + term
                if surrogate is not None:
                    surrogate.backward()
        self.records.clear()


def __getattr__(name: str) -> Any:
    """``ZeroObjectiveGradients``, the former name of :class:`ObjectiveGradients` (with a ``FutureWarning``)."""
    if name == "ZeroObjectiveGradients":
        warnings.warn(
            "`ZeroObjectiveGradients` is now `ObjectiveGradients` (it also averages the objective's gradients over "
            "the processes before each optimizer step); the old name will be removed.",
            FutureWarning,
            stacklevel=2,
        )
        return ObjectiveGradients
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
