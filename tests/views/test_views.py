"""The views interface: one ``ViewBuilder`` contract, implemented for images and for text, chosen from the model."""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import pytest
import torch
from _tiny import tiny_text_encoder, tiny_timm_encoder
from torch import nn

from hf_contrast.objectives import CAREObjective, LOCALObjective
from hf_contrast.views import (
    ChunkedAugmentation,
    ChunkedTextAugmentation,
    ImageViewCollator,
    ImageViews,
    PairedImageCollator,
    TextViewCollator,
    TextViews,
    ViewBuilder,
    views_for,
)


def _args(**overrides: object) -> SimpleNamespace:
    """The training-argument fields views read (a stand-in for ``ContrastiveTrainingArguments``)."""
    options: dict[str, object] = {
        "image_column": "image",
        "text_column": "text",
        "text_pair_column": None,
        "label_column": "label",
        "image_size": None,
        "max_length": None,
        "seed": 0,
        "data_seed": None,
        "on_bad_image": "raise",
        "gather_distributed": False,
        "eval_representation": "embeddings",
        "per_device_train_batch_size": 8,
    }
    options.update(overrides)
    return SimpleNamespace(**options)


@pytest.fixture(scope="module")
def image_views() -> ImageViews:
    encoder = tiny_timm_encoder()
    encoder.set_image_size(32)  # what the trainer's one decision (resolve_image_size) stores in the encoder
    views = views_for(encoder, _args())
    assert isinstance(views, ImageViews)
    return views


@pytest.fixture(scope="module")
def text_views() -> TextViews:
    encoder = tiny_text_encoder()
    views = views_for(encoder, _args(), encoder.tokenizer)
    assert isinstance(views, TextViews)
    return views


def test_views_are_chosen_once_from_the_model() -> None:
    assert type(views_for(tiny_timm_encoder(), _args())) is ImageViews
    assert type(views_for(tiny_text_encoder(), _args())) is TextViews
    assert type(views_for(nn.Linear(2, 2), _args())) is ImageViews  # no config: image views, as before
    with pytest.raises(TypeError):
        ViewBuilder(nn.Linear(2, 2), _args())  # the interface itself makes no views


def test_both_implementations_answer_the_whole_interface() -> None:
    abstract = {
        name for name, member in inspect.getmembers(ViewBuilder) if getattr(member, "__isabstractmethod__", False)
    }
    assert {"collator", "view", "augmented", "eval_views", "merge", "chunked_views", "paired_collator"} <= abstract
    for implementation in (ImageViews, TextViews):
        assert not implementation.__abstractmethods__
        for name in abstract:  # same parameters as the interface
            assert inspect.signature(getattr(implementation, name)).parameters.keys() == (
                inspect.signature(getattr(ViewBuilder, name)).parameters.keys()
            ), f"{implementation.__name__}.{name}"


def test_image_views_of_a_batch(image_views: ImageViews) -> None:
    x = {f"pixel_values_{k}": torch.full((4, 3, 32, 32), float(i)) for i, k in enumerate(["1", "2", "eq", "pre"])}
    x["pixel_values"] = torch.zeros(4, 3, 32, 32)
    v1, v2 = image_views.augmented(x, 2)
    assert v1["pixel_values"] is x["pixel_values_1"] and v2["pixel_values"] is x["pixel_values_2"]
    assert [v["pixel_values"] for v in image_views.eval_views(x)] == [
        x["pixel_values"],
        x["pixel_values_1"],
        x["pixel_values_2"],
    ]
    assert image_views.view(x, "pre")["pixel_values"] is x["pixel_values_pre"]
    merged = image_views.merge([v1, v2])
    assert torch.equal(merged["pixel_values"], torch.cat([x["pixel_values_1"], x["pixel_values_2"]]))
    assert image_views.chunked_batch_size(x) == 4 and image_views.chunked_batch_size({}) is None
    flipped = image_views.chunked_views(lambda raw: (raw + 1, raw.flip(-1)), x)
    assert torch.equal(flipped[0]["pixel_values"], x["pixel_values_eq"] + 1)
    with pytest.raises(ValueError, match="no `pixel_values_post`"):
        image_views.view(x, "post")
    with pytest.raises(ValueError, match="no `pixel_values_eq`.*raw_transform"):
        image_views.chunked_views(lambda raw: (raw, raw), {"pixel_values": x["pixel_values"]})


