"""Backbone adapters: a third family registers without touching the others; the encoder never tests its type."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import torch
from _tiny import tiny_text_encoder, tiny_timm_encoder
from torch import nn

from hf_contrast.models import ContrastiveEncoder, ContrastiveEncoderConfig, configuration
from hf_contrast.models.adapters import BackboneAdapter, TimmAdapter, TransformersTextAdapter, registry
from hf_contrast.models.adapters.registry import adapter_class, register_adapter

ROOT = Path(__file__).resolve().parents[1]


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


@pytest.fixture
def flat_family(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(registry, "_ADAPTERS", dict(registry._ADAPTERS))
    monkeypatch.setattr(configuration, "BACKBONE_TYPES", configuration.BACKBONE_TYPES)
    register_adapter("flat", _FlatAdapter)
    return "flat"


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
