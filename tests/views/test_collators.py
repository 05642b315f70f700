"""The collators take the images users bring: any PIL mode, bad files, streaming datasets."""

from __future__ import annotations

import warnings
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch
from _errors import assert_message
from _images import png_bytes
from _tiny import tiny_tokenizer
from PIL import Image
from torch.utils.data import DataLoader

from hf_contrast.data import defer_image_decoding
from hf_contrast.data.decode import BadImageError, convert_image_mode, decode_image
from hf_contrast.views import (
    ImageViewCollator,
    PairedImageCollator,
    TextViewCollator,
    eval_transform,
    paired_transform,
    pop_view_batch_index,
    raw_image_transform,
    simclr_transform,
)

MEAN3, STD3 = (0.5, 0.5, 0.5), (0.25, 0.25, 0.25)


def _every_mode() -> list[Image.Image]:
    palette = Image.new("P", (12, 10))
    palette.putpalette([10, 200, 30] * 256)
    sixteen = Image.fromarray(np.full((10, 12), 257 * 100, dtype=np.uint16))
    assert sixteen.mode == "I;16"
    return [
        Image.new("RGBA", (12, 10), (255, 0, 0, 0)),  # fully transparent red
        palette,
        Image.new("LA", (12, 10), (40, 255)),
        Image.new("L", (12, 10), 90),
        sixteen,
        Image.new("CMYK", (12, 10), (0, 0, 0, 0)),  # CMYK white
        Image.new("RGB", (12, 10), (1, 2, 3)),
    ]


def test_every_pil_mode_becomes_the_encoders_channels() -> None:
    rows = [{"image": im, "label": i} for i, im in enumerate(_every_mode())]
    collator = ImageViewCollator(
        simclr_transform(8, MEAN3, STD3),
        eval_transform=eval_transform(8, MEAN3, STD3),
        raw_transform=raw_image_transform(8),
    )
    batch = collator(rows)
    for key in ("pixel_values_1", "pixel_values_2", "pixel_values", "pixel_values_eq"):
        assert batch[key].shape == (7, 3, 8, 8), key
    raw = batch["pixel_values_eq"]
    centre = raw[:, :, 4, 4].tolist()
    assert centre[0] == [255, 255, 255]  # transparent pixels composited over white
    assert centre[1] == [10, 200, 30]  # palette colours, not palette indices
    assert centre[2] == [40, 40, 40]  # opaque LA
    assert centre[3] == [90, 90, 90]
    assert centre[4] == [100, 100, 100]  # 16-bit scaled to 8 bits (25700 / 257)
    assert centre[5] == [255, 255, 255]
    assert centre[6] == [1, 2, 3]
    grey = raw_image_transform(8, n_channels=1)
    assert grey(_every_mode()[1]).shape == (1, 8, 8)
    assert grey(_every_mode()[1])[0, 4, 4] == round(0.299 * 10 + 0.587 * 200 + 0.114 * 30)
    gray_eval = eval_transform(8, (0.5,), (0.5,))
    assert {tuple(gray_eval(im).shape) for im in _every_mode()} == {(1, 8, 8)}


def test_convert_image_mode_keeps_tensors_and_rejects_bad_channels() -> None:
    tensor = torch.rand(3, 4, 4)
    assert convert_image_mode(tensor, 3) is tensor
    assert convert_image_mode(Image.new("I;16", (2, 2)), 1).mode == "L"
    with pytest.raises(ValueError, match="`n_channels` must be 1, 3 or None"):
        ImageViewCollator(None, n_views=0, n_channels=4)


def test_none_image_error_names_the_row() -> None:
    collator = ImageViewCollator(simclr_transform(8, MEAN3, STD3))
    rows = [{"image": Image.new("RGB", (8, 8)), "label": 0}, {"image": None, "label": 1}]
    with pytest.raises(ValueError, match=r"row 1 of the batch \(column 'image'\).*None.*on_bad_image='skip'"):
        collator(rows)


