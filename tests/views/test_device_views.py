"""Device views (hf_contrast.views.batched_*): equality with torchvision per sample, distributions, seeding."""

from __future__ import annotations

import math

import pytest
import torch
from scipy import stats
from torchvision.transforms import InterpolationMode, v2
from torchvision.transforms.v2 import functional as F

from hf_contrast.views import ChunkedAugmentation, SimCLRRecipe, simclr_transform
from hf_contrast.views import batched_ops as ops
from hf_contrast.views.batched_params import (
    ViewParams,
    jitter_ranges,
    sample_bernoulli,
    sample_color_jitter,
    sample_resized_crop,
    sample_uniform,
)
from hf_contrast.views.batched_simclr import BatchedSimCLRViews

# Max abs difference on [0, 1] float images between a batched op and torchvision's functional op
# applied to each sample alone (float32 rounding only: the same formulas, evaluated in another order).
ATOL = 1e-5
MEAN, STD = (0.5, 0.4, 0.3), (0.25, 0.2, 0.3)

JITTER_FNS = (F.adjust_brightness, F.adjust_contrast, F.adjust_saturation, F.adjust_hue)


def _images(b: int = 6, c: int = 3, h: int = 20, w: int = 24, seed: int = 0) -> torch.Tensor:
    return torch.rand(b, c, h, w, generator=torch.Generator().manual_seed(seed))


def _uint8_images(b: int = 8, size: int = 20, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 256, (b, 3, size, size), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


@pytest.fixture
def views() -> BatchedSimCLRViews:
    """The default recipe at 16 px, seeded."""
    return BatchedSimCLRViews(16, MEAN, STD, seed=0)


@pytest.fixture
def uint8_batch() -> torch.Tensor:
    """8 random ``uint8`` images ``(8, 3, 20, 20)``."""
    return _uint8_images()


def _max_diff(batched: torch.Tensor, per_sample: list[torch.Tensor]) -> float:
    return max((batched[i] - ref).abs().max().item() for i, ref in enumerate(per_sample))


# --------------------------------------------------------------------------------------- equality


@pytest.mark.parametrize("antialias", [True, False])
def test_resized_crop_and_flip_equal_torchvision_per_sample(antialias):
    x = _images(6, h=40, w=36)
    # full image, up-scaled windows, down-scaled windows, a 1-pixel crop, thin crops
    boxes = torch.tensor([[0, 0, 40, 36], [3, 5, 20, 10], [10, 2, 7, 30], [0, 0, 1, 1], [5, 5, 35, 31], [1, 2, 39, 8]])
    flip = torch.tensor([False, True, False, True, True, False])
    out = ops.resized_crop(x, boxes.float(), (24, 28), flip=flip, antialias=antialias)
    refs = []
    for i in range(6):
        top, left, h, w = boxes[i].tolist()
        ref = F.resized_crop(x[i], top, left, h, w, [24, 28], InterpolationMode.BILINEAR, antialias=antialias)
        refs.append(F.hflip(ref) if flip[i] else ref)
    assert out.shape == (6, 3, 24, 28)
    assert _max_diff(out, refs) < ATOL


def test_antialias_matters_when_down_scaling():
    x = _images(1, h=64, w=64)
    box = torch.tensor([[0.0, 0.0, 64.0, 64.0]])
    smooth = ops.resized_crop(x, box, (16, 16), antialias=True)
    plain = ops.resized_crop(x, box, (16, 16), antialias=False)
    assert (smooth - plain).abs().max() > 0.05  # the two modes are really different filters


@pytest.mark.parametrize("channels", [3, 1])
def test_colour_ops_equal_torchvision_per_sample(channels):
    x = _images(6, c=channels)
    factor = torch.tensor([0.0, 0.6, 1.0, 1.4, 0.9, 2.5])
    hue = torch.tensor([-0.5, -0.1, 0.0, 0.05, 0.3, 0.5])
    for batched, reference, values in (
        (ops.adjust_brightness, F.adjust_brightness, factor),
        (ops.adjust_contrast, F.adjust_contrast, factor),
        (ops.adjust_saturation, F.adjust_saturation, factor),
        (ops.adjust_hue, F.adjust_hue, hue),
    ):
        out = batched(x, values)
        refs = [reference(x[i], values[i].item()) for i in range(6)]
        assert _max_diff(out, refs) < ATOL, batched.__name__


def test_hue_of_gray_and_saturated_pixels():
    # grey pixels (max == min), pure primaries and ties between channels: the HSV branches
    x = torch.tensor(
        [[0.5, 0.5, 0.5], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 1.0, 0.0], [0.2, 0.7, 0.7]]
    )
    x = x.reshape(6, 3, 1, 1).expand(6, 3, 2, 2).contiguous()
    hue = torch.tensor([0.3, 0.1, -0.2, 0.5, -0.5, 0.25])
    refs = [F.adjust_hue(x[i], hue[i].item()) for i in range(6)]
    assert _max_diff(ops.adjust_hue(x, hue), refs) < ATOL


