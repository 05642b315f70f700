"""Native exports load with timm / transformers / sentence-transformers alone and give our outputs."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import timm
import torch
from _tiny import TIMM_TEST_BACKBONE, tiny_text_encoder, tiny_timm_encoder
from transformers import AutoModel, AutoTokenizer, PreTrainedModel

from hf_contrast.models import (
    HUB_SUBFOLDER,
    ContrastiveEncoder,
    export_sentence_transformers,
    export_timm,
    export_transformers,
)
from hf_contrast.models.export import PROVENANCE_KEYS

SENTENCES = ["the cat sat on the mat", "hello world", "a red car", "the dog is a dog of the man"]


@pytest.fixture(scope="module")
def vision() -> ContrastiveEncoder:
    torch.manual_seed(0)
    enc = tiny_timm_encoder(
        backbone_kwargs={"global_pool": "max"},
        data_config={
            "input_size": [3, 32, 32],
            "mean": [0.4, 0.5, 0.6],
            "std": [0.2, 0.2, 0.2],
            "interpolation": "bicubic",
            "crop_pct": 1.0,
            "crop_mode": "center",
        },
    )
    enc.train()(pixel_values=torch.randn(8, 3, 32, 32))  # non-trivial BatchNorm statistics
    return enc.eval()


@pytest.fixture(scope="module")
def images() -> torch.Tensor:
    return torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(1))


def tokens(encoder: ContrastiveEncoder) -> dict[str, torch.Tensor]:
    return dict(encoder.tokenizer(SENTENCES, padding=True, return_tensors="pt"))


# ----------------------------------------------------------------------------------------------
# timm
# ----------------------------------------------------------------------------------------------


def test_export_timm_loads_with_timm(tmp_path, vision: ContrastiveEncoder, images: torch.Tensor) -> None:
    export_timm(vision, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architecture"] == TIMM_TEST_BACKBONE and config["num_classes"] == 0 and config["num_features"] == 96
    assert config["model_args"]["global_pool"] == "max"
    assert config["pretrained_cfg"]["input_size"] == [3, 32, 32] and config["pretrained_cfg"]["mean"] == [
        0.4,
        0.5,
        0.6,
    ]
    assert (tmp_path / "model.safetensors").is_file()
    model = timm.create_model("local-dir:" + str(tmp_path), pretrained=True).eval()
    torch.testing.assert_close(model(images), vision(pixel_values=images).embeddings, atol=1e-5, rtol=0)
    data_config = timm.data.resolve_data_config({}, model=model)
    # timm < 1.0.31 hands the JSON's list back as it is; the size is what matters
    assert tuple(data_config["input_size"]) == (3, 32, 32) and data_config["interpolation"] == "bicubic"


def test_export_timm_rejects_text(tmp_path, text_encoder: ContrastiveEncoder) -> None:
    with pytest.raises(ValueError, match="`export_timm` needs a timm backbone .* use `export_transformers"):
        export_timm(text_encoder, tmp_path)


# ----------------------------------------------------------------------------------------------
# transformers and sentence-transformers
# ----------------------------------------------------------------------------------------------


def test_export_transformers_loads_with_auto_classes(tmp_path, text_encoder: ContrastiveEncoder) -> None:
    export_transformers(text_encoder, tmp_path)
    model = AutoModel.from_pretrained(tmp_path).eval()
    tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    inputs = tokens(text_encoder)
    assert torch.equal(tokenizer(SENTENCES, padding=True, return_tensors="pt")["input_ids"], inputs["input_ids"])
    torch.testing.assert_close(
        model(**inputs).last_hidden_state, text_encoder.backbone(**inputs).last_hidden_state, atol=1e-5, rtol=0
    )


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_export_sentence_transformers_gives_our_embeddings(tmp_path, pooling: str) -> None:
    sentence_transformers = pytest.importorskip("sentence_transformers")
    torch.manual_seed(0)
    enc = tiny_text_encoder(pooling=pooling).eval()
    export_sentence_transformers(enc, tmp_path)
    for name in (
        "modules.json",
        "sentence_bert_config.json",
        "config_sentence_transformers.json",
        "config.json",
        "model.safetensors",
    ):
        assert (tmp_path / name).is_file(), name
    pooling_config = json.loads((tmp_path / "1_Pooling" / "config.json").read_text())
    assert pooling_config["pooling_mode_mean_tokens"] == (pooling == "mean")
    assert pooling_config["pooling_mode_cls_token"] == (pooling == "cls")
    model = sentence_transformers.SentenceTransformer(str(tmp_path), device="cpu")
    got = model.encode(SENTENCES, convert_to_tensor=True)
    torch.testing.assert_close(got, enc(**tokens(enc)).embeddings.detach(), atol=1e-5, rtol=0)


def test_text_exports_reject_timm_and_missing_tokenizer(tmp_path, vision: ContrastiveEncoder, caplog) -> None:
    with pytest.raises(ValueError, match="`export_transformers` needs a text backbone .* use `export_timm`"):
        export_transformers(vision, tmp_path)
    enc = tiny_text_encoder()
    enc.tokenizer = None
    with pytest.raises(ValueError, match=r"`encoder.tokenizer` is None: a text export needs the tokenizer"):
        export_sentence_transformers(enc, tmp_path)
    with caplog.at_level(logging.WARNING, logger="hf_contrast.models.modeling"):
        enc.save_pretrained(tmp_path / "no_tokenizer")
    assert "has no tokenizer" in caplog.text
    assert (tmp_path / "no_tokenizer" / "config.json").is_file() and not (
        tmp_path / "no_tokenizer" / "modules.json"
    ).exists()
    assert ContrastiveEncoder.from_pretrained(tmp_path / "no_tokenizer").tokenizer is None


# ----------------------------------------------------------------------------------------------
# The save layout
# ----------------------------------------------------------------------------------------------


def test_save_pretrained_vision_layout(tmp_path, vision: ContrastiveEncoder, images: torch.Tensor) -> None:
    vision.save_pretrained(tmp_path)
    assert (tmp_path / "config.json").is_file() and (tmp_path / "model.safetensors").is_file()
    assert (tmp_path / HUB_SUBFOLDER / "config.json").is_file() and (
        tmp_path / HUB_SUBFOLDER / "model.safetensors"
    ).is_file()
    assert not [
        p.name for p in tmp_path.parent.iterdir() if p.name.startswith(f".{tmp_path.name}.")
    ]  # no staging left
    expected = vision(pixel_values=images)
    loaded = ContrastiveEncoder.from_pretrained(tmp_path).eval()
    # the same weights in another instance: CPU kernels may round the last bit differently (alignment-dependent
    # vectorisation, seen with OMP_NUM_THREADS=1), so equal to float32 precision, not bitwise
    torch.testing.assert_close(loaded(pixel_values=images).projections, expected.projections, atol=1e-6, rtol=0)
    assert loaded.data_config == vision.data_config
    native = timm.create_model("local-dir:" + str(tmp_path), pretrained=True).eval()
    torch.testing.assert_close(native(images), expected.embeddings, atol=1e-5, rtol=0)
    wrapped = AutoModel.from_pretrained(tmp_path).eval()  # transformers' TimmWrapperModel reads timm's config
    torch.testing.assert_close(wrapped(pixel_values=images).pooler_output, expected.embeddings, atol=1e-5, rtol=0)
    explicit = ContrastiveEncoder.from_pretrained(tmp_path, subfolder=HUB_SUBFOLDER).eval()
    torch.testing.assert_close(explicit(pixel_values=images).embeddings, expected.embeddings, atol=1e-6, rtol=0)


def test_save_pretrained_text_layout(tmp_path, text_encoder: ContrastiveEncoder) -> None:
    text_encoder.save_pretrained(tmp_path)
    for name in ("config.json", "model.safetensors", "tokenizer_config.json", "modules.json", "1_Pooling/config.json"):
        assert (tmp_path / name).is_file(), name
    inputs = tokens(text_encoder)
    expected = text_encoder(**inputs)
    loaded = ContrastiveEncoder.from_pretrained(tmp_path).eval()
    assert loaded.tokenizer is not None
    assert torch.equal(loaded(**inputs).projections, expected.projections)
    native = AutoModel.from_pretrained(tmp_path).eval()
    torch.testing.assert_close(
        native(**inputs).last_hidden_state, text_encoder.backbone(**inputs).last_hidden_state, atol=1e-5, rtol=0
    )


def test_old_flat_saves_still_load(tmp_path, vision: ContrastiveEncoder, images: torch.Tensor) -> None:
    # the layout before the subfolder: our config and weights at the root (transformers' own save_pretrained)
    PreTrainedModel.save_pretrained(vision, tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == "hf_contrast_encoder"
    loaded = ContrastiveEncoder.from_pretrained(tmp_path).eval()
    torch.testing.assert_close(
        loaded(pixel_values=images).projections, vision(pixel_values=images).projections, atol=1e-6, rtol=0
    )


def test_from_scratch_export_has_no_pretrained_provenance_and_the_trained_size(tmp_path) -> None:
    scratch = tiny_timm_encoder()
    scratch.set_image_size(32)
    scratch.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    pretrained_cfg = config["pretrained_cfg"]
    assert pretrained_cfg["input_size"] == [3, 32, 32]
    assert not set(pretrained_cfg) & set(PROVENANCE_KEYS), pretrained_cfg
    assert json.loads((tmp_path / HUB_SUBFOLDER / "config.json").read_text())["data_config"]["input_size"] == [
        3,
        32,
        32,
    ]
    model = timm.create_model("local-dir:" + str(tmp_path), pretrained=True)
    assert tuple(timm.data.resolve_model_data_config(model)["input_size"]) == (3, 32, 32)
    # a pretrained source keeps its provenance (what base_model / license are read from)
    export_dir = tmp_path / "pretrained_source"
    export_timm(scratch, export_dir)
    fine_tuned = ContrastiveEncoder.from_backbone("local-dir:" + str(export_dir), pretrained=True, projection_dim=8)
    assert fine_tuned.config.backbone_pretrained
    assert fine_tuned.backbone.pretrained_cfg.get("hf_hub_id") is None  # the local source has none to keep


def test_save_pretrained_writes_the_card_and_survives_card_failures(
    tmp_path, vision: ContrastiveEncoder, monkeypatch, caplog
) -> None:
    from hf_contrast.models import saving as model_card  # where save_pretrained looks the writer up

    calls = []
    monkeypatch.setattr(
        model_card,
        "write_model_card",
        lambda model, folder: (calls.append(model), (Path(folder) / "README.md").write_text("card")),
    )
    vision.save_pretrained(tmp_path / "with_card")
    assert calls == [vision] and (tmp_path / "with_card" / "README.md").read_text() == "card"

    def broken(*args, **kwargs):
        raise RuntimeError("template exploded")

    monkeypatch.setattr(model_card, "write_model_card", broken)
    with caplog.at_level(logging.WARNING, logger="hf_contrast.models.modeling"):
        vision.save_pretrained(tmp_path / "broken_card")
    assert "template exploded" in caplog.text
    assert (tmp_path / "broken_card" / HUB_SUBFOLDER / "model.safetensors").is_file()
    assert not (tmp_path / "broken_card" / "README.md").exists()
