"""ContrastiveEncoder: config, forward (vision/text), pooling, save/load round trips, factories, errors, offline."""

from __future__ import annotations

import time

import pytest
import timm
import torch
from _tiny import TIMM_TEST_BACKBONE, tiny_bert_config, tiny_text_encoder, tiny_timm_encoder, tiny_tokenizer
from transformers import AutoConfig, AutoModel

from hf_contrast.errors import InputError, MissingPathError
from hf_contrast.models import (
    HUB_SUBFOLDER,
    ContrastiveEncoder,
    ContrastiveEncoderConfig,
    ContrastiveEncoderOutput,
    HubUnavailableError,
    ProjectionHead,
    export_timm,
    export_transformers,
    max_pool,
    mean_pool,
)

SENTENCES = ["the cat sat on the mat", "hello world", "a red car", "the dog is a dog of the man"]


@pytest.fixture(scope="module")
def vision() -> ContrastiveEncoder:
    torch.manual_seed(0)
    return tiny_timm_encoder(num_labels=3).eval()


@pytest.fixture(scope="module")
def text() -> ContrastiveEncoder:
    torch.manual_seed(0)
    return tiny_text_encoder(num_labels=2).eval()


@pytest.fixture(scope="module")
def images() -> torch.Tensor:
    return torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(1))


def batch(encoder: ContrastiveEncoder, texts: list[str] = SENTENCES) -> dict[str, torch.Tensor]:
    return dict(encoder.tokenizer(texts, padding=True, return_tensors="pt"))


# ----------------------------------------------------------------------------------------------
# Config
# ----------------------------------------------------------------------------------------------


def test_config_defaults_and_serialisation_round_trip() -> None:
    config = ContrastiveEncoderConfig(
        backbone="bert", backbone_type="text", text_config=tiny_bert_config(), num_labels=4
    )
    assert (config.projection_dim, config.projection_layers, config.projection_norm) == (128, 2, "batchnorm")
    assert config.normalize_projections and config.pooling == "mean" and config.num_labels == 4
    loaded = ContrastiveEncoderConfig.from_dict(config.to_dict())
    assert loaded.text_config.hidden_size == 32 and type(loaded.text_config).__name__ == "BertConfig"
    assert loaded.num_labels == 4 and loaded.get_text_config() is loaded.text_config
    assert ContrastiveEncoderConfig(backbone="resnet18").num_labels == 0
    assert isinstance(AutoConfig.for_model("hf_contrast_encoder", backbone="resnet18"), ContrastiveEncoderConfig)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"backbone_type": "audio"}, "`backbone_type`"),
        ({"pooling": "lasttoken"}, "`pooling`"),
        ({"normalize_embeddings": True}, "for text backbones"),
        ({"max_seq_length": 128}, "for text backbones"),
        ({"backbone_type": "text", "text_config": {"model_type": "bert"}, "max_seq_length": 0}, "`max_seq_length`"),
        ({"projection_norm": "groupnorm"}, "`projection_norm`"),
        ({"projection_dim": 0}, "`projection_dim`"),
        ({"projection_layers": 0}, "`projection_layers`"),
        ({"projection_hidden_dim": -2}, "`projection_hidden_dim`"),
        ({"embedding_dim": 1.5}, "`embedding_dim`"),
        ({"num_labels": -1}, "`num_labels`"),
        ({"backbone_kwargs": {"num_classes": 10}}, "`num_classes`"),
        ({"backbone_kwargs": ["drop_rate"]}, "`backbone_kwargs`"),
        ({"feature_stages": "last"}, "`feature_stages`"),
        ({"backbone_type": "text", "text_config": {"hidden_size": 8}}, "`model_type`"),
        (
            {"backbone_type": "text", "text_config": {"model_type": "bert"}, "data_config": {"input_size": [3, 8, 8]}},
            "for timm backbones",
        ),
        ({"data_config": [3, 32, 32]}, "`data_config` must be a dict"),
    ],
)
def test_config_rejects_bad_options(kwargs: dict, match: str) -> None:
    kwargs.setdefault("backbone", "resnet18")
    with pytest.raises(ValueError, match=match):
        ContrastiveEncoderConfig(**kwargs)


