"""Backbone adapters: a third family registers without touching the others (one class, one registration line): it
arrives by name and by model object, trains, saves, loads, encodes and gets a card; the encoder never tests its
type."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from _tiny import tiny_text_encoder, tiny_timm_encoder
from torch import nn

from hf_contrast.models import ContrastiveEncoder, ContrastiveEncoderConfig, configuration
from hf_contrast.models.adapters import BackboneAdapter, TimmAdapter, TransformersTextAdapter, registry
from hf_contrast.models.adapters.registry import adapter_class, register_adapter

ROOT = Path(__file__).resolve().parents[2]


class _FlatAdapter(BackboneAdapter):
    """A minimal family: a linear map of flat vectors given as ``pixel_values`` ``(B, 12)``."""

    modality = "image"
    main_input_name = "pixel_values"

    @classmethod
    def encoder_from_name(cls, encoder_class, name, **options):  # noqa: ANN001, ANN206
        raise NotImplementedError

    def build(self, config, backbone):  # noqa: ANN001, ANN201
        return (backbone if backbone is not None else nn.Linear(12, 6)), 6

    def features(self, encoder, pixel_values, input_ids, attention_mask, token_type_ids, output_feature_maps):  # noqa: ANN001, ANN201
        return encoder.backbone(pixel_values), None

    def export_native(self, encoder, save_dir, state_dict):  # noqa: ANN001, ANN201
        Path(save_dir).mkdir(parents=True, exist_ok=True)
        (Path(save_dir) / "flat.json").write_text(json.dumps({"width": 6}), encoding="utf-8")


class TinyConvNet(nn.Module):
    """A user's own image network: a 3x3 convolution, global average pooling, ``(B, 3, H, W) -> (B, 8)``."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x).mean(dim=(2, 3))


class _ConvAdapter(BackboneAdapter):
    """The whole family, as a user writes it: names ``"tinyconv:<anything>"`` and :class:`TinyConvNet` objects."""

    modality = "image"
    main_input_name = "pixel_values"

    @classmethod
    def claims_name(cls, name):  # noqa: ANN001, ANN206
        return name.startswith("tinyconv:")

    @classmethod
    def claims_instance(cls, backbone):  # noqa: ANN001, ANN206
        return isinstance(backbone, TinyConvNet)

    @classmethod
    def encoder_from_name(cls, encoder_class, name, *, provenance_name, config_kwargs, **options):  # noqa: ANN001, ANN206
        config = ContrastiveEncoderConfig(backbone=provenance_name, backbone_type="tinyconv", **config_kwargs)
        return encoder_class(config)

    @classmethod
    def encoder_from_instance(cls, encoder_class, backbone, *, config_kwargs, **options):  # noqa: ANN001, ANN206
        config = ContrastiveEncoderConfig(backbone="tinyconv:given", backbone_type="tinyconv", **config_kwargs)
        return encoder_class(config, backbone=backbone)

    def build(self, config, backbone):  # noqa: ANN001, ANN201
        config.data_config = {
            "input_size": (3, 16, 16),
            "mean": (0.5,) * 3,
            "std": (0.5,) * 3,
            **(config.data_config or {}),
        }
        return (backbone if backbone is not None else TinyConvNet()), 8

    def features(self, encoder, pixel_values, input_ids, attention_mask, token_type_ids, output_feature_maps):  # noqa: ANN001, ANN201
        return encoder.backbone(pixel_values), None

    def export_native(self, encoder, save_dir, state_dict):  # noqa: ANN001, ANN201
        Path(save_dir).mkdir(parents=True, exist_ok=True)


def _registered(monkeypatch: pytest.MonkeyPatch, name: str, adapter: type[BackboneAdapter]) -> str:
    """``register_adapter(name, adapter)`` for one test: the registry and the config's family names are restored."""
    monkeypatch.setattr(registry, "_ADAPTERS", dict(registry._ADAPTERS))
    monkeypatch.setattr(configuration, "BACKBONE_TYPES", configuration.BACKBONE_TYPES)
    register_adapter(name, adapter)
    return name


@pytest.fixture
def conv_family(monkeypatch: pytest.MonkeyPatch) -> str:
    return _registered(monkeypatch, "tinyconv", _ConvAdapter)


@pytest.fixture
def flat_family(monkeypatch: pytest.MonkeyPatch) -> str:
    return _registered(monkeypatch, "flat", _FlatAdapter)


def test_a_third_family_is_one_registration(flat_family: str, tmp_path: Path) -> None:
    torch.manual_seed(0)
    config = ContrastiveEncoderConfig(backbone="flat-net", backbone_type=flat_family, projection_dim=4)
    encoder = ContrastiveEncoder(config).eval()
    assert isinstance(encoder.adapter, _FlatAdapter) and encoder.input_modality == "image"
    x = torch.randn(3, 12)
    out = encoder(pixel_values=x)
    assert out.embeddings.shape == (3, 6) and out.projections.shape == (3, 4)
    assert torch.allclose(out.embeddings, encoder.backbone(x))
    assert encoder.data_config is None
    assert "adapter" not in "".join(encoder.state_dict())  # the adapter holds no tensors
    encoder.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "flat.json").read_text()) == {"width": 6}  # the family's own export
    loaded = ContrastiveEncoder.from_pretrained(tmp_path).eval()
    assert isinstance(loaded.adapter, _FlatAdapter)
    assert torch.equal(loaded(pixel_values=x).projections, out.projections)


