"""The small-image stem (issue 28): a timm ResNet's 3x3 stride-1 first convolution and no max-pool, as the
small-image papers train 32-px images; built, saved, reloaded, carded, loaded outside hf_contrast as the card
says, and offered (with a one-line notice) by the image examples."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import re
import runpy
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import timm
import torch
from _tiny import TIMM_TEST_BACKBONE
from PIL import Image

from hf_contrast.errors import InputError
from hf_contrast.evaluation import ProbeEvaluator
from hf_contrast.hub import generate_model_card, get_model_card_data
from hf_contrast.models import ContrastiveEncoder, ContrastiveEncoderConfig
from hf_contrast.models.stems import SMALL_IMAGE_STEM, has_small_image_stem
from hf_contrast.training import notice_small_image_stem

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _small(backbone: str = TIMM_TEST_BACKBONE, **options: Any) -> ContrastiveEncoder:
    torch.manual_seed(0)
    encoder = ContrastiveEncoder.from_backbone(
        backbone, pretrained=False, small_image_stem=True, projection_dim=8, **options
    )
    encoder.set_image_size(32)
    return encoder.eval()


def _images(n: int = 3) -> torch.Tensor:
    return torch.randn(n, 3, 32, 32, generator=torch.Generator().manual_seed(1))


def _stem_output(backbone: torch.nn.Module, pixels: torch.Tensor) -> torch.Tensor:
    """``(B, C, H', W')``: the map after a timm ResNet's stem (conv, norm, activation, pool)."""
    return backbone.maxpool(backbone.act1(backbone.bn1(backbone.conv1(pixels))))


# ----------------------------------------------------------------------------------------------
# The stem
# ----------------------------------------------------------------------------------------------


def test_resnet18_gets_a_3x3_stride_1_conv_no_max_pool_and_a_32x32_map_after_the_stem() -> None:
    encoder = _small("resnet18")
    conv = encoder.backbone.conv1
    assert isinstance(conv, torch.nn.Conv2d) and conv.bias is None
    assert (conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding) == (
        3, 64, (3, 3), (1, 1), (1, 1),
    )  # fmt: skip
    assert isinstance(encoder.backbone.maxpool, torch.nn.Identity)
    with torch.no_grad():
        assert _stem_output(encoder.backbone, _images(2)).shape == (2, 64, 32, 32)
        plain = ContrastiveEncoder.from_backbone("resnet18", pretrained=False).eval()
        assert _stem_output(plain.backbone, _images(2)).shape == (2, 64, 8, 8)  # timm's ImageNet stem
        maps = encoder(pixel_values=_images(2), output_feature_maps=True).feature_maps
    assert [m.shape[-1] for m in maps] == [32, 32, 16, 8, 4]
    assert [info["reduction"] for info in encoder.backbone.feature_info] == [1, 1, 2, 4, 8]


def test_a_deep_stem_resnet_becomes_one_3x3_conv_keeping_its_channels() -> None:
    encoder = _small()  # test_resnet: a deep stem (three 3x3 convs, the first stride 2) of 32 channels
    conv = encoder.backbone.conv1
    assert isinstance(conv, torch.nn.Conv2d) and (conv.in_channels, conv.out_channels) == (3, 32)
    assert has_small_image_stem(encoder.backbone)
    with torch.no_grad():
        assert _stem_output(encoder.backbone, _images(1)).shape == (1, 32, 32, 32)
        assert encoder(pixel_values=_images(2)).projections.shape == (2, 8)


def test_other_families_text_and_non_bools_are_refused_naming_the_argument() -> None:
    with pytest.raises(InputError, match=r"small_image_stem.*test_vit.*ResNet family"):
        ContrastiveEncoder.from_backbone("test_vit", pretrained=False, small_image_stem=True)
    with pytest.raises(InputError, match="small_image_stem.*text backbone"):
        ContrastiveEncoderConfig(backbone="bert", backbone_type="text", small_image_stem=True)
    with pytest.raises(InputError, match="small_image_stem"):
        ContrastiveEncoder.from_backbone(TIMM_TEST_BACKBONE, pretrained=False, small_image_stem="yes")


# ----------------------------------------------------------------------------------------------
# Save, reload, older saves, other sources
# ----------------------------------------------------------------------------------------------


def test_save_and_from_pretrained_rebuild_the_stem_with_equal_outputs(tmp_path: Path) -> None:
    encoder = _small()
    encoder.save_pretrained(tmp_path / "small")
    config = json.loads((tmp_path / "small" / "hf_contrast" / "config.json").read_text())
    assert config["small_image_stem"] is True
    loaded = ContrastiveEncoder.from_pretrained(tmp_path / "small").eval()
    assert loaded.config.small_image_stem and has_small_image_stem(loaded.backbone)
    with torch.no_grad():
        expected, got = encoder(pixel_values=_images()), loaded(pixel_values=_images())
    torch.testing.assert_close(got.projections, expected.projections, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got.embeddings, expected.embeddings, atol=1e-5, rtol=1e-5)