def test_grayscale_and_solarize_equal_torchvision():
    x = _images(4)
    gray = ops.rgb_to_grayscale(x).expand_as(x)
    assert _max_diff(gray, [F.rgb_to_grayscale(x[i], num_output_channels=3) for i in range(4)]) < ATOL
    apply = torch.tensor([True, False, True, False])
    out = ops.solarize(x, apply, threshold=0.4)
    refs = [F.solarize(x[i], threshold=0.4) if apply[i] else x[i] for i in range(4)]
    assert _max_diff(out, refs) == 0.0


@pytest.mark.parametrize("size", [(20, 24), (5, 9)])
def test_gaussian_blur_equals_torchvision_per_sample(size):
    x = _images(5, h=size[0], w=size[1])
    sigma = torch.tensor([0.1, 0.7, 2.0, 0.0, 5.0])  # 0: not blurred
    out = ops.gaussian_blur(x, sigma, kernel_size=9)
    refs = [F.gaussian_blur(x[i], [9, 9], [sigma[i].item()] * 2) if sigma[i] > 0 else x[i] for i in range(5)]
    assert _max_diff(out, refs) < ATOL
    assert torch.equal(out[3], x[3])


def _torchvision_jitter(image, factors, order):
    for op in order.tolist():
        image = JITTER_FNS[op](image, factors[op].item())
    return image


def test_color_jitter_per_sample_order_equals_torchvision():
    x = _images(48)
    factors, order = sample_color_jitter(
        48, jitter_ranges(0.8, 0.8, 0.8, 0.2), p=0.8, generator=torch.Generator().manual_seed(1)
    )
    assert len({tuple(o) for o in order.tolist()}) > 10  # many different orders in one batch
    refs = [_torchvision_jitter(x[i], factors[i], order[i]) for i in range(48)]
    generic = ops.color_jitter(x, factors.float(), order)
    assert _max_diff(generic, refs) < ATOL
    not_applied = (factors == torch.tensor([1.0, 1.0, 1.0, 0.0], dtype=factors.dtype)).all(1)
    assert not_applied.any() and torch.equal(generic[not_applied], x[not_applied])
    # the grouped path (batch sorted by hue round, slices known on the CPU) gives the same images
    perm, counts = ops.hue_groups(factors, order)
    grouped = ops.color_jitter(x[perm], factors[perm].float(), order[perm], counts)
    assert torch.equal(grouped, generic[perm])