@pytest.mark.filterwarnings("ignore::hf_contrast.evaluation.RepresentationCollapseWarning")
def test_a_family_arrives_by_name_and_by_object_trains_saves_loads_and_gets_a_card(
    conv_family: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from distributed_scripts.trainer_utils import image_dataset, training_args

    from hf_contrast.training import SimCLRTrainer

    torch.manual_seed(0)
    by_name = ContrastiveEncoder.from_backbone("tinyconv:net", pretrained=False, projection_dim=4)
    assert isinstance(by_name.adapter, _ConvAdapter) and by_name.config.backbone == "tinyconv:net"
    assert (
        type(ContrastiveEncoder.from_backbone("test_resnet", pretrained=False).adapter) is TimmAdapter
    )  # not claimed
    net = TinyConvNet().eval()
    by_object = ContrastiveEncoder.from_backbone(net, projection_dim=4)
    assert by_object.backbone is net and not by_object.training  # its weights, shared; its mode, as a whole
    with pytest.raises(ValueError, match="`backbone_kwargs` apply when `backbone` is a name"):
        ContrastiveEncoder.from_backbone(TinyConvNet(), backbone_kwargs={"x": 1})

    trainer = SimCLRTrainer(
        model=TinyConvNet(), args=training_args(tmp_path / "run"), train_dataset=image_dataset(16, 16)
    )
    assert isinstance(trainer.model.adapter, _ConvAdapter)  # a trainer's model= is wrapped the same way
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    trainer.train()
    assert any(not torch.equal(before[k], v) for k, v in trainer.model.state_dict().items())
    with caplog.at_level("WARNING"):
        trainer.save_model()
    assert "not written" not in caplog.text
    card = (tmp_path / "run" / "README.md").read_text(encoding="utf-8")
    assert "`tinyconv:given` backbone in its own family's format" in card
    assert "ContrastiveEncoder.from_pretrained(" in card and "(image)" in card
    assert "**Image size:** 16 x 16 (3 channels)" in card and "**Normalisation:** mean (0.5, 0.5, 0.5)" in card

    loaded = ContrastiveEncoder.from_pretrained(tmp_path / "run").eval()
    trained = trainer.model.eval()
    x = torch.randn(3, 3, 16, 16)
    assert torch.allclose(loaded(pixel_values=x).projections, trained(pixel_values=x).projections, atol=1e-6)
    images = [image_dataset(2, 16)[i]["image"] for i in range(2)]
    assert np.allclose(
        loaded.encode(images), trained.encode(images), atol=1e-6
    )  # images, as a timm encoder takes them
    loaded.set_image_size(24)
    assert loaded.data_config["input_size"] == (3, 24, 24)


def test_a_text_family_refuses_an_image_size() -> None:
    with pytest.raises(ValueError, match=r"`set_image_size` is for image encoders; .* is a text backbone"):
        tiny_text_encoder().set_image_size(32)


def test_registry_refuses_a_taken_name_and_non_adapters(flat_family: str) -> None:
    with pytest.raises(ValueError, match="already served by TimmAdapter"):
        register_adapter("timm", _FlatAdapter)
    with pytest.raises(ValueError, match="BackboneAdapter subclass"):
        register_adapter("other", object)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="`backbone_type` must be one of"):
        adapter_class("nope")


@pytest.mark.parametrize("name", [5, "", None, ("timm",)])
def test_registry_refuses_a_family_name_that_is_not_a_non_empty_string(name: object) -> None:
    before = configuration.BACKBONE_TYPES, dict(registry._ADAPTERS)
    with pytest.raises(ValueError, match=r"`backbone_type` must be a non-empty string"):
        register_adapter(name, TimmAdapter)  # type: ignore[arg-type]
    assert (configuration.BACKBONE_TYPES, registry._ADAPTERS) == before  # nothing registered


def test_built_in_families() -> None:
    assert adapter_class("timm") is TimmAdapter and adapter_class("text") is TransformersTextAdapter
    timm_encoder, text_encoder = tiny_timm_encoder(), tiny_text_encoder()
    assert (timm_encoder.input_modality, timm_encoder.main_input_name) == ("image", "pixel_values")
    assert (text_encoder.input_modality, text_encoder.main_input_name) == ("text", "input_ids")
    assert not any(key.startswith("adapter") for key in text_encoder.state_dict())


def _type_tests(path: Path) -> list[int]:
    """Lines comparing ``<...>.backbone_type`` (``==`` / ``!=`` / ``in``) in ``path``."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(isinstance(o, ast.Attribute) and o.attr == "backbone_type" for o in operands):
                lines.append(node.lineno)
    return lines


@pytest.mark.parametrize("module", ["modeling.py", "statistics.py", "encode.py", "inputs.py", "loading.py"])
def test_the_encoder_never_tests_its_backbone_type(module: str) -> None:
    assert _type_tests(ROOT / "hf_contrast" / "models" / module) == []
    assert "backbone_type ==" not in (ROOT / "hf_contrast" / "models" / module).read_text(encoding="utf-8")
