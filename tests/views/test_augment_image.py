"""Image views: SimCLR transform, two-view wrapper, CARE chunked views, LOCAL paired views."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.transforms import v2

from hf_contrast.views import (
    BatchedSimCLRViews,
    ChunkedAugmentation,
    PairedTransform,
    TwoViewTransform,
    default_blur_kernel,
    eval_transform,
    eval_transform_from_data_config,
    paired_transform,
    raw_image_transform,
    simclr_transform,
    simclr_transform_from_data_config,
)

MEAN, STD = (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)
DATA_CONFIG = {"input_size": (3, 24, 24), "mean": MEAN, "std": STD, "interpolation": "bicubic", "crop_pct": 0.75}


def _batch(b: int = 8, side: int = 32, seed: int = 0) -> torch.Tensor:
    return torch.rand(b, 3, side, side, generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------- simclr / eval transforms


@pytest.mark.parametrize(
    "image",
    [
        Image.fromarray(np.random.default_rng(0).integers(0, 256, (40, 36, 3), dtype=np.uint8)),
        Image.fromarray(np.random.default_rng(0).integers(0, 256, (40, 36), dtype=np.uint8)),  # grayscale PIL
        np.random.default_rng(0).integers(0, 256, (40, 36, 3), dtype=np.uint8),
        torch.randint(0, 256, (3, 40, 36), dtype=torch.uint8),
        torch.rand(3, 40, 36),
    ],
    ids=["pil-rgb", "pil-gray", "numpy", "uint8", "float"],
)
def test_simclr_transform_accepts_every_input_kind(image: object) -> None:
    out = simclr_transform(16, MEAN, STD)(image)
    assert type(out) is torch.Tensor and out.dtype == torch.float32 and out.shape == (3, 16, 16)


def test_simclr_transform_normalises_with_mean_and_std() -> None:
    # all augmentations off except a full-image crop: output = (x - mean) / std
    off = {"hflip_p": 0, "jitter_p": 0, "grayscale_p": 0, "blur_p": 0}
    t = simclr_transform(8, MEAN, STD, scale=(1.0, 1.0), ratio=(1.0, 1.0), **off)
    x = torch.rand(3, 8, 8)
    expected = (x - torch.tensor(MEAN)[:, None, None]) / torch.tensor(STD)[:, None, None]
    torch.testing.assert_close(t(x), expected)


def test_simclr_transform_composition_matches_simclr_recipe() -> None:
    t = simclr_transform(32, MEAN, STD)
    names = [type(s).__name__ for s in t.transforms]
    assert names == [
        "ConvertImageMode",
        "ToImage",
        "RGB",
        "RandomResizedCrop",
        "Lambda",
        "RandomHorizontalFlip",
        "RandomApply",
        "RandomGrayscale",
        "RandomApply",
        "ToDtype",
        "Normalize",
        "ToPureTensor",
    ]  # Lambda: float images clamped to [0, 1] after resampling, before the colour steps
    jitter_apply, blur_apply = t.transforms[6], t.transforms[8]
    assert jitter_apply.p == 0.8 and blur_apply.p == 0.5 and t.transforms[7].p == 0.2
    jitter = jitter_apply.transforms[0]
    assert jitter.brightness == (0.6, 1.4) and jitter.hue == (-0.1, 0.1)  # ColorJitter(0.4, 0.4, 0.4, 0.1)
    assert blur_apply.transforms[0].kernel_size == (3, 3)
    assert "GaussianBlur" not in repr(simclr_transform(32, MEAN, STD, blur_p=0))


def test_default_blur_kernel_is_odd_tenth_of_side() -> None:
    assert [default_blur_kernel(s) for s in (8, 32, 96, 224, (64, 128))] == [3, 3, 9, 23, 7]


def test_simclr_transform_random_and_seedable() -> None:
    t, x = simclr_transform(16, MEAN, STD), torch.rand(3, 24, 24)
    torch.manual_seed(3)
    a = t(x)
    torch.manual_seed(3)
    assert torch.equal(a, t(x))
    assert not torch.equal(t(x), t(x))


def test_from_data_config_uses_size_mean_std_and_interpolation() -> None:
    t = simclr_transform_from_data_config(DATA_CONFIG, blur_p=0)
    assert t(torch.rand(3, 40, 40)).shape == (3, 24, 24)
    assert t.transforms[3].interpolation == v2.InterpolationMode.BICUBIC
    e = eval_transform_from_data_config(DATA_CONFIG)
    resize, crop = e.transforms[3].transforms[:2]  # timm's own eval geometry
    assert (type(resize).__name__, type(crop).__name__) == ("Resize", "CenterCrop")
    assert resize.size == 32 and str(resize.interpolation.value) == "bicubic"  # 24 / crop_pct 0.75


def test_eval_transform_is_deterministic_center_crop() -> None:
    x = torch.rand(3, 10, 10)
    out = eval_transform(8, MEAN, STD, crop_pct=0.8)(x)  # resize 10 -> 10 (no-op), center 8x8
    expected = (x[:, 1:9, 1:9] - torch.tensor(MEAN)[:, None, None]) / torch.tensor(STD)[:, None, None]
    torch.testing.assert_close(out, expected)


def test_two_view_transform_draws_independent_views() -> None:
    views = TwoViewTransform(simclr_transform(16, MEAN, STD))
    v1, v2_ = views(torch.rand(3, 24, 24))
    assert v1.shape == v2_.shape == (3, 16, 16) and not torch.equal(v1, v2_)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"image_size": 0}, "`image_size` must be positive"),
        ({"image_size": "big"}, "`image_size` must be an int or a pair"),
        ({"std": (0.2, 0.0, 0.3)}, "`std` must be positive"),
        ({"mean": (0.5, 0.5)}, "`mean` and `std` must have one value per channel"),
        ({"scale": (0.9, 0.1)}, "`scale` must be a pair"),
        ({"jitter_p": 1.5}, r"`jitter_p` must be in \[0, 1\]"),
        ({"blur_kernel": 4}, "`blur_kernel` must be a positive odd int"),
        ({"jitter_strength": -1.0}, "`jitter_strength` must be >= 0"),
        ({"interpolation": "cubic-ish"}, "`interpolation` must be one of"),
        # found by the property suite (tests/views/test_properties_views.py): each failed inside torch / torchvision
        ({"mean": True}, "`mean` must be a sequence of numbers, one per channel"),  # TypeError: not iterable
        ({"mean": (0.5, float("nan"), 0.5)}, r"`mean\[1\]` must be finite"),  # NaN views
        ({"std": (1e-320,) * 3}, "far from the \\[0, 1\\] scale"),  # infinite views
        ({"image_size": 10**30}, "`image_size` must be at most 65536 pixels"),  # OverflowError in the resize
        ({"blur_sigma": (1e-297, 1e-297)}, "`blur_sigma` must start at 0.001"),  # torchvision: sigma 0.0
        ({"image_size": 1, "blur_p": 1.0}, "needs an output side above 1"),  # RuntimeError at the first blur
        ({"jitter_strength": 1e308}, "`jitter_strength` must be at most 10"),  # RuntimeError at the first jitter
        ({"ratio": (1 / 64, 1 / 64)}, r"`ratio` must lie within \[0.1, 10\]"),  # an empty crop: RuntimeError
    ],
)
def test_simclr_transform_rejects_bad_arguments(kwargs: dict, match: str) -> None:
    args = {"image_size": 16, "mean": MEAN, "std": STD} | kwargs
    with pytest.raises(ValueError, match=match):
        simclr_transform(**args)


def test_eval_transform_rejects_bad_crop_pct() -> None:
    with pytest.raises(ValueError, match="`crop_pct` must be in"):
        eval_transform(16, MEAN, STD, crop_pct=1.5)
    with pytest.raises(ValueError, match=r"`crop_pct`=1e-150 resizes the image to 1.6e\+151 pixels"):
        eval_transform(16, MEAN, STD, crop_pct=1e-150)  # OverflowError in timm's resize


def test_a_mean_of_another_channel_count_is_named_when_the_image_comes() -> None:
    two = eval_transform(16, (0.5, 0.5), (0.25, 0.25))  # a 2-channel model's: built, as for tensors of 2 channels
    assert two(torch.rand(2, 20, 20)).shape == (2, 16, 16)
    with pytest.raises(ValueError, match=r"the image has 3 channel\(s\) but `mean` and `std` have 2 value\(s\)"):
        two(Image.new("RGB", (20, 20)))  # torch's "size of tensor a (3) must match the size of tensor b (2)"


def test_raw_transform_and_blur_kernel_check_the_size() -> None:
    for call in (lambda: raw_image_transform(None), lambda: default_blur_kernel(None)):  # TypeError: not iterable
        with pytest.raises(ValueError, match="`image_size` must be an int or a pair"):
            call()
    with pytest.raises(ValueError, match="`n_channels` must be an integer >= 1"):
        raw_image_transform(16, 0)
    assert raw_image_transform((12, 10))(Image.new("RGB", (20, 20))).shape == (3, 12, 10)


@pytest.mark.parametrize(
    ("data_config", "match"),
    [
        (None, "`data_config` must be a mapping"),  # TypeError: argument of type 'NoneType' is not iterable
        ({"input_size": (3, 16.5, 16), "mean": MEAN, "std": STD}, r"must be \(C, H, W\) integers"),  # was int(16.5)
        ({"input_size": 16, "mean": MEAN, "std": STD}, r"must be \(C, H, W\) integers"),
        ({"input_size": (3, 0, 16), "mean": MEAN, "std": STD}, r"`data_config\['input_size'\]` must be positive"),
    ],
)
def test_from_data_config_rejects_bad_configs(data_config: object, match: str) -> None:
    for make in (
        simclr_transform_from_data_config,
        eval_transform_from_data_config,
        BatchedSimCLRViews.from_data_config,
    ):
        with pytest.raises(ValueError, match=match):
            make(data_config)


def test_from_data_config_takes_numpy_sizes() -> None:
    config = {"input_size": np.array([3, 12, 12]), "mean": np.array(MEAN), "std": torch.tensor(STD)}
    assert eval_transform_from_data_config(config)(Image.new("RGB", (20, 20))).shape == (3, 12, 12)


def test_from_data_config_rejects_missing_keys() -> None:
    with pytest.raises(ValueError, match="missing \\['mean'\\]"):
        simclr_transform_from_data_config({"input_size": (3, 8, 8), "std": STD})


def test_two_view_transform_rejects_non_callable() -> None:
    with pytest.raises(ValueError, match="`transform` must be callable"):
        TwoViewTransform(3)  # type: ignore[arg-type]


# ---------------------------------------------------------------- CARE chunked views


def _chunks(x: torch.Tensor, n: int) -> list[torch.Tensor]:
    return list(x.split(x.shape[0] // n))


def test_chunked_identical_images_share_within_chunk_and_differ_across() -> None:
    """Same image everywhere: views are equal inside a chunk, and differ between chunks/views."""
    image = torch.rand(3, 32, 32, generator=torch.Generator().manual_seed(1))
    images = image.expand(12, -1, -1, -1).contiguous()
    aug = ChunkedAugmentation.simclr(4, 16, MEAN, STD, generator=torch.Generator().manual_seed(0))
    v1, v2_ = aug(images)
    assert v1.shape == v2_.shape == (12, 3, 16, 16)
    for view in (v1, v2_):
        for chunk in _chunks(view, 4):
            assert torch.equal(chunk, chunk[:1].expand_as(chunk))  # one augmentation per chunk
        firsts = [c[0] for c in _chunks(view, 4)]
        assert all(not torch.equal(firsts[i], firsts[j]) for i in range(4) for j in range(i + 1, 4))  # fresh
    assert all(not torch.equal(a[0], b[0]) for a, b in zip(_chunks(v1, 4), _chunks(v2_, 4)))  # ã1_c != ã2_c


def test_chunked_parameters_recoverable_from_flip_and_brightness() -> None:
    """A transform with recoverable parameters: flip (yes/no) and a brightness factor.

    Distinct images per sample: the per-sample ratio out/in is the factor, identical within a
    chunk and different across chunks; flips are detected by comparing with the flipped input.
    """
    images = torch.rand(16, 3, 8, 8, generator=torch.Generator().manual_seed(2)) * 0.5 + 0.1  # < 0.6: no clipping
    transform = v2.Compose([v2.RandomHorizontalFlip(0.5), v2.ColorJitter(brightness=0.5)])
    aug = ChunkedAugmentation(4, transform, generator=torch.Generator().manual_seed(5))
    v1, _ = aug(images)
    flipped = torch.tensor(
        [torch.allclose(v1[i] / v1[i].mean(), images[i].flip(-1) / images[i].mean(), atol=1e-5) for i in range(16)]
    )
    aligned = torch.where(flipped[:, None, None, None], images.flip(-1), images)
    ratio = (v1 / aligned).flatten(1)  # brightness multiplies every pixel by the factor
    assert torch.allclose(ratio, ratio[:, :1], atol=1e-5)
    factors = ratio[:, 0].view(4, 4)
    flips = flipped.view(4, 4)
    assert torch.allclose(factors, factors[:, :1], atol=1e-5) and torch.equal(flips, flips[:, :1].expand_as(flips))
    assert (factors[:, None, 0] - factors[None, :, 0]).abs().add(torch.eye(4)).min() > 1e-3  # fresh per chunk


def test_chunked_generator_reproducible_and_leaves_global_rng_alone() -> None:
    images = _batch()
    aug_a = ChunkedAugmentation.simclr(2, 16, MEAN, STD, generator=torch.Generator().manual_seed(7))
    aug_b = ChunkedAugmentation.simclr(2, 16, MEAN, STD, generator=torch.Generator().manual_seed(7))
    state = torch.get_rng_state()
    out_a = aug_a(images)
    assert torch.equal(torch.get_rng_state(), state)
    out_b = aug_b(images)
    assert torch.equal(out_a[0], out_b[0]) and torch.equal(out_a[1], out_b[1])
    assert not torch.equal(aug_a(images)[0], out_a[0])  # next call: new draws


def test_chunked_global_seed_reproducible_without_generator() -> None:
    aug, images = ChunkedAugmentation.simclr(2, 16, MEAN, STD), _batch()
    torch.manual_seed(11)
    first = aug(images)
    torch.manual_seed(11)
    second = aug(images)
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])


def test_chunked_matches_transform_called_per_chunk() -> None:
    """The views are exactly the transform applied to each chunk (ã1 then ã2), in order."""
    images, transform = _batch(), simclr_transform(16, MEAN, STD)
    torch.manual_seed(4)
    v1, v2_ = ChunkedAugmentation(2, transform)(images)
    torch.manual_seed(4)
    expected = [transform(c) for c in _chunks(images, 2) for _ in range(2)]
    torch.testing.assert_close(v1, torch.cat(expected[0::2]), rtol=0, atol=0)
    torch.testing.assert_close(v2_, torch.cat(expected[1::2]), rtol=0, atol=0)


def test_chunked_from_data_config_uint8_and_device_preserved() -> None:
    aug = ChunkedAugmentation.from_data_config(2, DATA_CONFIG)
    v1, v2_ = aug((_batch(4) * 255).to(torch.uint8))
    assert v1.shape == v2_.shape == (4, 3, 24, 24) and v1.dtype == torch.float32 and v1.device == torch.device("cpu")


def test_chunked_single_split_is_one_augmentation_for_the_batch() -> None:
    image = torch.rand(3, 16, 16)
    v1, _ = ChunkedAugmentation.simclr(1, 8, MEAN, STD)(image.expand(4, -1, -1, -1))
    assert torch.equal(v1, v1[:1].expand_as(v1))


@pytest.mark.parametrize(
    ("images", "match"),
    [
        (torch.rand(6, 3, 16, 16), "batch size 6 must be a positive multiple of `n_splits`=4"),
        (torch.rand(3, 16, 16), "`images` must be a tensor of shape \\(B, C, H, W\\), got \\(3, 16, 16\\)"),
        (torch.zeros(4, 3, 16, 16, dtype=torch.int64), "`images` must be float in \\[0, 1\\] or uint8"),
    ],
)
def test_chunked_rejects_bad_batches(images: torch.Tensor, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ChunkedAugmentation.simclr(4, 8, MEAN, STD)(images)


def test_chunked_rejects_bad_n_splits() -> None:
    with pytest.raises(ValueError, match="`n_splits` must be an integer >= 1, got 0"):
        ChunkedAugmentation(0, simclr_transform(8, MEAN, STD))


def test_chunked_rejects_variable_output_size() -> None:
    sizes = iter([4, 6])
    aug = ChunkedAugmentation(2, lambda chunk: v2.functional.resize(chunk, [next(sizes, 6)] * 2))
    with pytest.raises(ValueError, match="one output size for every chunk"):
        aug(_batch(4, 8))


# ---------------------------------------------------------------- LOCAL paired views


def test_paired_identical_pair_gives_identical_outputs_and_calls_differ() -> None:
    t = paired_transform(16, MEAN, STD, degrees=20.0, vflip_p=0.5)
    x = Image.fromarray(np.random.default_rng(1).integers(0, 256, (24, 24, 3), dtype=np.uint8))
    outs = [t(x, x) for _ in range(4)]
    for pre, post in outs:
        assert pre.shape == (3, 16, 16) and torch.equal(pre, post)
    assert not torch.equal(outs[0][0], outs[1][0])


def test_paired_geometry_shared_for_different_images() -> None:
    """post = pre + constant: a shared geometric transform keeps post' - pre' at that constant."""
    t = PairedTransform(v2.Compose([v2.RandomResizedCrop(12, antialias=True), v2.RandomHorizontalFlip()]))
    pre = torch.rand(3, 20, 20) * 0.5
    for _ in range(5):
        a, b = t(pre, pre + 0.25)
        torch.testing.assert_close(b - a, torch.full_like(a, 0.25))


def test_paired_photometric_is_per_image() -> None:
    t = PairedTransform(v2.Identity(), v2.ColorJitter(brightness=0.5))
    x = torch.rand(3, 8, 8) * 0.5
    a, b = t(x, x)
    assert not torch.equal(a, b)


def test_paired_rejects_size_mismatch() -> None:
    with pytest.raises(ValueError, match="`pre` and `post` must have the same size"):
        PairedTransform(v2.Identity())(torch.rand(3, 8, 8), torch.rand(3, 9, 8))


def test_paired_transform_rejects_negative_degrees() -> None:
    with pytest.raises(ValueError, match="`degrees` must be >= 0"):
        paired_transform(16, MEAN, STD, degrees=-1.0)
    with pytest.raises(ValueError, match="`degrees` must be a number, got None"):  # TypeError: '<' with None
        paired_transform(16, MEAN, STD, degrees=None)
    with pytest.raises(ValueError, match="`degrees` must be at most 180"):
        paired_transform(16, MEAN, STD, degrees=1e300)
    with pytest.raises(ValueError, match="`jitter_strength` must be at most 10"):  # RuntimeError at the first pair
        paired_transform(16, MEAN, STD, jitter_strength=1e308)


def test_a_probability_given_as_text_is_named() -> None:
    with pytest.raises(ValueError, match=r"`hflip_p` must be a number, got '0\.5'"):
        simclr_transform(32, hflip_p="0.5", mean=MEAN, std=STD)