def test_encoder_needs_a_backbone() -> None:
    # the config itself has defaults for everything (transformers builds `ContrastiveEncoderConfig()`
    # when it saves one); the encoder refuses to build a backbone from nothing
    with pytest.raises(ValueError, match="timm model name"):
        ContrastiveEncoder(ContrastiveEncoderConfig())
    with pytest.raises(ValueError, match="`text_config`"):
        ContrastiveEncoder(ContrastiveEncoderConfig(backbone_type="text"))


def test_config_defaults_and_save_round_trip(tmp_path) -> None:
    default = ContrastiveEncoderConfig()
    assert default.backbone is None and default.backbone_type == "timm"
    config = ContrastiveEncoderConfig(backbone="resnet18", projection_dim=8, backbone_kwargs={"drop_rate": 0.1})
    config.save_pretrained(tmp_path)
    loaded = ContrastiveEncoderConfig.from_pretrained(tmp_path)
    assert (loaded.backbone, loaded.projection_dim, loaded.backbone_kwargs) == ("resnet18", 8, {"drop_rate": 0.1})


# ----------------------------------------------------------------------------------------------
# Vision forward
# ----------------------------------------------------------------------------------------------


def test_vision_forward_outputs(vision: ContrastiveEncoder, images: torch.Tensor) -> None:
    out = vision(pixel_values=images)
    assert isinstance(out, ContrastiveEncoderOutput)
    assert vision.config.backbone_type == "timm" and vision.embedding_dim == 96 and vision.tokenizer is None
    assert out.embeddings.shape == (4, 96) and out.projections.shape == (4, 16) and out.logits.shape == (4, 3)
    assert out.feature_maps is None
    torch.testing.assert_close(out.projections.norm(dim=-1), torch.ones(4))
    # embeddings are the timm backbone's pooled features; logits the task head on them
    torch.testing.assert_close(out.embeddings, vision.backbone(images))
    torch.testing.assert_close(out.logits, vision.classifier(out.embeddings))
    assert vision(pixel_values=images, return_dict=False)[0].shape == (4, 96)


def test_vision_data_config_resolved_from_timm(vision: ContrastiveEncoder) -> None:
    expected = timm.data.resolve_data_config({}, model=timm.create_model(TIMM_TEST_BACKBONE))
    data_config = vision.data_config
    for key in ("input_size", "mean", "std", "interpolation", "crop_pct"):
        assert data_config[key] == expected[key]
    assert isinstance(data_config["input_size"], tuple)


def test_partial_data_config_is_completed_from_timm() -> None:
    enc = tiny_timm_encoder(data_config={"input_size": [3, 32, 32]})
    assert enc.data_config["input_size"] == (3, 32, 32) and enc.data_config["mean"] == (0.5, 0.5, 0.5)


def test_unnormalised_projections_and_one_layer_head(images: torch.Tensor) -> None:
    enc = tiny_timm_encoder(normalize_projections=False, projection_layers=1, projection_dim=5).eval()
    out = enc(pixel_values=images)
    assert not torch.allclose(out.projections.norm(dim=-1), torch.ones(4))
    linear = enc.projection_head.layers
    assert len(linear) == 1
    torch.testing.assert_close(out.projections, linear[0](out.embeddings))