def test_a_save_without_the_stem_has_no_key_and_loads_as_before(tmp_path: Path) -> None:
    plain = ContrastiveEncoder.from_backbone(TIMM_TEST_BACKBONE, pretrained=False, projection_dim=8)
    plain.save_pretrained(tmp_path / "plain")
    config = json.loads((tmp_path / "plain" / "hf_contrast" / "config.json").read_text())
    assert "small_image_stem" not in config  # releases that do not know the key read it silently, as before
    loaded = ContrastiveEncoder.from_pretrained(tmp_path / "plain")
    assert loaded.config.small_image_stem is False and not has_small_image_stem(loaded.backbone)


def test_from_backbone_on_a_small_stem_export_needs_the_option_and_keeps_the_weights(tmp_path: Path) -> None:
    encoder = _small()
    encoder.save_pretrained(tmp_path / "small")
    source = f"local-dir:{tmp_path / 'small'}"
    with pytest.raises(InputError, match="small_image_stem=True"):
        ContrastiveEncoder.from_backbone(source)
    again = ContrastiveEncoder.from_backbone(source, small_image_stem=True).eval()
    with torch.no_grad():
        torch.testing.assert_close(
            again(pixel_values=_images()).embeddings, encoder(pixel_values=_images()).embeddings, atol=1e-5, rtol=1e-5
        )


def test_pretrained_weights_are_kept_but_the_stems_with_a_warning(tmp_path: Path, caplog) -> None:  # noqa: ANN001
    plain = ContrastiveEncoder.from_backbone(TIMM_TEST_BACKBONE, pretrained=False)
    plain.save_pretrained(tmp_path / "plain")  # a plain timm export at the root: the "pretrained" weights
    with caplog.at_level(logging.WARNING, logger="hf_contrast"):
        encoder = ContrastiveEncoder.from_backbone(f"local-dir:{tmp_path / 'plain'}", small_image_stem=True)
    assert "fresh 3x3" in caplog.text and has_small_image_stem(encoder.backbone)
    kept = plain.backbone.state_dict()
    for name, tensor in encoder.backbone.state_dict().items():
        if not name.startswith("conv1."):
            torch.testing.assert_close(tensor, kept[name], msg=name)


def test_a_timm_instance_with_the_stem_is_detected(tmp_path: Path) -> None:
    model = timm.create_model(TIMM_TEST_BACKBONE, pretrained=False, num_classes=0)
    model.conv1 = torch.nn.Conv2d(3, 32, kernel_size=3, stride=1, padding=1, bias=False)
    model.maxpool = torch.nn.Identity()
    encoder = ContrastiveEncoder.from_backbone(model, projection_dim=8).eval()
    assert encoder.config.small_image_stem
    encoder.save_pretrained(tmp_path / "instance")
    loaded = ContrastiveEncoder.from_pretrained(tmp_path / "instance").eval()
    with torch.no_grad():
        torch.testing.assert_close(
            loaded(pixel_values=_images()).projections, encoder(pixel_values=_images()).projections
        )


# ----------------------------------------------------------------------------------------------
# The model card, and the route it documents outside hf_contrast
# ----------------------------------------------------------------------------------------------


def test_the_card_names_the_stem_and_a_plain_encoders_does_not() -> None:
    card = generate_model_card(_small("resnet18"))
    assert f"- **Stem:** {SMALL_IMAGE_STEM}" in card
    usage = card[card.index("## Usage") :]
    assert "pretrained=False)" in usage and "torch.nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1" in usage
    assert "model.maxpool = torch.nn.Identity()" in usage and 'load_file(hf_hub_download("' in usage
    plain = generate_model_card(ContrastiveEncoder.from_backbone("resnet18", pretrained=False))
    assert "small-image stem" not in plain and "pretrained=True).eval()" in plain


def test_the_cards_outside_route_gives_the_encoders_embeddings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hub_server import HubServer, use_hub_server

    encoder = _small("resnet18")
    get_model_card_data(encoder).model_id = "user/small-stem"
    encoder.save_pretrained(tmp_path / "saved")
    card = (tmp_path / "saved" / "README.md").read_text(encoding="utf-8")
    assert f"ResNet(timm 'resnet18', {SMALL_IMAGE_STEM}, " in card  # the architecture line
    timm_block = re.findall(r"```python\n(.*?)```", card, flags=re.S)[0]
    monkeypatch.chdir(tmp_path)
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8)).save("image.jpg")
    with HubServer(tmp_path / "hub") as server, use_hub_server(server.url, cache_dir=tmp_path / "cache") as refused:
        encoder.push_to_hub("user/small-stem")
        namespace: dict[str, Any] = {}
        exec(timm_block, namespace)  # noqa: S102 - the card's own code, as written
    assert refused == []
    assert tuple(namespace["data_config"]["input_size"]) == (3, 32, 32)
    pixels = namespace["transform"](Image.open(tmp_path / "image.jpg").convert("RGB")).unsqueeze(0)
    with torch.no_grad():
        expected = encoder(pixel_values=pixels).embeddings
    torch.testing.assert_close(namespace["embeddings"], expected, atol=1e-5, rtol=1e-5)
    # the same lines on a local folder, as the card says (docs/encoders.md shows this form)
    local = timm_block.replace('"hf-hub:user/small-stem"', f'"local-dir:{tmp_path / "saved"}"').replace(
        'hf_hub_download("user/small-stem", "model.safetensors")', f'"{tmp_path / "saved" / "model.safetensors"}"'
    )
    namespace = {}
    exec(local, namespace)  # noqa: S102
    torch.testing.assert_close(namespace["embeddings"], expected, atol=1e-5, rtol=1e-5)


