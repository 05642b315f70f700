"""What a trainer checks before it trains, each failure naming the argument and the fix.

At ``__init__`` (:func:`check_objective_fits`, :func:`check_evaluation_fits`): the batch sizes and the
evaluation sets fit the objective. At the start of ``train()`` (:func:`check_datasets`,
:func:`check_image_files`): the datasets are large enough and have the columns the objective reads, and the
image files can be read (:func:`hf_contrast.views.image_scan.scan_images`).
"""

from __future__ import annotations

import time
import warnings
from typing import Any

from transformers.utils import logging

from hf_contrast.errors import InputError

from ..data.checks import check_dataset, dataset_columns
from ..data.columns import CANONICAL_COLUMNS
from ..views import BadImageError, input_modality_of, scan_images
from ..views.image_scan import image_columns, scan_depth

__all__ = ["check_datasets", "check_evaluation_fits", "check_image_files", "check_objective_fits"]

_SCAN_DEPTHS = {"decode": "every image decoded", "header": "headers read", "size": "file sizes read"}

logger = logging.get_logger(__name__)  # follows the Trainer's log level (hf_contrast.progress)


def _eval_sets(eval_dataset: Any) -> dict[str, Any]:
    """``{name: dataset}`` of ``eval_dataset`` (one set or a dict of sets), named as the errors name them."""
    sets = eval_dataset if isinstance(eval_dataset, dict) else {"": eval_dataset}
    return {f"eval_dataset[{key!r}]" if key else "eval_dataset": dataset for key, dataset in sets.items()}


def check_objective_fits(args: Any, objective: Any) -> None:
    """The training batch holds whole chunks of the objective, and ``load_best_model_at_end`` has a metric.

    Raises:
        InputError: naming the argument and the value to use.
    """
    multiple = objective.batch_multiple
    if args.per_device_train_batch_size % multiple:
        raise InputError(
            f"`per_device_train_batch_size`={args.per_device_train_batch_size} must be a multiple of "
            f"{multiple} for {type(objective).__name__} (its chunks must be whole, e.g. `n_splits`={multiple}); "
            f"use {max(multiple, args.per_device_train_batch_size // multiple * multiple)}."
        )
    if (
        args.load_best_model_at_end
        and not objective.has_eval_loss
        and args.metric_for_best_model in (None, "loss", "eval_loss")
    ):
        raise InputError(
            f"`load_best_model_at_end=True` chooses by `eval_loss`, which {type(objective).__name__} does not "
            "report (its batches are not evaluation batches); set `metric_for_best_model`, e.g. "
            "'eval_knn_loo_accuracy'."
        )


def check_evaluation_fits(args: Any, objective: Any, eval_dataset: Any) -> None:
    """When the run evaluates (an ``eval_dataset`` or an ``eval_strategy``): evaluation batches and sets
    the objective can score, so ``eval_loss`` is always reported (or the error says what to set)."""
    if eval_dataset is None and args.eval_strategy == "no":
        return
    objective.check_eval_batch_size(args.per_device_eval_batch_size)
    if not objective.has_eval_loss:
        return
    for name, dataset in _eval_sets(eval_dataset).items():
        if dataset is not None:
            check_dataset(
                dataset,
                name=name,
                min_rows=objective.min_eval_batch_size,
                why=f"{type(objective).__name__}'s `eval_loss` compares the samples of an evaluation batch",
            )


def check_datasets(trainer: Any) -> None:
    """Fail before training, with the fix, on an empty or too small dataset or a missing column."""
    objective, args = trainer.objective, trainer.args
    if trainer.train_dataset is not None:
        full = objective.needs_full_batches
        check_dataset(
            trainer.train_dataset,
            name="train_dataset",
            min_rows=args.per_device_train_batch_size if full else 1,
            columns=objective.required_columns(trainer.views),
            why=f"{type(objective).__name__} trains on whole batches of {args.per_device_train_batch_size}"
            if full
            else None,
        )
        pair = CANONICAL_COLUMNS["text_pair_column"]
        if (
            input_modality_of(trainer.model) == "text"
            and args.text_pair_column is None
            and pair in (dataset_columns(trainer.train_dataset) or ())
        ):
            warnings.warn(
                f"train_dataset has a {pair!r} column (what `load_text_dataset(text_pair_column=...)` names the "
                f"paired sentences) but `text_pair_column` is None: training on {args.text_column!r} alone (SimCSE "
                f"views). Set `text_pair_column={pair!r}` in the training arguments to train on the pairs.",
                stacklevel=4,
            )
    for name, dataset in _eval_sets(trainer.eval_dataset).items():
        if dataset is not None:
            check_dataset(dataset, name=name, min_rows=1)


def check_image_files(args: Any, train_dataset: Any, eval_dataset: Any) -> None:
    """Scan the training and (when the run evaluates) evaluation sets' image files before training
    (:func:`hf_contrast.views.image_scan.scan_images`: full decode up to 10,000 rows, headers up to 200,000, file
    sizes above).

    Raises:
        BadImageError: with ``on_bad_image="raise"``, naming the bad files and the fix; with ``"skip"`` they
            are logged (the collators leave them out when their batch is drawn, and count them).
    """
    sets = {"train_dataset": train_dataset}
    if eval_dataset is not None and (args.eval_strategy != "no" or args.do_eval):
        sets.update(_eval_sets(eval_dataset))
    found = []
    for name, dataset in sets.items():
        if dataset is None or not image_columns(dataset):
            continue
        start = time.perf_counter()
        found += [(name, bad) for bad in scan_images(dataset)]
        logger.info(  # said: on a large folder this takes a while (about 1 ms per decoded 28-px PNG)
            "Checked the image files of %s before training (%d rows, %s) in %.1f s.",
            name, len(dataset), _SCAN_DEPTHS[scan_depth(len(dataset))], time.perf_counter() - start,
        )  # fmt: skip
    if not found:
        return
    listed = "\n".join(f"  {name}: {bad}" for name, bad in found[:10])
    more = f"\n  … and {len(found) - 10} more" if len(found) > 10 else ""
    if args.on_bad_image == "raise":
        raise BadImageError(
            f"{len(found)} unreadable image(s) found before training:\n{listed}{more}\nFix or remove them, or pass "
            "`on_bad_image='skip'` (`--on_bad_image skip`) to leave them out of their batches (counted as "
            "`train_skipped_images` / `eval_skipped_images`)."
        )
    logger.warning(
        "%d unreadable image(s) found before training; on_bad_image='skip' leaves them out of their batches "
        "(counted as `*_skipped_images`):\n%s%s", len(found), listed, more,
    )  # fmt: skip
