"""What a training script sets up around the Trainer: its logging, and where it resumes.

The examples (``examples/run_*.py``) call these two, as transformers' example scripts do the same steps:

- :func:`setup_logging`: the script's, transformers' and hf_contrast's messages at ``--log_level`` on the
  main process and ``--log_level_replica`` on the others, on standard output;
- :func:`detect_last_checkpoint`: the newest checkpoint of ``output_dir`` to resume from, or an error
  when ``output_dir`` holds an earlier run's files and no checkpoint (``--overwrite_output_dir`` is the
  way to train from scratch into it; transformers 5 no longer has that argument).
"""

from __future__ import annotations

from hf_contrast.errors import InputError

import logging
import os
import sys

import transformers
from transformers import TrainingArguments
from transformers.trainer_utils import get_last_checkpoint

__all__ = ["detect_last_checkpoint", "setup_logging"]

logger = logging.getLogger(__name__)


def setup_logging(training_args: TrainingArguments, script_logger: str = "__main__") -> None:
    """The script's (``script_logger``, its ``__name__``), transformers' and hf_contrast's messages at
    ``--log_level`` (info by default) on the main process, ``--log_level_replica`` (warning) on the others;
    datasets' at warning or above."""
    import datasets  # not at module level: the package imports without `datasets` (a bare GPU image)

    logging.basicConfig(
        format="%(asctime)s - %(levelname)s - %(name)s - %(message)s",
        datefmt="%m/%d/%Y %H:%M:%S",
        handlers=[logging.StreamHandler(sys.stdout)],
    )
    if training_args.should_log:  # the default `--log_level passive` means info here, as in transformers' examples
        transformers.utils.logging.set_verbosity_info()
    log_level = training_args.get_process_log_level()
    for name in (script_logger, "hf_contrast"):
        logging.getLogger(name).setLevel(log_level)
    datasets.utils.logging.set_verbosity(max(log_level, logging.WARNING))  # its info lines are about its cache
    transformers.utils.logging.set_verbosity(log_level)
    transformers.utils.logging.enable_default_handler()
    transformers.utils.logging.enable_explicit_format()


def detect_last_checkpoint(training_args: TrainingArguments, overwrite_output_dir: bool) -> str | None:
    """The newest checkpoint in ``output_dir`` to resume from (``None``: start from scratch).

    Raises:
        ValueError: if ``output_dir`` holds files but no checkpoint and ``overwrite_output_dir`` is false
            (nothing of an earlier run is overwritten unasked).
    """
    output_dir = training_args.output_dir
    if not os.path.isdir(output_dir) or overwrite_output_dir:
        return None
    last_checkpoint = get_last_checkpoint(output_dir)
    if last_checkpoint is None and os.listdir(output_dir):
        raise InputError(
            f"Output directory ({output_dir}) already exists and is not empty. Use --overwrite_output_dir to train "
            "from scratch into it, or pick another --output_dir."
        )
    if last_checkpoint is not None and training_args.resume_from_checkpoint is None:
        logger.info(
            f"Checkpoint detected, resuming training at {last_checkpoint}. To avoid this behavior, change the "
            "`--output_dir` or add `--overwrite_output_dir` to train from scratch."
        )
    return last_checkpoint
