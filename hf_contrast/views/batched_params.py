"""Per-sample parameters of the SimCLR/BYOL views, drawn with torchvision's distributions, vectorised.

Every sampler draws a fixed number of values from an explicit CPU ``torch.Generator`` whatever the
outcome, so the parameters depend only on the generator's seed and the batch size (resume stays
exact). The draws reproduce the *distributions* of ``torchvision.transforms.v2`` (tested with
two-sample KS and binomial tests in ``tests/views/test_device_views.py``), not its random stream:

* :func:`sample_resized_crop` -- ``v2.RandomResizedCrop.make_params``: up to 10 tries of an area
  fraction ``U(scale)`` and a log-uniform aspect ratio, ``w = round(sqrt(A r))``, ``h =
  round(sqrt(A / r))``, the first try that fits wins and its corner is uniform; no fit: the
  central crop clipped to the ratio range.
* :func:`sample_color_jitter` -- ``v2.RandomApply([v2.ColorJitter(...)], p)``: a uniform random
  order of the four adjustments and uniform factors per sample, identity where not applied.
* :func:`sample_bernoulli`, :func:`sample_uniform` -- the ``p`` of ``RandomHorizontalFlip``,
  ``RandomGrayscale``, ``RandomApply``, ``RandomSolarize``; ``GaussianBlur``'s sigma range.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace

import torch
from torch import Tensor

from hf_contrast.errors import InputError

__all__ = [
    "ViewParams",
    "sample_bernoulli",
    "sample_uniform",
    "sample_resized_crop",
    "sample_color_jitter",
    "jitter_ranges",
]

MAX_CROP_TRIES = 10
"""Tries of ``RandomResizedCrop`` before its central-crop fallback (torchvision's constant)."""

IDENTITY_JITTER = (1.0, 1.0, 1.0, 0.0)
"""Brightness, contrast, saturation, hue factors that leave an image unchanged."""


def _check_generator(generator: torch.Generator | None) -> None:
    if generator is not None and generator.device.type != "cpu":
        raise InputError(
            f"`generator` must be a CPU torch.Generator (parameters are drawn on the CPU, then moved), "
            f"got one on {generator.device}."
        )


def sample_bernoulli(n: int, p: float, generator: torch.Generator | None = None) -> Tensor:
    """``n`` independent ``u < p`` draws (torchvision's ``torch.rand(1) < p`` apply test). Shape: ``(n,)``, bool."""
    _check_generator(generator)
    return torch.rand(n, generator=generator, dtype=torch.float64) < p


def sample_uniform(n: int, low: float, high: float, generator: torch.Generator | None = None) -> Tensor:
    """``n`` draws of ``U(low, high)``. Shape: ``(n,)``, float64."""
    _check_generator(generator)
    return low + (high - low) * torch.rand(n, generator=generator, dtype=torch.float64)


def sample_resized_crop(
    n: int,
    height: int,
    width: int,
    scale: tuple[float, float],
    ratio: tuple[float, float],
    generator: torch.Generator | None = None,
) -> Tensor:
    """Crop boxes distributed as ``v2.RandomResizedCrop(scale=scale, ratio=ratio).make_params``.

    Args:
        n: Number of boxes.
        height: Input image height.
        width: Input image width.
        scale: Area fraction range ``(lo, hi)``.
        ratio: Aspect ratio (width / height) range ``(lo, hi)``, drawn log-uniformly.
        generator: CPU generator (``None``: torch's global one).

    Returns:
        ``(top, left, height, width)`` per box, integer values. Shape: ``(n, 4)``, float64.
    """
    _check_generator(generator)
    area = float(height * width)
    fraction = scale[0] + (scale[1] - scale[0]) * torch.rand(
        n, MAX_CROP_TRIES, generator=generator, dtype=torch.float64
    )
    log_lo, log_hi = math.log(ratio[0]), math.log(ratio[1])
    aspect = torch.exp(
        log_lo + (log_hi - log_lo) * torch.rand(n, MAX_CROP_TRIES, generator=generator, dtype=torch.float64)
    )
    corner = torch.rand(n, 2, generator=generator, dtype=torch.float64)
    target = area * fraction
    w = torch.round(torch.sqrt(target * aspect))  # round half to even, as Python's round()
    h = torch.round(torch.sqrt(target / aspect))
    fits = (w > 0) & (w <= width) & (h > 0) & (h <= height)
    first = fits.to(torch.uint8).argmax(dim=1, keepdim=True)  # first fitting try (0 if none)
    found = fits.any(dim=1)
    w, h = w.gather(1, first).squeeze(1), h.gather(1, first).squeeze(1)
    # Fallback: the central crop, clipped to the ratio range.
    in_ratio = width / height
    if in_ratio < min(ratio):
        fb_w, fb_h = width, int(round(width / min(ratio)))
    elif in_ratio > max(ratio):
        fb_w, fb_h = int(round(height * max(ratio))), height
    else:
        fb_w, fb_h = width, height
    w = torch.where(found, w, float(fb_w))
    h = torch.where(found, h, float(fb_h))
    top = torch.where(found, torch.floor(corner[:, 0] * (height - h + 1)), float((height - fb_h) // 2))
    left = torch.where(found, torch.floor(corner[:, 1] * (width - w + 1)), float((width - fb_w) // 2))
    return torch.stack((top, left, h, w), dim=1)


def jitter_ranges(
    brightness: float, contrast: float, saturation: float, hue: float
) -> tuple[tuple[float, float] | None, ...]:
    """``v2.ColorJitter``'s factor ranges for scalar arguments (``None``: that adjustment is off).

    Brightness, contrast, saturation ``x`` give ``[max(0, 1 - x), 1 + x]``; hue ``x`` gives ``[-x, x]``.
    """
    for name, value, bound in (
        ("brightness", brightness, math.inf),
        ("contrast", contrast, math.inf),
        ("saturation", saturation, math.inf),
        ("hue", hue, 0.5),
    ):
        if not 0.0 <= value <= bound:
            raise InputError(f"`{name}` jitter must lie in [0, {bound}], got {value}.")
    scaled = [None if x == 0 else (max(0.0, 1.0 - x), 1.0 + x) for x in (brightness, contrast, saturation)]
    return (*scaled, None if hue == 0 else (-hue, hue))


def sample_color_jitter(
    n: int,
    ranges: tuple[tuple[float, float] | None, ...],
    p: float,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """Per-sample ``v2.RandomApply([v2.ColorJitter(...)], p)`` parameters.

    Args:
        n: Number of samples.
        ranges: Brightness, contrast, saturation and hue factor ranges (:func:`jitter_ranges`);
            ``None`` leaves that adjustment out.
        p: Probability of applying the jitter.
        generator: CPU generator (``None``: torch's global one).

    Returns:
        ``(factors, order)``: factors ``(n, 4)`` float64 (the identity ``(1, 1, 1, 0)`` where the
        jitter is not applied or the adjustment is off) and a uniform random permutation of
        ``0..3`` per sample, ``(n, 4)`` int64 (``v2.ColorJitter``'s ``fn_idx = randperm(4)``).
    """
    _check_generator(generator)
    if len(ranges) != 4:
        raise InputError(f"`ranges` must hold 4 entries (brightness, contrast, saturation, hue), got {len(ranges)}.")
    applied = sample_bernoulli(n, p, generator)
    order = torch.rand(n, 4, generator=generator).argsort(dim=1)
    uniform = torch.rand(n, 4, generator=generator, dtype=torch.float64)
    identity, lows, spans = _jitter_bounds(tuple(tuple(r) if r is not None else None for r in ranges))
    return torch.where(applied.unsqueeze(1), lows + spans * uniform, identity), order


@functools.lru_cache(maxsize=16)
def _jitter_bounds(ranges: tuple[tuple[float, float] | None, ...]) -> tuple[Tensor, Tensor, Tensor]:
    """The identity factors, the ranges' lows and their spans (high - low) as ``(4,)`` float64 tensors, made once
    per ``ranges`` (drawing a batch's parameters is host work on every step; the tensors are only read)."""
    identity = torch.tensor(IDENTITY_JITTER, dtype=torch.float64)
    lows = torch.tensor([r[0] if r is not None else i for r, i in zip(ranges, IDENTITY_JITTER)], dtype=torch.float64)
    highs = torch.tensor([r[1] if r is not None else i for r, i in zip(ranges, IDENTITY_JITTER)], dtype=torch.float64)
    return identity, lows, highs - lows


@dataclass(frozen=True)
class ViewParams:
    """Per-sample parameters of one SimCLR/BYOL view of a batch of ``B`` images.

    Attributes:
        boxes: ``(top, left, height, width)`` of the crop in input pixels. Shape: ``(B, 4)``.
        flip: Horizontal flip. Shape: ``(B,)``, bool.
        jitter_factors: Brightness, contrast, saturation, hue factors (identity where the jitter
            is not applied). Shape: ``(B, 4)``.
        jitter_order: Order of the four adjustments (torchvision's ``fn_idx``). Shape: ``(B, 4)``, int64.
        grayscale: Convert to grayscale. Shape: ``(B,)``, bool.
        blur_sigma: Gaussian blur standard deviation, 0 where not blurred. Shape: ``(B,)``.
        solarize: Solarize. Shape: ``(B,)``, bool.
    """

    boxes: Tensor
    flip: Tensor
    jitter_factors: Tensor
    jitter_order: Tensor
    grayscale: Tensor
    blur_sigma: Tensor
    solarize: Tensor

    def __len__(self) -> int:
        return int(self.flip.shape[0])

    def repeat_interleave(self, repeats: int) -> ViewParams:
        """Each sample's parameters repeated ``repeats`` times in a row (chunk-shared views)."""
        return replace(self, **{f.name: getattr(self, f.name).repeat_interleave(repeats, dim=0) for f in fields(self)})

    @classmethod
    def cat(cls, params: Sequence[ViewParams]) -> ViewParams:
        """Several parameter sets one after the other (the views of one call of
        :meth:`BatchedSimCLRViews.many <hf_contrast.views.BatchedSimCLRViews.many>`)."""
        if len(params) == 1:
            return params[0]
        return cls(**{f.name: torch.cat([getattr(p, f.name) for p in params]) for f in fields(cls)})

    def select(self, index: Tensor) -> ViewParams:
        """The parameter sets ``index`` (a ``(K,)`` int64 tensor on the parameters' device), in that order."""
        return replace(self, **{f.name: getattr(self, f.name).index_select(0, index) for f in fields(self)})

    def to(self, device: torch.device | str) -> ViewParams:
        """The parameters on ``device`` (floats as float32) in ONE host-to-device copy:
        ``ViewParams.unpack(params.packed_on(device))``."""
        return ViewParams.unpack(self.packed_on(device))

    def packed_on(self, device: torch.device | str) -> Tensor:
        """All fields packed into one ``(B, 16)`` float32 tensor (integers and booleans are exact in float32)
        and sent to ``device`` in one copy: pinned when the target is CUDA and copied with ``non_blocking=True``,
        so the copy does not wait for the kernels already queued. :meth:`unpack` is the inverse."""
        device = torch.device(device)
        parts = [getattr(self, f.name).reshape(len(self), -1).to(torch.float32) for f in fields(self)]
        packed = torch.cat(parts, dim=1)
        if device.type == "cuda":
            packed = packed.pin_memory()
        return packed.to(device, non_blocking=True)

    @classmethod
    def unpack(cls, packed: Tensor) -> ViewParams:
        """The parameters from :meth:`packed_on`'s ``(B, 16)`` float32 tensor, on its device (a few device
        operations with no host read: they can be captured in a CUDA graph)."""
        boxes, flip, factors, order, gray, sigma, sol = packed.split([4, 1, 4, 4, 1, 1, 1], dim=1)
        return cls(
            boxes=boxes,
            flip=flip.squeeze(1) > 0.5,
            jitter_factors=factors,
            jitter_order=order.round().long(),
            grayscale=gray.squeeze(1) > 0.5,
            blur_sigma=sigma.squeeze(1),
            solarize=sol.squeeze(1) > 0.5,
        )
