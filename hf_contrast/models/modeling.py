"""``ContrastiveEncoder``: a timm or transformers backbone with a projection head, as a ``PreTrainedModel``."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from transformers import PretrainedConfig, PreTrainedModel
from transformers.utils import ModelOutput

from hf_contrast.errors import InputError
from hf_contrast.hub import ContrastiveModelCardData, EncoderCardFacts, get_model_card_data, save_and_push
from hf_contrast.models.adapters.registry import adapter_for, adapter_for_name
from hf_contrast.models.configuration import ContrastiveEncoderConfig
from hf_contrast.models.encode import encode as encode_inputs
from hf_contrast.models.export import HUB_SUBFOLDER
from hf_contrast.models.heads import ProjectionHead
from hf_contrast.models.instances import encoder_from_instance
from hf_contrast.models.loading import load_encoder
from hf_contrast.models.saving import save_encoder
from hf_contrast.provenance import backbone_provenance
from hf_contrast.tensor_checks import check_folder_path, l2_normalize

__all__ = ["ContrastiveEncoder", "ContrastiveEncoderOutput", "HUB_SUBFOLDER"]

logger = logging.getLogger(__name__)


@dataclass
class ContrastiveEncoderOutput(ModelOutput):
    """Outputs of :class:`ContrastiveEncoder`.

    Args:
        embeddings: Backbone features (pooled), what a linear probe uses; L2-normalised iff
            ``config.normalize_embeddings`` (a sentence-transformers ``Normalize``). Shape: ``(B, F)``.
        projections: Projection-head outputs, what the losses use; L2-normalised iff
            ``config.normalize_projections``. Shape: ``(B, P)``.
        feature_maps: timm stage feature maps (``output_feature_maps=True``), else ``None``.
            Shape: a tuple of ``(B, C_i, H_i, W_i)``.
        logits: Task-head outputs on ``embeddings`` when ``config.num_labels > 0``, else ``None``.
            Shape: ``(B, num_labels)``.
    """

    embeddings: torch.FloatTensor | None = None
    projections: torch.FloatTensor | None = None
    feature_maps: tuple[torch.FloatTensor, ...] | None = None
    logits: torch.FloatTensor | None = None


class ContrastiveEncoder(PreTrainedModel):
    r"""A contrastive encoder: a timm vision or transformers text backbone followed by a projection head.

    ``embeddings`` are the backbone's pooled features (timm's global pooling; for text, mean over the
    attention mask or the CLS token); ``projections`` are the head's outputs (SimCLR's MLP head,
    https://arxiv.org/abs/2002.05709), L2-normalised by default. An optional linear task head on
    ``embeddings`` gives ``logits`` (``config.num_labels > 0``). Build one with :meth:`from_backbone`
    (pretrained backbone weights) or :meth:`from_text_config` (random text backbone); save and load with
    ``save_pretrained`` / ``from_pretrained`` (safetensors, tokenizer and preprocessing included).

    Args:
        config: The encoder's configuration.
        backbone: An already built backbone (used by the factories to keep pretrained weights); by
            default it is built from ``config`` with random weights.
        tokenizer: The tokenizer of a text backbone (saved with the model).

    Raises:
        ValueError: If ``config.embedding_dim`` does not match the backbone width,
            ``config.feature_stages`` indexes stages the backbone does not have, or ``config`` names no
            backbone (no ``backbone`` for timm, neither ``backbone`` nor ``text_config`` for text) and
            none is given.

    Example:
        >>> enc = ContrastiveEncoder.from_backbone("test_resnet", pretrained=False, projection_dim=8)
        >>> out = enc.eval()(pixel_values=torch.randn(2, 3, 32, 32))
        >>> out.embeddings.shape, out.projections.shape
        (torch.Size([2, 96]), torch.Size([2, 8]))
    """

    config_class = ContrastiveEncoderConfig
    config: ContrastiveEncoderConfig
    base_model_prefix = "backbone"
    main_input_name = "pixel_values"
    supports_gradient_checkpointing = True
    _no_split_modules: list[str] = []

    def __init__(
        self, config: ContrastiveEncoderConfig, backbone: nn.Module | None = None, tokenizer: Any = None
    ) -> None:
        super().__init__(config)
        self.adapter = adapter_for(config)  # the backbone family's half (a plain object: no tensors, not saved)
        self.backbone, width = self.adapter.build(config, backbone)
        self.main_input_name = self.adapter.main_input_name
        if config.embedding_dim is not None and config.embedding_dim != width:
            raise InputError(
                f"`embedding_dim`={config.embedding_dim} does not fit the backbone `{config.backbone}`, whose output "
                f"width is {width}: pass `embedding_dim={width}` or leave it as None (read from the backbone)."
            )
        config.embedding_dim = width
        if config.projection_hidden_dim is None:
            config.projection_hidden_dim = width
        self.projection_head = ProjectionHead(
            width,
            config.projection_hidden_dim,
            config.projection_dim,
            config.projection_layers,
            config.projection_norm,
        )
        self.classifier = nn.Linear(width, config.num_labels) if config.num_labels > 0 else None
        self.tokenizer = tokenizer
        self.model_card_data = ContrastiveModelCardData()  # what the card says; saved with the model (model_card.json)
        self.post_init()

    # ------------------------------------------------------------------------------------------
    # Factories
    # ------------------------------------------------------------------------------------------

    @classmethod
    def from_backbone(
        cls,
        backbone: str | nn.Module,
        *,
        pretrained: bool = True,
        backbone_kwargs: dict[str, Any] | None = None,
        tokenizer: Any = None,
        hub_kwargs: dict[str, Any] | None = None,
        base_model: str | None = None,
        license: str | None = None,  # noqa: A002 - the model card's field name
        small_image_stem: bool = False,
        **config_kwargs: Any,
    ) -> ContrastiveEncoder:
        """Build an encoder on a timm or transformers backbone, by default with its pretrained weights.

        Args:
            backbone: A timm name (``"resnet50"``, ``"vit_small_patch16_224.augreg_in21k"``,
                ``"hf-hub:timm/..."``, ``"local-dir:/path"``), or a transformers text encoder's Hub id
                or local path (``"bert-base-uncased"``, ``"/models/my-bert"``). A sentence-transformers
                model (``modules.json``) keeps its pooling, ``Normalize`` and ``max_seq_length``
                (``pooling=`` etc. override them, with a warning), so ``embeddings`` equal
                ``SentenceTransformer(backbone).encode``. Or a model instance, kept with its weights (shared,
                not copied): a ``SentenceTransformer`` (with its pooling, ``Normalize``, tokenizer), a timm model
                (its classifier is removed) or a transformers text model
                (:mod:`hf_contrast.models.instances`); ``pretrained``, ``backbone_kwargs`` and ``hub_kwargs``
                do not apply to one.
            pretrained: Load pretrained backbone weights (timm's Hub weights; ``AutoModel.from_pretrained``
                for text). ``False``: the architecture with random weights (the config is still read).
            backbone_kwargs: timm only: extra ``timm.create_model`` arguments (``drop_path_rate``...).
            tokenizer: text only: a tokenizer to use instead of the repository's.
            hub_kwargs: text only: ``revision``, ``cache_dir``, ``token``... for ``from_pretrained``.
            base_model: The Hub id the backbone's weights come from, for the model card (e.g. when
                ``backbone`` is a local copy that does not say it); found in the source otherwise
                (see :mod:`hf_contrast.provenance`). Never a local path.
            license: The license of the backbone's weights, for the model card (found in the source
                otherwise: timm's ``pretrained_cfg``, the local copy's README).
            small_image_stem: timm ResNet family only (resnet*, resnext*, wide_resnet*, seresnet*…): replace
                the ImageNet stem (7x7 stride-2 convolution + max-pool; a 32-px image is 8x8 after it) by a
                3x3 stride-1 convolution and no max-pool, as the small-image papers (CARE, SimCLR and SupCon on
                CIFAR) train 32-px images (:mod:`hf_contrast.models.stems`). Saved in the config and rebuilt by
                ``from_pretrained``. With ``pretrained=True`` every pretrained weight is kept except the stem's:
                ``conv1`` starts from random values (a warning says so). A timm instance that already has the
                stem keeps it (detected).
            **config_kwargs: Any :class:`ContrastiveEncoderConfig` option (``projection_dim``, ``pooling``,
                ``projection_norm``, ``num_labels``, ``data_config``...).

        Returns:
            The encoder, in training mode.

        Raises:
            ValueError: If ``backbone`` is unknown (with close timm names) or an object of another kind,
                ``small_image_stem=True`` for a backbone outside timm's ResNet family,
                ``backbone_kwargs`` are given for a text backbone or do not fit the timm model, an option is
                invalid, or a sentence-transformers model has modules other than Transformer, Pooling, Normalize.
            HubUnavailableError: (an ``OSError``) if pretrained weights are requested and the Hub is
                unreachable with nothing cached.
        """
        if not isinstance(small_image_stem, bool):
            raise InputError(f"`small_image_stem` must be True or False, got {small_image_stem!r}.")
        if small_image_stem:
            config_kwargs["small_image_stem"] = True
        if not isinstance(backbone, str):
            return encoder_from_instance(
                cls,
                backbone,
                tokenizer=tokenizer,
                backbone_kwargs=backbone_kwargs,
                hub_kwargs=hub_kwargs,
                **config_kwargs,
            )
        if backbone.startswith("~"):  # a folder under a home directory: transformers and timm do not expand '~'
            backbone = os.path.expanduser(backbone)
        family = adapter_for_name(backbone)  # a registered family that claims the name, else timm or text
        provenance = backbone_provenance(backbone, base_model=base_model, license=license)  # no local path is saved
        for reserved in ("backbone", "backbone_type", "text_config", "backbone_architecture", "backbone_pretrained"):
            if reserved in config_kwargs:
                raise InputError(f"`{reserved}` is set by `from_backbone`; do not pass it in `config_kwargs`.")
        encoder = family.encoder_from_name(
            cls,
            backbone,
            pretrained=pretrained,
            backbone_kwargs=backbone_kwargs,
            tokenizer=tokenizer,
            hub_kwargs=hub_kwargs,
            provenance_name=provenance.name,
            config_kwargs=config_kwargs,
        )
        return encoder._with_provenance(provenance, pretrained, license)

    def _with_provenance(self, provenance: Any, pretrained: bool, license: str | None) -> ContrastiveEncoder:  # noqa: A002
        """Record where the backbone's weights come from in the card data (a from-scratch model claims none)."""
        data = get_model_card_data(self)
        data.base_model = provenance.base_model if pretrained else None
        data.license = provenance.license if pretrained else license
        if data.language is None and provenance.language:  # the text the backbone reads: kept by fine-tuning
            data.language = provenance.language
        return self

    @classmethod
    def from_text_config(
        cls, text_config: PretrainedConfig, tokenizer: Any = None, **config_kwargs: Any
    ) -> ContrastiveEncoder:
        """Build a text encoder with a randomly initialised backbone from its config (tests, from-scratch training).

        Args:
            text_config: The backbone's config, e.g. ``BertConfig(hidden_size=32, ...)``.
            tokenizer: The tokenizer (saved with the model, needed by the text exports).
            **config_kwargs: Any :class:`ContrastiveEncoderConfig` option; ``backbone`` defaults to the
                config's ``model_type``.

        Returns:
            The encoder.

        Raises:
            ValueError: If ``text_config`` is not a ``PretrainedConfig`` or an option is invalid.

        Example:
            >>> from transformers import BertConfig
            >>> cfg = BertConfig(
            ...     hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, vocab_size=50
            ... )
            >>> ContrastiveEncoder.from_text_config(cfg, pooling="cls").embedding_dim
            32
        """
        if not isinstance(text_config, PretrainedConfig):
            raise InputError(
                "`text_config` must be a transformers PretrainedConfig (e.g. BertConfig), got "
                f"{type(text_config).__name__}."
            )
        config_kwargs.setdefault("backbone", text_config.model_type)
        config = ContrastiveEncoderConfig(backbone_type="text", text_config=text_config, **config_kwargs)
        return cls(config, tokenizer=tokenizer)

    # ------------------------------------------------------------------------------------------
    # Properties
    # ------------------------------------------------------------------------------------------

    @property
    def embedding_dim(self) -> int:
        """The backbone width F (the size of ``embeddings``)."""
        return int(self.config.embedding_dim)

    @property
    def data_config(self) -> dict[str, Any] | None:
        """timm: the image preprocessing (``input_size`` (C, H, W), ``mean``, ``std``, ``interpolation``,
        ``crop_pct``, ``crop_mode``), ready for ``timm.data.create_transform(**enc.data_config)``; text: ``None``."""
        return self.adapter.data_config(self.config)

    @property
    def input_modality(self) -> str:
        """What the encoder reads: ``"image"`` (``pixel_values``) or ``"text"`` (``input_ids``), from its
        backbone adapter; the evaluation's default batching and ``views_for`` ask it."""
        return self.adapter.modality

    def set_image_size(self, image_size: int | tuple[int, int] | list[int]) -> None:
        """Record the image size the encoder is trained / used at in ``data_config`` (and so in timm's export).

        After ``set_image_size(32)``, ``data_config["input_size"]`` is ``(C, 32, 32)``: what
        ``save_pretrained`` writes to ``hf_contrast/config.json`` and to the root ``config.json``'s
        ``pretrained_cfg``, so ``timm.data.resolve_model_data_config`` on the saved model gives 32 px.
        The trainer calls it with its ``image_size`` argument.

        Args:
            image_size: The side ``n`` (square) or ``(height, width)``.

        Raises:
            ValueError: If the encoder has a text backbone, the size is not positive, or the backbone has
                a fixed input size (ViT-style) that differs: build it with
                ``backbone_kwargs={"img_size": n}`` instead.
        """
        self.adapter.set_image_size(self, image_size)

    #: ``encoder.encode(sentences or images, batch_size=32, normalize_embeddings=False, convert_to_tensor=False...)``:
    #: embeddings as ``SentenceTransformer.encode`` gives them (:func:`hf_contrast.models.encode.encode`).
    encode = encode_inputs

    # ------------------------------------------------------------------------------------------
    # Forward
    # ------------------------------------------------------------------------------------------

    def forward(
        self,
        pixel_values: Tensor | None = None,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        output_feature_maps: bool = False,
        return_dict: bool | None = None,
    ) -> ContrastiveEncoderOutput | tuple[Tensor, ...]:
        """Encode images (``pixel_values``) or token sequences (``input_ids``).

        Args:
            pixel_values: Images, for timm backbones. Shape: ``(B, C, H, W)``.
            input_ids: Token ids, for text backbones. Shape: ``(B, L)``.
            attention_mask: 1 for tokens, 0 for padding (``None``: all tokens). Shape: ``(B, L)``.
            token_type_ids: Segment ids, if the text backbone uses them. Shape: ``(B, L)``.
            output_feature_maps: timm only: also return the stage feature maps (one forward pass
                through ``forward_intermediates``).
            return_dict: ``False`` returns a tuple (``ModelOutput.to_tuple()``).

        Returns:
            A :class:`ContrastiveEncoderOutput`.

        Raises:
            ValueError: If the inputs do not match the backbone type (``pixel_values`` for a text model
                or ``input_ids`` for a vision model), have the wrong rank, or feature maps are requested
                from a text backbone or a timm model without ``forward_intermediates``.
        """
        embeddings, feature_maps = self.adapter.features(
            self, pixel_values, input_ids, attention_mask, token_type_ids, output_feature_maps
        )
        projections = self.projection_head(embeddings)
        if self.config.normalize_projections:
            projections = l2_normalize(projections)
        logits = self.classifier(embeddings) if self.classifier is not None else None
        output = ContrastiveEncoderOutput(
            embeddings=embeddings, projections=projections, feature_maps=feature_maps, logits=logits
        )
        if return_dict is False:
            return output.to_tuple()
        return output

    # ------------------------------------------------------------------------------------------
    # transformers integration
    # ------------------------------------------------------------------------------------------

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """Initialise only our heads; backbones keep their own (timm or pretrained) initialisation.

        A layer whose every tensor was loaded from a checkpoint (``_is_hf_initialized``, the flag
        ``transformers.initialization``'s functions honour) is left alone: transformers 5.0 also calls
        this hook on loaded modules, and ``BatchNorm``'s running statistics are reset without going
        through those guarded functions.
        """
        if isinstance(module, ProjectionHead) or (module is getattr(self, "classifier", None) and module is not None):
            for layer in module.modules():
                tensors = [*layer.parameters(recurse=False), *layer.buffers(recurse=False)]
                loaded = bool(tensors) and all(getattr(t, "_is_hf_initialized", False) for t in tensors)
                if tensors and not loaded and hasattr(layer, "reset_parameters"):
                    layer.reset_parameters()

    def _set_gradient_checkpointing(self, enable: bool = True, *args: Any, **kwargs: Any) -> None:
        """The hook of ``activation_checkpointing_enable`` (``gradient_checkpointing_enable`` before v5):
        timm backbones use their own ``set_grad_checkpointing``; text backbones transformers' layers."""
        if not self.adapter.set_gradient_checkpointing(self, enable):
            super()._set_gradient_checkpointing(enable, *args, **kwargs)

    def save_pretrained(
        self,
        save_directory: str | os.PathLike[str],
        is_main_process: bool = True,
        state_dict: dict[str, Tensor] | None = None,
        push_to_hub: bool = False,
        **kwargs: Any,
    ) -> None:
        """Write the one save layout: the native model at the root, the full encoder in ``hf_contrast/``.

        Layout (also what every checkpoint, ``trainer.save_model`` and :meth:`push_to_hub` write)::

            README.md                    model card (hf_contrast.hub.write_model_card; a failure only warns)
            config.json, model.safetensors
                                         timm: export_timm   -> timm.create_model("local-dir:DIR", pretrained=True)
                                         text: transformers  -> AutoModel / AutoTokenizer.from_pretrained(DIR)
            modules.json, 1_Pooling/...  text: sentence-transformers modules -> SentenceTransformer(DIR)
            hf_contrast/                 config (data_config, pooling...), weights incl. the head, tokenizer,
                                         model_card.json (the card data: it travels with the model)
                                         -> ContrastiveEncoder.from_pretrained(DIR)

        Everything is written to a hidden sibling folder first and moved in with renames at the end
        (:func:`~hf_contrast.hub.staging.staged_directory`): a save that fails or is interrupted
        leaves a model already in ``save_directory`` loadable; other files there (checkpoints, logs)
        are kept. Weights are always safetensors.

        Args:
            save_directory: The folder to write (created if needed).
            is_main_process: ``False`` on the other processes of a distributed run: nothing is written.
            state_dict: The encoder's state dict to save instead of the module's (``Trainer._save``
                passes a gathered one under FSDP / DeepSpeed).
            push_to_hub: Not supported here (see Raises).
            **kwargs: Further ``PreTrainedModel.save_pretrained`` arguments for ``hf_contrast/``
                (``max_shard_size``, ``variant``...); ``safe_serialization`` is accepted and ignored.

        Raises:
            ValueError: If ``push_to_hub=True`` is passed: call :meth:`push_to_hub`.
            InputTypeError: If ``save_directory`` is not a str or a ``pathlib.Path``.
        """
        if push_to_hub:
            raise InputError(
                "`save_pretrained(push_to_hub=True)` is not supported: call `encoder.push_to_hub(repo_id)`."
            )
        kwargs.pop("safe_serialization", None)
        check_folder_path("save_directory", save_directory)
        if not is_main_process:
            return
        save_encoder(self, save_directory, state_dict, super().save_pretrained, **kwargs)

    def card_facts(self) -> EncoderCardFacts:
        """What this encoder's model card says that depends on its backbone family (metadata, details, usage)."""
        return self.adapter.card_facts(self)

    @classmethod
    def from_pretrained(
        cls, pretrained_model_name_or_path: str | os.PathLike[str], *model_args: Any, **kwargs: Any
    ) -> ContrastiveEncoder:
        """Load an encoder saved with :meth:`save_pretrained` (a folder, a checkpoint or a Hub repository).

        Reads the ``hf_contrast/`` subfolder of the save layout, or an older flat save (our
        ``config.json`` at the root). The tokenizer of a text encoder is loaded from the same place,
        and so is the model card data (``model_card.json``: method, datasets, metrics, citation...),
        so a reloaded model saves and pushes the card it was trained with.
        All ``PreTrainedModel.from_pretrained`` arguments apply. Only a task head (``classifier.*``,
        e.g. a new ``num_labels``) may be missing from the weights; the others must all be there.

        Raises:
            MissingPathError: (a ``FileNotFoundError``) if ``pretrained_model_name_or_path`` is a file, or
                neither a folder nor a Hub id, or a local folder lacks the encoder's ``config.json`` or weights
                (e.g. ``hf_contrast/config.json`` next to a native root model; the message lists what it holds).
            InputError: if a local ``config.json`` is not valid JSON or belongs to another model.
            OSError: if the
                weights file is corrupted, truncated or empty (the file is named).
            ValueError: if backbone or projection-head tensors are missing from the weights, or a
                saved tensor holds NaN/inf (see :mod:`hf_contrast.models.loading`), or a saved format
                version is not a non-negative integer (:mod:`hf_contrast.models.save_format`).

        Warns:
            NewerSaveFormatWarning: once, if the folder was written by a newer hf_contrast (a higher
                ``format_version`` / card ``version``, or config keys this release does not know).
        """
        return load_encoder(super().from_pretrained, pretrained_model_name_or_path, *model_args, **kwargs)

    def push_to_hub(
        self,
        repo_id: str,
        *,
        commit_message: str | None = None,
        commit_description: str | None = None,
        private: bool | None = None,
        token: str | bool | None = None,
        revision: str | None = None,
        create_pr: bool = False,
        replace_model_card: bool = False,
        **save_kwargs: Any,
    ) -> Any:
        """Upload :meth:`save_pretrained`'s layout to the Hub in one commit (``huggingface_hub.upload_folder``).

        The repository is created if needed. A ``README.md`` already in the repository that hf_contrast
        did not generate is kept unless ``replace_model_card=True``; files under ``hf_contrast/`` that
        the new save does not have are deleted.

        Args:
            repo_id: ``"user/name"`` (or ``"name"`` for your own namespace).
            commit_message: The commit title (default "Upload hf_contrast encoder").
            commit_description: The commit description.
            private: Visibility of a newly created repository (``None``: the account's default).
            token: A Hub token; defaults to the stored login or ``HF_TOKEN``.
            revision: The branch to push to (created from ``main`` if missing).
            create_pr: Open a pull request instead of committing to the branch.
            replace_model_card: Overwrite a hand-written ``README.md`` on the Hub.
            **save_kwargs: :meth:`save_pretrained` arguments.

        Returns:
            The ``huggingface_hub.CommitInfo`` (a ``str``: the commit url).

        Raises:
            ValueError: If ``repo_id`` is empty or ``revision`` is combined with ``create_pr``.
        """
        commit = save_and_push(
            self,
            repo_id,
            commit_message=commit_message,
            commit_description=commit_description,
            private=private,
            token=token,
            revision=revision,
            create_pr=create_pr,
            replace_model_card=replace_model_card,
            save_kwargs=save_kwargs,
        )
        logger.info("Pushed %s to %s", type(self).__name__, commit.commit_url)
        return commit