def _torchvision_view(image, params, i: int, size: int, kernel: int, threshold: float = 0.5):  # noqa: ANN001, ANN202
    """Sample ``i``'s view made by torchvision's functional ops, one at a time, with the drawn parameters."""
    top, left, h, w = (int(v) for v in params.boxes[i].tolist())
    y = F.resized_crop(image, top, left, h, w, [size, size], InterpolationMode.BILINEAR, antialias=True)
    y = F.hflip(y) if params.flip[i] else y
    y = _torchvision_jitter(y, params.jitter_factors[i], params.jitter_order[i])
    y = F.rgb_to_grayscale(y, num_output_channels=3) if params.grayscale[i] else y
    y = F.gaussian_blur(y, [kernel, kernel], [params.blur_sigma[i].item()] * 2) if params.blur_sigma[i] > 0 else y
    return F.solarize(y, threshold) if params.solarize[i] else y


def test_whole_recipe_equals_torchvision_ops_composed_per_sample():
    views = BatchedSimCLRViews(16, MEAN, STD, blur_kernel=5, solarize_p=0.5, seed=3)
    x = _images(32, h=24, w=20)
    params = views.sample(32, (24, 20), views.generator(0))
    out = views.apply(x, params)
    refs = [F.normalize(_torchvision_view(x[i], params, i, 16, 5), list(MEAN), list(STD)) for i in range(32)]
    assert _max_diff(out, refs) < 1e-4  # 1e-5 on [0, 1], divided by std >= 0.2


def test_uint8_views_stay_close_to_torchvisions_uint8_ops():
    """torchvision rounds to uint8 after every op; the device views keep float32 throughout."""
    views = BatchedSimCLRViews(16, (0.0,) * 3, (1.0,) * 3, blur_kernel=5)
    x = _uint8_images(16, size=24)
    params = views.sample(16, (24, 24), torch.Generator().manual_seed(0))
    out = views.apply(x, params)
    refs = [F.to_dtype(_torchvision_view(x[i], params, i, 16, 5), torch.float32, scale=True) for i in range(16)]
    diff = torch.stack([(out[i] - refs[i]).abs() for i in range(16)])
    assert diff.mean() < 2 / 255 and diff.max() < 12 / 255  # measured: 1.3 / 255 and 6 / 255


# ----------------------------------------------------------------------------------- distributions

N_DRAWS = 3000


def _ks(a, b) -> float:
    return stats.ks_2samp(torch.as_tensor(a).double().numpy(), torch.as_tensor(b).double().numpy()).pvalue


@pytest.mark.parametrize(
    ("size", "scale", "ratio"),
    [
        ((24, 40), (0.08, 1.0), (3 / 4, 4 / 3)),
        ((32, 32), (0.6, 1.0), (0.5, 2.0)),
        ((10, 40), (0.9, 1.0), (3 / 4, 4 / 3)),
    ],
)
def test_resized_crop_boxes_follow_torchvisions_distribution(size, scale, ratio):
    """The last case fails all 10 tries often: the central-crop fallback must be drawn as often."""
    height, width = size
    torch.manual_seed(0)
    transform = v2.RandomResizedCrop(8, scale=scale, ratio=ratio)
    image = torch.zeros(3, height, width)
    theirs = torch.tensor(
        [
            [p["top"], p["left"], p["height"], p["width"]]
            for p in (transform.make_params([image]) for _ in range(N_DRAWS))
        ],
        dtype=torch.float64,
    )
    ours = sample_resized_crop(N_DRAWS, height, width, scale, ratio, torch.Generator().manual_seed(0))
    assert ours.shape == (N_DRAWS, 4)
    top, left, h, w = ours.unbind(1)
    assert (h >= 1).all() and (w >= 1).all() and (top >= 0).all() and (left >= 0).all()
    assert (top + h <= height).all() and (left + w <= width).all()
    assert torch.equal(ours, ours.round())
    for name, column in (
        ("area", lambda b: b[:, 2] * b[:, 3] / (height * width)),
        ("aspect", lambda b: b[:, 3] / b[:, 2]),
        ("top", lambda b: b[:, 0] / height),
        ("left", lambda b: b[:, 1] / width),
    ):
        assert _ks(column(ours), column(theirs)) > 0.001, name


