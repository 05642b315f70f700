"""Tiny, offline model builders shared by the tests (no downloads, each builds in well under a second).

- :func:`tiny_tokenizer`: a lower-casing WordPiece ``BertTokenizerFast`` over a ~130-token vocabulary
  (special tokens, a few words, every letter/digit as a word start and as a ``##`` continuation), so
  any ASCII sentence tokenizes without ``[UNK]`` for letters and digits.
- :func:`tiny_bert_config`: a 2-layer BERT with hidden size 32.
- :func:`tiny_text_encoder` / :func:`tiny_timm_encoder`: ``ContrastiveEncoder`` on those / on timm's
  ``test_resnet`` (96 features, ~0.4 M parameters, any input size >= 32x32).
"""

from __future__ import annotations

import string
from pathlib import Path
from typing import Any

from transformers import BertConfig, BertTokenizerFast

from hf_contrast.models import ContrastiveEncoder

__all__ = [
    "TINY_VOCAB",
    "TIMM_TEST_BACKBONE",
    "tiny_tokenizer",
    "tiny_bert_config",
    "tiny_text_encoder",
    "tiny_timm_encoder",
]

TIMM_TEST_BACKBONE = "test_resnet"
_SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
_WORDS = [
    "the",
    "a",
    "cat",
    "dog",
    "sat",
    "on",
    "mat",
    "hello",
    "world",
    "is",
    "of",
    "and",
    "man",
    "woman",
    "car",
    "red",
]
_CHARS = list(string.ascii_lowercase + string.digits)
TINY_VOCAB: list[str] = _SPECIAL + _WORDS + list(string.punctuation) + _CHARS + ["##" + c for c in _CHARS]


def tiny_tokenizer(tmp_path: str | Path | None = None) -> BertTokenizerFast:
    """A small WordPiece tokenizer; with ``tmp_path``, its ``vocab.txt`` is written there first.

    Args:
        tmp_path: A directory for ``vocab.txt`` (e.g. pytest's ``tmp_path``); ``None`` builds it in memory.

    Returns:
        The tokenizer (``len(tok) == len(TINY_VOCAB)``, ``model_max_length`` 64).
    """
    if tmp_path is None:
        vocab: Any = {token: index for index, token in enumerate(TINY_VOCAB)}
        return BertTokenizerFast(vocab=vocab, model_max_length=64)
    vocab_file = Path(tmp_path) / "vocab.txt"
    vocab_file.parent.mkdir(parents=True, exist_ok=True)
    vocab_file.write_text("\n".join(TINY_VOCAB) + "\n", encoding="utf-8")
    return BertTokenizerFast(str(vocab_file), model_max_length=64)


def tiny_bert_config(**overrides: Any) -> BertConfig:
    """A 2-layer BERT config (hidden 32, 2 heads, vocabulary :data:`TINY_VOCAB`, 64 positions)."""
    options: dict[str, Any] = {
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "vocab_size": len(TINY_VOCAB),
        "max_position_embeddings": 64,
    }
    options.update(overrides)
    return BertConfig(**options)


def tiny_text_encoder(tokenizer: BertTokenizerFast | None = None, **config_kwargs: Any) -> ContrastiveEncoder:
    """A ``ContrastiveEncoder`` on a random tiny BERT (default ``projection_dim=16``, mean pooling).

    Args:
        tokenizer: Defaults to :func:`tiny_tokenizer` built in memory.
        **config_kwargs: ``ContrastiveEncoderConfig`` options.
    """
    config_kwargs.setdefault("projection_dim", 16)
    return ContrastiveEncoder.from_text_config(
        tiny_bert_config(), tokenizer=tokenizer or tiny_tokenizer(), **config_kwargs
    )


def tiny_timm_encoder(**config_kwargs: Any) -> ContrastiveEncoder:
    """A ``ContrastiveEncoder`` on timm's random ``test_resnet`` (F = 96; default ``projection_dim=16``).

    Args:
        **config_kwargs: ``ContrastiveEncoderConfig`` options (and ``backbone_kwargs=``).
    """
    config_kwargs.setdefault("projection_dim", 16)
    return ContrastiveEncoder.from_backbone(TIMM_TEST_BACKBONE, pretrained=False, **config_kwargs)