def test_feature_maps_in_one_pass(vision: ContrastiveEncoder, images: torch.Tensor) -> None:
    out = vision(pixel_values=images, output_feature_maps=True)
    reference = timm.create_model(TIMM_TEST_BACKBONE, num_classes=0)
    channels = [info["num_chs"] for info in reference.feature_info]
    reductions = [info["reduction"] for info in reference.feature_info]
    assert [tuple(f.shape) for f in out.feature_maps] == [
        (4, c, 32 // r, 32 // r) for c, r in zip(channels, reductions)
    ]
    torch.testing.assert_close(out.embeddings, vision(pixel_values=images).embeddings)

    enc = tiny_timm_encoder(feature_stages=[1, 3]).eval()
    maps = enc(pixel_values=images, output_feature_maps=True).feature_maps
    assert [f.shape[1] for f in maps] == [channels[1], channels[3]]


# ----------------------------------------------------------------------------------------------
# Projection head and pooling
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("norm", "norm_type"), [("batchnorm", torch.nn.BatchNorm1d), ("layernorm", torch.nn.LayerNorm), (None, None)]
)
def test_projection_head_layers(norm: str | None, norm_type: type | None) -> None:
    head = ProjectionHead(16, 24, 8, num_layers=3, norm=norm)
    linears = [m for m in head.layers if isinstance(m, torch.nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(16, 24), (24, 24), (24, 8)]
    norms = [m for m in head.layers if norm_type is not None and isinstance(m, norm_type)]
    assert len(norms) == (2 if norm else 0)
    assert all((m.bias is None) == (norm is not None) for m in linears[:-1]) and linears[-1].bias is not None
    assert head(torch.randn(5, 16)).shape == (5, 8)


def test_projection_hidden_dim_defaults_to_backbone_width(text: ContrastiveEncoder) -> None:
    assert text.config.projection_hidden_dim == 32
    assert text.projection_head.layers[0].out_features == 32


def test_projection_head_rejects_bad_sizes() -> None:
    with pytest.raises(ValueError, match="`hidden_dim`"):
        ProjectionHead(16, 0, 8)
    with pytest.raises(ValueError, match="`norm`"):
        ProjectionHead(16, 8, 8, norm="rmsnorm")


def test_mean_pool_matches_a_loop() -> None:
    hidden = torch.randn(3, 5, 4, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
    expected = torch.stack([hidden[i, : int(mask[i].sum())].mean(dim=0) for i in range(3)])
    torch.testing.assert_close(mean_pool(hidden, mask), expected)
    torch.testing.assert_close(mean_pool(hidden, None), hidden.mean(dim=1))


def test_text_forward_outputs(text: ContrastiveEncoder) -> None:
    inputs = batch(text)
    out = text(**inputs)
    assert text.config.backbone_type == "text" and text.data_config is None
    assert out.embeddings.shape == (4, 32) and out.projections.shape == (4, 16) and out.logits.shape == (4, 2)
    hidden = text.backbone(**inputs).last_hidden_state
    torch.testing.assert_close(out.embeddings, mean_pool(hidden, inputs["attention_mask"]))


def test_mean_pooling_ignores_padding(text: ContrastiveEncoder) -> None:
    alone = text(**batch(text, ["hello world"])).embeddings[0]
    padded_inputs = batch(text, ["hello world", "the dog is a dog of the man and a cat"])
    assert int(padded_inputs["attention_mask"][0].sum()) < padded_inputs["attention_mask"].shape[1]  # really padded
    padded = text(**padded_inputs).embeddings[0]
    torch.testing.assert_close(padded, alone, atol=1e-6, rtol=1e-5)
    # without the mask the padding does change the embedding: the test above can fail
    no_mask = text(input_ids=padded_inputs["input_ids"]).embeddings[0]
    assert not torch.allclose(no_mask, alone, atol=1e-4)


def test_max_pool_matches_a_loop_and_ignores_padding() -> None:
    hidden = torch.randn(3, 5, 4, generator=torch.Generator().manual_seed(0))
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 0, 0, 0, 0]])
    expected = torch.stack([hidden[i, : int(mask[i].sum())].max(dim=0).values for i in range(3)])
    assert torch.equal(max_pool(hidden, mask), expected)
    assert torch.equal(max_pool(hidden, None), hidden.max(dim=1).values)