def test_jitter_factors_and_order_follow_torchvisions_distribution():
    torch.manual_seed(0)
    jitter = v2.ColorJitter(0.4, 0.4, 0.4, 0.1)
    image = torch.zeros(3, 4, 4)
    drawn = [jitter.make_params([image]) for _ in range(N_DRAWS)]
    ranges = jitter_ranges(0.4, 0.4, 0.4, 0.1)
    assert ranges == (jitter.brightness, jitter.contrast, jitter.saturation, jitter.hue)
    factors, order = sample_color_jitter(N_DRAWS, ranges, p=1.0, generator=torch.Generator().manual_seed(0))
    for k, key in enumerate(("brightness_factor", "contrast_factor", "saturation_factor", "hue_factor")):
        assert _ks(factors[:, k], [d[key] for d in drawn]) > 0.001, key
    theirs = torch.stack([d["fn_idx"] for d in drawn])
    assert (order.sort(dim=1).values == torch.arange(4)).all()  # permutations
    for position in range(4):
        for op in range(4):
            for sample in (order, theirs):  # each op at each position with probability 1/4
                share = (sample[:, position] == op).double().mean().item()
                assert abs(share - 0.25) < 5 * math.sqrt(0.25 * 0.75 / N_DRAWS)
    # not applied with probability 1 - p: exactly the identity
    factors, _ = sample_color_jitter(N_DRAWS, ranges, p=0.8, generator=torch.Generator().manual_seed(1))
    identity = (factors == torch.tensor([1.0, 1.0, 1.0, 0.0], dtype=factors.dtype)).all(1).double().mean().item()
    assert abs(identity - 0.2) < 5 * math.sqrt(0.2 * 0.8 / N_DRAWS)


def test_probabilities_and_blur_sigma_follow_torchvision():
    generator = torch.Generator().manual_seed(0)
    for p in (0.0, 0.2, 0.5, 0.8, 1.0):
        share = sample_bernoulli(N_DRAWS, p, generator).double().mean().item()
        assert abs(share - p) <= 5 * math.sqrt(p * (1 - p) / N_DRAWS)
    torch.manual_seed(0)
    blur = v2.GaussianBlur(5, sigma=(0.1, 2.0))
    theirs = [blur.make_params([torch.zeros(3, 8, 8)])["sigma"][0] for _ in range(N_DRAWS)]
    assert _ks(sample_uniform(N_DRAWS, 0.1, 2.0, generator), theirs) > 0.001
    # the recipe: blur applied with blur_p, flips with hflip_p, grayscale with grayscale_p
    views = BatchedSimCLRViews(16, MEAN, STD, hflip_p=0.3, grayscale_p=0.2, blur_p=0.5)
    params = views.sample(N_DRAWS, (16, 16), generator)
    for value, p in (
        (params.flip, 0.3),
        (params.grayscale, 0.2),
        (params.blur_sigma > 0, 0.5),
        (params.solarize, 0.0),
    ):
        assert abs(value.double().mean().item() - p) <= 5 * math.sqrt(p * (1 - p) / N_DRAWS) + 1e-12


def test_distribution_test_detects_a_wrong_sampler():
    """Control: the KS check above rejects a crop sampler with the wrong scale range."""
    torch.manual_seed(0)
    transform = v2.RandomResizedCrop(8, scale=(0.08, 1.0))
    image = torch.zeros(3, 32, 32)
    theirs = [p["height"] * p["width"] / 1024 for p in (transform.make_params([image]) for _ in range(N_DRAWS))]
    wrong = sample_resized_crop(N_DRAWS, 32, 32, (0.2, 1.0), (3 / 4, 4 / 3), torch.Generator().manual_seed(0))
    assert _ks(wrong[:, 2] * wrong[:, 3] / 1024, theirs) < 1e-6


# ------------------------------------------------------------------------------ seeding and chunks


