"""Publishing a trained encoder: model card data and ``push_to_hub`` in the hf_contrast layout."""

from __future__ import annotations

import math
import os
import warnings
from typing import Any

__all__ = ["HubPublishingMixin"]


# ``Trainer.push_to_hub`` keywords that have no meaning for one commit of an encoder folder.
_TRAINER_ONLY_PUSH_KWARGS = ("blocking", "model_name", "finetuned_from", "language", "license", "dataset_tags",
                             "dataset", "dataset_args", "tasks")


class HubPublishingMixin:
    """``model_card_data`` and ``push_to_hub`` for contrastive trainers (mixed into ``ContrastiveTrainer``)."""

    def model_card_data(self, **kwargs: Any) -> Any:
        """``ContrastiveModelCardData`` of this run: method, loss config and citations, non-default
        arguments, log history and the last evaluation metrics. ``kwargs`` set other card fields
        (``datasets``, ``license``, …). ``None`` (with a warning) if it cannot be built: a card
        never makes a push fail."""
        try:
            from ..hub.model_card import ContrastiveModelCardData

            metrics: dict[str, float] = {}
            for entry in self.state.log_history:
                for key, value in entry.items():
                    if key.startswith("eval_") and isinstance(value, (int, float)) and math.isfinite(value):
                        if not key.endswith(("_runtime", "_per_second")):
                            metrics[key[len("eval_"):]] = value
            kwargs.setdefault("method", self.method)
            kwargs.setdefault("metrics", metrics)
            return ContrastiveModelCardData.from_trainer(self, **kwargs)
        except Exception as err:  # noqa: BLE001 - the card is optional, the push is not
            warnings.warn(f"Could not build the model card data ({err!r}); pushing without it.", stacklevel=2)
            return None

    def push_to_hub(
        self,
        repo_id: str | None = None,
        commit_message: str | None = "End of training",
        token: str | None = None,
        private: bool | None = None,
        **kwargs: Any,
    ) -> Any:
        """Publish the encoder with ``hf_contrast.hub.push.push_encoder_to_hub``: weights, config,
        processing files, native timm / transformers / sentence-transformers exports and a model
        card from :meth:`model_card_data` (``card_kwargs={...}`` adds card fields). Other ``kwargs``
        go to ``push_encoder_to_hub`` (``revision``, ``create_pr``); ``tags`` go to the card; the
        ``Trainer.push_to_hub`` keywords that only concern its own card or background upload
        (``blocking``, ``model_name``, …) are accepted and ignored. Only the main process uploads.

        Returns:
            The commit URL (``None`` on other processes).
        """
        from ..hub.push import push_encoder_to_hub

        if not self.is_world_process_zero():
            return None
        repo_id = repo_id or self.args.hub_model_id or os.path.basename(os.path.normpath(self.args.output_dir))
        card_kwargs = dict(kwargs.pop("card_kwargs", None) or {})
        if kwargs.get("tags"):
            tags = kwargs.pop("tags")
            card_kwargs.setdefault("tags", [tags] if isinstance(tags, str) else list(tags))
        kwargs.pop("tags", None)
        for key in _TRAINER_ONLY_PUSH_KWARGS:
            kwargs.pop(key, None)
        return push_encoder_to_hub(
            self.model,
            repo_id,
            card_data=self.model_card_data(**card_kwargs),
            token=token if token is not None else self.args.hub_token,
            private=private,
            commit_message=commit_message or "Upload hf_contrast encoder",
            **kwargs,
        )
