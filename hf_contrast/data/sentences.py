"""The embedded default text data: a small file of scored sentence pairs shipped with the package.

``sentence_pairs.tsv`` holds 240 synthetic English sentence pairs written from templates over four
topics (animals, food, sports, weather): paraphrases (score 5), same subject and verb with another
object (3), same topic (1.5) and different topic (0), plus the topic of the first sentence as a
class label. It is small, offline test and demo data — not a benchmark (use STS-B for that).
"""

from __future__ import annotations

from pathlib import Path

from ..tensor_checks import MAX_SEED, check_int, check_positive, check_unit_interval

__all__ = ["SENTENCE_PAIRS_PATH", "TOPIC_NAMES", "load_sentence_pairs"]

SENTENCE_PAIRS_PATH = Path(__file__).with_name("sentence_pairs.tsv")
#: The model cards' name for the shipped pairs, however they are loaded (:func:`load_sentence_pairs`, or the file
#: through ``load_text_dataset`` / ``load_sts_pairs``: :func:`~hf_contrast.data.naming.local_dataset_name`).
SENTENCE_PAIRS_NAME = "hf_contrast-sentence-pairs"
TOPIC_NAMES = ("animals", "food", "sports", "weather")


def load_sentence_pairs(test_size: float = 0.25, seed: int = 0):
    """Load the shipped sentence pairs as a ``datasets.DatasetDict`` (``train`` / ``test``).

    Columns: ``sentence1``, ``sentence2`` (str), ``score`` (float in [0, 5]) and ``label``
    (``ClassLabel`` over :data:`TOPIC_NAMES`, the topic of ``sentence1``). ``test_size`` is in ``(0, 1)``; ``seed``
    (of the split) an integer in ``[0, 2**63 - 2]``.
    """
    import csv

    import datasets

    check_unit_interval("test_size", check_positive("test_size", test_size), include_one=False)
    check_int("seed", seed, 0, MAX_SEED)
    with SENTENCE_PAIRS_PATH.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    features = datasets.Features(
        {
            "sentence1": datasets.Value("string"),
            "sentence2": datasets.Value("string"),
            "score": datasets.Value("float32"),
            "label": datasets.ClassLabel(names=list(TOPIC_NAMES)),
        }
    )
    data = datasets.Dataset.from_dict(
        {
            "sentence1": [r["sentence1"] for r in rows],
            "sentence2": [r["sentence2"] for r in rows],
            "score": [float(r["score"]) for r in rows],
            "label": [int(r["label"]) for r in rows],
        },
        features=features,
    )
    data.info.dataset_name = SENTENCE_PAIRS_NAME
    return data.train_test_split(test_size=test_size, seed=seed)