def test_same_seed_and_batch_index_give_bit_identical_views(views, uint8_batch):
    x = uint8_batch
    g = views.generator(5)
    first = (views(x, g), views(x, g), views(x, g, chunk_size=4))
    for index in range(5):  # a run that drew other batches first, as before a resume
        views(x, views.generator(index))
    g = views.generator(5)
    again = (views(x, g), views(x, g), views(x, g, chunk_size=4))
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert not torch.equal(first[0], first[1])  # successive calls draw new parameters
    assert not torch.equal(first[0], views(x, views.generator(6)))
    other_seed = BatchedSimCLRViews(16, MEAN, STD, seed=8)
    assert not torch.equal(first[0], other_seed(x, other_seed.generator(5)))
    assert not torch.equal(first[0], views(x, views.generator(5, process_index=1)))  # ranks draw apart
    assert not torch.equal(first[0], views(x, views.generator(5, stream=1)))  # evaluation batches draw apart


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("channels", [3, 1])
def test_compiled_views_equal_the_eager_views(backend, channels):
    """``compile=`` (what ``torch_compile=True`` turns on) makes the same views as the eager pass, up to float
    rounding: per-sample, chunk-shared and several views in one call, a second batch size, 1 and 3 channels."""
    mean, std = MEAN[:channels], STD[:channels]
    eager = BatchedSimCLRViews(16, mean, std, seed=0)
    compiled = BatchedSimCLRViews(16, mean, std, seed=0, compile={"backend": backend})
    for batch in (8, 12):  # a new batch size compiles again (or runs the dynamic graph), the same views
        x = _uint8_images(b=batch)[:, :channels]
        for chunks in ([None, None], [4, 4, None, None], [None]):
            want = eager.many(x, eager.generator(batch), chunks)
            got = compiled.many(x, compiled.generator(batch), chunks)
            assert len(got) == len(want)
            for a, b in zip(got, want):
                torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    assert "compile={'backend'" in repr(compiled)


@pytest.mark.parametrize("channels", [3, 1])
def test_the_pass_a_cuda_graph_replays_makes_the_eager_views(channels):
    """On CUDA the views of small images are replayed from a CUDA graph of ``_static_pass``: every parameter unpacked
    on the device and the hue rotation computed for every row (no host-side grouping, whose sizes change per
    batch). That pass, run here without a graph, makes the eager views: per-sample, chunk-shared, several in one
    call (``repeats``). The graph itself is tested on a GPU (tests/views/test_cuda_graphs.py)."""
    mean, std = MEAN[:channels], STD[:channels]
    views = BatchedSimCLRViews(16, mean, std, seed=0, blur_p=0.5, solarize_p=0.5)
    x = _uint8_images(b=12)[:, :channels]
    for chunks in ([None], [None, None], [4, 4, None, None]):
        g = views.generator(len(chunks))
        params = ViewParams.cat([views._draw(x, g, chunk) for chunk in chunks])
        repeats = len(chunks)
        want = views.apply(x, params, repeats=repeats)
        got = views._static_pass(x, params.packed_on("cpu"), repeats, *views._normalisation(x.device))
        torch.testing.assert_close(got, want, atol=1e-6, rtol=0)


def test_views_are_normalised_float32_of_the_right_shape(uint8_batch):
    views = BatchedSimCLRViews((12, 10), MEAN, STD, seed=0)
    x = uint8_batch[:4]
    out = views(x, views.generator(0))
    assert out.dtype == torch.float32 and out.shape == (4, 3, 12, 10) and torch.isfinite(out).all()
    lo = (0 - torch.tensor(MEAN)) / torch.tensor(STD)
    hi = (1 - torch.tensor(MEAN)) / torch.tensor(STD)
    per_channel = out.transpose(0, 1).reshape(3, -1)
    assert (per_channel.min(1).values >= lo - 1e-5).all() and (per_channel.max(1).values <= hi + 1e-5).all()
    # uint8 and the same images as [0, 1] floats give the same views
    assert torch.allclose(views(x.float() / 255, views.generator(0)), out, atol=1e-5)


