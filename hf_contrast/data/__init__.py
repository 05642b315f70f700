"""Embedded, offline data for the examples and tests: nothing here downloads anything."""

from __future__ import annotations

from .change_pairs import CHANGE_NAMES, make_change_pairs
from .digits import load_digits_dataset
from .long_tail import long_tailed_counts, make_long_tailed
from .sentences import SENTENCE_PAIRS_PATH, TOPIC_NAMES, load_sentence_pairs

__all__ = [
    "CHANGE_NAMES",
    "SENTENCE_PAIRS_PATH",
    "TOPIC_NAMES",
    "load_digits_dataset",
    "load_sentence_pairs",
    "long_tailed_counts",
    "make_change_pairs",
    "make_long_tailed",
]
