"""The sentence-transformers folder layout: read a model's Transformer / Pooling / Normalize modules, write them back.

A sentence-transformers model folder holds ``modules.json`` (the module pipeline), the transformer at
the module path (usually the root), ``1_Pooling/config.json`` (the pooling mode: ``pooling_mode`` since
sentence-transformers 6, ``pooling_mode_*_tokens`` flags before), an optional ``2_Normalize`` module and
``sentence_bert_config.json`` (``max_seq_length``; since version 6 the tokenizer's ``model_max_length``).
:func:`read_st_layout` turns that into the encoder options that reproduce ``SentenceTransformer(path).encode``;
:func:`write_st_modules` writes them back, so a fine-tuned model stays a drop-in replacement.
sentence-transformers itself is needed for neither.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hf_contrast.errors import InputError
from hf_contrast.hub.layout import find_saved_file

from .configuration import POOLINGS

__all__ = [
    "SentenceTransformerLayout",
    "read_st_layout",
    "pooling_from_config",
    "layout_options",
    "write_st_modules",
    "POOLING_MODES",
]

#: Our pooling name -> the key of sentence-transformers' ``1_Pooling/config.json``.
POOLING_MODES = {"cls": "pooling_mode_cls_token", "mean": "pooling_mode_mean_tokens", "max": "pooling_mode_max_tokens"}
_OTHER_POOLING_MODES = (
    "pooling_mode_mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens",
    "pooling_mode_lasttoken",
)
_MODULE = "sentence_transformers.models."

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SentenceTransformerLayout:
    """What a sentence-transformers folder says about its embedding.

    Attributes:
        transformer_path: The Transformer module's folder inside the model (``""`` = the root).
        pooling: ``"mean"``, ``"cls"`` or ``"max"``.
        normalize: Whether a ``Normalize`` module follows the pooling.
        max_seq_length: ``sentence_bert_config.json``'s ``max_seq_length`` (``None`` if absent).
    """

    transformer_path: str
    pooling: str
    normalize: bool
    max_seq_length: int | None


def _module_kind(entry: dict[str, Any]) -> str:
    return str(entry.get("type", "")).rsplit(".", 1)[-1]


def _read_json(name: str, filename: str, hub_kwargs: dict[str, Any]) -> Any:
    folder, _, base = filename.rpartition("/")
    path = find_saved_file(name, base, folder, hub_kwargs)
    if path is None:
        return None
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def read_st_layout(name: str | os.PathLike[str], **hub_kwargs: Any) -> SentenceTransformerLayout | None:
    """Read the sentence-transformers modules of a local folder or Hub repository.

    Args:
        name: A local directory or a Hub id.
        **hub_kwargs: ``revision``, ``cache_dir``, ``token``, ``local_files_only``…

    Returns:
        The layout, or ``None`` if ``name`` has no ``modules.json`` (a plain transformers model).

    Raises:
        ValueError: If the model has modules the encoder cannot reproduce (``Dense``, a second
            Transformer…) or a pooling mode other than CLS / mean / max: silently dropping them would
            change the embeddings.
    """
    modules = _read_json(str(name), "modules.json", hub_kwargs)
    if modules is None:
        return None
    kinds = [_module_kind(entry) for entry in modules]
    if kinds[:2] != ["Transformer", "Pooling"] or any(kind != "Normalize" for kind in kinds[2:]):
        raise InputError(
            f"The sentence-transformers model `{name}` has the modules {kinds}; ContrastiveEncoder reproduces "
            "Transformer -> Pooling [-> Normalize] only. Load its transformer alone with a plain transformers path, "
            "or export a model without the extra modules."
        )
    transformer_path = str(modules[0].get("path", "") or "")
    pooling_path = str(modules[1].get("path", "1_Pooling") or "1_Pooling")
    pooling_config = _read_json(str(name), f"{pooling_path}/config.json", hub_kwargs) or {}
    pooling = pooling_from_config(pooling_config, name)
    for entry in modules[2:]:
        normalize_config = _read_json(str(name), f"{entry.get('path') or '2_Normalize'}/config.json", hub_kwargs) or {}
        if normalize_config.get("module_input_name", "sentence_embedding") != "sentence_embedding":
            raise InputError(
                f"The Normalize module of `{name}` normalises `{normalize_config['module_input_name']}`; "
                f"ContrastiveEncoder reproduces a Normalize of the sentence embedding only."
            )
    prefix = f"{transformer_path}/" if transformer_path else ""
    st_config = _read_json(str(name), f"{prefix}sentence_bert_config.json", hub_kwargs) or {}
    max_seq_length = st_config.get("max_seq_length")
    if max_seq_length is None:  # sentence-transformers >= 6 keeps it as the tokenizer's model_max_length
        max_seq_length = (_read_json(str(name), f"{prefix}tokenizer_config.json", hub_kwargs) or {}).get(
            "model_max_length"
        )
    valid = isinstance(max_seq_length, int) and 0 < max_seq_length < 1_000_000
    return SentenceTransformerLayout(
        transformer_path=transformer_path,
        pooling=pooling,
        normalize=len(kinds) > 2,
        max_seq_length=int(max_seq_length) if valid else None,
    )


def pooling_from_config(pooling_config: dict[str, Any], name: Any) -> str:
    """Our pooling name for a sentence-transformers ``Pooling`` config (``1_Pooling/config.json``, or
    ``Pooling.get_config_dict()``): ``pooling_mode`` since sentence-transformers 6, ``pooling_mode_*_tokens``
    flags before.

    Args:
        pooling_config: The Pooling module's config.
        name: The model, for the message.

    Returns:
        ``"mean"``, ``"cls"`` or ``"max"``.

    Raises:
        ValueError: If the config sets no mode, several, or one the encoder does not implement.
    """
    if "pooling_mode" in pooling_config:  # sentence-transformers >= 6: "cls" / "mean" / ["mean", "max"]...
        mode = pooling_config["pooling_mode"]
        modes = [mode] if isinstance(mode, str) else list(mode)
        chosen = [m for m in modes if m in POOLING_MODES]
        unsupported = [m for m in modes if m not in POOLING_MODES]
    else:  # the classic pooling_mode_*_tokens flags
        chosen = [ours for ours, key in POOLING_MODES.items() if pooling_config.get(key)]
        unsupported = [key for key in _OTHER_POOLING_MODES if pooling_config.get(key)]
    if len(chosen) != 1 or unsupported:
        raise InputError(
            f"The Pooling module of `{name}` sets {chosen + unsupported}; ContrastiveEncoder supports exactly one of "
            f"{list(POOLING_MODES)} ({list(POOLING_MODES.values())})."
        )
    return chosen[0]


def layout_options(layout: SentenceTransformerLayout, config_kwargs: dict[str, Any], name: Any) -> dict[str, Any]:
    """``config_kwargs`` completed with the layout's ``pooling``, ``normalize_embeddings`` and ``max_seq_length``,
    so the encoder's embeddings equal ``SentenceTransformer.encode``; an option the user set wins, with a warning.

    Args:
        layout: The sentence-transformers model's layout.
        config_kwargs: The user's ``ContrastiveEncoderConfig`` options (not modified).
        name: The model, for the warning.

    Returns:
        The completed options.
    """
    options = dict(config_kwargs)
    for key, value in (
        ("pooling", layout.pooling),
        ("normalize_embeddings", layout.normalize),
        ("max_seq_length", layout.max_seq_length),
    ):
        if key == "pooling" and key in options and options[key] not in POOLINGS:
            continue  # refused by ContrastiveEncoderConfig, naming it; no "overrides" warning in front of that error
        if key in options and options[key] != value:
            logger.warning(
                "`%s=%r` overrides the sentence-transformers model `%s`, which uses %r: the embeddings will differ "
                "from its SentenceTransformer.encode.",
                key,
                options[key],
                name,
                value,
            )
        options.setdefault(key, value)
    return options


def apply_max_seq_length(tokenizer: Any, max_seq_length: int | None) -> None:
    """Lower ``tokenizer.model_max_length`` to ``max_seq_length`` (when both are given and it is longer), so the
    tokenizer truncates as ``SentenceTransformer`` does."""
    if (
        max_seq_length is not None
        and tokenizer is not None
        and getattr(tokenizer, "model_max_length", 0) > max_seq_length
    ):
        tokenizer.model_max_length = int(max_seq_length)


def write_st_modules(
    save_dir: str | os.PathLike[str],
    *,
    embedding_dim: int,
    pooling: str,
    normalize: bool,
    max_seq_length: int | None,
    do_lower_case: bool = False,
    versions: dict[str, str] | None = None,
) -> None:
    """Write ``modules.json``, ``1_Pooling/config.json``, ``2_Normalize/`` and the two ST config files.

    The transformer itself (config, weights, tokenizer) must be at the root of ``save_dir``. Module
    types use the classic ``sentence_transformers.models.*`` names every sentence-transformers version
    since 2.x reads.

    Args:
        save_dir: The model folder.
        embedding_dim: The pooled width F.
        pooling: ``"mean"``, ``"cls"`` or ``"max"``.
        normalize: Whether to add a ``Normalize`` module.
        max_seq_length: sentence-transformers' input limit in tokens.
        do_lower_case: ``sentence_bert_config.json``'s flag (the tokenizer does its own lower-casing).
        versions: ``config_sentence_transformers.json``'s ``__version__`` entry.

    Raises:
        ValueError: If ``pooling`` is unknown.
    """
    if pooling not in POOLING_MODES:
        raise InputError(f"`pooling` must be one of {list(POOLING_MODES)}, got {pooling!r}.")
    save_dir = Path(save_dir)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": _MODULE + "Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": _MODULE + "Pooling"},
    ]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": _MODULE + "Normalize"})
        (save_dir / "2_Normalize").mkdir(parents=True, exist_ok=True)
    pooling_config = {"word_embedding_dimension": int(embedding_dim)}
    pooling_config.update({key: pooling == ours for ours, key in POOLING_MODES.items()})
    pooling_config.update({key: False for key in _OTHER_POOLING_MODES})
    pooling_config["include_prompt"] = True
    st_config = {
        "__version__": dict(versions or {}),
        "model_type": "SentenceTransformer",
        "prompts": {},
        "default_prompt_name": None,
        "similarity_fn_name": "cosine",
    }
    files = {
        "modules.json": modules,
        "sentence_bert_config.json": {"max_seq_length": max_seq_length, "do_lower_case": bool(do_lower_case)},
        "config_sentence_transformers.json": st_config,
        "1_Pooling/config.json": pooling_config,
    }
    for filename, content in files.items():
        path = save_dir / filename
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(content, indent=2) + "\n", encoding="utf-8")
