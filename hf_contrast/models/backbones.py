"""Backbones: resolve a name to a timm or Hugging Face text encoder, build it, and explain download failures."""

from __future__ import annotations

import difflib
import json
import logging
import os
from pathlib import Path
from typing import Any

import timm
import torch
from torch import nn
from transformers import AutoConfig, AutoModel, AutoTokenizer, PreTrainedModel

from hf_contrast.errors import InputError, MissingPathError
from hf_contrast.hub_ids import is_hub_repo_id

__all__ = [
    "HubUnavailableError",
    "TIMM_SOURCES",
    "backbone_type_of",
    "folder_listing",
    "is_hub_unreachable",
    "close_timm_names",
    "create_timm_backbone",
    "build_timm_backbone",
    "timm_data_config",
    "built_input_size",
    "load_text_backbone",
    "restore_non_persistent_buffers",
]

logger = logging.getLogger(__name__)

TIMM_SOURCES = ("hf-hub:", "local-dir:")
_DATA_CONFIG_KEYS = ("input_size", "interpolation", "mean", "std", "crop_pct", "crop_mode")


class HubUnavailableError(OSError):
    """Pretrained weights were requested but the Hugging Face Hub cannot be reached and nothing is cached.

    An ``OSError`` (like ``transformers``' own loading errors), so ``except OSError`` catches it.
    """


def _hub_offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def is_hub_unreachable(error: BaseException) -> bool:
    """Whether ``error`` (or anything it was raised from) says the Hub could not be contacted."""
    from huggingface_hub.errors import LocalEntryNotFoundError, OfflineModeIsEnabled

    unreachable: tuple[type[BaseException], ...] = (
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        ConnectionError,
        TimeoutError,
    )
    try:
        import httpx

        unreachable += (httpx.TransportError,)
    except ImportError:  # pragma: no cover - huggingface_hub >= 1.0 depends on httpx
        pass
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, unreachable) or "couldn't connect to" in str(current):
            return True
        kind = type(current)
        if kind.__module__.split(".")[0].rstrip("0123456789") in ("httpx", "httpcore") and kind.__name__ in (
            "ConnectError", "ConnectTimeout", "ReadTimeout", "TimeoutException", "NetworkError", "ProxyError",
        ):  # fmt: skip
            return True  # an httpx-like client under another module name (e.g. httpx2): the same failures
        current = current.__cause__ or current.__context__
    return False


def _unavailable(name: str, error: BaseException, pretrained: bool = True) -> HubUnavailableError:
    reason = "HF_HUB_OFFLINE=1 is set" if _hub_offline() else "the network request failed"
    what = "pretrained weights" if pretrained else "the config (`pretrained=False` still reads it)"
    read_as = (
        ""
        if name.startswith(TIMM_SOURCES)
        else (" It is not a timm model name nor an existing local folder, so it was read as a Hub model id.")
    )
    return HubUnavailableError(
        f"Cannot load {what} for `backbone`={name!r}: the Hugging Face Hub is unreachable ({reason}) and "
        f"the files are not in the local cache.{read_as} Check the name, or pass a local path instead (a directory "
        f"saved with `save_pretrained`, "
        "a timm export as 'local-dir:/path'), or set HF_HUB_OFFLINE=1 with a cache populated beforehand "
        "(HF_HOME / HF_HUB_CACHE), or build the backbone without weights (`pretrained=False`). "
        f"Original error: {type(error).__name__}: {error}"
    )


def close_timm_names(name: str, n: int = 5) -> list[str]:
    """Up to ``n`` timm model names close to ``name`` (its architecture part), for "did you mean" hints."""
    base = name.split(".", 1)[0].lower()
    return difflib.get_close_matches(base, timm.list_models(), n=n, cutoff=0.75)


