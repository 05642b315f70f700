"""The views' doors under generated inputs: ``simclr_transform``, ``eval_transform``, ``paired_transform``, the
``*_from_data_config`` builders, ``raw_image_transform``, ``ImageViewCollator``, ``TextViewCollator``,
``ChunkedAugmentation``, ``ChunkedTextAugmentation`` and ``BatchedSimCLRViews``. For any argument, each is built and
used (a transform must turn an RGB image into a finite float tensor) or raises the package's error naming the
argument (:func:`_properties.assert_package_error_or_result`). Sizes stay below 65 pixels or above the accepted
65,536 (a valid large size is a memory question, not an input error)."""

from __future__ import annotations

import numpy as np
import torch
from _properties import assert_package_error_or_result, bad_names, bad_numbers, tensors, wrong_types
from _tiny import tiny_tokenizer
from hypothesis import example, given, settings
from hypothesis import strategies as st
from PIL import Image

from hf_contrast.views import (
    BatchedSimCLRViews,
    ChunkedAugmentation,
    ChunkedTextAugmentation,
    ImageViewCollator,
    TextViewCollator,
    eval_transform,
    eval_transform_from_data_config,
    paired_transform,
    raw_image_transform,
    simclr_transform,
    simclr_transform_from_data_config,
)

FEW = settings(max_examples=max(1, settings().max_examples // 2))
MEAN, STD = (0.5, 0.5, 0.5), (0.25, 0.25, 0.25)
TOKENIZER = tiny_tokenizer()
IMAGE = Image.fromarray(np.random.default_rng(0).integers(0, 256, (20, 20, 3), dtype=np.uint8))
_SMALL_BAD = bad_numbers.filter(lambda v: not (isinstance(v, int) and not isinstance(v, bool) and 64 < v <= 65536))
SIZES = st.one_of(
    wrong_types,
    _SMALL_BAD,
    st.integers(-3, 64),
    st.integers(65537, 10**30),
    st.tuples(st.integers(-2, 40), st.integers(-2, 40)),
    st.lists(st.integers(-2, 40), max_size=4),
)
CHANNEL_VALUES = st.one_of(
    wrong_types, st.lists(st.one_of(bad_numbers, st.floats(0, 1)), max_size=4), tensors(max_rank=1)
)
VALUES = st.one_of(
    wrong_types, bad_numbers, bad_names, st.floats(-1, 2), st.tuples(st.floats(-1, 2), st.floats(-1, 2))
)
RECIPE = ["hflip_p", "jitter_p", "grayscale_p", "blur_p", "scale", "jitter_strength", "blur_sigma", "ratio"]


def finite_image(out: object) -> None:
    assert isinstance(out, torch.Tensor) and out.is_floating_point() and bool(torch.isfinite(out).all()), out


def _built_then_called(build, names, *images) -> None:
    transform = assert_package_error_or_result(build, names)
    if transform is not None:
        assert_package_error_or_result(lambda: transform(*images), names, None if len(images) > 1 else finite_image)


@given(size=SIZES, mean=CHANNEL_VALUES, std=CHANNEL_VALUES)
def test_eval_transform_size_mean_std(size, mean, std) -> None:
    _built_then_called(lambda: eval_transform(size, mean, std), ("image_size", "mean", "std"), IMAGE)


@given(size=st.one_of(st.just(16), SIZES), key=st.sampled_from([*RECIPE, "interpolation", "bogus"]), value=VALUES)
def test_simclr_transform_recipe(size, key, value) -> None:
    _built_then_called(lambda: simclr_transform(size, MEAN, STD, **{key: value}), ("image_size", key), IMAGE)


@given(key=st.sampled_from(["crop_pct", "interpolation", "crop_mode"]), value=VALUES)
def test_eval_transform_options(key, value) -> None:
    _built_then_called(lambda: eval_transform(16, MEAN, STD, **{key: value}), key, IMAGE)


@given(
    key=st.sampled_from(["scale", "hflip_p", "vflip_p", "degrees", "jitter_strength", "jitter_p", "interpolation"]),
    value=VALUES,
)
def test_paired_transform_options(key, value) -> None:
    _built_then_called(lambda: paired_transform(16, MEAN, STD, **{key: value}), key, IMAGE, IMAGE)


CONFIG_KEYS = ["input_size", "mean", "std", "interpolation", "crop_pct", "crop_mode"]


@FEW
@given(data_config=st.one_of(wrong_types, st.dictionaries(st.sampled_from(CONFIG_KEYS), VALUES, max_size=6)))
def test_from_data_config(data_config) -> None:
    names = ("data_config", *CONFIG_KEYS, "image_size")
    for make in (simclr_transform_from_data_config, eval_transform_from_data_config):
        _built_then_called(lambda make=make: make(data_config), names, IMAGE)


@given(size=SIZES, channels=st.one_of(wrong_types, bad_numbers, st.integers(-1, 5)))
def test_raw_image_transform(size, channels) -> None:
    assert_package_error_or_result(lambda: raw_image_transform(size, channels), ("image_size", "n_channels"))


COLLATOR_FIELDS = ["n_views", "image_column", "label_column", "seed", "next_index", "on_bad_image", "n_channels"]


@given(
    key=st.sampled_from([*COLLATOR_FIELDS, "transform", "eval_transform", "raw_transform"]),
    value=st.one_of(VALUES, st.integers(-3, 5)).filter(lambda v: v is not float),  # `float` is a callable
)
def test_image_collator_fields(key, value) -> None:
    kwargs = {"transform": simclr_transform(16, MEAN, STD), key: value}
    collator = assert_package_error_or_result(lambda: ImageViewCollator(**kwargs), key)
    if collator is not None:
        rows = [{"image": IMAGE, "label": 1}, {"image": IMAGE, "label": 0}]
        assert_package_error_or_result(lambda: collator(rows), key)


@given(
    key=st.sampled_from(["tokenizer", "text_column", "text_pair_column", "label_column", "max_length"]),
    value=VALUES.filter(lambda v: v is not float),
)
def test_text_collator_fields(key, value) -> None:
    collator = assert_package_error_or_result(lambda: TextViewCollator(**{"tokenizer": TOKENIZER, key: value}), key)
    if collator is not None:
        rows = [{"text": "a cat", "label": 1}, {"text": "the dog", "label": 0}]
        assert_package_error_or_result(lambda: collator(rows), key)


@given(
    n_splits=st.one_of(VALUES, st.integers(-2, 10)),
    generator=st.one_of(st.none(), wrong_types, st.just(torch.Generator().manual_seed(0))),
)
def test_chunked_augmentation(n_splits, generator) -> None:
    names = ("n_splits", "generator", "images")
    augment = assert_package_error_or_result(
        lambda: ChunkedAugmentation(n_splits, simclr_transform(8, MEAN, STD), generator=generator), names
    )
    if augment is not None:
        views = assert_package_error_or_result(lambda: augment(torch.randint(0, 256, (8, 3, 12, 12)).byte()), names)
        if views is not None:
            finite_image(views[0])


DEVICE_VIEW_OPTIONS = ["antialias", "seed", "cuda_graphs", "compile", "hflip_p", "ratio", "blur_kernel", "blur_sigma"]


@given(
    size=st.one_of(_SMALL_BAD, st.integers(-2, 40), wrong_types),
    key=st.sampled_from([*DEVICE_VIEW_OPTIONS, "solarize_threshold"]),
    value=VALUES,
)
def test_device_views(size, key, value) -> None:
    assert_package_error_or_result(lambda: BatchedSimCLRViews(size, MEAN, STD, **{key: value}), ("image_size", key))


@given(
    key=st.sampled_from(
        [
            "n_splits",
            "ops",
            "mask_token_id",
            "insert_token_ids",
            "special_token_ids",
            "pad_token_id",
            "span_fraction",
            "generator",
        ]
    ),
    value=st.one_of(
        VALUES,
        tensors(max_rank=1, max_side=4),
        st.lists(st.sampled_from(["delete", "insert", "mask", "x", ""]), max_size=4),
        st.sampled_from([2**63, 10**30, [2**64], [-1, 5]]),
    ),
)
def test_chunked_text_augmentation(key, value) -> None:
    """`ops=None`, `span_fraction=None`, token ids that are strings, lists or beyond int64, or a generator that
    is a string raised TypeError, AttributeError or a size mismatch at the first batch; each is named when built."""
    options = {"n_splits": 2, "mask_token_id": 3, "insert_token_ids": [5, 6], key: value}
    augmentation = assert_package_error_or_result(lambda: ChunkedTextAugmentation(**options), key)
    if augmentation is not None:
        batch = {"input_ids": torch.randint(4, 9, (4, 6)), "attention_mask": torch.ones(4, 6, dtype=torch.long)}
        views = assert_package_error_or_result(lambda: augmentation(batch), (key, "batch"))
        if views is not None:
            assert all(view["input_ids"].shape[0] == 4 for view in views)


@given(columns=st.one_of(st.none(), VALUES, st.lists(st.one_of(bad_names, st.just("image")), max_size=3)))
@example(columns=["image", "image"])
def test_scan_images(columns) -> None:
    """`columns=0` raised "'int' object is not iterable", `['image', 'image']` arrow's KeyError ('Field "image"
    exists 2 times in schema'); a list of names is scanned (each once), anything else named."""
    import datasets
    from _images import png_bytes

    from hf_contrast.views import scan_images

    rows = [{"bytes": png_bytes(np.zeros((4, 4, 3), np.uint8)), "path": None}, {"bytes": b"not a png", "path": None}]
    data = datasets.Dataset.from_dict({"image": rows}).cast_column("image", datasets.Image())
    found = assert_package_error_or_result(lambda: scan_images(data, columns), ("columns",))
    if found is not None:
        scanned = columns is None or "image" in columns
        assert [bad.row for bad in found] == ([1] if scanned else [])
