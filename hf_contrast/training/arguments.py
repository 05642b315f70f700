"""``ContrastiveTrainingArguments``: ``TrainingArguments`` plus every method's hyperparameters.

One dataclass serves all trainers (each reads the fields it needs), so a script can switch method
without changing its argument parsing, and ``HfArgumentParser`` turns every field into a
command-line flag (``--care_weight 0.01 --n_splits 8``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from transformers import TrainingArguments

__all__ = ["ContrastiveTrainingArguments"]

_ALPHA_SCHEDULES = ("inverse_epoch", "constant")
_REPRESENTATIONS = ("embeddings", "projections")


def _require(condition: bool, name: str, value: object, expected: str) -> None:
    if not condition:
        raise ValueError(f"`{name}` must be {expected}, got {value!r}.")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass
class ContrastiveTrainingArguments(TrainingArguments):
    """``TrainingArguments`` with the hyperparameters of the contrastive methods (docs/methods.md).

    Fields unused by a method are ignored by its trainer. Differences from ``TrainingArguments``:
    ``remove_unused_columns`` defaults to ``False`` (the collators read image/text/label columns that
    the encoder's ``forward`` does not take). Everything else (``report_to``, ``optim``, …) keeps
    the ``transformers`` default.

    Raises:
        ValueError: naming the field, when a value is out of range (``temperature <= 0``,
            ``n_splits < 1``, ``olean`` outside ``[0, 1]``, ``moco_momentum`` outside ``[0, 1)``, …).

    >>> args = ContrastiveTrainingArguments(output_dir="out", care_weight=0.01, n_splits=8)  # doctest: +SKIP
    """

    # ---- shared ------------------------------------------------------------------------------
    temperature: float | None = field(
        default=None,
        metadata={
            "help": "Temperature τ > 0 of the method's softmax loss. None: the method's default "
            "(SimCLR/CARE 0.5, SupCon/OCL 0.1, BinaryNCE 0.1)."
        },
    )
    gather_distributed: bool = field(
        default=False,
        metadata={
            "help": "Compare local anchors with the candidates gathered from all processes (InfoNCE, SupCon, "
            "OCL, uniformity). Gives the same gradients as one process on the global batch."
        },
    )
    n_views: int | None = field(
        default=None,
        metadata={
            "help": "Augmented views per sample for the supervised methods (1 or 2). None: the method's "
            "default (SupCon/OCL 2, SimO 1)."
        },
    )
    # ---- CARE (docs/methods.md §4) ------------------------------------------------------------------
    care_weight: float = field(default=0.01, metadata={"help": "CARE: weight λ >= 0 of the equivariance term."})
    n_splits: int = field(
        default=8,
        metadata={"help": "CARE: number of chunks S sharing one augmentation pair; must divide the batch."},
    )
    share_views: bool = field(
        default=False,
        metadata={
            "help": "CARE: compute InfoNCE on the (chunk-shared) equivariance views instead of separate "
            "per-sample views: two forward passes fewer, weaker invariance views."
        },
    )
    moco_momentum: float = field(
        default=0.99, metadata={"help": "CARE-MoCo: EMA momentum m in [0, 1) of the key encoder."}
    )
    moco_queue_size: int = field(default=4096, metadata={"help": "CARE-MoCo: number of negative keys in the queue."})
    moco_temperature: float = field(default=0.2, metadata={"help": "CARE-MoCo: temperature of the queue InfoNCE."})
    # ---- SimO / AFCL (docs/methods.md §5) -----------------------------------------------------------
    olean: float = field(default=0.01, metadata={"help": "SimO/AFCL: orthogonality leaning in [0, 1]."})
    classes_per_batch: int | None = field(
        default=None,
        metadata={
            "help": "SimO/AFCL: classes C per batch (fewer than half the classes). C * samples_per_class must "
            "equal per_device_train_batch_size."
        },
    )
    samples_per_class: int | None = field(
        default=None, metadata={"help": "SimO/AFCL: samples k per class in a batch (>= 2)."}
    )
    # ---- LOCAL (docs/methods.md §3a) ----------------------------------------------------------------
    local_alpha_schedule: str = field(
        default="inverse_epoch",
        metadata={"help": "LOCAL: schedule of α, 'inverse_epoch' (α/(1+epoch)) or 'constant'."},
    )
    local_alpha: float = field(default=1.0, metadata={"help": "LOCAL: initial / constant α in [0, 1]."})
    local_beta: float = field(default=1.0, metadata={"help": "LOCAL: weight β >= 0 of the latent OCL term."})
    # ---- alignment / uniformity (docs/methods.md §6) ------------------------------------------------
    align_weight: float = field(default=1.0, metadata={"help": "Align/uniform: weight >= 0 of the alignment term."})
    uniform_weight: float = field(
        default=1.0, metadata={"help": "Align/uniform: weight >= 0 of the uniformity term."}
    )
    simcse_weight: float = field(
        default=0.0,
        metadata={"help": "Align/uniform: weight >= 0 of an extra SimCSE InfoNCE term on the two views."},
    )
    task_loss_weight: float = field(
        default=1.0,
        metadata={
            "help": "Weight >= 0 of the cross-entropy of a supervised task head (encoder config.num_labels > 0, "
            "labels in the batch); the EquiBERT recipe."
        },
    )
    # ---- data ----------------------------------------------------------------------------------
    image_column: str = field(default="image", metadata={"help": "Dataset column with the PIL images."})
    text_column: str = field(default="text", metadata={"help": "Dataset column with the sentences."})
    text_pair_column: str | None = field(
        default=None,
        metadata={
            "help": "Optional column with a positive sentence for each text (e.g. a paraphrase); "
            "without it the two text views are the same sentence under dropout (SimCSE)."
        },
    )
    label_column: str = field(default="label", metadata={"help": "Dataset column with integer class labels."})
    max_length: int = field(default=128, metadata={"help": "Text: tokenizer truncation length."})
    image_size: int | None = field(
        default=None,
        metadata={"help": "Image: side of the views. None: the encoder's data config (input_size)."},
    )
    # ---- evaluation ----------------------------------------------------------------------------
    eval_representation: str = field(
        default="embeddings",
        metadata={
            "help": "Which output the eval metrics use: 'embeddings' (backbone features, what a probe "
            "uses) or 'projections' (what the loss sees)."
        },
    )
    knn_k: int = field(default=20, metadata={"help": "Eval: neighbours of the leave-one-out kNN classifier."})
    knn_temperature: float = field(default=0.07, metadata={"help": "Eval: vote temperature of the kNN classifier."})
    # ---- TrainingArguments defaults changed for contrastive training ---------------------------
    remove_unused_columns: bool = field(
        default=False,
        metadata={
            "help": "Drop dataset columns the collator does not read (False: keep all). The contrastive "
            "trainers keep their image/text/label columns either way."
        },
    )

    def __post_init__(self) -> None:
        if self.temperature is not None:
            _require(_is_real(self.temperature) and self.temperature > 0, "temperature", self.temperature, "> 0 or None")
        _require(
            self.n_views is None or (_is_int(self.n_views) and self.n_views in (1, 2)), "n_views", self.n_views, "1, 2 or None"
        )
        for name in ("care_weight", "local_beta", "align_weight", "uniform_weight", "simcse_weight", "task_loss_weight"):
            value = getattr(self, name)
            _require(_is_real(value) and value >= 0, name, value, "a finite number >= 0")
        _require(_is_int(self.n_splits) and self.n_splits >= 1, "n_splits", self.n_splits, "an int >= 1")
        _require(
            _is_real(self.moco_momentum) and 0 <= self.moco_momentum < 1, "moco_momentum", self.moco_momentum, "in [0, 1)"
        )
        _require(_is_int(self.moco_queue_size) and self.moco_queue_size >= 1, "moco_queue_size", self.moco_queue_size, "an int >= 1")
        _require(
            _is_real(self.moco_temperature) and self.moco_temperature > 0, "moco_temperature", self.moco_temperature, "> 0"
        )
        _require(_is_real(self.olean) and 0 <= self.olean <= 1, "olean", self.olean, "in [0, 1]")
        _require(
            self.classes_per_batch is None or (_is_int(self.classes_per_batch) and self.classes_per_batch >= 2),
            "classes_per_batch",
            self.classes_per_batch,
            "an int >= 2 or None",
        )
        _require(
            self.samples_per_class is None or (_is_int(self.samples_per_class) and self.samples_per_class >= 2),
            "samples_per_class",
            self.samples_per_class,
            "an int >= 2 or None",
        )
        _require(
            self.local_alpha_schedule in _ALPHA_SCHEDULES,
            "local_alpha_schedule",
            self.local_alpha_schedule,
            f"one of {_ALPHA_SCHEDULES}",
        )
        _require(_is_real(self.local_alpha) and 0 <= self.local_alpha <= 1, "local_alpha", self.local_alpha, "in [0, 1]")
        for name in ("image_column", "text_column", "label_column"):
            value = getattr(self, name)
            _require(isinstance(value, str) and value != "", name, value, "a non-empty column name")
        _require(_is_int(self.max_length) and self.max_length >= 2, "max_length", self.max_length, "an int >= 2")
        _require(
            self.image_size is None or (_is_int(self.image_size) and self.image_size >= 1),
            "image_size",
            self.image_size,
            "an int >= 1 or None",
        )
        _require(
            self.eval_representation in _REPRESENTATIONS,
            "eval_representation",
            self.eval_representation,
            f"one of {_REPRESENTATIONS}",
        )
        _require(_is_int(self.knn_k) and self.knn_k >= 1, "knn_k", self.knn_k, "an int >= 1")
        _require(
            _is_real(self.knn_temperature) and self.knn_temperature > 0, "knn_temperature", self.knn_temperature, "> 0"
        )
        super().__post_init__()
