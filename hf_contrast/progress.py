"""Progress bars and messages governed the ecosystem's way.

- The package's own bars ("Encoding", "Embedding metrics") show only when asked for (``progress=True``), in the
  main process (rank 0, as the Trainer's own bars: ``N`` launched processes draw one bar, not ``N`` interleaved
  ones) *and* while transformers' progress-bar switch is on (``transformers.utils.logging.is_progress_bar_enabled()``;
  turn every bar of transformers, huggingface_hub and this package off with
  ``transformers.utils.logging.disable_progress_bar()``): :func:`progress_enabled`.
- A trainer built with ``disable_tqdm=True`` turns that switch off while it trains, evaluates, predicts and
  saves (:func:`progress_bars_disabled`), so transformers' "Writing model shards" and the Hub's upload bars
  are silent too, and restores it afterwards.
- The package's loggers (``hf_contrast.*``) follow the Trainer's log level
  (``args.get_process_log_level()``, ``log_level`` / ``log_level_replica``): :func:`follow_log_level`.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator

from huggingface_hub.utils import are_progress_bars_disabled
from huggingface_hub.utils import disable_progress_bars as disable_hub_progress_bars
from transformers.utils import logging as transformers_logging

from .distributed import is_distributed, rank

__all__ = ["progress_enabled", "progress_bars_disabled", "follow_log_level", "PACKAGE_LOGGER"]

#: The root logger of the package; every module logs to a child ``hf_contrast.<module>``.
PACKAGE_LOGGER = "hf_contrast"


def progress_enabled(requested: bool) -> bool:
    """Whether to show a bar the caller asked for (``requested``): only in the main process (rank 0 of the process
    group, or of a launcher's ``RANK`` before the group starts) and while transformers' switch is on."""
    main = rank() == 0 if is_distributed() else os.environ.get("RANK", "0") == "0"
    return bool(requested) and main and transformers_logging.is_progress_bar_enabled()


@contextlib.contextmanager
def progress_bars_disabled(disabled: bool = True) -> Iterator[None]:
    """Turn transformers' (and with it huggingface_hub's) progress bars off inside the block when ``disabled``;
    the previous settings are restored on exit. Nests."""
    if not disabled or not transformers_logging.is_progress_bar_enabled():
        yield
        return
    hub_was_disabled = are_progress_bars_disabled()
    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        transformers_logging.enable_progress_bar()  # re-enables huggingface_hub's bars as well
        if hub_was_disabled:
            disable_hub_progress_bars()


def follow_log_level(level: int) -> None:
    """Set the level of the package's loggers (a Trainer's ``args.get_process_log_level()``), as ``Trainer``
    does for transformers' own."""
    logging.getLogger(PACKAGE_LOGGER).setLevel(level)