def test_text_views_of_a_batch(text_views: TextViews) -> None:
    tokenizer = text_views.processing_class
    batch = dict(tokenizer(["the cat sat", "a dog"], padding=True, return_tensors="pt"))
    pair = dict(tokenizer(["the red car is on the mat", "hello"], padding=True, return_tensors="pt"))
    x = {**batch, **{f"pair_{k}": v for k, v in pair.items()}}
    first, second = text_views.augmented(x, 2)
    assert first["input_ids"] is x["input_ids"] and second["input_ids"] is x["pair_input_ids"]  # the pair column
    assert all(v["input_ids"] is x["input_ids"] for v in text_views.augmented(batch, 3))  # SimCSE: same tokens
    assert [v["input_ids"] for v in text_views.eval_views(x)] == [x["input_ids"], x["input_ids"], x["pair_input_ids"]]
    merged = text_views.merge([first, second])  # right-padded to the longer view
    length = max(batch["input_ids"].shape[1], pair["input_ids"].shape[1])
    assert merged["input_ids"].shape == (4, length)
    assert torch.equal(merged["input_ids"][:2, : batch["input_ids"].shape[1]], batch["input_ids"])
    assert (merged["input_ids"][:2, batch["input_ids"].shape[1] :] == tokenizer.pad_token_id).all()
    assert (merged["attention_mask"][:2, batch["input_ids"].shape[1] :] == 0).all()
    assert text_views.chunked_batch_size(x) == 2
    with pytest.raises(ValueError, match="no `input_ids`"):
        text_views.chunked_batch_size({})


def test_padding_views_together_does_not_change_their_embeddings(text_views: TextViews) -> None:
    model = text_views.model.eval()
    tokenizer = text_views.processing_class
    short = dict(tokenizer(["the cat", "a dog sat"], padding=True, return_tensors="pt"))
    long = dict(
        tokenizer(["the man and the woman sat on the red mat", "hello world"], padding=True, return_tensors="pt")
    )
    with torch.no_grad():
        together = text_views.encode(model, [short, long])
        alone = [model(**short), model(**long)]
    for joint, separate in zip(together, alone):
        torch.testing.assert_close(joint["embeddings"], separate["embeddings"], atol=1e-5, rtol=1e-5)


def test_collators_and_chunked_augmentations_follow_the_model(image_views: ImageViews, text_views: TextViews) -> None:
    assert isinstance(image_views.collator(n_views=2, raw=True), ImageViewCollator)
    assert isinstance(image_views.paired_collator("image_pre", "image_post", train=True), PairedImageCollator)
    assert isinstance(image_views.chunked_augmentation(4), ChunkedAugmentation)
    assert isinstance(text_views.collator(n_views=2, raw=True), TextViewCollator)
    assert isinstance(text_views.chunked_augmentation(4), ChunkedTextAugmentation)
    assert text_views.input_columns() == ("text", "input_ids") and image_views.input_columns()[0] == "image"


def test_care_gets_its_equivariance_views_from_either_implementation(
    image_views: ImageViews, text_views: TextViews
) -> None:
    tokenizer = text_views.processing_class
    for views, batch in (
        (image_views, {"pixel_values_eq": torch.randint(0, 255, (8, 3, 32, 32), dtype=torch.uint8)}),
        (text_views, dict(tokenizer(["the cat sat on the mat"] * 8, padding=True, return_tensors="pt"))),
    ):
        objective = CAREObjective(n_splits=4)
        objective.setup(views, train_dataset=None)
        eq1, eq2 = objective.equivariance_views(batch, views)
        assert eq1.keys() == eq2.keys() == views.merge([eq1, eq2]).keys()
        assert next(iter(eq1.values())).shape[0] == 8
    one = {"pixel_values_eq": torch.zeros(1, 3, 32, 32, dtype=torch.uint8)}
    with pytest.warns(RuntimeWarning, match="not scored in `eval_loss`"):
        assert objective.eval_loss(nn.Identity(), one, image_views) is None  # 1 row: no pair to compare


def test_local_on_a_text_encoder_fails_before_training(text_views: TextViews) -> None:
    with pytest.raises(ValueError, match="image pairs: they need a timm image encoder"):
        LOCALObjective().setup(text_views, train_dataset=None)
    with pytest.raises(ValueError, match="image pairs"):
        text_views.paired_collator("image_pre", "image_post", train=False)


def test_image_views_read_the_size_from_the_encoder_and_never_decide_it() -> None:
    """The views take the encoder's data config as it is: ``args.image_size`` is the trainer's to decide (once,
    in :func:`~hf_contrast.training.resolve_image_size`), not the views' to override."""
    encoder = tiny_timm_encoder()
    encoder.set_image_size(24)
    views = views_for(encoder, _args(image_size=40))
    assert tuple(views.data_config()["input_size"])[1:] == (24, 24)
    assert views.data_config() == dict(encoder.data_config)
    assert tuple(encoder.data_config["input_size"])[1:] == (24, 24)  # building views changed nothing