# ----------------------------------------------------------------------------------------------
# encode() and the probes
# ----------------------------------------------------------------------------------------------


def test_encode_and_the_probe_evaluator_work_on_a_small_stem_encoder() -> None:
    encoder = _small()
    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)) for _ in range(12)]
    embeddings = encoder.encode(images, batch_size=4, convert_to_tensor=True)
    assert embeddings.shape == (12, encoder.embedding_dim) and torch.isfinite(embeddings).all()
    rows = [{"image": image, "label": i % 2} for i, image in enumerate(images)]
    out = ProbeEvaluator(rows[:8], rows[8:], knn_k=3, seed=0, batch_size=4, progress=False)(encoder)
    assert set(out) >= {"linear_probe_accuracy", "knn_accuracy"} and all(np.isfinite(v) for v in out.values())


# ----------------------------------------------------------------------------------------------
# The examples: --small_image_stem, and the one-line notice when small images meet the ImageNet stem
# ----------------------------------------------------------------------------------------------


def test_the_notice_needs_small_images_a_resnet_and_no_choice() -> None:
    plain = ContrastiveEncoder.from_backbone("resnet18", pretrained=False)
    line = notice_small_image_stem(plain, None, image_size=32)
    assert line is not None and line.startswith(
        "32-px images on resnet18's ImageNet stem (7x7 stride-2 conv + max-pool"
    )
    assert "8x8 after the stem" in line and "--small_image_stem" in line
    assert notice_small_image_stem(plain, False, image_size=32) is None  # the user chose
    assert notice_small_image_stem(plain, None, image_size=96) is None  # not small
    assert notice_small_image_stem(_small(), None, image_size=32) is None  # has it
    vit = ContrastiveEncoder.from_backbone("test_vit", pretrained=False)
    assert notice_small_image_stem(vit, None, image_size=32) is None  # another family: nothing to suggest


class _Stop(Exception):
    pass


def _parse_example(script: str, *args: str, output_dir: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, str]:
    """Run ``examples/<script>`` up to its trainer (not built): ``(the encoder it built, what it logged)``."""
    import hf_contrast.training

    built: dict[str, Any] = {}

    def stop(*_: Any, model: Any = None, **__: Any) -> None:
        built["model"] = model
        raise _Stop

    monkeypatch.setattr(hf_contrast.training, "ContrastiveTrainer", stop)
    monkeypatch.setattr(sys, "argv", [script, *args, "--output_dir", str(output_dir)])
    printed, handler = io.StringIO(), None
    handler = logging.StreamHandler(printed)
    logging.getLogger().addHandler(handler)
    levels = {name: logging.getLogger(name).level for name in ("__main__", "hf_contrast")}
    try:
        with contextlib.redirect_stdout(printed), pytest.raises(_Stop):
            runpy.run_path(str(EXAMPLES / script), run_name="__main__")
    finally:
        logging.getLogger().removeHandler(handler)
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
    return built["model"], printed.getvalue()


TINY = ["--model", TIMM_TEST_BACKBONE, "--max_train_samples", "40", "--max_eval_samples", "20"]


@pytest.mark.parametrize(
    ("script", "flags", "stem", "notice"),
    [
        ("run_care.py", [], False, True),
        ("run_care.py", ["--small_image_stem"], True, False),
        ("run_care.py", ["--small_image_stem", "false"], False, False),
        ("run_ocl.py", ["--small_image_stem"], True, False),
        ("run_simo.py", ["--small_image_stem", "true"], True, False),
        ("run_local.py", [], False, True),
    ],
)
def test_examples_pass_the_flag_and_note_small_images_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str, flags: list[str], stem: bool, notice: bool
) -> None:
    encoder, printed = _parse_example(script, *TINY, *flags, output_dir=tmp_path / "out", monkeypatch=monkeypatch)
    assert encoder.config.small_image_stem is stem and has_small_image_stem(encoder.backbone) is stem
    assert printed.count("ImageNet stem") == (1 if notice else 0), printed[-3000:]
    if notice:
        assert "32-px images on test_resnet's ImageNet stem" in printed and "pass --small_image_stem" in printed
