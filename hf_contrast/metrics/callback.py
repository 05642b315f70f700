"""``TrainerCallback`` that adds geometry metrics of a fixed probe batch to every evaluation.

For CARE runs it also samples augmentations and logs the Wahba error and the relative rotational
equivariance ``γ_f`` (https://arxiv.org/abs/2306.13924, Figures 2c and 5) over training.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor, nn
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from ._inputs import as_labels
from .geometry import (
    alignment,
    class_orthogonality,
    effective_rank,
    relative_rotational_equivariance,
    uniformity,
    wahba_error,
)
from .probes import knn_accuracy

__all__ = ["GeometryMetricsCallback"]

Batch = Mapping[str, Any]


def _model_device(model: nn.Module) -> torch.device:
    for tensor in model.parameters():
        return tensor.device
    return torch.device("cpu")


def _to_device(batch: Batch, device: torch.device) -> dict[str, Any]:
    return {key: value.to(device) if isinstance(value, Tensor) else value for key, value in batch.items()}


def _batch_size(batch: Batch) -> int:
    for value in batch.values():
        if isinstance(value, Tensor) and value.ndim > 0:
            return int(value.shape[0])
    raise ValueError("`probe_batch` must contain at least one tensor with a batch axis, e.g. `pixel_values`.")


class GeometryMetricsCallback(TrainerCallback):
    """Log embedding-geometry metrics of a fixed probe batch at each evaluation.

    At every ``on_evaluate`` the model embeds ``probe_batch`` (eval mode, no gradient) and the
    metrics below are added *in place* to the evaluation ``metrics`` dict (so they reach
    ``trainer.evaluate()``'s return value, ``metric_for_best_model`` and early stopping) and to
    the evaluation entry of ``state.log_history`` (so they appear in the saved trainer state and
    loss/metric plots). Keys carry the evaluation prefix, e.g. ``eval_wahba_error``. Reporting
    integrations (TensorBoard, W&B) are called by the ``Trainer`` *before* ``on_evaluate``; a
    trainer that wants them there can merge :meth:`compute` into its metrics before logging.

    Logged (with ``representation`` outputs ``f``):

    - always: ``uniformity`` (``t = 2``) and ``effective_rank`` of ``f(x)``;
    - with ``labels``: ``class_orthogonality`` and leave-one-out ``knn_accuracy`` (``knn_k``);
    - with ``augment``: for each of ``num_augmentations`` sampled augmentations ``a`` (one per
      call of ``augment``, applied to the whole batch), the Wahba error (``wahba_error``: mean
      ``W``; ``wahba_error_per_sample``: mean ``W/√n``; ``wahba_error_max``: the worst ``W``),
      ``relative_rotational_equivariance`` (mean ``γ_f`` over the augmentations where it is
      defined, ``nan`` if none) and the positive-pair ``alignment`` of ``f(x)`` and ``f(a(x))``.
      The augmentations are drawn under a fixed ``seed`` in a forked CPU RNG, so every
      evaluation sees the same ones and training randomness is untouched. Each augmentation's
      values are also kept in :attr:`history` (step, index, ``W``, ``W/√n``, ``γ_f``).

    Args:
        probe_batch: Model inputs of a small fixed probe set, e.g. ``{"pixel_values": (n, C, H, W)}``
            or tokenizer output; kept on CPU and moved to the model's device at each evaluation.
        labels: Optional integer labels of the probe rows. Shape: ``(n,)``.
        augment: Optional ``augment(x) -> x`` sampling ONE augmentation per call and applying it
            to every row (``torchvision.transforms.v2`` transforms on a batched tensor do this).
            It receives ``probe_batch[augment_key]`` (CPU), or the whole batch dict when
            ``augment_key`` is ``None``.
        augment_key: Which input ``augment`` transforms (``None``: the whole dict).
        num_augmentations: Augmentations sampled per evaluation (>= 1).
        representation: Output attribute (or key) of ``model(**inputs)`` to measure:
            ``"projections"`` (what the contrastive loss sees) or ``"embeddings"``.
        normalize: L2-normalise the outputs first (CARE's ``f`` maps to the unit sphere).
        knn_k: Neighbours for the leave-one-out kNN accuracy, ``1 <= knn_k <= n - 1``.
        seed: Seed of the augmentation RNG.

    Raises:
        ValueError: on an empty or label-inconsistent probe batch, bad counts, or an unknown
            ``augment_key`` (at construction); on a model output without ``representation``
            or an ``augment`` that changes the batch size (at evaluation).

    Example:
        >>> callback = GeometryMetricsCallback(  # doctest: +SKIP
        ...     {"pixel_values": probe_images}, labels=probe_labels,
        ...     augment=v2.Compose([v2.RandomResizedCrop(32), v2.ColorJitter(0.4, 0.4, 0.4, 0.1)]))
        >>> trainer = ContrastiveTrainer(..., callbacks=[callback])  # doctest: +SKIP
    """

    def __init__(
        self,
        probe_batch: Batch,
        labels: Tensor | None = None,
        augment: Callable[[Any], Any] | None = None,
        augment_key: str | None = "pixel_values",
        num_augmentations: int = 4,
        representation: str = "projections",
        normalize: bool = True,
        knn_k: int = 20,
        seed: int = 0,
    ) -> None:
        if not isinstance(probe_batch, Mapping) or not probe_batch:
            raise ValueError(
                f"`probe_batch` must be a non-empty dict of model inputs, got {type(probe_batch).__name__}."
            )
        self.probe_batch = {k: v.detach().cpu() if isinstance(v, Tensor) else v for k, v in probe_batch.items()}
        n = _batch_size(self.probe_batch)
        if n < 2:
            raise ValueError(f"`probe_batch` needs at least 2 samples for pairwise metrics, got {n}.")
        self.labels = None if labels is None else as_labels("labels", labels, n, torch.device("cpu"))
        if self.labels is not None and not 1 <= knn_k <= n - 1:
            raise ValueError(f"`knn_k` must be in [1, {n - 1}] for a probe batch of {n} samples, got {knn_k}.")
        if augment is not None and augment_key is not None and augment_key not in self.probe_batch:
            raise ValueError(
                f"`augment_key` {augment_key!r} is not a key of `probe_batch` ({sorted(self.probe_batch)}); "
                "pass the key of the input to augment, or None to augment the whole dict."
            )
        if isinstance(num_augmentations, bool) or not isinstance(num_augmentations, int) or num_augmentations < 1:
            raise ValueError(f"`num_augmentations` must be an integer >= 1, got {num_augmentations!r}.")
        self.n = n
        self.augment = augment
        self.augment_key = augment_key
        self.num_augmentations = num_augmentations
        self.representation = representation
        self.normalize = normalize
        self.knn_k = knn_k
        self.seed = seed
        self.history: list[dict[str, float]] = []

    def _embed(self, model: nn.Module, batch: Batch) -> Tensor:
        outputs = model(**_to_device(batch, _model_device(model)))
        if isinstance(outputs, Mapping):
            z = outputs.get(self.representation)
        else:
            z = getattr(outputs, self.representation, None)
        if not isinstance(z, Tensor):
            available = list(outputs.keys()) if isinstance(outputs, Mapping) else type(outputs).__name__
            raise ValueError(
                f"`representation` {self.representation!r} is not a tensor output of the model "
                f"(got {available}); use 'embeddings' or 'projections'."
            )
        if z.ndim != 2 or z.shape[0] != self.n:
            raise ValueError(
                f"model output `{self.representation}` must have shape ({self.n}, D), got {tuple(z.shape)}; "
                "`augment` must keep the batch size."
            )
        return z.detach().float().cpu()

    def _augmented(self, augment: Callable[[Any], Any]) -> Batch:
        if self.augment_key is None:
            return augment(dict(self.probe_batch))
        return {**self.probe_batch, self.augment_key: augment(self.probe_batch[self.augment_key])}

    @torch.no_grad()
    def compute(self, model: nn.Module, step: int | None = None) -> dict[str, float]:
        """Embed the probe batch with ``model`` and return the metrics (unprefixed names).

        Args:
            model: Encoder whose ``forward(**probe_batch)`` returns ``representation``.
            step: Global step recorded in :attr:`history` with the per-augmentation values.

        Returns:
            ``{name: value}``, see the class docstring for the names.
        """
        was_training = model.training
        model.eval()
        try:
            f = self._embed(model, self.probe_batch)
            metrics = {"uniformity": uniformity(f, normalize=self.normalize), "effective_rank": effective_rank(f)}
            if self.labels is not None:
                metrics["class_orthogonality"] = class_orthogonality(f, self.labels, normalize=self.normalize)
                metrics["knn_accuracy"] = knn_accuracy(f, self.labels, k=self.knn_k)
            if self.augment is not None:
                metrics.update(self._equivariance(model, self.augment, f, step))
        finally:
            model.train(was_training)
        return metrics

    def _equivariance(
        self, model: nn.Module, augment: Callable[[Any], Any], f: Tensor, step: int | None
    ) -> dict[str, float]:
        errors, per_sample, gammas, alignments = [], [], [], []
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            augmented = [self._augmented(augment) for _ in range(self.num_augmentations)]
        for index, batch in enumerate(augmented):
            f_a = self._embed(model, batch)
            wahba = wahba_error(f, f_a, normalize=self.normalize)
            gamma = relative_rotational_equivariance(f, f_a, normalize=self.normalize)
            errors.append(wahba.error)
            per_sample.append(wahba.error_per_sample)
            gammas.append(gamma)
            alignments.append(alignment(f, f_a, normalize=self.normalize))
            self.history.append(
                {
                    "step": float("nan") if step is None else float(step),
                    "augmentation": float(index),
                    "wahba_error": wahba.error,
                    "wahba_error_per_sample": wahba.error_per_sample,
                    "relative_rotational_equivariance": gamma,
                }
            )
        finite_gammas = [g for g in gammas if not math.isnan(g)]
        return {
            "wahba_error": sum(errors) / len(errors),
            "wahba_error_per_sample": sum(per_sample) / len(per_sample),
            "wahba_error_max": max(errors),
            "relative_rotational_equivariance": (
                sum(finite_gammas) / len(finite_gammas) if finite_gammas else float("nan")
            ),
            "alignment": sum(alignments) / len(alignments),
        }

    def on_evaluate(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        metrics: dict[str, float] | None = None,
        model: nn.Module | None = None,
        **kwargs: Any,
    ) -> None:
        """Add the prefixed metrics to ``metrics`` and to the evaluation entry of ``state.log_history``.

        The entry is the last one holding ``<prefix>_runtime`` at the current step (what
        ``Trainer.evaluate`` logged just before); without one a new entry is appended.
        """
        if model is None:
            raise ValueError("`model` must be passed to `on_evaluate` (the Trainer passes it as a keyword).")
        values = self.compute(model, step=state.global_step)
        prefix = self._prefix(metrics)
        prefixed = {f"{prefix}_{name}": value for name, value in values.items()}
        if metrics is not None:
            metrics.update(prefixed)
        runtime_key = f"{prefix}_runtime"
        for entry in reversed(state.log_history):
            if runtime_key in entry and entry.get("step") == state.global_step:
                entry.update(prefixed)
                break
        else:
            state.log_history.append({**prefixed, "step": state.global_step})

    @staticmethod
    def _prefix(metrics: Mapping[str, float] | None) -> str:
        """The ``metric_key_prefix`` of this evaluation, read off its ``<prefix>_runtime`` key."""
        for key in metrics or {}:
            if key.endswith("_runtime"):
                return key[: -len("_runtime")]
        return "eval"