def _unknown(name: str, matches: list[str], detail: str = "") -> InputError:
    hint = f"Close timm names: {', '.join(matches)}. " if matches else ""
    return InputError(
        f"Unknown `backbone`={name!r}: it is not a timm model name, an existing local directory, or a Hugging Face "
        f"model id. {hint}Pass a timm name (list them with `timm.list_models('*resnet*')`), 'hf-hub:<repo>' / "
        f"'local-dir:<path>' for timm checkpoints, or the Hub id / local path of a transformers text encoder (e.g. "
        f"'bert-base-uncased').{detail}"
    )


def _looks_like_path(name: str) -> bool:
    return name.startswith((".", "/", "~")) or os.sep in name.strip("/").replace("/", "", 1) or "\\" in name


def folder_listing(folder: str) -> str:
    """What a local folder holds, for an error message: its first 8 names (sub-folders with a ``/``) and how many
    more, ``"nothing (an empty folder)"`` or ``"an unreadable folder"``."""
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return "an unreadable folder"
    if not names:
        return "nothing (an empty folder)"
    shown = ", ".join(f"{name}/" if os.path.isdir(os.path.join(folder, name)) else name for name in names[:8])
    return shown + (f" and {len(names) - 8} more" if len(names) > 8 else "")


def backbone_type_of(name: str) -> str:
    """Whether ``name`` is a timm backbone (``"timm"``) or a transformers text encoder (``"text"``).

    timm: a timm registry name (optionally with a pretrained tag), an ``hf-hub:``/``local-dir:`` source,
    or a local directory holding a timm ``config.json`` (with ``architecture``). Text: a local directory holding a
    transformers ``config.json`` (with ``model_type``), or a Hub id (resolved when it is loaded).

    Args:
        name: A timm name, a Hub id or a local path.

    Returns:
        ``"timm"`` or ``"text"``.

    Raises:
        InputError: If ``name`` is empty, or neither a timm name, an existing folder nor a valid Hub id
            (with close timm names), or a folder whose ``config.json`` is unreadable or neither timm's nor
            transformers'.
        MissingPathError: If ``name`` looks like a local path (``./x``, ``/x``, ``a/b/c``) that does not exist, or is
            a folder without a ``config.json``.
    """
    if not isinstance(name, str) or not name:
        raise InputError(f"`backbone` must be a non-empty string (a timm name, Hub id or local path), got {name!r}.")
    if name.startswith(TIMM_SOURCES) or timm.is_model(name):
        return "timm"
    path = Path(os.path.expanduser(name))  # '~user' of an unknown user stays as given (Path.expanduser raises)
    if path.is_dir():
        config_file = path / "config.json"
        if not config_file.is_file():
            where = "" if str(path) == name else f" ({str(path)!r})"
            raise MissingPathError(
                f"`backbone`={name!r} is a folder{where} without a config.json, so not a saved model (it holds "
                f"{folder_listing(str(path))}). Pass a folder saved with `save_pretrained` (transformers, "
                "sentence-transformers, or `timm` with its config.json), a timm name or a Hub id."
            )
        try:
            config = json.loads(config_file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise InputError(
                f"`backbone`={name!r}: its config.json cannot be read ({type(error).__name__}: {error}); pass a "
                "folder saved with `save_pretrained`, a timm name or a Hub id."
            ) from None
        if isinstance(config, dict) and "architecture" in config and "model_type" not in config:
            return "timm"
        if not isinstance(config, dict) or "model_type" not in config:
            raise InputError(
                f"`backbone`={name!r}: its config.json is neither a timm config (with `architecture`) nor a "
                "transformers one (with `model_type`); pass a folder saved with `save_pretrained`, a timm name or a "
                "Hub id."
            )
        return "text"
    if _looks_like_path(name):
        raise MissingPathError(
            f"`backbone`={name!r} looks like a local path but no such directory exists (the working directory is "
            f"{os.getcwd()!r}): check the path, or pass a timm name or a Hub id."
        )
    if not is_hub_repo_id(name):  # not a timm name, not a folder, and no Hub id either: say so before any request
        raise _unknown(
            name,
            close_timm_names(name),
            " It is not a valid Hub id either ('name' or 'user/name' of letters, digits, '-', '_', '.').",
        )
    return "text"


def _timm_source_config(name: str) -> tuple[str, dict[str, Any]]:
    """The registry architecture and saved model arguments of an ``hf-hub:``/``local-dir:`` source."""
    from timm.models import _hub

    source, _, model_id = name.partition(":")
    if source == "local-dir":
        _, architecture, model_args = _hub.load_model_config_from_path(model_id)
    else:
        _, architecture, model_args = _hub.load_model_config_from_hf(model_id)
    return architecture, dict(model_args or {})


def create_timm_backbone(
    name: str, pretrained: bool, backbone_kwargs: dict[str, Any] | None = None, small_image_stem: bool = False
) -> tuple[nn.Module, str, dict[str, Any]]:
    """Create a timm backbone without classifier (``num_classes=0``), optionally with pretrained weights.

    Args:
        name: A timm name (``"resnet18"``, ``"resnet18.a1_in1k"``), ``"hf-hub:<repo>"``, ``"local-dir:<path>"``
            or a local directory holding a timm export.
        pretrained: Load the pretrained weights (from the Hub or the local directory).
        backbone_kwargs: Extra ``timm.create_model`` arguments.
        small_image_stem: The encoder will get the small-image stem (:mod:`hf_contrast.models.stems`, applied by
            the adapter): a ``hf-hub:``/``local-dir:`` source whose weights already have it (an hf_contrast
            save's root) is built with it before its weights are loaded.

    Returns:
        ``(model, architecture, kwargs)``: the module, the registry name and the arguments that rebuild it
        offline with :func:`build_timm_backbone`.

    Raises:
        ValueError: If the name is unknown to timm, or the arguments do not fit the architecture.
        HubUnavailableError: If ``pretrained=True`` and the Hub is unreachable with nothing cached.
    """
    kwargs = dict(backbone_kwargs or {})
    if not name.startswith(TIMM_SOURCES) and Path(name).expanduser().is_dir():
        name = "local-dir:" + str(Path(name).expanduser())
    try:
        if name.startswith(TIMM_SOURCES):
            architecture, source_args = _timm_source_config(name)
            source_args.pop("num_classes", None)  # the classifier is always dropped
            kwargs = {**source_args, **kwargs}
        else:
            architecture = name
        create_kwargs = dict(backbone_kwargs or {})
        if not pretrained and "zero_init_last" not in create_kwargs:
            # From scratch, timm zero-initialises the last norm of every residual block: each block starts as
            # its shortcut, and a ResNet's 1x1 stride-2 shortcuts keep one pixel in four, so at 32 px the
            # random network sees only the image's top-left 8x8 corner (every centred image maps to one point,
            # all cosines stay positive and OCL cannot differ from SupCon). Contrastive training from scratch
            # starts from full residual blocks, as SimCLR's ResNets do.
            try:
                model = timm.create_model(name, pretrained=False, num_classes=0, zero_init_last=False, **create_kwargs)
                kwargs["zero_init_last"] = False
                return model, architecture, kwargs
            except TypeError:  # an architecture without residual zero-init
                pass
        model = timm.create_model(name, pretrained=pretrained, num_classes=0, **create_kwargs)
    except (RuntimeError, FileNotFoundError, OSError) as error:
        if is_hub_unreachable(error):
            raise _unavailable(name, error) from error
        if "Unknown model" in str(error):
            raise _unknown(name, close_timm_names(name)) from error
        small_stem_model = _source_with_small_stem(name, create_kwargs) if _stem_mismatch(error) else None
        if small_stem_model is None:
            raise
        if not small_image_stem:
            raise InputError(
                f"The weights of `backbone`={name!r} have a small-image stem (a 3x3 stride-1 `conv1`, saved by "
                "`from_backbone(..., small_image_stem=True)`) that the plain timm architecture does not: pass "
                "`small_image_stem=True` (`--small_image_stem`) to load them."
            ) from error
        return small_stem_model, architecture, kwargs
    except TypeError as error:
        raise InputError(f"`backbone_kwargs` {backbone_kwargs!r} do not fit timm model `{name}`: {error}") from error
    return model, architecture, kwargs


def _stem_mismatch(error: BaseException) -> bool:
    """Whether loading a checkpoint failed on ``conv1`` (its shape or its keys): perhaps a small-image stem."""
    text = str(error)
    return "Error(s) in loading state_dict" in text and "conv1." in text


def _source_with_small_stem(name: str, create_kwargs: dict[str, Any]) -> nn.Module | None:
    """A ``hf-hub:``/``local-dir:`` timm source whose weights have the small-image stem: the architecture,
    its stem replaced, then the weights (timm's own loader, strict); ``None`` if they do not fit it either."""
    from timm.models import load_pretrained

    from hf_contrast.models.stems import apply_small_image_stem, supports_small_image_stem

    if not name.startswith(TIMM_SOURCES):
        return None
    model = timm.create_model(name, pretrained=False, num_classes=0, **create_kwargs)
    if not supports_small_image_stem(model):
        return None
    apply_small_image_stem(model, name)
    try:
        load_pretrained(model, num_classes=0, in_chans=model.conv1.in_channels)
    except RuntimeError:
        return None
    return model


def build_timm_backbone(architecture: str, backbone_kwargs: dict[str, Any] | None = None) -> nn.Module:
    """Build a timm backbone with random weights (``num_classes=0``), e.g. to load a checkpoint into.

    Args:
        architecture: A timm registry name.
        backbone_kwargs: Extra ``timm.create_model`` arguments.

    Returns:
        The module.

    Raises:
        ValueError: If the name is unknown to timm or the arguments do not fit it.
    """
    if not timm.is_model(architecture):
        raise _unknown(architecture, close_timm_names(architecture))
    try:
        return timm.create_model(architecture, pretrained=False, num_classes=0, **(backbone_kwargs or {}))
    except TypeError as error:
        raise InputError(
            f"`backbone_kwargs` {backbone_kwargs!r} do not fit timm model `{architecture}`: {error}"
        ) from error


def built_input_size(model: nn.Module) -> tuple[int, ...] | None:
    """The ``(C, H, W)`` a timm model was built at, or ``None`` where timm does not say.

    timm >= 1.0.31 reports it (``get_model_input_config``); older timm keeps only the pretrained tag's
    size in ``pretrained_cfg``, and the built size of a patch-embedding model (ViT, DeiT, Swin...) is its
    ``patch_embed.img_size``.
    """
    try:
        from timm.data.model_config import get_model_input_config
    except ImportError:  # timm < 1.0.31
        img_size = getattr(getattr(model, "patch_embed", None), "img_size", None)
        if not isinstance(img_size, (tuple, list)) or len(img_size) != 2:
            return None
        channels = getattr(model, "in_chans", None) or getattr(model, "pretrained_cfg", {}).get("input_size", (3,))[0]
        return (int(channels), int(img_size[0]), int(img_size[1]))
    try:
        return tuple(get_model_input_config(model)["input_size"])
    except (KeyError, TypeError, AttributeError):
        return None


def timm_data_config(model: nn.Module) -> dict[str, Any]:
    """The image preprocessing a timm model expects (``timm.data.resolve_data_config``, with the input size
    the module was built at), JSON-ready.

    Args:
        model: A timm model.

    Returns:
        ``input_size`` (C, H, W), ``mean``, ``std``, ``interpolation``, ``crop_pct`` and ``crop_mode``.
    """
    resolved = dict(timm.data.resolve_data_config({}, model=model))
    built_size = built_input_size(model)
    if built_size is not None:  # the size the module was built at (a ViT with img_size=16), not its tag's
        resolved["input_size"] = built_size
    return {
        key: list(value) if isinstance(value, tuple) else value
        for key, value in resolved.items()
        if key in _DATA_CONFIG_KEYS
    }


def load_text_backbone(name: str, pretrained: bool = True, **hub_kwargs: Any) -> tuple[PreTrainedModel, Any]:
    """Load a transformers text encoder and its tokenizer from a Hub id or a local path.

    Args:
        name: A Hub id (``"bert-base-uncased"``) or a local directory.
        pretrained: Load the weights (``AutoModel.from_pretrained``); ``False`` builds the same
            architecture with random weights from its config.
        **hub_kwargs: ``revision``, ``cache_dir``, ``token``, ``local_files_only``… for ``from_pretrained``.

    Returns:
        ``(model, tokenizer)``; the tokenizer is ``None`` (with a logged warning) if the repository has none.

    Raises:
        ValueError: If ``name`` is not a model on the Hub or a model directory.
        HubUnavailableError: If the Hub is unreachable and the files are not cached.
    """
    try:
        if pretrained:
            model = AutoModel.from_pretrained(name, **hub_kwargs)
        else:
            model = AutoModel.from_config(AutoConfig.from_pretrained(name, **hub_kwargs))
    except (OSError, ValueError) as error:
        from huggingface_hub.errors import RepositoryNotFoundError

        if is_hub_unreachable(error):
            matches = close_timm_names(name) if "/" not in name else []
            if matches:  # most likely a misspelt timm name, not a Hub id
                raise _unknown(name, matches, " (The Hub is unreachable, so Hub ids cannot be checked.)") from error
            raise _unavailable(name, error, pretrained) from error
        if isinstance(
            error, RepositoryNotFoundError
        ) or "is not a local folder and is not a valid model identifier" in str(error):
            raise _unknown(name, close_timm_names(name)) from error
        raise
    try:
        tokenizer = AutoTokenizer.from_pretrained(name, **hub_kwargs)
    except (OSError, ValueError) as error:
        logger.warning(
            "No tokenizer could be loaded for `%s` (%s); set `encoder.tokenizer` before exporting.", name, error
        )
        tokenizer = None
    return model, tokenizer


def restore_non_persistent_buffers(backbone: nn.Module, architecture: str, backbone_kwargs: dict[str, Any]) -> None:
    """Recompute a timm backbone's non-persistent buffers after a meta-device load.

    ``transformers`` builds models on the meta device before loading weights; buffers that are not in the
    checkpoint (``persistent=False``, e.g. relative position indices of Swin/CoAtNet/MaxViT) come back
    uninitialised. They are deterministic functions of the architecture, so a fresh CPU build provides them.

    Args:
        backbone: The loaded timm module, modified in place.
        architecture: Its timm registry name.
        backbone_kwargs: Its ``timm.create_model`` arguments.
    """
    names = [
        name
        for name, _ in backbone.named_buffers()
        if name.rsplit(".", 1)[-1]
        in backbone.get_submodule(name.rsplit(".", 1)[0] if "." in name else "")._non_persistent_buffers_set
    ]
    if not names:
        return
    with torch.device("cpu"):
        fresh = dict(build_timm_backbone(architecture, backbone_kwargs).named_buffers())
    for name in names:
        parent_name, _, buffer_name = name.rpartition(".")
        parent = backbone.get_submodule(parent_name)
        current = parent._buffers[buffer_name]
        value = fresh[name]
        device = current.device if current is not None and current.device.type != "meta" else torch.device("cpu")
        dtype = (
            current.dtype
            if current is not None and current.is_floating_point() and value.is_floating_point()
            else value.dtype
        )
        parent._buffers[buffer_name] = value.to(device=device, dtype=dtype)