def test_chunk_shared_rows_share_parameters_and_chunks_differ(views, uint8_batch):
    x = uint8_batch[:1].expand(12, -1, -1, -1)  # identical rows: identical parameters give identical views
    out = views(x, views.generator(0), chunk_size=4)
    for chunk in out.split(4):
        assert all(torch.equal(chunk[0], row) for row in chunk[1:])
    assert not torch.equal(out[0], out[4]) and not torch.equal(out[4], out[8])
    per_sample = views(x, views.generator(0))
    assert not all(torch.equal(per_sample[0], row) for row in per_sample[1:4])
    # the chunk parameters are the per-sample draw of B / m sets, each repeated m times
    params = views.sample(3, (20, 20), views.generator(1)).repeat_interleave(4)
    assert torch.equal(views(x, views.generator(1), chunk_size=4), views.apply(x, params))


def test_params_round_trip_through_one_packed_copy():
    views = BatchedSimCLRViews(16, MEAN, STD, solarize_p=0.5)
    params = views.sample(50, (20, 20), torch.Generator().manual_seed(0))
    moved = params.to("cpu")
    assert isinstance(moved, ViewParams) and len(moved) == 50
    packed = params.packed_on("cpu")
    assert packed.shape == (50, 16) and packed.dtype == torch.float32
    assert all(torch.equal(getattr(ViewParams.unpack(packed), f), getattr(moved, f)) for f in vars(moved))
    assert torch.equal(moved.boxes, params.boxes.float()) and torch.equal(moved.jitter_order, params.jitter_order)
    for name in ("flip", "grayscale", "solarize"):
        assert torch.equal(getattr(moved, name), getattr(params, name))
    assert torch.allclose(moved.jitter_factors, params.jitter_factors.float())


def test_bad_inputs_raise_clear_errors(views):
    with pytest.raises(ValueError, match="channels"):
        views(torch.zeros(2, 1, 16, 16, dtype=torch.uint8))
    with pytest.raises(ValueError, match="uint8 or float"):
        views(torch.zeros(2, 3, 16, 16, dtype=torch.int32))
    with pytest.raises(ValueError, match="shape"):
        views(torch.zeros(3, 16, 16))
    with pytest.raises(ValueError, match="chunk_size"):
        views(torch.zeros(6, 3, 16, 16), chunk_size=4)
    with pytest.raises(ValueError, match="seed"):
        BatchedSimCLRViews(16, MEAN, STD).generator(0)
    with pytest.raises(ValueError, match="blur_kernel"):
        BatchedSimCLRViews(16, MEAN, STD, blur_kernel=4)
    with pytest.raises(ValueError, match="blur_kernel"):
        BatchedSimCLRViews(4, MEAN, STD, blur_kernel=9)
    with pytest.raises(ValueError, match="hflip_p"):
        BatchedSimCLRViews(16, MEAN, STD, hflip_p=1.5)
    with pytest.raises(ValueError, match="mean"):
        BatchedSimCLRViews(16, MEAN, STD[:2])
    with pytest.raises(ValueError, match="hue"):
        jitter_ranges(0.4, 0.4, 0.4, 0.6)
    with pytest.raises(ValueError, match="`cuda_graphs` must be True or False, got 'no'"):
        BatchedSimCLRViews(16, MEAN, STD, cuda_graphs="no")
    # found by tests/views/test_properties_views.py
    with pytest.raises(ValueError, match="`antialias` must be True or False, got 'no'"):  # was read as True
        BatchedSimCLRViews(16, MEAN, STD, antialias="no")
    with pytest.raises(ValueError, match="`seed` must be an integer >= 0 or None"):  # failed at the first batch
        BatchedSimCLRViews(16, MEAN, STD, seed=-1)
    with pytest.raises(ValueError, match="`compile` must be None or a dict of torch.compile arguments"):
        BatchedSimCLRViews(16, MEAN, STD, compile="max-autotune")  # ValueError from dict()
    with pytest.raises(ValueError, match="the unknown key\\(s\\) 'fast'"):
        BatchedSimCLRViews(16, MEAN, STD, compile={"fast": True})  # TypeError from torch.compile
    with pytest.raises(ValueError, match="`generator` must be a CPU torch.Generator or None, got 0"):
        ChunkedAugmentation(2, lambda chunk: chunk, generator=0)  # AttributeError at build


