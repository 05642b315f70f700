"""``LOCALTrainer``: the LOCAL paired-input framework (docs/methods.md §3a) on ``transformers.Trainer``.

Rows hold a pair of images (``image_pre``, ``image_post``) and the class of the pair (e.g. the
kind of change between them). Both images go through the shared encoder in one forward pass with
their stage feature maps; :class:`hf_contrast.losses.LOCALLoss` combines OCL on the projection
difference, β · OCL on the latent feature-correlation embedding, and the class-weighted
cross-entropy of its pair classifier, weighted by α (decreasing over epochs).
``loss="supcon"`` gives the paper's L-SCL baseline.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, SequentialSampler

from ..losses.local import LOCALLoss, local_alpha, pair_difference
from .collators import _collate_labels
from .trainer import ContrastiveTrainer

__all__ = ["LOCALTrainer", "PairedImageCollator"]

_CONTRASTIVE = ("ocl", "supcon")


@dataclass
class PairedImageCollator:
    """Collate ``(pre, post)`` image rows into ``pixel_values_pre`` / ``pixel_values_post``.

    Args:
        transform: ``(pre, post) -> (pre', post')`` on one pair, e.g.
            :func:`hf_contrast.augment.paired_transform` (shared geometric draw) for training.
        pre_column, post_column: Columns holding the two images.
        label_column: Integer class of the pair (``labels`` in the batch).

    Raises:
        ValueError: if a row lacks an image column or a label is not an int.
    """

    transform: Callable[[Any, Any], tuple[Tensor, Tensor]]
    pre_column: str = "image_pre"
    post_column: str = "image_post"
    label_column: str | None = "label"

    def __call__(self, features: Sequence[Mapping[str, Any]]) -> dict[str, Tensor]:
        for name, column in (("pre_column", self.pre_column), ("post_column", self.post_column)):
            if column not in features[0]:
                raise ValueError(
                    f"`{name}`={column!r} is not a column of the dataset (columns: {sorted(features[0])})."
                )
        pairs = [self.transform(f[self.pre_column], f[self.post_column]) for f in features]
        batch = {
            "pixel_values_pre": torch.stack([p[0] for p in pairs]),
            "pixel_values_post": torch.stack([p[1] for p in pairs]),
        }
        labels = _collate_labels(features, self.label_column)
        if labels is not None:
            batch["labels"] = labels
        return batch


class _EachImage:
    """Apply one deterministic transform to both images of a pair (evaluation)."""

    def __init__(self, transform: Callable[[Any], Tensor]) -> None:
        self.transform = transform

    def __call__(self, pre: Any, post: Any) -> tuple[Tensor, Tensor]:
        return self.transform(pre), self.transform(post)


class LOCALTrainer(ContrastiveTrainer):
    """LOCAL (paired inputs, docs/methods.md §3a): ``α·(OCL(z) + β·OCL(l)) + (1 − α)·WCE``.

    The encoder must be a timm ``ContrastiveEncoder`` (its projection head is LOCAL's projection
    network; its stage maps feed the latent correlation module). The pair classifier lives in
    ``trainer.loss`` (a :class:`~hf_contrast.losses.LOCALLoss`): it is trained, checkpointed in
    ``contrastive_state.pt`` and used by :meth:`predict_pairs`, but not saved with the encoder.

    Hyperparameters come from the arguments: ``temperature`` (default 0.1), ``local_beta`` (β),
    ``local_alpha`` and ``local_alpha_schedule`` (``"inverse_epoch"``: α = local_alpha / (1 + e)
    at the integer epoch e; ``"constant"``). Class weights are 1/frequency over the training set.

    Args:
        loss: ``"ocl"`` (LOCAL, default), ``"supcon"`` (L-SCL), or a ready ``LOCALLoss``.
        num_labels: Number of pair classes; default read from the training set's ``ClassLabel``
            feature, else ``max(label) + 1``.
        pre_column, post_column: Image columns of the pair.
        *args, **kwargs: As :class:`ContrastiveTrainer`.

    Raises:
        ValueError: on an unknown ``loss``, a text encoder, or a training set without labels.
    """

    method: ClassVar[str] = "local"
    default_temperature: ClassVar[float] = 0.1

    def __init__(
        self,
        *args: Any,
        loss: str | nn.Module = "ocl",
        num_labels: int | None = None,
        pre_column: str = "image_pre",
        post_column: str = "image_post",
        **kwargs: Any,
    ) -> None:
        if isinstance(loss, str) and loss not in _CONTRASTIVE:
            raise ValueError(f"`loss` must be one of {_CONTRASTIVE} or a LOCALLoss, got {loss!r}.")
        self.contrastive = loss if isinstance(loss, str) else getattr(loss, "contrastive", "ocl")
        self.method = "local" if self.contrastive == "ocl" else "l_scl"
        self.num_labels = num_labels
        self.pre_column, self.post_column = pre_column, post_column
        self.extra_columns = (pre_column, post_column)
        model = kwargs.get("model", args[0] if args else None)
        if getattr(getattr(model, "config", None), "backbone_type", "timm") == "text":
            raise ValueError("LOCALTrainer needs a timm image encoder (stage feature maps); got a text encoder.")
        super().__init__(*args, loss=None if isinstance(loss, str) else loss, **kwargs)

    # ---- what the method defines -------------------------------------------------------------

    def _train_labels(self) -> list[int]:
        dataset = self.train_dataset
        column = self.args.label_column
        if dataset is None or not hasattr(dataset, "column_names") or column not in dataset.column_names:
            raise ValueError(
                f"LOCALTrainer needs a training `datasets.Dataset` with the label column `label_column`={column!r} "
                "(the class weights are 1/frequency over it); pass `loss=LOCALLoss(...)` to build them yourself."
            )
        return list(dataset[column])

    def build_loss(self) -> nn.Module:
        """:class:`LOCALLoss` with 1/frequency class weights over the training labels."""
        labels = self._train_labels()
        num_labels = self.num_labels
        if num_labels is None:
            feature = getattr(self.train_dataset, "features", {}).get(self.args.label_column)
            num_labels = getattr(feature, "num_classes", None) or max(labels) + 1
        counts = torch.bincount(torch.tensor(labels, dtype=torch.long), minlength=num_labels)
        if counts.numel() != num_labels:
            raise ValueError(f"`num_labels`={num_labels} is smaller than the largest training label {max(labels)}.")
        return LOCALLoss(
            embedding_dim=self.model.embedding_dim,
            num_classes=num_labels,
            class_counts=counts.tolist(),
            beta=self.args.local_beta,
            temperature=self.temperature,
            contrastive=self.contrastive,
        )

    def _pair_collator(self, transform: Callable[[Any, Any], tuple[Tensor, Tensor]]) -> PairedImageCollator:
        return PairedImageCollator(
            transform=transform,
            pre_column=self.pre_column,
            post_column=self.post_column,
            label_column=self.args.label_column,
        )

    def build_data_collator(self) -> Callable[[list[dict[str, Any]]], dict[str, Any]]:
        """Training pairs: one shared random crop/flip per pair (:func:`~hf_contrast.augment.paired_transform`)."""
        from ..augment.paired import paired_transform

        config = self.image_data_config()
        return self._pair_collator(paired_transform(config["input_size"][1:], config["mean"], config["std"]))

    def build_eval_data_collator(self) -> Callable[[list[dict[str, Any]]], dict[str, Any]]:
        """Evaluation pairs: the deterministic resize / centre-crop / normalise of each image."""
        from ..augment.image import eval_transform_from_data_config

        return self._pair_collator(_EachImage(eval_transform_from_data_config(self.image_data_config())))

    def current_alpha(self) -> float:
        """α at the current integer epoch (``args.local_alpha_schedule``)."""
        epoch = int(self.state.epoch or 0)
        return local_alpha(epoch, self.args.local_alpha_schedule, self.args.local_alpha)

    def _encode_pairs(self, model: nn.Module, inputs: Mapping[str, Any], feature_maps: bool) -> list[dict[str, Any]]:
        views = [{"pixel_values": inputs["pixel_values_pre"]}, {"pixel_values": inputs["pixel_values_post"]}]
        return self.forward_views(model, views, output_feature_maps=feature_maps)

    def compute_contrastive_loss(self, model: nn.Module, inputs: dict[str, Any]) -> Mapping[str, Tensor]:
        """Both images in one forward pass (with stage maps when β > 0), then :class:`LOCALLoss`."""
        labels = self.require_labels(inputs)
        pre, post = self._encode_pairs(model, inputs, feature_maps=self.args.local_beta > 0)
        return self.loss(
            pre["embeddings"],
            post["embeddings"],
            pre["projections"],
            post["projections"],
            labels,
            pre.get("feature_maps"),
            post.get("feature_maps"),
            alpha=self.current_alpha(),
        )

    # ---- evaluation ----------------------------------------------------------------------------

    @torch.no_grad()
    def predict_pairs(self, dataset: Any) -> dict[str, Tensor]:
        """Classify every pair of ``dataset`` (deterministic views, eval mode).

        Returns:
            ``{"logits": (N, K), "labels": (N,) (if the dataset has labels), "z": (N, P)}`` on the
            CPU, where ``z = n(n(e_pre) − n(e_post))`` is the pair representation OCL shapes.
        """
        collator = self.eval_data_collator or self.build_eval_data_collator()
        if hasattr(dataset, "column_names"):
            dataset = self._remove_unused_columns(dataset, description="Prediction")
        loader = DataLoader(
            dataset, batch_size=self.args.eval_batch_size, sampler=SequentialSampler(dataset), collate_fn=collator
        )
        loader = self.accelerator.prepare(loader)
        model = self.model
        was_training, loss_training = model.training, self.loss.training
        model.eval()
        self.loss.eval()
        out: dict[str, list[Tensor]] = {"logits": [], "labels": [], "z": []}
        try:
            for inputs in loader:
                inputs = self._prepare_inputs(inputs)
                pre, post = self._encode_pairs(model, inputs, feature_maps=False)
                logits = self.loss.classify(pre["embeddings"], post["embeddings"]).float()
                z = pair_difference(pre["projections"], post["projections"]).float()
                out["logits"].append(self.accelerator.gather_for_metrics(logits).cpu())
                out["z"].append(self.accelerator.gather_for_metrics(z).cpu())
                if "labels" in inputs:
                    out["labels"].append(self.accelerator.gather_for_metrics(inputs["labels"]).cpu())
        finally:
            model.train(was_training)
            self.loss.train(loss_training)
        return {key: torch.cat(values) for key, values in out.items() if values}

    def embedding_metrics(self, dataset: Any, prefix: str = "eval") -> dict[str, float]:
        """Pair-classifier accuracy and macro-F1, and kNN top-1 / class orthogonality of ``z``."""
        from ..metrics.geometry import class_orthogonality
        from ..metrics.probes import knn_accuracy, macro_f1

        pred = self.predict_pairs(dataset)
        metrics: dict[str, float] = {}
        if "labels" not in pred:
            return metrics
        labels = pred["labels"]
        predicted = pred["logits"].argmax(dim=1)
        metrics[f"{prefix}_accuracy"] = float((predicted == labels).float().mean())
        metrics[f"{prefix}_macro_f1"] = macro_f1(predicted, labels, num_classes=pred["logits"].shape[1])
        if labels.numel() >= 2:
            metrics[f"{prefix}_knn_top1"] = knn_accuracy(
                pred["z"], labels, k=min(self.args.knn_k, labels.numel() - 1), temperature=self.args.knn_temperature
            )
        if labels.unique().numel() >= 2:
            metrics[f"{prefix}_class_orthogonality"] = class_orthogonality(pred["z"], labels)
        return metrics