def test_truncated_file_error_names_row_and_file(tmp_path: Path) -> None:
    good = tmp_path / "good.png"
    Image.new("RGB", (16, 16), (9, 9, 9)).save(good)
    data = png_bytes(Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)))
    truncated = tmp_path / "truncated.png"
    truncated.write_bytes(data[: len(data) // 2])
    # datasets' Image(decode=False) rows: {"path", "bytes"}
    dataset = datasets.Dataset.from_dict({"image": [str(good), str(truncated)], "label": [0, 1]})
    dataset = dataset.cast_column("image", datasets.Image(decode=False))
    rows = [dataset[0], dataset[1]]
    assert rows[1]["image"]["path"] == str(truncated)
    collator = ImageViewCollator(simclr_transform(8, MEAN3, STD3))
    with pytest.raises(ValueError, match=rf"row 1 of the batch .*{truncated.name}") as info:
        collator(rows)
    assert isinstance(info.value, BadImageError)
    # a lazily opened PIL image: the file comes from `.filename`
    lazy = Image.open(truncated)
    with pytest.raises(ValueError, match=rf"row 0 of the batch .*file '{truncated}'"):
        collator([{"image": lazy, "label": 0}])
    # bytes without a path, and garbage bytes
    with pytest.raises(BadImageError, match="cannot decode the image"):
        decode_image({"path": None, "bytes": b"not an image"})
    assert decode_image({"path": None, "bytes": png_bytes(Image.new("LA", (3, 3)))}).mode == "LA"


def test_skip_option_leaves_bad_rows_out_and_counts_them(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"\xff\xd8\xff garbage")
    collator = ImageViewCollator(simclr_transform(8, MEAN3, STD3), on_bad_image="skip", seed=0)
    rows = [
        {"image": Image.new("RGB", (8, 8)), "label": 0},
        {"image": None, "label": 1},
        {"image": {"path": str(bad), "bytes": None}, "label": 2},
        {"image": Image.new("P", (8, 8)), "label": 3},
    ]
    with pytest.warns(UserWarning, match="Skipped: Bad image in row") as record:
        batch = collator(rows)
    assert batch["labels"].tolist() == [0, 3]
    assert batch["pixel_values_1"].shape[0] == 2 and batch["view_batch_index"].shape == (2,)
    assert collator.skipped_images == 2
    assert any("bad.jpg" in str(w.message) for w in record)
    with pytest.warns(UserWarning), pytest.raises(ValueError, match="Every image of this batch of 1 rows is bad"):
        collator([{"image": None, "label": 0}])
    assert collator.skipped_images == 3
    with pytest.raises(ValueError, match="`on_bad_image` must be one of"):
        ImageViewCollator(simclr_transform(8, MEAN3, STD3), on_bad_image="ignore")


def test_paired_collator_seeded_batches_resume_and_skip() -> None:
    rng = np.random.default_rng(0)
    rows = [
        {
            "image_pre": Image.fromarray(rng.integers(0, 255, (12, 12, 4), dtype=np.uint8), mode="RGBA"),
            "image_post": Image.fromarray(rng.integers(0, 255, (12, 12), dtype=np.uint8), mode="L"),
            "label": i % 2,
        }
        for i in range(6)
    ]
    transform = paired_transform(8, MEAN3, STD3, jitter_strength=0.5)
    first = PairedImageCollator(transform, seed=3)
    batches = [first(rows[:3]), first(rows[3:])]
    assert batches[0]["pixel_values_pre"].shape == (3, 3, 8, 8)
    assert batches[1]["view_batch_index"].tolist() == [1, 1, 1]
    resumed = PairedImageCollator(transform, seed=3, next_index=1)  # a run resumed before batch 1
    again = resumed(rows[3:])
    assert torch.equal(again["pixel_values_pre"], batches[1]["pixel_values_pre"])
    assert torch.equal(again["pixel_values_post"], batches[1]["pixel_values_post"])
    other_seed = PairedImageCollator(transform, seed=4, next_index=1)(rows[3:])
    assert not torch.equal(other_seed["pixel_values_pre"], batches[1]["pixel_values_pre"])
    skipping = PairedImageCollator(transform, on_bad_image="skip")
    with pytest.warns(UserWarning, match="column 'image_post'"):
        batch = skipping([*rows[:2], {**rows[2], "image_post": None}])
    assert batch["labels"].tolist() == [0, 1] and skipping.skipped_images == 1
    with pytest.raises(ValueError, match="row 0 of the batch .*'image_pre'"):
        PairedImageCollator(transform)([{**rows[0], "image_pre": None}])


def _image_rows(n: int) -> dict[str, list]:
    rng = np.random.default_rng(1)
    images = [Image.fromarray(rng.integers(0, 255, (10, 10, 4), dtype=np.uint8), mode="RGBA") for _ in range(n)]
    return {"image": images, "label": [i % 3 for i in range(n)]}


def test_streaming_iterable_dataset_collates_like_map_style() -> None:
    data = datasets.Dataset.from_dict(_image_rows(10))
    streaming = data.to_iterable_dataset()
    assert isinstance(streaming, datasets.IterableDataset)

    def collator() -> ImageViewCollator:
        return ImageViewCollator(simclr_transform(8, MEAN3, STD3), raw_transform=raw_image_transform(8), seed=7)

    mapped = list(DataLoader(data, batch_size=4, collate_fn=collator()))
    streamed = list(DataLoader(streaming, batch_size=4, collate_fn=collator()))
    assert [b["labels"].tolist() for b in streamed] == [[0, 1, 2, 0], [1, 2, 0, 1], [2, 0]]
    for a, b in zip(mapped, streamed, strict=True):
        assert (
            set(a) == set(b) == {"pixel_values_1", "pixel_values_2", "pixel_values_eq", "labels", "view_batch_index"}
        )
        for key, value in b.items():
            assert isinstance(value, torch.Tensor) and value.shape[0] == b["labels"].shape[0], key
            assert torch.equal(a[key], value), key
    assert [b["view_batch_index"].tolist() for b in streamed] == [[0] * 4, [1] * 4, [2] * 2]


def test_streaming_batches_pass_accelerates_dispatcher() -> None:
    """accelerate dispatches IterableDataset batches: it concatenates, broadcasts and slices every value."""
    from accelerate import Accelerator
    from accelerate.data_loader import DataLoaderDispatcher
    from accelerate.state import AcceleratorState

    streaming = datasets.Dataset.from_dict(_image_rows(6)).to_iterable_dataset()
    collator = ImageViewCollator(simclr_transform(8, MEAN3, STD3), seed=0)
    try:
        loader = Accelerator().prepare(DataLoader(streaming, batch_size=4, collate_fn=collator))
        assert isinstance(loader, DataLoaderDispatcher)
        batches = list(loader)
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)  # leave no global state to later tests
    assert [b["pixel_values_1"].shape[0] for b in batches] == [4, 2]
    indices = [pop_view_batch_index(b) for b in batches]
    assert [int(i) for i in indices] == [0, 1] and all(i.ndim == 0 for i in indices)
    assert "view_batch_index" not in batches[0]
    assert pop_view_batch_index({"labels": torch.zeros(2)}) is None


def test_text_collator_streaming_rows_and_missing_text() -> None:
    tokenizer = tiny_tokenizer()
    rows = {"text": ["a cat sat", "the dog ran", "a bird"], "label": [0, 1, 0]}
    streaming = datasets.Dataset.from_dict(rows).to_iterable_dataset()
    collator = TextViewCollator(tokenizer)
    batch = next(iter(DataLoader(streaming, batch_size=3, collate_fn=collator)))
    assert batch["input_ids"].shape[0] == 3 and batch["labels"].tolist() == [0, 1, 0]
    with pytest.raises(ValueError, match=r"Row 1 of the batch holds a NoneType in the text column 'text'"):
        collator([{"text": "a cat", "label": 0}, {"text": None, "label": 1}])
    with pytest.raises(ValueError, match=r"integer class labels, got 'cat' \(a str\) in row 0 of the batch"):
        collator([{"text": "a cat", "label": "cat"}])


def test_collators_reject_an_empty_batch() -> None:
    with pytest.raises(ValueError, match="empty batch"):
        ImageViewCollator(simclr_transform(8, MEAN3, STD3))([])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        batch = ImageViewCollator(None, n_views=0, eval_transform=eval_transform(8, MEAN3, STD3))(
            [{"image": Image.new("RGB", (9, 9))}]
        )
    assert set(batch) == {"pixel_values"}


@pytest.mark.parametrize("stored", ["path", "bytes"])
def test_truncated_png_names_the_row_and_the_file(tmp_path, stored: str) -> None:
    rng = np.random.default_rng(0)
    files = [png_bytes(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)) for _ in range(3)]
    files[2] = files[2][:300]  # truncated
    if stored == "path":
        paths = [tmp_path / f"{i}.png" for i in range(3)]
        for path, data in zip(paths, files):
            path.write_bytes(data)
        column = [str(p) for p in paths]
    else:
        column = [{"bytes": data, "path": None} for data in files]
    dataset = datasets.Dataset.from_dict({"image": column}).cast_column("image", datasets.Image())
    dataset = defer_image_decoding(dataset)  # decoded by the collator, which knows the row
    collator = ImageViewCollator(transform=simclr_transform(32, mean=MEAN3, std=STD3))
    with pytest.raises(BadImageError) as caught:
        collator([dataset[i] for i in range(3)])
    where = str(tmp_path / "2.png") if stored == "path" else "embedded bytes, 300 bytes"
    assert_message(caught, "row 2 of the batch", where, "truncated", "on_bad_image='skip'")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [  # each failed at the first batch, after training had started (found by tests/views/test_properties_views.py)
        ({"transform": 1.5}, "`transform` must be callable"),  # TypeError: 'float' object is not callable
        ({"eval_transform": "eval"}, "`eval_transform` must be callable"),
        ({"image_column": None}, "`image_column` must be a non-empty column name"),
        ({"label_column": 3}, "`label_column` must be a non-empty column name"),
        ({"seed": -1}, "`seed` must be an integer >= 0 or None"),  # ValueError from NumPy's SeedSequence
        ({"next_index": 1.5}, "`next_index` must be an integer >= 0"),
        ({"n_views": 10**30}, r"`n_views` must be an integer in \[0, 64\]"),  # MemoryError (or a very long batch)
    ],
)
def test_image_collator_checks_its_fields_when_built(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ImageViewCollator(**{"transform": simclr_transform(8, MEAN3, STD3), **kwargs})


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [  # each failed at the first batch
        ({"tokenizer": None}, "`tokenizer` must be a transformers tokenizer"),  # 'NoneType' object is not callable
        ({"tokenizer": float}, "`tokenizer` must be a transformers tokenizer"),  # float() takes no keyword arguments
        ({"max_length": "0.1"}, "`max_length` must be an integer"),  # TypeError in the tokenizer
        ({"max_length": 10**30}, "`max_length` must be an integer in"),  # OverflowError in the tokenizer
        ({"text_column": ""}, "`text_column` must be a non-empty column name"),
        ({"text_pair_column": 1}, "`text_pair_column` must be a non-empty column name"),
    ],
)
def test_text_collator_checks_its_fields_when_built(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        TextViewCollator(**{"tokenizer": tiny_tokenizer(), **kwargs})


def test_paired_collator_checks_its_fields_when_built() -> None:
    with pytest.raises(ValueError, match="`transform` is required"):
        PairedImageCollator(None)
    with pytest.raises(ValueError, match="`post_column` must be a non-empty column name"):
        PairedImageCollator(paired_transform(8, MEAN3, STD3), post_column="")