def test_views_inside_a_bf16_autocast_are_computed_in_float32(views, uint8_batch):
    """The trainer's step may run under autocast; the views' matmuls must not drop to bf16."""
    x = uint8_batch
    plain = views(x, views.generator(0))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        inside = views(x, views.generator(0))
    assert inside.dtype == torch.float32 and torch.equal(inside, plain)


def test_from_data_config_sizes_and_normalises_like_the_config(uint8_batch):
    config = {"input_size": (3, 12, 14), "mean": MEAN, "std": STD, "interpolation": "bicubic"}
    views = BatchedSimCLRViews.from_data_config(config, seed=1, blur_kernel=3)
    assert views(uint8_batch, views.generator(0)).shape == (8, 3, 12, 14)
    with pytest.raises(ValueError, match="input_size"):
        BatchedSimCLRViews.from_data_config({"mean": MEAN, "std": STD})


# ------------------------------------------------------------------------------ one recipe for both pipelines


def _torchvision_recipe(transform) -> dict:  # noqa: ANN001
    """The random parameters a ``simclr_transform`` pipeline draws with, read from its steps."""
    found: dict = {
        "hflip_p": 0.0,
        "jitter": None,
        "jitter_p": 0.0,
        "grayscale_p": 0.0,
        "blur_p": 0.0,
        "solarize_p": 0.0,
    }
    for step in transform.transforms:
        if isinstance(step, v2.RandomResizedCrop):
            found["scale"], found["ratio"] = tuple(step.scale), tuple(step.ratio)
        elif isinstance(step, v2.RandomHorizontalFlip):
            found["hflip_p"] = step.p
        elif isinstance(step, v2.RandomGrayscale):
            found["grayscale_p"] = step.p
        elif isinstance(step, v2.RandomSolarize):
            found["solarize_p"], found["solarize_threshold"] = step.p, step.threshold
        elif isinstance(step, v2.RandomApply):
            (inner,) = step.transforms
            if isinstance(inner, v2.ColorJitter):
                found["jitter"] = (inner.brightness, inner.contrast, inner.saturation, inner.hue)
                found["jitter_p"] = step.p
            elif isinstance(inner, v2.GaussianBlur):
                found["blur_p"], found["blur_kernel"], found["blur_sigma"] = (
                    step.p,
                    inner.kernel_size[0],
                    tuple(inner.sigma),
                )
    return found


def _device_recipe(views: BatchedSimCLRViews) -> dict:
    r = views.recipe
    found = {
        "scale": r.scale, "ratio": r.ratio, "hflip_p": r.hflip_p,
        "jitter": views.jitter_ranges if views.jitter_p else None, "jitter_p": views.jitter_p,
        "grayscale_p": r.grayscale_p, "blur_p": r.blur_p, "solarize_p": r.solarize_p,
    }  # fmt: skip
    if r.blur_p:
        found["blur_kernel"], found["blur_sigma"] = views.blur_kernel, r.blur_sigma
    if r.solarize_p:
        found["solarize_threshold"] = r.solarize_threshold
    return found


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"scale": (0.2, 1.0), "hflip_p": 0.0, "jitter_strength": 1.0, "blur_p": 0.0},
        {"solarize_p": 0.2, "blur_kernel": 5},
    ],
)
def test_per_sample_and_device_views_read_one_recipe(changes):
    """Defaults and changes reach both pipelines alike.

    The torchvision steps draw with the device views' parameters.
    """
    assert BatchedSimCLRViews(16, MEAN, STD).recipe == SimCLRRecipe()
    per_sample = _torchvision_recipe(simclr_transform(16, MEAN, STD, **changes))
    device = _device_recipe(BatchedSimCLRViews(16, MEAN, STD, **changes))
    assert per_sample.keys() == device.keys()
    for key, value in per_sample.items():
        flat = torch.tensor(value).flatten().tolist() if value is not None else None
        assert flat == (
            pytest.approx(torch.tensor(device[key]).flatten().tolist()) if device[key] is not None else None
        ), key
    if not changes:  # SimCLR / CARE's published values
        assert torch.allclose(
            torch.tensor(per_sample["jitter"]), torch.tensor([[0.6, 1.4], [0.6, 1.4], [0.6, 1.4], [-0.1, 0.1]])
        )
        assert (per_sample["jitter_p"], per_sample["grayscale_p"], per_sample["blur_p"]) == (0.8, 0.2, 0.5)


