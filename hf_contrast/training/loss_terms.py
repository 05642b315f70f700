"""``LossTermTracker``: the running mean of each loss term and the non-finite watch, without host syncs.

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
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

import hf_contrast.distributed as distributed

__all__ = ["LossTermTracker", "NonFiniteLossError"]


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
