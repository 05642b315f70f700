"""Data: the embedded offline sets of the examples and tests, loaders and checks for users' data.

Nothing here downloads anything unless given a Hub id.

- :func:`load_image_dataset`, :func:`defer_image_decoding`, :func:`empty_class_folders` — image folders and Hub
  image sets; :func:`load_image_splits` — a train and a held-out split of them (or of the embedded digits);
- :func:`load_text_dataset`, :func:`load_sts_pairs` — CSV / TSV / JSON / JSONL / parquet / text;
- :data:`CANONICAL_COLUMNS` — the column names the loaders give and the trainers read;
- :func:`check_dataset` — empty / too-small / missing-column checks before training;
- :func:`make_long_tailed` — a long-tailed subset (or the data as is);
- embedded sets: :func:`load_digits_dataset`, :func:`load_sentence_pairs`, :func:`make_change_pairs`;
- :func:`balanced_subset` / :func:`balanced_split` — seeded class-balanced rows (:mod:`~hf_contrast.data.sampling`);
  :func:`take_subset` — at most N rows of a split, :func:`hold_out` — an evaluation split of a dataset without one,
  each said in the model card;
- :mod:`~hf_contrast.data.decode` — any PIL mode / path / bytes to the encoder's channels; :class:`BadImageError`.
"""

from __future__ import annotations

from .change_pairs import CHANGE_NAMES, make_change_pairs
from .checks import check_dataset, dataset_columns
from .columns import CANONICAL_COLUMNS
from .decode import BadImageError
from .digits import load_digits_dataset
from .image_splits import load_image_splits
from .images import defer_image_decoding, empty_class_folders, load_image_dataset
from .long_tail import long_tailed_counts, make_long_tailed
from .sampling import balanced_split, balanced_subset, hold_out, take_subset
from .sentences import SENTENCE_PAIRS_PATH, TOPIC_NAMES, load_sentence_pairs
from .text import load_sts_pairs, load_text_dataset

__all__ = [
    "BadImageError",
    "CANONICAL_COLUMNS",
    "CHANGE_NAMES",
    "SENTENCE_PAIRS_PATH",
    "TOPIC_NAMES",
    "balanced_split",
    "hold_out",
    "balanced_subset",
    "check_dataset",
    "dataset_columns",
    "defer_image_decoding",
    "empty_class_folders",
    "load_digits_dataset",
    "load_image_dataset",
    "load_image_splits",
    "load_sentence_pairs",
    "load_sts_pairs",
    "load_text_dataset",
    "long_tailed_counts",
    "make_change_pairs",
    "make_long_tailed",
    "take_subset",
]
