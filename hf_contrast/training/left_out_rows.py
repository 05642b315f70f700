"""The rows the collators left out of their batches (``on_bad_image="skip"``), counted and reported per stage.

The collators mark each batch with the unreadable rows they left out (``skipped_images``) and the readable
rows they left out with them to keep the objective's chunks or class groups whole (``dropped_rows``,
:mod:`hf_contrast.views.whole_rows`). :class:`LeftOutRows` sums both on the device (no host sync per step),
separately for ``"train"`` (one ``train()`` call) and ``"eval"`` (one evaluation), and :meth:`LeftOutRows.report`
sums them over the processes once, warning when they are not zero; the trainer reports them as
``train_skipped_images`` / ``train_dropped_rows`` and ``<prefix>_skipped_images`` / ``<prefix>_dropped_rows``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from transformers.utils import logging

from ..views import pop_dropped_rows, pop_skipped_images

__all__ = ["LeftOutRows"]

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
        calls this: one all-reduce for both), each with a warning naming ``what`` when it is not zero."""
        local = torch.zeros(2, dtype=torch.long, device=args.device)
        for i, counts in enumerate((self.skipped_images, self.dropped_rows)):
            count = counts.get(stage)
            if count is not None:
                local[i] += count.to(local.device)
        if args.world_size > 1:
            local = accelerator.reduce(local, reduction="sum")
        skipped, dropped = (int(v) for v in local.tolist())
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