def test_normalize_embeddings_gives_unit_embeddings() -> None:
    torch.manual_seed(0)
    plain = tiny_text_encoder().eval()
    normalized = tiny_text_encoder(normalize_embeddings=True).eval()
    normalized.load_state_dict(plain.state_dict())
    inputs = batch(plain)
    raw = plain(**inputs).embeddings
    got = normalized(**inputs).embeddings
    assert not torch.allclose(raw.norm(dim=-1), torch.ones(len(SENTENCES)), atol=1e-3)  # the test can fail
    torch.testing.assert_close(got, raw / raw.norm(dim=-1, keepdim=True))


def test_set_image_size_updates_data_config() -> None:
    enc = tiny_timm_encoder()
    assert enc.data_config["input_size"] == (3, 160, 160)  # test_resnet's default
    enc.set_image_size(32)
    assert enc.data_config["input_size"] == (3, 32, 32) and enc.config.data_config["input_size"] == [3, 32, 32]
    enc.set_image_size((24, 40))
    assert enc.data_config["input_size"] == (3, 24, 40)
    for bad in (0, -3, (32,), "32", 2.5, True):
        with pytest.raises(ValueError, match="`image_size` must be a positive int"):
            enc.set_image_size(bad)
    with pytest.raises(ValueError, match="text backbone"):
        tiny_text_encoder().set_image_size(32)
    vit = ContrastiveEncoder.from_backbone("test_vit", pretrained=False, backbone_kwargs={"img_size": 16})
    vit.set_image_size(16)
    with pytest.raises(ValueError, match=r"input size is fixed at \(16, 16\).*backbone_kwargs=\{'img_size': 32\}"):
        vit.set_image_size(32)


def test_cls_pooling_takes_the_first_token() -> None:
    enc = tiny_text_encoder(pooling="cls").eval()
    inputs = batch(enc)
    out = enc(**inputs)
    torch.testing.assert_close(out.embeddings, enc.backbone(**inputs).last_hidden_state[:, 0])


# ----------------------------------------------------------------------------------------------
# save_pretrained / from_pretrained
# ----------------------------------------------------------------------------------------------


def test_vision_round_trip(tmp_path, images: torch.Tensor) -> None:
    enc = tiny_timm_encoder(num_labels=3, backbone_kwargs={"drop_path_rate": 0.1})
    enc.train()(pixel_values=images)  # move the BatchNorm running statistics away from their init
    enc.eval()
    enc.save_pretrained(tmp_path)
    assert (tmp_path / HUB_SUBFOLDER / "model.safetensors").is_file() and (tmp_path / "config.json").is_file()
    loaded = ContrastiveEncoder.from_pretrained(tmp_path).eval()
    expected, got = (
        enc(pixel_values=images, output_feature_maps=True),
        loaded(pixel_values=images, output_feature_maps=True),
    )
    for name in ("embeddings", "projections", "logits"):
        assert torch.equal(getattr(expected, name), getattr(got, name)), name
    assert all(torch.equal(a, b) for a, b in zip(expected.feature_maps, got.feature_maps))
    # from scratch, residual blocks start full (zero_init_last=False: see backbones.create_timm_backbone)
    assert loaded.data_config == enc.data_config
    assert loaded.config.backbone_kwargs == {"drop_path_rate": 0.1, "zero_init_last": False}
    assert isinstance(AutoModel.from_pretrained(tmp_path, subfolder=HUB_SUBFOLDER), ContrastiveEncoder)


def test_text_round_trip_with_tokenizer(tmp_path) -> None:
    enc = tiny_text_encoder(tokenizer=tiny_tokenizer(tmp_path / "vocab"), projection_norm="layernorm").eval()
    enc.save_pretrained(tmp_path / "model")
    assert (tmp_path / "model" / "tokenizer_config.json").is_file()
    loaded = ContrastiveEncoder.from_pretrained(tmp_path / "model").eval()
    assert loaded.tokenizer is not None
    inputs = batch(enc)
    assert all(torch.equal(inputs[k], batch(loaded)[k]) for k in inputs)
    assert torch.equal(enc(**inputs).projections, loaded(**inputs).projections)
    assert torch.equal(enc(**inputs).embeddings, loaded(**inputs).embeddings)


