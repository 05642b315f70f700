"""Evaluation of a contrastive trainer: embedding metrics instead of logits metrics.

:class:`EmbeddingEvaluationMixin` replaces ``Trainer.evaluate`` with alignment, uniformity and
leave-one-out kNN top-1 on the representations of the evaluation set (docs/methods.md §6–7). It is
mixed into :class:`~hf_contrast.training.ContrastiveTrainer`, whose view helpers it uses.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import DataLoader, SequentialSampler
from transformers.trainer_utils import speed_metrics

__all__ = ["EmbeddingEvaluationMixin"]


class EmbeddingEvaluationMixin:
    """``evaluate`` for contrastive trainers (mixed into ``ContrastiveTrainer``)."""


    def evaluate(
        self,
        eval_dataset: Any = None,
        ignore_keys: list[str] | None = None,
        metric_key_prefix: str = "eval",
    ) -> dict[str, float]:
        """Embedding metrics on the eval set instead of logits metrics.

        Returns ``{prefix}_alignment`` (mean squared distance between the normalised
        representations of two random views of each sample; images, or text with a
        ``text_pair_column``), ``{prefix}_uniformity`` (log mean Gaussian potential of the
        deterministic view), ``{prefix}_knn_top1`` (leave-one-out weighted kNN on the eval set,
        cosine, ``k = min(args.knn_k, n - 1)``; only with labels), plus speed metrics. The
        representation is ``args.eval_representation``. Callbacks get ``on_evaluate``.

        Raises:
            ValueError: without an evaluation dataset.
        """
        override = eval_dataset is not None
        eval_dataset = eval_dataset if override else self.eval_dataset
        if isinstance(eval_dataset, dict):
            metrics: dict[str, float] = {}
            for name, dataset in eval_dataset.items():
                metrics.update(
                    self.evaluate(dataset if override else name, ignore_keys, f"{metric_key_prefix}_{name}")
                )
            return metrics
        if isinstance(eval_dataset, str):
            eval_dataset = self.eval_dataset[eval_dataset]
        if eval_dataset is None:
            raise ValueError("Trainer: evaluation requires an `eval_dataset`.")

        self._memory_tracker.start()
        start_time = time.time()
        metrics = self.embedding_metrics(eval_dataset, metric_key_prefix)
        metrics.update(speed_metrics(metric_key_prefix, start_time, num_samples=len(eval_dataset)))
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        self._memory_tracker.stop_and_update_metrics(metrics)
        return metrics

    def eval_views(self, inputs: Mapping[str, Any]) -> tuple[dict[str, Tensor], list[dict[str, Tensor]] | None]:
        """``(deterministic view, positive pair or None)`` of an evaluation batch."""
        if self.is_text:
            pair = [self.view_inputs(inputs, ""), self.view_inputs(inputs, "pair")] if "pair_input_ids" in inputs else None
            return self.view_inputs(inputs, ""), pair
        main = self.view_inputs(inputs, "") if "pixel_values" in inputs else self.view_inputs(inputs, "1")
        pair = self.augmented_views(inputs, 2) if "pixel_values_2" in inputs else None
        return main, pair

    @torch.no_grad()
    def embedding_metrics(self, dataset: Any, prefix: str = "eval") -> dict[str, float]:
        """Alignment, uniformity and kNN top-1 of the model's representations of ``dataset``."""
        from ..metrics.geometry import alignment, uniformity
        from ..metrics.probes import knn_accuracy

        collator = self.eval_data_collator or self.build_eval_data_collator()
        if hasattr(dataset, "column_names"):
            dataset = self._remove_unused_columns(dataset, description="Evaluation")
        loader = DataLoader(
            dataset,
            batch_size=self.args.eval_batch_size,
            sampler=SequentialSampler(dataset),
            collate_fn=collator,
            num_workers=self.args.dataloader_num_workers,
            pin_memory=self.args.dataloader_pin_memory,
        )
        loader = self.accelerator.prepare(loader)
        key = self.args.eval_representation
        model = self.model
        was_training = model.training
        model.eval()
        reps: list[Tensor] = []
        labels: list[Tensor] = []
        pair1: list[Tensor] = []
        pair2: list[Tensor] = []
        try:
            with self.accelerator.autocast():
                for inputs in loader:
                    inputs = self._prepare_inputs(inputs)
                    main, pair = self.eval_views(inputs)
                    views = [main] + (pair or [])
                    outs = self.forward_views(model, views)
                    reps.append(self.accelerator.gather_for_metrics(outs[0][key].float()))
                    if pair is not None:
                        pair1.append(self.accelerator.gather_for_metrics(outs[1][key].float()))
                        pair2.append(self.accelerator.gather_for_metrics(outs[2][key].float()))
                    if "labels" in inputs:
                        labels.append(self.accelerator.gather_for_metrics(inputs["labels"]))
        finally:
            model.train(was_training)
        z = torch.cat(reps)
        metrics: dict[str, float] = {}
        if pair1:
            metrics[f"{prefix}_alignment"] = alignment(torch.cat(pair1), torch.cat(pair2))
        if z.shape[0] >= 2:
            metrics[f"{prefix}_uniformity"] = uniformity(z)
        if labels and z.shape[0] >= 2:
            y = torch.cat(labels)
            metrics[f"{prefix}_knn_top1"] = knn_accuracy(
                z, y, k=min(self.args.knn_k, z.shape[0] - 1), temperature=self.args.knn_temperature
            )
        return metrics

