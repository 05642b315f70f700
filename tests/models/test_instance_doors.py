"""``ContrastiveEncoder.from_backbone(<model object>)``: what a model instance must be, checked at the door.

Each refusal is the package's ``InputError`` naming the argument and the fix, raised before the
model is changed (its classifier is still there) and before any training.
"""

from __future__ import annotations

import logging

import pytest
import timm
import torch
from _tiny import TIMM_TEST_BACKBONE, tiny_bert_config, tiny_tokenizer
from transformers import BertModel

from hf_contrast.errors import InputError, InputTypeError
from hf_contrast.models import ContrastiveEncoder


@pytest.mark.parametrize("name", [TIMM_TEST_BACKBONE, "test_vit"])
def test_timm_model_without_global_pooling_is_refused_and_left_unchanged(name: str) -> None:
    model = timm.create_model(name, pretrained=False, num_classes=7, global_pool="")
    with pytest.raises(
        InputError, match=r"`backbone` \(test_\w+\) gives features of shape \(1, .*global_pool=''.*num_classes=0"
    ):
        ContrastiveEncoder.from_backbone(model)
    assert model.num_classes == 7 and model.training  # not changed by the refusal, mode restored


def test_timm_model_with_another_pooling_round_trips(tmp_path) -> None:
    model = timm.create_model(TIMM_TEST_BACKBONE, pretrained=False, num_classes=3, global_pool="max").eval()
    x = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        before = model.forward_head(model.forward_features(x), pre_logits=True)
    encoder = ContrastiveEncoder.from_backbone(model, projection_dim=8)
    assert encoder.config.backbone_kwargs == {"global_pool": "max"}
    encoder.save_pretrained(tmp_path)
    with torch.no_grad():
        torch.testing.assert_close(
            ContrastiveEncoder.from_pretrained(tmp_path).eval()(pixel_values=x).embeddings, before
        )


def test_model_on_the_meta_device_is_refused() -> None:
    with torch.device("meta"):
        model = timm.create_model(TIMM_TEST_BACKBONE, pretrained=False)
    with pytest.raises(
        InputError, match=r"`backbone` \(ResNet\) has \d+ tensor\(s\) on the meta device.*to_empty.*load"
    ):
        ContrastiveEncoder.from_backbone(model)
    with torch.device("meta"):
        bert = BertModel(tiny_bert_config())
    with pytest.raises(InputError, match="meta device"):
        ContrastiveEncoder.from_backbone(bert, tokenizer=tiny_tokenizer())


def test_model_with_mixed_dtypes_is_refused() -> None:
    model = timm.create_model(TIMM_TEST_BACKBONE, pretrained=False)
    model.fc = torch.nn.Linear(96, 2).half()
    with pytest.raises(InputError, match=r"several dtypes \['torch.float16', 'torch.float32'\].*model.float\(\)"):
        ContrastiveEncoder.from_backbone(model)


def test_half_precision_model_gives_a_half_encoder_that_runs(caplog) -> None:
    model = timm.create_model(TIMM_TEST_BACKBONE, pretrained=False).to(torch.bfloat16)
    with caplog.at_level(logging.WARNING, logger="hf_contrast"):
        encoder = ContrastiveEncoder.from_backbone(model, projection_dim=8)
    assert {p.dtype for p in encoder.parameters()} == {torch.bfloat16}  # the heads too: no dtype mismatch
    assert "torch.bfloat16" in caplog.text and "bf16=True" in caplog.text
    assert encoder.encode(torch.rand(2, 3, 32, 32)).shape == (2, 96)


@pytest.mark.parametrize("training", [True, False])
def test_encoder_takes_the_mode_of_the_instance_as_a_whole(training: bool) -> None:
    model = timm.create_model(TIMM_TEST_BACKBONE, pretrained=False).train(training)
    encoder = ContrastiveEncoder.from_backbone(model, projection_dim=8)
    assert {m.training for m in encoder.modules()} == {training}


def test_tokenizer_name_instead_of_a_tokenizer_is_refused() -> None:
    with pytest.raises(InputTypeError, match="`tokenizer` is a str; pass a tokenizer object"):
        ContrastiveEncoder.from_backbone(BertModel(tiny_bert_config()), tokenizer="bert-base-uncased")
