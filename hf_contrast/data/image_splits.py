"""``load_image_splits``: a train split and a held-out split of the embedded digits, an image folder or a Hub set."""

from __future__ import annotations

import os
import warnings
from collections import Counter
from typing import Any

from hf_contrast.errors import InputError

from ..tensor_checks import check_int, check_positive, check_unit_interval

__all__ = ["load_image_splits"]


def load_image_splits(
    dataset: str | None = None,
    *,
    image_column: str = "image",
    label_column: str = "label",
    image_size: int = 32,
    test_fraction: float = 0.2,
    max_train_samples: int | None = None,
    max_eval_samples: int | None = None,
    seed: int = 0,
    decode: bool = False,
    dataset_name: str | None = None,
) -> Any:
    """``DatasetDict(train=..., test=...)`` of labelled images, ready for a trainer and its evaluators.

    - ``dataset=None`` (or ``"digits"``): the embedded scikit-learn digits
      (:func:`~hf_contrast.data.load_digits_dataset`, ``image_size`` pixels, nothing downloaded);
    - else an image folder or a Hub id (:func:`~hf_contrast.data.load_image_dataset`: class names from
      the folders, a warning for a class folder without images).

    Data without a ``test`` split takes its ``validation`` split, else a seeded stratified
    ``test_fraction`` of ``train`` is held out (:func:`~hf_contrast.data.hold_out`: a folder sorted by class is
    fine, nothing takes "the first rows"; said at start-up and beside each split in the model card).
    ``max_*_samples`` keep a seeded class-balanced subset of a split
    (:func:`~hf_contrast.evaluation.balanced_subset`), said in the model card (a loader note: "a class-balanced
    subset of 2,000 of the split's 10,000 rows").

    By default the image column stays undecoded (``decode=False``,
    :func:`~hf_contrast.data.defer_image_decoding`): the collators and evaluators decode each image and
    name the file and row of a bad one, or skip and count it under ``on_bad_image="skip"``.

    Args:
        dataset: ``None`` / ``"digits"``, a local image folder or a Hub dataset id.
        image_column: Column of the images.
        label_column: Column of the integer (or string) classes.
        image_size: Side of the embedded digits (at least 8).
        test_fraction: Held-out fraction when there is no test / validation split.
        max_train_samples: Keep a class-balanced subset of this many training rows.
        max_eval_samples: Keep a class-balanced subset of this many test rows.
        seed: Seed of the held-out split and the subsets.
        decode: ``True``: decode images inside ``datasets`` (PIL images in the rows).
        dataset_name: The data's name in model cards (default: a folder's name, a Hub id, ``sklearn-digits``).

    Returns:
        ``datasets.DatasetDict`` with the splits ``train`` and ``test``, the chosen columns renamed to
        ``image`` and ``label`` (:mod:`hf_contrast.data.columns`), the trainers' defaults.

    Raises:
        MissingPathError: if ``dataset`` looks like a local path that does not exist (an ``InputError``).
        InputError: (a ``ValueError``) as :func:`~hf_contrast.data.load_image_dataset` (a refused folder
            layout, no images, a missing column, …), a dataset without a ``train`` split (the error names
            the splits found and what to rename), or a bad setting.
        ConnectionError: when a Hub id cannot be reached (the message suggests a local folder).
    """
    import datasets

    from .columns import CANONICAL_COLUMNS
    from .digits import load_digits_dataset
    from .images import defer_image_decoding, prepare_image_splits, read_image_source
    from .naming import add_loader_note, name_dataset
    from .sampling import hold_out, take_subset

    check_unit_interval("test_fraction", check_positive("test_fraction", test_fraction), include_one=False)
    check_int("max_train_samples", max_train_samples, 1, allow_none=True)
    check_int("max_eval_samples", max_eval_samples, 1, allow_none=True)
    check_int("seed", seed, 0)
    if isinstance(dataset, str) and dataset in ("", "digits") or dataset is None:
        for name, value in (("image_column", image_column), ("label_column", label_column)):
            if value != CANONICAL_COLUMNS[name]:  # the embedded digits have their own columns: nothing to choose
                raise InputError(
                    f"`{name}`={value!r} (`--{name}`) names a column of your data, but no `dataset` (`--dataset`) "
                    f"was given: the embedded digits have the columns 'image' and 'label'. Pass `--dataset` with "
                    f"the data that has {value!r}, or drop `--{name}`."
                )
        data = load_digits_dataset(image_size=max(8, image_size), seed=seed)
        if dataset_name is not None:
            name_dataset(data, "digits", dataset_name)
    else:
        loaded, is_local = read_image_source("dataset", dataset, True, {})
        if "train" not in loaded:
            found = list(loaded)
            fix = (
                "rename the folder of the training images to train/ (root/train/<class>/<image>; test/ and val/ "
                "are the held-out splits)"
                if is_local
                else "pick a dataset with a train split, or load it with load_image_dataset(..., split=None)"
            )
            raise InputError(f"`dataset`={os.fspath(dataset)!r} has no 'train' split (its splits: {found}); {fix}.")
        name_dataset(loaded, os.fspath(dataset), dataset_name)
        data = prepare_image_splits(loaded, os.fspath(dataset), image_column, label_column, decode=True)
    image_column, label_column = (
        CANONICAL_COLUMNS["image_column"],
        CANONICAL_COLUMNS["label_column"],
    )  # renamed by the loader
    if "test" not in data and "validation" in data:
        data["test"] = data.pop("validation")
    if "test" not in data:
        labels = list(data["train"][label_column])
        single = sorted(label for label, count in Counter(labels).items() if count == 1)
        if single:
            names = getattr(data["train"].features.get(label_column), "names", None)
            shown = [names[label] if names else label for label in single]
            one_image_note = f"{len(single)} class(es) of a single image, in training only: {shown[:10]}"
            warnings.warn(
                f"{len(single)} class(es) hold a single image: {shown[:10]}{' …' if len(shown) > 10 else ''}. With no "
                f"test split, {test_fraction:.0%} of each class is held out for evaluation, but a one-image class "
                "can only be trained on: the evaluation never sees it. Add images to those classes, or give a "
                "test/ folder.",
                UserWarning,
                stacklevel=2,
            )
        train, held_out = hold_out(  # said at start-up and, beside each split, in the card
            data["train"], test_fraction, argument="test_fraction", seed=seed, label_column=label_column,
            name=os.fspath(dataset) if dataset is not None else None,
        )  # fmt: skip
        data = datasets.DatasetDict({"train": train, "test": held_out})
        if single:  # on both splits: the card lists the note with the training and the evaluation data
            add_loader_note(data, one_image_note)
    data = datasets.DatasetDict({"train": data["train"], "test": data["test"]})
    for split, limit in (("train", max_train_samples), ("test", max_eval_samples)):
        argument = "max_train_samples" if split == "train" else "max_eval_samples"
        data[split] = take_subset(data[split], limit, argument=argument, seed=seed, label_column=label_column)
    if not decode:
        data = datasets.DatasetDict({name: defer_image_decoding(part, image_column) for name, part in data.items()})
    return data