def test_recipe_errors_name_the_field():
    with pytest.raises(ValueError, match="Unknown SimCLR recipe parameter.*'blur'"):
        simclr_transform(16, MEAN, STD, blur=0.5)
    for bad, match in (({"jitter_strength": -1.0}, "jitter_strength"), ({"solarize_p": 2.0}, "solarize_p"),
                       ({"blur_kernel": 4}, "blur_kernel"), ({"scale": (0.9, 0.1)}, "scale")):  # fmt: skip
        with pytest.raises(ValueError, match=match):
            SimCLRRecipe.of(**bad)
        with pytest.raises(ValueError, match=match):
            BatchedSimCLRViews(16, MEAN, STD, **bad)


def test_a_batch_generators_parameters_are_fixed_values():
    """The parameters drawn from a seed are part of every run's result (and of an exact resume): a change to how
    they are computed must leave them equal. Values drawn by the sampler as first released."""
    views = BatchedSimCLRViews(32, (0.5,) * 3, (0.25,) * 3, seed=0)
    p = views.sample(3, (32, 32), views.generator(5))
    assert p.boxes.tolist() == [[19.0, 9.0, 13.0, 17.0], [13.0, 7.0, 13.0, 12.0], [1.0, 8.0, 19.0, 17.0]]
    assert p.flip.tolist() == [True, False, False] and p.grayscale.tolist() == p.solarize.tolist() == [False] * 3
    assert p.jitter_order.tolist() == [[1, 0, 3, 2], [1, 2, 0, 3], [2, 0, 3, 1]]
    assert p.jitter_factors.tolist() == [
        [1.0, 1.0, 1.0, 0.0],
        [0.7730208633100024, 1.319103028130733, 1.1680558291901892, -0.09230444238849543],
        [1.0, 1.0, 1.0, 0.0],
    ]
    assert p.blur_sigma.tolist() == [0.0, 1.8957092014639023, 0.2649698326738706]
    assert p.blur_sigma.dtype == p.boxes.dtype == p.jitter_factors.dtype == torch.float64


@pytest.mark.parametrize(
    ("mode", "expected"),
    [(None, None), ("default", "default"), ("reduce-overhead", None),
     ("max-autotune", "max-autotune-no-cudagraphs"), ("max-autotune-no-cudagraphs", "max-autotune-no-cudagraphs")],
)  # fmt: skip
def test_the_compiled_view_pass_leaves_out_torch_compiles_cuda_graphs(monkeypatch, mode, expected):
    """With ``--torch_compile_mode reduce-overhead`` the view pass's output, owned by torch.compile's CUDA graphs,
    was overwritten while the compiled model still read it (a crash at the second step on a GPU): the pass compiles
    with the same mode less its CUDA graphs; the views keep the requested settings in their repr."""
    seen = {}
    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: seen.update(kwargs) or fn)
    views = BatchedSimCLRViews(8, MEAN, STD, seed=0, compile={"backend": "inductor", "mode": mode})
    assert seen == {"backend": "inductor", "mode": expected}
    assert views.compile == {"backend": "inductor", "mode": mode}
