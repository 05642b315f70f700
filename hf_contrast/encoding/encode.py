"""``encode_dataset``: the one helper that embeds a dataset with a model (no gradient, eval mode)."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from hf_contrast.errors import InputError, InputTypeError

from ..progress import progress_enabled
from ..tensor_checks import MAX_LENGTH, check_bool, check_choice, check_device, check_int, check_name
from ..views.labels import class_labels, is_index_dtype
from .model_access import eval_mode, model_device, model_output, to_device, unwrap_model

__all__ = ["encode_dataset", "encode_texts", "check_encode_options"]

_NO_VALUE = object()


def _field(row: Any, column: str | None, position: int) -> Any:
    """``row[column]`` of a dict row, ``row[position]`` of an ``(input, label)`` tuple, the row itself otherwise."""
    if isinstance(row, Mapping):
        if column not in row:
            return _NO_VALUE
        return row[column]
    if isinstance(row, tuple):
        return row[position] if position < len(row) else _NO_VALUE
    return row if position == 0 else _NO_VALUE


def _input_modality(model: nn.Module) -> str | None:
    """``"text"`` or ``"image"``: what the model says it reads (``ContrastiveEncoder.input_modality``, from its
    backbone adapter); for another model, guessed from what it carries (a ``tokenizer``, a ``data_config``)."""
    modality = getattr(model, "input_modality", None)
    if modality is not None:
        return modality
    if getattr(model, "tokenizer", None) is not None:
        return "text"
    return "image" if getattr(model, "data_config", None) is not None else None


def _default_collate(model: nn.Module, input_column: str | None, max_length: int | None) -> tuple[Callable, str]:
    """Tokenise texts (a text model with a ``tokenizer``) or apply the eval transform of an image model's
    ``data_config``."""
    inner = unwrap_model(model)
    modality = _input_modality(inner)
    tokenizer = getattr(inner, "tokenizer", None)
    if modality == "text" and tokenizer is not None:
        column = input_column or "text"
        if max_length is None:  # what sentence-transformers truncates at (an encoder's `max_seq_length`)
            max_length = getattr(getattr(inner, "config", None), "max_seq_length", None)

        def tokenize(inputs: list[Any]) -> dict[str, Tensor]:
            bad = [type(x).__name__ for x in inputs if not isinstance(x, str)]
            if bad:
                raise InputError(f"`{column}` must hold strings for a text model, got {bad[0]}.")
            options: dict[str, Any] = {"padding": True, "truncation": True, "return_tensors": "pt"}
            if max_length is not None:
                options["max_length"] = max_length
            return dict(tokenizer(inputs, **options))

        return tokenize, column
    data_config = getattr(inner, "data_config", None)
    if modality == "image" and data_config is not None:
        from ..views import eval_transform_from_data_config

        return _stack(eval_transform_from_data_config(data_config)), input_column or "image"
    raise InputError(
        f"encode_dataset cannot tell how to batch inputs for {type(inner).__name__} (no `tokenizer`, no "
        "`data_config`): pass `collate_fn=` (rows -> model inputs) or `transform=` (image -> (C, H, W) tensor)."
    )


def _row_labels(rows: list[Any], label_column: str | None, first_row: int) -> Tensor | None:
    """The ``label_column`` of ``rows`` (rows ``first_row…`` of the dataset) as ``int64`` ``(B,)``; ``None`` without
    that column or when a row lacks it. A label that is not an integer raises, naming the row."""
    if label_column is None:
        return None
    found = [_field(row, label_column, 1) for row in rows]
    if any(value is _NO_VALUE for value in found):
        return None
    return class_labels(found, label_column, first_row=first_row)


def _decoded_rows(values: list[Any], first_row: int, on_bad_image: str) -> tuple[list[int], list[Any]]:
    """Decode the image ``values`` (rows ``first_row…`` of the dataset): a bad one raises (naming the file and the
    row) or, under ``"skip"``, is left out with a warning. Returns the kept offsets and their decoded images."""
    from ..data.decode import BadImageError, decode_image, image_source

    kept_offsets, kept_values = [], []
    for offset, value in enumerate(values):
        try:
            kept_values.append(decode_image(value))
        except BadImageError as error:
            source = image_source(value)
            where = f" (file {source!r})" if source and source not in str(error) else ""
            message = f"encode_dataset: row {first_row + offset}{where}: {error}"
            if on_bad_image == "raise":
                raise BadImageError(f"{message}. Fix or remove the image, or pass `on_bad_image='skip'`.") from error
            warnings.warn(f"Skipped: {message}.", UserWarning, stacklevel=4)
            continue
        kept_offsets.append(offset)
    return kept_offsets, kept_values


def _stack(transform: Callable[[Any], Tensor]) -> Callable[[list[Any]], dict[str, Tensor]]:
    def collate(inputs: list[Any]) -> dict[str, Tensor]:
        return {"pixel_values": torch.stack([transform(x) for x in inputs])}

    return collate


def check_encode_options(
    *,
    collate_fn: Callable[[list[Any]], Mapping[str, Any]] | None = None,
    transform: Callable[[Any], Tensor] | None = None,
    input_column: str | None = None,
    label_column: str | None = "label",
    batch_size: int = 64,
    output: str = "embeddings",
    max_length: int | None = None,
    on_bad_image: str = "raise",
    progress: bool = False,
    **others: Any,
) -> dict[str, Any]:
    """Check :func:`encode_dataset`'s options (``others``, e.g. ``device``, pass through unchecked) and return
    them as its keyword arguments. An evaluator calls it when it is built, so that a bad option is said before
    training rather than at the first evaluation.

    Raises:
        ValueError: naming the option, e.g. both ``collate_fn`` and ``transform``, a ``batch_size`` below 1, an
            ``output`` or a column that is not a name.
    """
    if collate_fn is not None and transform is not None:
        raise InputError(
            "Pass either `collate_fn` (rows -> model inputs) or `transform` (one image -> tensor), not both."
        )
    for name, function in (("collate_fn", collate_fn), ("transform", transform)):
        if function is not None and not callable(function):
            raise InputError(f"`{name}` must be callable or None, got {type(function).__name__}.")
    check_name("input_column", input_column, allow_none=True)
    check_name("label_column", label_column, allow_none=True)
    check_int("batch_size", batch_size, 1, sys.maxsize)  # a DataLoader takes no larger batch
    check_name("output", output, what="model output name ('embeddings' or 'projections')")
    check_int("max_length", max_length, 1, MAX_LENGTH, allow_none=True)
    check_choice("on_bad_image", on_bad_image, ("raise", "skip"))
    check_bool("progress", progress)  # a tensor's truth value raised torch's RuntimeError in the progress bar
    return {
        "collate_fn": collate_fn,
        "transform": transform,
        "input_column": input_column,
        "label_column": label_column,
        "batch_size": batch_size,
        "output": output,
        "max_length": max_length,
        "on_bad_image": on_bad_image,
        "progress": progress,
        **others,
    }


def encode_dataset(
    model: nn.Module,
    dataset: Any,
    *,
    collate_fn: Callable[[list[Any]], Mapping[str, Any]] | None = None,
    transform: Callable[[Any], Tensor] | None = None,
    input_column: str | None = None,
    label_column: str | None = "label",
    batch_size: int = 64,
    output: str = "embeddings",
    device: torch.device | str | None = None,
    max_length: int | None = None,
    progress: bool = True,
    on_bad_image: str = "raise",
) -> tuple[Tensor, Tensor | None]:
    """Embed every row of ``dataset`` with ``model`` (eval mode, no gradient, mode restored after).

    Rows are read in order, ``batch_size`` at a time (a ``datasets.Dataset`` or
    ``IterableDataset``, a torch dataset, or a list). How a batch of rows becomes model inputs:

    - ``collate_fn(rows)`` → a dict of model inputs (its ``"labels"`` entry, if any, is taken as
      the labels and not passed to the model);
    - else ``transform(row[input_column])`` per row, stacked as ``pixel_values``;
    - else, for a text model (``input_modality == "text"``, or a model with a ``tokenizer``), the strings of
      ``row[input_column or "text"]`` are tokenised (padding, truncation at ``max_length``); for
      an image model (``input_modality == "image"``, or one with a ``data_config``), the images of
      ``row[input_column or "image"]`` go through its deterministic evaluation transform
      (:func:`hf_contrast.views.eval_transform_from_data_config`).

    A row may be a dict, an ``(input, label)`` tuple (torchvision datasets) or the input itself
    (a list of sentences or images).

    Args:
        model: The encoder; ``model(**inputs)`` returns ``output`` (``ContrastiveEncoderOutput``).
        dataset: The rows.
        collate_fn: Rows → model inputs (excludes ``transform``).
        transform: One image → ``(C, H, W)`` tensor (excludes ``collate_fn``).
        input_column: Column of the inputs (default ``"text"`` / ``"image"``).
        label_column: Column of the integer class labels (``None``: no labels). Rows without it give
            no labels; a label that is not an integer (a class name, a float) raises, naming the row
            (encode class names first: ``dataset.class_encode_column(label_column)``).
        batch_size: Rows per forward pass.
        output: Model output to keep: ``"embeddings"`` (backbone features) or ``"projections"``.
        device: Device the inputs are moved to (default: the model's).
        max_length: Token limit of the default text collation (default: the encoder's
            ``config.max_seq_length``, else the tokenizer's ``model_max_length``).
        progress: Show a progress bar (while transformers' progress-bar switch is on, see
            :mod:`hf_contrast.progress`).
        on_bad_image: Images only (``transform`` or a timm model's default): ``"raise"`` (default) — an
            unreadable / truncated / missing image raises a ``ValueError`` naming the file and the row;
            ``"skip"`` — that row (and its label) is left out of the result, with a warning naming the file.

    Returns:
        ``(embeddings, labels)``: float32 CPU ``(N, D)`` and int64 ``(N,)`` or ``None``.

    Raises:
        ValueError: on an empty dataset, both ``collate_fn`` and ``transform``, inputs the model
            cannot take, labels on some rows only or not integers, or a missing ``output``.
    """
    check_encode_options(
        collate_fn=collate_fn,
        transform=transform,
        input_column=input_column,
        label_column=label_column,
        batch_size=batch_size,
        output=output,
        max_length=max_length,
        on_bad_image=on_bad_image,
        progress=progress,
    )
    if transform is not None:
        make_inputs, column = _stack(transform), input_column or "image"
    elif collate_fn is None:
        make_inputs, column = _default_collate(model, input_column, max_length)
    else:
        make_inputs, column = None, input_column
    is_images = transform is not None or (
        collate_fn is None and getattr(unwrap_model(model), "tokenizer", None) is None
    )
    target = check_device("device", device) if device is not None else model_device(model)
    loader = DataLoader(dataset, batch_size=batch_size, collate_fn=list, shuffle=False)
    try:
        total = len(loader)
    except TypeError:  # an IterableDataset without a length
        total = None
    chunks: list[Tensor] = []
    labels: list[Tensor] = []
    rows_seen = rows_labelled = position = 0  # position: dataset row of the batch's first row
    with eval_mode(model):
        for rows in tqdm(
            loader, total=total, desc="Encoding", unit="batch", disable=not progress_enabled(progress), leave=False
        ):
            start, position = position, position + len(rows)
            if make_inputs is None:
                inputs = dict(collate_fn(rows))
                batch_labels = inputs.pop("labels", None)
                if batch_labels is None:
                    batch_labels = _row_labels(rows, label_column, start)
                else:
                    batch_labels = torch.as_tensor(batch_labels).detach().cpu().reshape(-1)
                    if not is_index_dtype(batch_labels.dtype):
                        raise InputError(
                            f"`collate_fn` returned labels of dtype {batch_labels.dtype}: the labels must be integer "
                            "class indices (e.g. torch.long)."
                        )
            else:
                values = [_field(row, column, 0) for row in rows]
                if any(value is _NO_VALUE for value in values):
                    keys = sorted(rows[0]) if isinstance(rows[0], Mapping) else type(rows[0]).__name__
                    raise InputError(
                        f"`input_column` {column!r} is not in the rows (got {keys}); pass `input_column=`."
                    )
                batch_labels = _row_labels(rows, label_column, start)  # before a skipped image moves the rows
                if is_images:
                    kept, values = _decoded_rows(values, start, on_bad_image)
                    if not kept:
                        continue
                    if len(kept) < len(rows):
                        rows = [rows[i] for i in kept]
                        batch_labels = None if batch_labels is None else batch_labels[kept]
                inputs = make_inputs(values)
            rows_seen += len(rows)
            if batch_labels is not None:
                rows_labelled += len(rows)
                labels.append(batch_labels.long())
            chunks.append(model_output(model(**to_device(inputs, target)), output, len(rows)))
    if not chunks:
        raise InputError("`dataset` is empty: there is nothing to encode.")
    if 0 < rows_labelled < rows_seen:
        raise InputError(
            f"Only {rows_labelled} of {rows_seen} rows have labels (`label_column`={label_column!r}); "
            "label every row or pass `label_column=None`."
        )
    return torch.cat(chunks), (torch.cat(labels) if labels else None)


def encode_texts(
    model: nn.Module,
    texts: Sequence[str],
    *,
    batch_size: int = 64,
    output: str = "embeddings",
    max_length: int | None = None,
    progress: bool = False,
) -> Tensor:
    """Embeddings of sentences (:func:`encode_dataset` on a list of strings). Shape: ``(n, D)``.

    Raises:
        InputError: if ``texts`` is not a non-empty sequence of strings (a lone string is refused: wrap it in a
            list), or an option is out of range (:func:`encode_dataset`).
    """

    def refused() -> InputTypeError:  # built only when raised: the repr of a million sentences is no free check
        return InputTypeError(f"`texts` must be a list of strings, got {texts!r:.80} of type {type(texts).__name__}.")

    if isinstance(texts, (str, bytes, Mapping)) or not isinstance(texts, Iterable):  # a dict: its keys, values lost
        raise refused()
    if isinstance(texts, (set, frozenset)):
        raise InputTypeError(
            f"`texts` is a {type(texts).__name__}: its rows would come back in no order you could match to the "
            "sentences; pass a list (e.g. `sorted(texts)`)."
        )
    try:
        texts = list(texts)
    except TypeError:  # an iterable type that cannot iterate this value (a 0-d tensor or array)
        raise refused() from None
    if not texts:
        raise InputError("`texts` is empty: there is nothing to encode.")
    wrong = next(((i, t) for i, t in enumerate(texts) if not isinstance(t, str)), None)
    if wrong is not None:
        index, text = wrong
        raise InputTypeError(f"`texts` must hold strings, got {type(text).__name__} {text!r:.40} at index {index}.")
    z, _ = encode_dataset(
        model,
        texts,
        label_column=None,
        batch_size=batch_size,
        output=output,
        max_length=max_length,
        progress=progress,
    )
    return z
