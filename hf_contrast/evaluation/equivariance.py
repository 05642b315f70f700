"""``EquivarianceEvaluator``: Wahba error and γ_f of a fixed batch under sampled augmentations (CARE)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor, nn

from hf_contrast.errors import InputError

from ..data.checks import dataset_columns
from ..data.sampling import sample_rows
from ..encoding.model_access import model_device, model_output, to_device
from ..metrics import relative_rotational_equivariance, wahba_error
from ..seeding import seeded_cpu_rng
from ..tensor_checks import MAX_SEED, check_bool, check_choice, check_int, check_name
from ..views.labels import class_labels
from .evaluator import Evaluator

__all__ = ["EquivarianceEvaluator"]


def _batch_size(batch: Mapping[str, Any]) -> int:
    for value in batch.values():
        if isinstance(value, Tensor) and value.ndim > 0:
            return int(value.shape[0])
    raise InputError("`batch` must contain at least one tensor with a batch axis, e.g. `pixel_values`.")


def _decoded(dataset: Any, row: int, column: str, transform: Callable[[Any], Tensor]) -> Tensor:
    """``transform`` of row ``row``'s image; a file that cannot be read is named with its row.

    Raises:
        BadImageError: naming the row, the file when known, the cause and the fix.
    """
    from ..data.decode import BadImageError

    try:
        return transform(dataset[row][column])
    except (OSError, ValueError, SyntaxError) as error:  # PIL: UnidentifiedImageError, truncated files
        raise BadImageError(
            f"EquivarianceEvaluator: row {row} of column {column!r}: {error} — remove or replace that image "
            "(or keep the column undecoded, `datasets.Image(decode=False)`, so the file is named)."
        ) from error


class EquivarianceEvaluator(Evaluator):
    """How well one rotation maps ``f(x)`` to ``f(a(x))`` on a fixed batch (CARE, https://arxiv.org/abs/2306.13924).

    At each call the model embeds the fixed ``batch`` (``f(x)``) and, for each of
    ``num_augmentations`` augmentations ``a_k`` — each ONE draw applied to the whole batch, the
    chunk-shared augmentation of CARE — ``f(a_k(x))``. The augmentations are drawn under
    ``seed`` in a forked CPU RNG: every evaluation sees the same ones and the training randomness
    is untouched. Keys (prefixed with ``name``):

    - ``wahba_error`` (primary, lower is better): mean over ``k`` of
      :func:`~hf_contrast.metrics.wahba_error` ``W``; ``wahba_error_per_sample``: mean ``W/√n``;
      ``wahba_error_max``: the largest ``W``;
    - ``relative_rotational_equivariance``: mean ``γ_f`` over the augmentations where it is
      defined (``nan`` if none) — :func:`~hf_contrast.metrics.relative_rotational_equivariance`;
    - ``augmentation_cosine_mean``: mean ``cos(f(x_i), f(a_k(x_i)))``.

    Each augmentation's values are appended to :attr:`history` (``call``, ``augmentation``,
    ``wahba_error``, ``wahba_error_per_sample``, ``relative_rotational_equivariance``) for
    Figure-2c-style plots; the trainer logs the means in ``log_history`` as ``eval_<key>``.

    Args:
        batch: Model inputs of the fixed batch, e.g. ``{"pixel_values": (n, C, H, W)}``; kept on
            the CPU and moved to the model's device at each call. ``n >= 2``.
        augment: ``augment(x) -> x`` sampling ONE augmentation per call and applying it to every
            row (``torchvision.transforms.v2`` on a batched tensor does this). It receives
            ``batch[augment_key]`` (CPU), or the whole dict when ``augment_key`` is ``None``.
        augment_key: The input ``augment`` transforms (``None``: the whole dict).
        num_augmentations: Augmentations per call (>= 1).
        output: Model output measured: ``"projections"`` (what CARE's loss sees) or ``"embeddings"``.
        normalize: L2-normalise the outputs first (CARE's ``f`` maps to the unit sphere).
        seed: Seed of the augmentation draws, an integer in ``[0, 2**63 - 2]``.
        name: Metric-key prefix.

    Raises:
        ValueError: at construction on an empty batch, ``n < 2``, a bad count or an unknown
            ``augment_key``; at call on a missing ``output`` or an ``augment`` that changes the
            batch size.
    """

    def __init__(
        self,
        batch: Mapping[str, Any],
        augment: Callable[[Any], Any],
        augment_key: str | None = "pixel_values",
        num_augmentations: int = 4,
        output: str = "projections",
        normalize: bool = True,
        seed: int = 0,
        name: str = "equivariance",
    ) -> None:
        super().__init__(name, "wahba_error", greater_is_better=False)
        self.metric_names = (
            "wahba_error",
            "wahba_error_per_sample",
            "wahba_error_max",
            "relative_rotational_equivariance",
            "augmentation_cosine_mean",
        )
        if not isinstance(batch, Mapping) or not batch:
            raise InputError(f"`batch` must be a non-empty dict of model inputs, got {type(batch).__name__}.")
        self.batch = {k: v.detach().cpu() if isinstance(v, Tensor) else v for k, v in batch.items()}
        self.n = _batch_size(self.batch)
        if self.n < 2:
            raise InputError(f"`batch` needs at least 2 samples for the pairwise metrics, got {self.n}.")
        if not callable(augment):
            raise InputError(f"`augment` must be callable (x -> augmented x), got {type(augment).__name__}.")
        check_name("augment_key", augment_key, what="key of `batch` (the input to augment)", allow_none=True)
        if augment_key is not None and augment_key not in self.batch:
            raise InputError(
                f"`augment_key` {augment_key!r} is not a key of `batch` ({sorted(self.batch)}); "
                "pass the key of the input to augment, or None to augment the whole dict."
            )
        check_int("num_augmentations", num_augmentations, 1)
        self.augment, self.augment_key, self.num_augmentations = augment, augment_key, num_augmentations
        self.output = check_name("output", output, what="model output name (e.g. 'projections')")
        self.normalize = check_bool("normalize", normalize)
        self.seed = check_int("seed", seed, 0, MAX_SEED)
        self.history: list[dict[str, float]] = []
        self._calls = 0
        #: The dataset the batch was drawn from (set by :meth:`from_image_dataset`); model cards name it.
        self.dataset: Any = None

    @classmethod
    def from_image_dataset(
        cls,
        dataset: Any,
        data_config: Mapping[str, Any],
        *,
        num_samples: int = 128,
        image_column: str = "image",
        label_column: str | None = "label",
        seed: int = 0,
        on_bad_image: str = "raise",
        **kwargs: Any,
    ) -> EquivarianceEvaluator:
        """An evaluator on ``num_samples`` images of ``dataset`` under SimCLR augmentations.

        The rows are a seeded class-balanced subset (:func:`balanced_subset`; a seeded random one
        without ``label_column``), decoded to ``uint8``, resized to the ``input_size`` of
        ``data_config`` (no crop) and normalised with its ``mean``/``std``. Each augmentation applies
        one draw of :func:`hf_contrast.views.simclr_transform_from_data_config` to the whole batch
        of ``uint8`` images — the way training makes its views: resampling ``uint8`` saturates, where
        bicubic resampling of float images overshoots ``[0, 1]`` and colour jitter then gives NaN.

        Args:
            dataset: Image rows (``datasets.Dataset`` or a list of dicts).
            data_config: The encoder's ``data_config`` (``input_size`` ``(C, H, W)``, ``mean``, ``std``).
            num_samples: Rows in the fixed batch (at most ``len(dataset)``).
            image_column: Column of the images.
            label_column: Column of the labels.
            seed: Seed of the row selection and of the augmentations, an integer in ``[0, 2**63 - 2]``.
            on_bad_image: An unreadable image among the selected rows: ``"raise"`` (default) — a
                ``ValueError`` naming the row and the file; ``"skip"`` — the row is left out of the batch
                (which then has fewer than ``num_samples`` rows) with a warning naming the file.
            **kwargs: Other :class:`EquivarianceEvaluator` arguments.
        """
        from torchvision.transforms import v2

        from ..views import simclr_transform_from_data_config
        from ..views.transform_steps import read_data_config, to_image_steps

        simclr = simclr_transform_from_data_config(data_config)  # checks data_config: size, mean, std
        check_name("image_column", image_column)
        check_name("label_column", label_column, allow_none=True)
        columns = dataset_columns(dataset)
        for argument, column in (("image_column", image_column), ("label_column", label_column)):
            if column is not None and columns is not None and column not in columns:
                raise InputError(f"`{argument}`={column!r} is not a column of `dataset` (its columns: {columns}).")
        n_rows = len(dataset)
        check_int("num_samples", num_samples, 2, maximum=n_rows, fix="the dataset size.")
        labels = None
        if label_column is not None:
            labels = (
                dataset[label_column] if hasattr(dataset, "column_names") else [row[label_column] for row in dataset]
            )
            labels = class_labels(list(labels), label_column, first_row=0)
        rows = sample_rows(n_rows, num_samples, seed, labels)
        (height, width), mean_values, std_values, _ = read_data_config(data_config)
        channels = int(data_config["input_size"][0])
        raw = v2.Compose(
            [
                *to_image_steps(channels),
                v2.ToDtype(torch.uint8, scale=True),
                v2.Resize((height, width), antialias=True),
            ]
        )
        from ..data.decode import BadImageError

        check_choice("on_bad_image", on_bad_image, ("raise", "skip"))
        decoded = []
        for i in rows:
            try:
                decoded.append(_decoded(dataset, int(i), image_column, raw))
            except BadImageError as error:
                if on_bad_image == "raise":
                    raise
                warnings.warn(f"Skipped: {error}", UserWarning, stacklevel=2)
        if len(decoded) < 2:
            raise InputError(
                f"EquivarianceEvaluator: {len(rows) - len(decoded)} of the {len(rows)} selected images are "
                f"unreadable; fewer than 2 remain. Fix the images of column {image_column!r}."
            )
        images = torch.stack(decoded)  # uint8 (n, C, H, W)
        mean = torch.tensor(mean_values, dtype=torch.float32).view(1, -1, 1, 1)
        std = torch.tensor(std_values, dtype=torch.float32).view(1, -1, 1, 1)

        def augment(x: Tensor) -> Tensor:  # normalised in, one SimCLR draw of the uint8 batch, normalised out
            return simclr(((x * std + mean) * 255).round().clamp(0, 255).to(torch.uint8))  # exact: x came from uint8

        pixel_values = (images.float() / 255 - mean) / std
        evaluator = cls({"pixel_values": pixel_values}, augment, augment_key="pixel_values", seed=seed, **kwargs)
        evaluator.dataset = dataset  # the data its rows come from: model cards name it (not the metric prefix)
        return evaluator

    def _embed(self, model: nn.Module, batch: Mapping[str, Any]) -> Tensor:
        try:
            return model_output(model(**to_device(batch, model_device(model))), self.output, self.n)
        except ValueError as error:
            raise InputError(f"{error} (`augment` must keep the batch size)") from None

    def _augmented(self) -> Mapping[str, Any]:
        if self.augment_key is None:
            return self.augment(dict(self.batch))
        return {**self.batch, self.augment_key: self.augment(self.batch[self.augment_key])}

    def embeddings(self, model: nn.Module) -> tuple[Tensor, list[Tensor]]:
        """``f(x)`` of the fixed batch and ``[f(a_k(x))]`` under the seeded augmentations (the same draws at
        every call). Shape: ``(n, D)`` each. Call in eval mode under ``torch.no_grad`` (``__call__`` does)."""
        f = self._embed(model, self.batch)
        with seeded_cpu_rng(self.seed):
            augmented = [self._augmented() for _ in range(self.num_augmentations)]
        return f, [self._embed(model, batch) for batch in augmented]

    def compute(self, model: nn.Module) -> dict[str, float]:
        f, augmented_embeddings = self.embeddings(model)
        errors, per_sample, gammas, cosines = [], [], [], []
        for index, f_a in enumerate(augmented_embeddings):
            wahba = wahba_error(f, f_a, normalize=self.normalize)
            gamma = relative_rotational_equivariance(f, f_a, normalize=self.normalize)
            errors.append(wahba.error)
            per_sample.append(wahba.error_per_sample)
            gammas.append(gamma)
            cosines.append(float(torch.nn.functional.cosine_similarity(f, f_a, dim=1).double().mean()))
            self.history.append(
                {
                    "call": float(self._calls),
                    "augmentation": float(index),
                    "wahba_error": wahba.error,
                    "wahba_error_per_sample": wahba.error_per_sample,
                    "relative_rotational_equivariance": gamma,
                }
            )
        self._calls += 1
        finite = [g for g in gammas if not math.isnan(g)]
        return {
            "wahba_error": sum(errors) / len(errors),
            "wahba_error_per_sample": sum(per_sample) / len(per_sample),
            "wahba_error_max": max(errors),
            "relative_rotational_equivariance": sum(finite) / len(finite) if finite else float("nan"),
            "augmentation_cosine_mean": sum(cosines) / len(cosines),
        }