def test_non_persistent_timm_buffers_survive_loading(tmp_path) -> None:
    # Swin's relative position indices are persistent=False buffers: not in the checkpoint, and left
    # uninitialised by transformers' meta-device loading unless rebuilt. A tiny Swin (every supported
    # timm has it; its `test_*` models have no such buffer before timm 1.0.31's test_coatnet).
    swin = dict(img_size=32, patch_size=4, window_size=4, embed_dim=16, depths=(1, 1), num_heads=(1, 1))
    enc = ContrastiveEncoder.from_backbone(
        "swin_tiny_patch4_window7_224", pretrained=False, projection_dim=8, backbone_kwargs=swin
    ).eval()
    non_persistent = set(dict(enc.backbone.named_buffers())) - set(enc.backbone.state_dict())
    assert non_persistent, "the test needs a backbone with persistent=False buffers"
    enc.save_pretrained(tmp_path)
    loaded = ContrastiveEncoder.from_pretrained(tmp_path).eval()
    expected = dict(enc.backbone.named_buffers())
    for name, value in loaded.backbone.named_buffers():
        assert torch.equal(value, expected[name]), name
    x = torch.randn(1, 3, 32, 32)  # Swin's attention windows fix the input size
    assert torch.equal(enc(pixel_values=x).projections, loaded(pixel_values=x).projections)


def test_from_backbone_keeps_pretrained_timm_weights(
    tmp_path, vision: ContrastiveEncoder, images: torch.Tensor
) -> None:
    export_timm(vision, tmp_path)
    for name in ("local-dir:" + str(tmp_path), str(tmp_path)):
        enc = ContrastiveEncoder.from_backbone(name, pretrained=True, projection_dim=8).eval()
        assert enc.config.backbone_architecture == TIMM_TEST_BACKBONE and enc.config.backbone_pretrained
        torch.testing.assert_close(enc(pixel_values=images).embeddings, vision(pixel_values=images).embeddings)
    scratch = ContrastiveEncoder.from_backbone(str(tmp_path), pretrained=False).eval()
    assert not torch.allclose(scratch(pixel_values=images).embeddings, vision(pixel_values=images).embeddings)


def test_from_backbone_keeps_pretrained_text_weights(tmp_path, text: ContrastiveEncoder) -> None:
    export_transformers(text, tmp_path)
    enc = ContrastiveEncoder.from_backbone(str(tmp_path), projection_dim=8, pooling="mean").eval()
    assert enc.tokenizer is not None and enc.config.text_config.hidden_size == 32
    torch.testing.assert_close(enc(**batch(enc)).embeddings, text(**batch(text)).embeddings)


def _checkpointing(enc: ContrastiveEncoder, enable: bool) -> None:
    if hasattr(enc, "activation_checkpointing_enable"):  # transformers >= 5
        enc.activation_checkpointing_enable() if enable else enc.activation_checkpointing_disable()
    else:
        enc.gradient_checkpointing_enable() if enable else enc.gradient_checkpointing_disable()


def test_activation_checkpointing_reaches_the_backbone(images: torch.Tensor) -> None:
    vision_enc, text_enc = tiny_timm_encoder(), tiny_text_encoder()
    flags = {
        "timm": lambda: vision_enc.backbone.grad_checkpointing,
        "text": lambda: text_enc.backbone.encoder.layer[0].gradient_checkpointing,
    }
    for enc, inputs in ((vision_enc, {"pixel_values": images}), (text_enc, batch(text_enc))):
        enc.eval()
        before = enc(**inputs).projections
        _checkpointing(enc, True)
        assert flags[enc.config.backbone_type]()
        torch.testing.assert_close(enc(**inputs).projections, before)
        _checkpointing(enc, False)
        assert not flags[enc.config.backbone_type]()


# ----------------------------------------------------------------------------------------------
# Errors
# ----------------------------------------------------------------------------------------------


def test_unknown_backbone_suggests_close_timm_names() -> None:
    with pytest.raises(ValueError, match=r"Unknown `backbone`='test_resnett'.*test_resnet"):
        ContrastiveEncoder.from_backbone("test_resnett", pretrained=False)


