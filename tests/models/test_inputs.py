"""The encoder's inputs (:mod:`hf_contrast.models.inputs`): a bad ``pixel_values`` or token batch is named with the
problem and the fix before it fails deep inside timm or transformers; fp16 images are cast; NaN pixels are the
trainer's business in training; a batch of one in training mode names BatchNorm and ``eval()``."""

from __future__ import annotations

import pytest
import torch
from _errors import assert_message
from _tiny import tiny_text_encoder, tiny_timm_encoder
from distributed_scripts.trainer_utils import vit_encoder
from hypothesis import given, settings
from hypothesis import strategies as st

IMAGE_CASES = [
    ("one channel", lambda: torch.randn(2, 1, 32, 32),
     ("`pixel_values`", "1 channel", "takes 3", "expand(-1, 3, -1, -1)", "in_chans")),
    ("uint8", lambda: torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8),
     ("`pixel_values`", "torch.uint8", "eval_transform_from_data_config", "/ 255")),
    ("2x2 image", lambda: torch.randn(2, 3, 2, 2),
     ("`pixel_values`", "2×2", "32-pixel total stride", "at least 32×32")),
    ("NaN pixels", lambda: torch.full((2, 3, 32, 32), float("nan")),
     ("`pixel_values`", "NaN", "[0, 1] before colour transforms")),
]  # fmt: skip


@pytest.mark.parametrize(("name", "make", "pieces"), IMAGE_CASES, ids=[case[0] for case in IMAGE_CASES])
def test_bad_pixel_values_name_the_problem_and_the_fix(timm_encoder, name, make, pieces) -> None:
    with pytest.raises(ValueError) as caught:
        timm_encoder(pixel_values=make())
    assert_message(caught, *pieces)


def test_fp16_pixel_values_are_cast_to_the_encoder_dtype(timm_encoder) -> None:
    images = torch.randn(2, 3, 32, 32).half()
    got = timm_encoder(pixel_values=images)
    want = timm_encoder(pixel_values=images.float())  # the same (fp16-representable) values in float32
    torch.testing.assert_close(got.projections, want.projections, rtol=0, atol=0)
    assert got.projections.dtype == torch.float32


def test_nan_pixels_are_only_checked_outside_training() -> None:
    encoder = tiny_timm_encoder().train()  # training: the trainer's nonfinite_policy owns non-finite losses
    out = encoder(pixel_values=torch.full((2, 3, 32, 32), float("nan")))
    assert torch.isnan(out.projections).all()


@pytest.mark.parametrize("modality", ["image", "text"])
def test_batch_of_one_in_training_mode_names_batchnorm_and_eval(modality: str) -> None:
    if modality == "image":
        encoder, inputs, name = (
            tiny_timm_encoder().train(),
            {"pixel_values": torch.randn(1, 3, 32, 32)},
            "`pixel_values`",
        )
    else:
        encoder, inputs, name = tiny_text_encoder().train(), {"input_ids": torch.tensor([[2, 7, 3]])}, "`input_ids`"
    with pytest.raises(ValueError) as caught:
        encoder(**inputs)
    assert_message(caught, name, "1 sample in training mode", "BatchNorm", "enc.eval()")
    encoder.eval()(**inputs)  # the documented fix works


def test_batch_of_one_without_batchnorm_trains() -> None:
    encoder = vit_encoder(img_size=16).train()  # LayerNorm only
    assert encoder(pixel_values=torch.randn(1, 3, 16, 16)).projections.shape == (1, 8)


TEXT_CASES = [
    ("float input_ids", {"input_ids": torch.ones(2, 4)}, ("`input_ids`", "torch.float32", ".long()")),
    ("out-of-vocabulary input_ids", {"input_ids": torch.full((2, 4), 10000)},
     ("`input_ids`", "holds 10000", "0..124", "enc.tokenizer", "resize_token_embeddings")),
    ("all-zero attention mask",
     {"input_ids": torch.ones(2, 4, dtype=torch.long), "attention_mask": torch.tensor([[0, 0, 0, 0], [1, 1, 0, 0]])},
     ("`attention_mask`", "row(s) [0]", "tokenizer's `attention_mask`")),
]  # fmt: skip


@pytest.mark.parametrize(("name", "inputs", "pieces"), TEXT_CASES, ids=[case[0] for case in TEXT_CASES])
def test_bad_token_inputs_name_the_problem_and_the_fix(text_encoder, name, inputs, pieces) -> None:
    with pytest.raises(ValueError) as caught:
        text_encoder(**inputs)
    assert_message(caught, *pieces)


_POSITIONED: dict[str, object] = {}


def _positioned(family: str):  # noqa: ANN202
    """A tiny BERT (64 absolute positions) or RoBERTa (66 rows, 2 of them skipped: padding_idx = 1) encoder."""
    from _tiny import TINY_VOCAB, tiny_bert_config
    from transformers import RobertaConfig

    from hf_contrast.models import ContrastiveEncoder

    if family not in _POSITIONED:
        config = tiny_bert_config()
        if family == "roberta":
            config = RobertaConfig(**{**config.to_diff_dict(), "max_position_embeddings": 66, "pad_token_id": 1})
            config.vocab_size = len(TINY_VOCAB)
        _POSITIONED[family] = ContrastiveEncoder.from_text_config(config, projection_dim=8).eval()
    return _POSITIONED[family]


@settings(max_examples=40, deadline=None)
@given(family=st.sampled_from(["bert", "roberta"]), length=st.integers(1, 70))
def test_a_token_sequence_longer_than_the_position_embeddings_is_named(family: str, length: int) -> None:
    """Both families take 64 tokens: exactly the sequences their backbone runs on are accepted (position_limit is
    exact), a longer one is named with the limit and the fix, not torch's 'size of tensor a must match'."""
    from hf_contrast.models.inputs import position_limit

    encoder = _positioned(family)
    assert position_limit(encoder.backbone) == 64
    input_ids = torch.full((2, length), 7)
    if length <= 64:
        encoder.backbone(input_ids=input_ids)  # the backbone itself runs
        assert encoder(input_ids=input_ids).embeddings.shape == (2, 32)
    else:
        with pytest.raises(RuntimeError):  # what the backbone alone says
            encoder.backbone(input_ids=input_ids)
        with pytest.raises(ValueError) as caught:
            encoder(input_ids=input_ids)
        assert_message(caught, "`input_ids`", f"{length} tokens", "position embeddings for 64", "max_length=64")


def test_the_exported_max_seq_length_is_the_position_limit() -> None:
    """Without a configured length, the sentence-transformers export writes what the backbone takes: a RoBERTa
    table of 66 rows takes 64 tokens (the export wrote 66, which sentence-transformers then tokenized up to)."""
    from hf_contrast.models.export import text_max_seq_length

    for family in ("bert", "roberta"):
        assert text_max_seq_length(_positioned(family)) == 64
