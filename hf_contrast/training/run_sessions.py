"""``RunSessions``: a run trained in several ``train()`` calls (resumed after a stop, or continued to a larger
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
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

from transformers import TrainerCallback
from transformers.trainer_utils import TrainOutput

__all__ = ["RunSessions", "whole_run_loss"]


class RunSessions(TrainerCallback):
    """The sessions of a run: ``[{"start_step": int, "runtime_s": float}, ...]``, oldest first."""

    def __init__(self) -> None:
        self.sessions: list[dict[str, float]] = []
        self._started: float | None = None

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

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._clock()
        self._started = None

    def _clock(self) -> None:
        if self._started is not None and self.sessions:
            self.sessions[-1]["runtime_s"] = time.monotonic() - self._started

    def whole_run(
        self, output: TrainOutput, log_history: Sequence[Mapping[str, Any]], global_batch: int
    ) -> TrainOutput:
        """``train()``'s output over the whole run when it had earlier sessions (see the module), else as is.

        Args:
            output: What ``Trainer.train`` returned for this call.
            log_history: ``trainer.state.log_history`` (it holds the earlier sessions' logged losses).
            global_batch: Samples per optimizer step over all processes.
        """
        if len(self.sessions) < 2 or "train_runtime" not in output.metrics:
            return output
        metrics = dict(output.metrics)
        start = int(self.sessions[-1]["start_step"])
        session_steps = output.global_step - start
        bounds = [(int(s["start_step"]), int(t["start_step"])) for s, t in zip(self.sessions, self.sessions[1:])]
        loss, loss_steps = whole_run_loss(log_history, bounds, metrics.get("train_loss"), session_steps)
        runtime = sum(s["runtime_s"] for s in self.sessions)
        per_second = 1.0 / runtime if runtime > 0 else float("nan")
        metrics.update(
            session_train_runtime=metrics["train_runtime"],
            session_train_loss=metrics.get("train_loss"),
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
