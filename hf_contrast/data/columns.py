"""The one mapping of dataset columns: the loaders rename the user's columns to these canonical names.

``load_text_dataset(text_column="sentence", label_column="topic")`` returns the columns ``text`` and
``label``; ``load_image_dataset(image_column="img")`` returns ``image``. These are the defaults of
:class:`~hf_contrast.training.ContrastiveTrainingArguments` (``image_column``, ``text_column``,
``label_column``), so a loaded dataset trains without setting the column arguments; those arguments
are the other (and only other) way, for datasets built without the loaders.

==================  ============  ==========================================================
loader option       column        read by
==================  ============  ==========================================================
``image_column``    ``image``     the trainers (``args.image_column``), ``encode_dataset``
``text_column``     ``text``      the trainers (``args.text_column``), ``encode_dataset``
``text_pair_column`` ``text_pair`` the trainers with ``args.text_pair_column="text_pair"``
``label_column``    ``label``     the trainers (``args.label_column``), evaluators
``score_column``    ``score``     ``STSEvaluator.from_dataset`` (via :func:`load_sts_pairs`)
==================  ============  ==========================================================

:func:`~hf_contrast.data.load_sts_pairs` names its pairs ``sentence1`` / ``sentence2`` / ``score``,
sentence-transformers' STS names that ``STSEvaluator.from_dataset`` reads.
"""

from __future__ import annotations

import logging
from typing import Any

from .naming import add_loader_note

__all__ = ["CANONICAL_COLUMNS", "rename_to_canonical"]

logger = logging.getLogger(__name__)

#: Loader option -> the column it becomes.
CANONICAL_COLUMNS = {
    "image_column": "image",
    "text_column": "text",
    "text_pair_column": "text_pair",
    "label_column": "label",
    "score_column": "score",
}


def rename_to_canonical(
    dataset: Any, columns: dict[str, str | None], source: str, targets: dict[str, str] | None = None
) -> Any:
    """Rename the chosen columns of ``dataset`` to their canonical names (:data:`CANONICAL_COLUMNS`).

    A column that already has a canonical name but was not chosen for it (a ``text`` column while
    ``text_column="body"``) is kept under ``<name>_original``, with a warning, so no data is lost.

    Args:
        dataset: A ``datasets.Dataset`` (or ``IterableDataset``) whose columns were checked.
        columns: Loader option -> the user's column (``None``: not used), e.g. ``{"text_column": "body"}``.
        source: The file or Hub id, for the warning.
        targets: Names that replace canonical ones, by loader option (``load_sts_pairs``: ``sentence1``...).

    Returns:
        The dataset with the renamed columns (other columns unchanged); the renames are kept as a loader note
        (:func:`~hf_contrast.data.naming.add_loader_note`), so the model card names the source's columns too.
    """
    names = {**CANONICAL_COLUMNS, **(targets or {})}
    chosen = {column: names[option] for option, column in columns.items() if column is not None}
    renames = {column: target for column, target in chosen.items() if column != target}
    if not renames:
        return dataset
    names = list(dataset.column_names)
    for target in list(renames.values()):
        if target in names and target not in chosen:
            moved = f"{target}_original"
            logger.warning(
                "%s has a column %r that is not the one chosen for it; it is kept as %r.", source, target, moved
            )
            renames[target] = moved
    said = ", ".join(f"`{column}` to `{target}`" for column, target in renames.items())
    return add_loader_note(dataset.rename_columns(renames), f"the loader renamed the source's columns {said}")
