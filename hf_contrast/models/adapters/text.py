"""``TransformersTextAdapter``: transformers text encoders (``config.backbone_type == "text"``, ``input_ids``),
built from a name, a config, a ``SentenceTransformer`` or a transformers model object."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any, ClassVar

import torch.nn.functional as F
from torch import Tensor, nn
from transformers import AutoModel, AutoTokenizer, PretrainedConfig, PreTrainedModel

from hf_contrast.errors import InputError
from hf_contrast.hub import EncoderCardFacts, get_model_card_data
from hf_contrast.hub.layout import find_saved_file
from hf_contrast.models.adapters.base import BackboneAdapter
from hf_contrast.models.backbones import load_text_backbone
from hf_contrast.models.configuration import ContrastiveEncoderConfig
from hf_contrast.models.encode import text_batch
from hf_contrast.models.export import export_sentence_transformers, text_max_seq_length
from hf_contrast.models.inputs import check_token_inputs, check_training_batch, position_limit
from hf_contrast.models.pooling import pool_tokens
from hf_contrast.models.st_layout import (
    SentenceTransformerLayout,
    apply_max_seq_length,
    layout_options,
    pooling_from_config,
    read_st_layout,
)

__all__ = ["TransformersTextAdapter"]

#: The encoder's logger: what a save warns about is said in the name of ``ContrastiveEncoder``.
logger = logging.getLogger("hf_contrast.models.modeling")


class TransformersTextAdapter(BackboneAdapter):
    """A transformers ``AutoModel`` text encoder: token states pooled (mean / CLS / max) [+ ``Normalize``]."""

    modality: ClassVar[str] = "text"
    main_input_name: ClassVar[str] = "input_ids"

    @classmethod
    def encoder_from_name(
        cls,
        encoder_class: type,
        name: str,
        *,
        pretrained: bool,
        backbone_kwargs: dict[str, Any] | None,
        tokenizer: Any,
        hub_kwargs: dict[str, Any] | None,
        provenance_name: str,
        config_kwargs: dict[str, Any],
    ) -> Any:
        """A sentence-transformers folder (``modules.json``) keeps its pooling, ``Normalize`` and length."""
        if backbone_kwargs:
            raise InputError(
                f"`backbone_kwargs` are timm.create_model arguments but `{name}` is a transformers text encoder; "
                "pass text config changes through a config (see `from_text_config`)."
            )
        hub_kwargs = dict(hub_kwargs or {})
        layout = read_st_layout(name, **hub_kwargs)
        if layout is not None:  # keep what `SentenceTransformer(backbone).encode` does
            config_kwargs = layout_options(layout, config_kwargs, name)
            if layout.transformer_path:
                hub_kwargs["subfolder"] = layout.transformer_path
        module, loaded_tokenizer = load_text_backbone(name, pretrained, **hub_kwargs)
        module.config.name_or_path = provenance_name  # saved inside `text_config`: never the local folder's path
        tokenizer = tokenizer if tokenizer is not None else loaded_tokenizer
        return _text_encoder(encoder_class, module, tokenizer, provenance_name, pretrained, config_kwargs)

    @classmethod
    def claims_instance(cls, backbone: Any) -> bool:
        return _is_sentence_transformer(backbone) or isinstance(backbone, PreTrainedModel)

    @classmethod
    def encoder_from_instance(
        cls,
        encoder_class: type,
        backbone: Any,
        *,
        tokenizer: Any,
        device: Any,
        dtype: Any,
        config_kwargs: dict[str, Any],
    ) -> Any:
        """A ``SentenceTransformer`` (``Transformer -> Pooling [-> Normalize]``) keeps its transformer and tokenizer,
        its Pooling mode, its ``Normalize`` and ``max_seq_length`` (so ``encoder.encode`` equals ``model.encode``);
        a transformers model with token inputs gives its base model, mean pooling unless ``pooling=`` says
        otherwise, and ``tokenizer`` or the one saved under its ``name_or_path``.

        Raises:
            InputError: for a ``SentenceTransformer`` with no modules or modules other than Transformer, Pooling,
                Normalize, or a transformers model without token inputs.
        """
        if _is_sentence_transformer(backbone):
            module, own_tokenizer, parts = _sentence_transformer_parts(backbone)
            config_kwargs = layout_options(parts["layout"], config_kwargs, parts["backbone"])
            name = parts["backbone"]
        else:
            module = _text_model(backbone)
            own_tokenizer = None if tokenizer is not None else _tokenizer_of(module)
            name = module.config.name_or_path or module.config.model_type
        tokenizer = tokenizer if tokenizer is not None else own_tokenizer
        pretrained = bool(module.config.name_or_path)
        return _text_encoder(encoder_class, module, tokenizer, name, pretrained, config_kwargs)

    def build(self, config: Any, backbone: nn.Module | None) -> tuple[nn.Module, int]:
        if backbone is None:
            if config.text_config is None:
                raise InputError(
                    "A text encoder needs `backbone` (a Hub id or local path, see `from_backbone`) or "
                    "`text_config` in its config to build the backbone."
                )
            backbone = AutoModel.from_config(config.text_config)
        return backbone, int(backbone.config.hidden_size)

    def features(
        self,
        encoder: Any,
        pixel_values: Tensor | None,
        input_ids: Tensor | None,
        attention_mask: Tensor | None,
        token_type_ids: Tensor | None,
        output_feature_maps: bool,
    ) -> tuple[Tensor, tuple[Tensor, ...] | None]:
        """Token ids ``(B, L)`` (mask and segment ids ``(B, L)``) → pooled features ``(B, F)``, no maps."""
        config = encoder.config
        if pixel_values is not None:
            raise InputError(
                f"`pixel_values` were given but `{config.backbone}` is a text backbone: pass `input_ids` (and "
                "`attention_mask`) from the tokenizer, e.g. `enc(**enc.tokenizer(texts, padding=True, "
                "return_tensors='pt'))`."
            )
        if output_feature_maps:
            raise InputError(
                "`output_feature_maps=True` needs a timm vision backbone; text backbones have no stage maps."
            )
        if input_ids is None:
            raise InputError(
                "`input_ids` of shape (B, L) are required for a text backbone (with `attention_mask` for padded "
                "batches)."
            )
        if input_ids.ndim != 2:
            raise InputError(f"`input_ids` must have shape (B, L), got shape {tuple(input_ids.shape)}.")
        for name, tensor in (("attention_mask", attention_mask), ("token_type_ids", token_type_ids)):
            if tensor is not None and tensor.shape != input_ids.shape:
                raise InputError(
                    f"`{name}` must have the shape of `input_ids` {tuple(input_ids.shape)}, got {tuple(tensor.shape)}."
                )
        backbone = encoder.backbone
        check_token_inputs(
            input_ids,
            attention_mask,
            vocab_size=backbone.get_input_embeddings().num_embeddings,
            backbone=config.backbone,
            max_tokens=position_limit(backbone),
        )
        check_training_batch("input_ids", encoder, input_ids.shape[0])
        extra = {"token_type_ids": token_type_ids} if token_type_ids is not None else {}
        outputs = backbone(input_ids=input_ids, attention_mask=attention_mask, return_dict=True, **extra)
        embeddings = pool_tokens(outputs.last_hidden_state, attention_mask, config.pooling)
        if config.normalize_embeddings:
            embeddings = F.normalize(embeddings, p=2, dim=-1)
        return embeddings, None

    def export_native(
        self, encoder: Any, save_dir: str | os.PathLike[str], state_dict: Mapping[str, Tensor] | None
    ) -> Any:
        return export_sentence_transformers(encoder, save_dir, state_dict)

    def save_native(
        self, encoder: Any, folder: str | os.PathLike[str], state_dict: Mapping[str, Tensor] | None, target: Any
    ) -> None:
        """Without a tokenizer only the transformers backbone is written (with a warning): no ST modules."""
        if encoder.tokenizer is not None:
            self.export_native(encoder, folder, state_dict)
            return
        logger.warning(
            "The text encoder has no tokenizer: %s gets the transformers backbone at the root but no tokenizer and no "
            "sentence-transformers modules, so AutoTokenizer / SentenceTransformer cannot load it. Set "
            "`encoder.tokenizer` before saving.",
            target,
        )
        backbone_state = None
        if state_dict is not None:
            backbone_state = {k[len("backbone.") :]: v for k, v in state_dict.items() if k.startswith("backbone.")}
        encoder.backbone.save_pretrained(folder, state_dict=backbone_state)

    def after_load(
        self, encoder: Any, path: str | os.PathLike[str], subfolder: str, hub_kwargs: dict[str, Any]
    ) -> None:
        if encoder.tokenizer is None:
            encoder.tokenizer = _load_tokenizer(path, subfolder, hub_kwargs, encoder.config.text_config)

    def encode_inputs(self, encoder: Any, inputs: Any) -> tuple[list[Any], bool]:
        if getattr(encoder, "tokenizer", None) is None:
            raise InputError(
                "The text encoder has no tokenizer to encode sentences with: set `encoder.tokenizer` (e.g. "
                "`AutoTokenizer.from_pretrained(<the backbone's name>)`) or pass `tokenizer=` to `from_backbone`."
            )
        return text_batch(inputs)

    def describe(self, encoder: Any) -> tuple[str, str]:
        config = encoder.config
        source = f"transformers '{getattr(config.text_config, 'model_type', None) or type(encoder.backbone).__name__}'"
        return source, f", {config.pooling} pooling" + (" + Normalize" if config.normalize_embeddings else "")

    def details(self, encoder: Any, previous: dict[str, Any] | None) -> dict[str, Any]:
        """``architecture_name`` (the backbone config's first ``architectures``) and ``max_seq_length``."""
        architectures = getattr(encoder.config.text_config, "architectures", None) or []
        return {
            "architecture_name": architectures[0] if architectures else type(encoder.backbone).__name__,
            "max_seq_length": text_max_seq_length(encoder),
        }

    def card_facts(self, encoder: Any) -> EncoderCardFacts:
        """Sequence length, pooling and similarity rows; sentence-transformers' library, tags and usage."""
        config = encoder.config
        card_data = get_model_card_data(encoder)
        rows: list[tuple[str, str]] = []
        max_length = getattr(config, "max_seq_length", None) or (card_data.model_details or {}).get("max_seq_length")
        if max_length:
            rows.append(("Maximum sequence length", f"{max_length} tokens"))
        normalized = ", then L2 normalisation" if getattr(config, "normalize_embeddings", False) else ""
        rows.append(("Pooling", f"{getattr(config, 'pooling', 'mean')}{normalized}"))
        rows.append(("Similarity function", "cosine similarity"))
        return EncoderCardFacts(
            model_type="hf_contrast ContrastiveEncoder (text)",
            input_noun="sentence",
            inputs_noun="sentences",
            backbone_library="transformers",
            detail_rows=tuple(rows),
            embeddings_normalized=bool(getattr(config, "normalize_embeddings", False)),
            usage_template="usage_sentence_transformers.md",
            library_name="sentence-transformers",
            pipeline_tag="sentence-similarity",
            tags=("sentence-transformers", "sentence-similarity", "feature-extraction"),
            feature_extraction_task="feature-extraction",
            classification_task="text-classification",
            base_model=self.card_base_model(config, card_data),
        )


def _load_tokenizer(
    path: str | os.PathLike[str], subfolder: str, hub_kwargs: dict[str, Any], text_config: PretrainedConfig | None
) -> Any:
    """The tokenizer saved beside the encoder, or ``None``. ``config=text_config`` (the backbone's, e.g. a
    ``BertConfig``) lets ``AutoTokenizer`` match the saved tokenizer class to its model type; from the
    encoder's own config transformers 5.0 falls back to a generic ``TokenizersBackend`` without the
    backbone's ``model_input_names`` (no ``token_type_ids`` for BERT)."""
    if find_saved_file(path, "tokenizer_config.json", subfolder, hub_kwargs) is None:
        return None
    config = {"config": text_config} if text_config is not None else {}
    try:
        return AutoTokenizer.from_pretrained(path, subfolder=subfolder, **hub_kwargs, **config)
    except (OSError, ValueError) as error:
        logger.warning("The tokenizer saved with the encoder at %s could not be loaded: %s", path, error)
        return None


def _text_encoder(
    encoder_class: type, module: Any, tokenizer: Any, name: str, pretrained: bool, config_kwargs: dict[str, Any]
) -> Any:
    """The encoder on the text backbone ``module`` (its config saved as ``text_config``, ``name`` as the backbone),
    ``tokenizer`` cut to ``max_seq_length`` when one is given."""
    apply_max_seq_length(tokenizer, config_kwargs.get("max_seq_length"))
    config = ContrastiveEncoderConfig(
        backbone=name, backbone_type="text", text_config=module.config, backbone_pretrained=pretrained, **config_kwargs
    )
    return encoder_class(config, backbone=module, tokenizer=tokenizer)


# ---- sentence-transformers and transformers model objects (from_backbone(model), a trainer's model=) -----


def _is_sentence_transformer(obj: Any) -> bool:
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        return False
    return isinstance(obj, SentenceTransformer)


def _sentence_transformer_parts(model: Any) -> tuple[PreTrainedModel, Any, dict[str, Any]]:
    """``(transformer, tokenizer, options)`` of a ``SentenceTransformer`` (Transformer -> Pooling [-> Normalize])."""
    modules = list(model)
    kinds = [type(m).__name__ for m in modules]
    if not modules:
        raise InputError(
            "`backbone` is a SentenceTransformer with no modules: there is no transformer to train. Load a model "
            "(`SentenceTransformer('sentence-transformers/all-MiniLM-L6-v2')`) or pass its name to `from_backbone`."
        )
    if kinds[:2] != ["Transformer", "Pooling"] or any(kind != "Normalize" for kind in kinds[2:]):
        raise InputError(
            f"The SentenceTransformer has the modules {kinds}; ContrastiveEncoder reproduces Transformer -> Pooling "
            "[-> Normalize] only. Pass its transformer alone (`model[0].auto_model`) to train without the other "
            "modules."
        )
    transformer = modules[0].auto_model
    name = (
        getattr(model.model_card_data, "base_model", None)
        or transformer.config.name_or_path
        or transformer.config.model_type
    )
    layout = SentenceTransformerLayout(
        transformer_path="",
        pooling=pooling_from_config(modules[1].get_config_dict(), name),
        normalize=len(modules) > 2,
        max_seq_length=int(model.max_seq_length) if model.max_seq_length else None,
    )
    return transformer, modules[0].tokenizer, {"backbone": name, "layout": layout}


def _text_model(model: PreTrainedModel) -> PreTrainedModel:
    """The base model of a transformers model with token inputs (``BertForX`` -> its ``BertModel``)."""
    base = model.base_model
    if getattr(base, "main_input_name", "input_ids") != "input_ids" or not hasattr(base.config, "hidden_size"):
        raise InputError(
            f"`backbone` is a transformers {type(model).__name__}, which does not take token ids (`main_input_name` "
            f"is {base.main_input_name!r}): ContrastiveEncoder wraps transformers *text* encoders. For images, pass a "
            "timm model or name (e.g. 'resnet18', 'hf-hub:timm/...')."
        )
    return base


def _tokenizer_of(model: PreTrainedModel) -> Any:
    """The tokenizer saved under the model's ``name_or_path`` (``None``, with a warning, if there is none)."""
    source = model.config.name_or_path
    if source:
        try:
            return AutoTokenizer.from_pretrained(source)
        except (OSError, ValueError) as error:
            reason = f"{type(error).__name__}: {error}"
    else:
        reason = "the model has no `name_or_path`"
    logger.warning(
        "No tokenizer for the %s backbone (%s): pass `tokenizer=` to `from_backbone`, or set `encoder.tokenizer` "
        "before encoding, training or saving.",
        type(model).__name__,
        reason,
    )
    return None
