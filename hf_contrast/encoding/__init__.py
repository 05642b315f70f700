"""Run a model over a dataset in batches: eval mode, no gradient, the model's own preprocessing (its tokenizer or
the evaluation transform of its image ``data_config``).

- :func:`encode_dataset` — the one helper that embeds a dataset (``ContrastiveEncoder.encode``, the evaluators and
  the examples use it; also importable from :mod:`hf_contrast.evaluation`); :func:`encode_texts` for sentences;
  :func:`check_encode_options` checks its options when an evaluator is built.
- :mod:`.model_access` — the model's device, eval mode, and the representation picked from its output.

Below the models in the layers (it runs any ``nn.Module``, a ``ContrastiveEncoder`` or not), above the views
(whose evaluation transform it applies).
"""

from __future__ import annotations

from .encode import check_encode_options, encode_dataset, encode_texts

__all__ = ["encode_dataset", "encode_texts", "check_encode_options"]