def test_missing_local_path_is_reported() -> None:
    with pytest.raises(ValueError, match="no such directory"):
        ContrastiveEncoder.from_backbone("./no/such/model")


def test_a_folder_under_home_loads_as_the_folder(tmp_path, monkeypatch, text: ContrastiveEncoder) -> None:
    # '~/x' was detected as a folder but handed to transformers unexpanded, which read it as a Hub id
    monkeypatch.setenv("HOME", str(tmp_path))
    export_transformers(text, tmp_path / "bert")
    enc = ContrastiveEncoder.from_backbone("~/bert", projection_dim=8, pooling="mean").eval()
    torch.testing.assert_close(enc(**batch(enc)).embeddings, text(**batch(text)).embeddings)


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda root: "~no_such_user_0/model", MissingPathError, "looks like a local path but no such directory"),
        (lambda root: _folder(root, {"weights.bin": "x"}), MissingPathError, r"without a config.json.*weights\.bin"),
        (lambda root: _folder(root, {"config.json": "{not json"}), InputError, "config.json cannot be read"),
        (lambda root: _folder(root, {"config.json": '{"hidden": 3}'}), InputError, "neither a timm config"),
    ],
    ids=["unknown-home", "no-config", "bad-json", "no-model-type"],
)
def test_a_folder_that_is_no_saved_model_is_named(tmp_path, make, error, message) -> None:
    # '~user' of an unknown user raised RuntimeError from Path.expanduser; a folder without a usable config.json
    # raised transformers' ValueError ("Unrecognized model") or its Hub-id OSError, naming no argument
    with pytest.raises(error, match=message) as raised:
        ContrastiveEncoder.from_backbone(make(tmp_path), pretrained=False)
    assert "`backbone`=" in str(raised.value)


def _folder(root, files: dict[str, str]) -> str:
    folder = root / "folder"
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text)
    return str(folder)


def test_text_model_rejects_pixel_values(text: ContrastiveEncoder) -> None:
    with pytest.raises(ValueError, match=r"`pixel_values` were given .* text backbone: pass `input_ids`"):
        text(pixel_values=torch.randn(1, 3, 32, 32))


def test_vision_model_rejects_input_ids(vision: ContrastiveEncoder) -> None:
    with pytest.raises(ValueError, match=r"timm vision backbone: pass images as `pixel_values`"):
        vision(input_ids=torch.ones(1, 4, dtype=torch.long))


