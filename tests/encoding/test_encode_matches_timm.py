"""``encode`` on PIL images preprocesses exactly as timm's own evaluation transform does.

The reference is timm itself: ``timm.data.create_transform(**resolve_data_config(model=...))``,
which resizes the PIL image with PIL. Random images of several sizes and PIL modes, every
``crop_mode`` (``hypothesis``, bounded).
"""

from __future__ import annotations

import numpy as np
import timm
import torch
from _tiny import tiny_timm_encoder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from hf_contrast.data.decode import convert_image_mode
from hf_contrast.views import eval_transform_from_data_config

#: float32 rounding of the same arithmetic (uint8 / 255, then normalise) in two orders.
TOLERANCE = 2e-6

_MODES = ("RGB", "L", "RGBA", "P", "I;16")


def _image(seed: int, height: int, width: int, mode: str) -> Image.Image:
    rng = np.random.default_rng(seed)
    if mode == "I;16":
        return Image.fromarray(rng.integers(0, 65536, (height, width), dtype=np.uint16))
    channels = {"RGB": 3, "RGBA": 4}.get(mode, 1)
    array = (
        rng.integers(0, 256, (height, width, channels), dtype=np.uint8).squeeze(-1)
        if channels == 1
        else (rng.integers(0, 256, (height, width, channels), dtype=np.uint8))
    )
    image = Image.fromarray(array)
    return image.convert("P") if mode == "P" else image


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**16),
    height=st.integers(5, 90),
    width=st.integers(5, 90),
    mode=st.sampled_from(_MODES),
    side=st.sampled_from([(16, 16), (24, 32), (32, 24)]),
    crop_pct=st.sampled_from([0.8, 0.875, 0.95, 1.0]),
    crop_mode=st.sampled_from(["center", "squash", "border"]),
    interpolation=st.sampled_from(["bilinear", "bicubic", "nearest"]),
)
def test_eval_transform_equals_timms_on_pil_images(
    seed, height, width, mode, side, crop_pct, crop_mode, interpolation
) -> None:
    config = {
        "input_size": (3, *side),
        "mean": (0.485, 0.456, 0.406),
        "std": (0.229, 0.224, 0.225),
        "crop_pct": crop_pct,
        "crop_mode": crop_mode,
        "interpolation": interpolation,
    }
    image = _image(seed, height, width, mode)
    expected = timm.data.create_transform(**config)(convert_image_mode(image, 3))  # timm takes RGB images
    got = eval_transform_from_data_config(config)(image)
    assert got.shape == expected.shape == (3, *side)
    assert (got - expected).abs().max().item() <= TOLERANCE


def test_encode_on_pil_images_equals_timm_on_its_eval_transform() -> None:
    """The encoder's vectors equal its backbone on timm's own transform (not only a cosine >= 0.9999)."""
    torch.manual_seed(0)
    encoder = tiny_timm_encoder().eval()
    encoder.set_image_size(24)
    transform = timm.data.create_transform(**timm.data.resolve_data_config(encoder.data_config))
    images = [_image(i, h, w, "RGB") for i, (h, w) in enumerate([(28, 28), (64, 40), (17, 90)])]
    with torch.no_grad():
        expected = encoder.backbone(torch.stack([transform(image) for image in images]))
    torch.testing.assert_close(torch.from_numpy(encoder.encode(images)), expected, atol=1e-5, rtol=1e-5)