@pytest.mark.parametrize(
    ("inputs", "match"),
    [
        ({}, "`pixel_values` of shape"),
        ({"pixel_values": torch.randn(3, 32, 32)}, r"got shape \(3, 32, 32\)"),
    ],
)
def test_vision_input_errors(vision: ContrastiveEncoder, inputs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        vision(**inputs)


@pytest.mark.parametrize(
    ("inputs", "match"),
    [
        ({}, "`input_ids` of shape"),
        ({"input_ids": torch.ones(4, dtype=torch.long)}, r"`input_ids` must have shape \(B, L\)"),
        (
            {"input_ids": torch.ones(2, 4, dtype=torch.long), "attention_mask": torch.ones(2, 5)},
            "`attention_mask` must have the shape",
        ),
        (
            {"input_ids": torch.ones(2, 4, dtype=torch.long), "output_feature_maps": True},
            "`output_feature_maps=True` needs a timm",
        ),
    ],
)
def test_text_input_errors(text: ContrastiveEncoder, inputs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        text(**inputs)


def test_head_width_must_fit_the_backbone() -> None:
    with pytest.raises(
        ValueError, match=r"`embedding_dim`=64 does not fit .* output width is 96: pass `embedding_dim=96`"
    ):
        tiny_timm_encoder(embedding_dim=64)
    with pytest.raises(ValueError, match=r"`embedding_dim`=16 does not fit .* 32"):
        tiny_text_encoder(embedding_dim=16)


def test_feature_stages_must_exist() -> None:
    with pytest.raises(ValueError, match=r"`feature_stages` \[7\] index stages"):
        tiny_timm_encoder(feature_stages=[7])


def test_backbone_kwargs_must_fit() -> None:
    with pytest.raises(ValueError, match="`backbone_kwargs`"):
        tiny_timm_encoder(backbone_kwargs={"not_an_argument": 1})


def test_factory_argument_errors(tmp_path, text: ContrastiveEncoder) -> None:
    with pytest.raises(ValueError, match="`tokenizer` was given but .* timm"):
        ContrastiveEncoder.from_backbone(TIMM_TEST_BACKBONE, pretrained=False, tokenizer=text.tokenizer)
    with pytest.raises(ValueError, match="`backbone_type` is set by `from_backbone`"):
        ContrastiveEncoder.from_backbone(TIMM_TEST_BACKBONE, pretrained=False, backbone_type="text")
    export_transformers(text, tmp_path)
    with pytest.raises(ValueError, match="`backbone_kwargs` are timm.create_model arguments"):
        ContrastiveEncoder.from_backbone(str(tmp_path), backbone_kwargs={"drop_rate": 0.1})
    with pytest.raises(ValueError, match="`text_config` must be a transformers PretrainedConfig"):
        ContrastiveEncoder.from_text_config({"model_type": "bert"})


def test_save_pretrained_points_push_to_push_to_hub(tmp_path, vision: ContrastiveEncoder) -> None:
    with pytest.raises(ValueError, match="encoder.push_to_hub"):
        vision.save_pretrained(tmp_path, push_to_hub=True)


# ----------------------------------------------------------------------------------------------
# Offline Hub
# ----------------------------------------------------------------------------------------------


@pytest.fixture()
def offline_empty_cache(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    return tmp_path


def test_pretrained_timm_weights_offline_fail_fast(offline_empty_cache) -> None:
    start = time.perf_counter()
    with pytest.raises(
        HubUnavailableError, match=r"Hub is unreachable \(HF_HUB_OFFLINE=1 is set\).*local path.*HF_HUB_OFFLINE=1"
    ) as info:
        ContrastiveEncoder.from_backbone(TIMM_TEST_BACKBONE, pretrained=True)
    assert isinstance(info.value, OSError)
    assert time.perf_counter() - start < 10.0


def test_pretrained_text_weights_offline_fail_fast(offline_empty_cache) -> None:
    start = time.perf_counter()
    with pytest.raises(
        HubUnavailableError, match="`backbone`='someone/tiny-bert': the Hugging Face Hub is unreachable"
    ):
        ContrastiveEncoder.from_backbone("someone/tiny-bert")
    assert time.perf_counter() - start < 10.0


def test_offline_misspelt_timm_name_is_still_unknown(offline_empty_cache) -> None:
    with pytest.raises(ValueError, match=r"Unknown `backbone`='resnet1888'.*resnet18"):
        ContrastiveEncoder.from_backbone("resnet1888")


def test_a_from_scratch_resnet_sees_the_whole_image() -> None:
    # timm's zero_init_last makes a random ResNet a function of the top-left 8x8 corner at 32 px (every
    # block starts as its 1x1 stride-2 shortcut); from-scratch encoders start from full residual blocks.
    torch.manual_seed(0)
    encoder = ContrastiveEncoder.from_backbone(
        "resnet18", pretrained=False, projection_dim=8
    ).eval()  # random weights, offline
    assert encoder.config.backbone_kwargs.get("zero_init_last") is False
    x = torch.rand(2, 3, 32, 32)
    y = x.clone()
    y[:, :, 8:, 8:] = torch.rand_like(y[:, :, 8:, 8:])  # the same top-left corner, another image elsewhere
    with torch.no_grad():
        assert (encoder(pixel_values=x).embeddings - encoder(pixel_values=y).embeddings).abs().max() > 1e-3
    rebuilt = ContrastiveEncoder(encoder.config)  # the saved config rebuilds the same architecture
    assert rebuilt.config.backbone_kwargs == encoder.config.backbone_kwargs
