"""Per-sample image ops on a whole batch: every sample has its own parameters, no Python loop over samples.

Each op takes a float batch ``(B, C, H, W)`` with values in ``[0, 1]`` (``C`` = 1 or 3) on any device
and per-sample parameter tensors of length ``B`` on the same device, and equals the matching
``torchvision.transforms.v2.functional`` op applied to each sample on its own (float inputs; the
tolerances are in ``tests/views/test_device_views.py``):

=====================================  =========================================================
this module                            torchvision.transforms.v2.functional, per sample
=====================================  =========================================================
:func:`resized_crop` (``flip``)        ``resized_crop(..., BILINEAR, antialias)`` then ``hflip``
:func:`adjust_brightness`              ``adjust_brightness``
:func:`adjust_contrast`                ``adjust_contrast``
:func:`adjust_saturation`              ``adjust_saturation``
:func:`adjust_hue`                     ``adjust_hue``
:func:`color_jitter`                   ``v2.ColorJitter.transform`` with a per-sample ``fn_idx``
:func:`rgb_to_grayscale`               ``rgb_to_grayscale(num_output_channels=C)``
:func:`gaussian_blur`                  ``gaussian_blur(kernel_size, sigma)``
:func:`solarize`                       ``solarize``
=====================================  =========================================================

Resampling is written as two batched matrix products, ``out = R_y @ x @ R_xᵀ``, with per-sample
``(H_out, H)`` / ``(W_out, W)`` interpolation matrices: bilinear with PyTorch's antialias filter
(the triangle widened by the down-scaling factor, as ``F.interpolate(..., antialias=True)``), or
plain bilinear. The blur is the same kind of product with a banded matrix that folds the reflect
padding in. All colour maths run in the batch's float dtype (float32 by default). On CUDA the
matrix products follow ``torch.backends.cuda.matmul.allow_tf32``: TF32 would cost about 1e-3 of
precision on ``[0, 1]`` values, below the ``uint8`` step.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = [
    "GRAY_WEIGHTS",
    "crop_matrices",
    "resized_crop",
    "rgb_to_grayscale",
    "adjust_brightness",
    "adjust_contrast",
    "adjust_saturation",
    "adjust_hue",
    "color_jitter",
    "hue_groups",
    "blur_matrices",
    "gaussian_blur",
    "solarize",
]

GRAY_WEIGHTS = (0.2989, 0.587, 0.114)
"""ITU-R 601-2 luma weights, the ones torchvision's ``rgb_to_grayscale`` uses."""


def _per_sample(value: Tensor, like: Tensor) -> Tensor:
    """A ``(B,)`` parameter shaped ``(B, 1, 1, 1)`` in ``like``'s dtype for broadcasting."""
    return value.to(dtype=like.dtype).reshape(-1, 1, 1, 1)


def _interpolation_matrix(start: Tensor, length: Tensor, in_size: int, out_size: int, antialias: bool) -> Tensor:
    """Rows of bilinear weights mapping a window ``[start, start + length)`` of ``in_size`` pixels to ``out_size``.

    Matches ``F.interpolate(window, out_size, mode="bilinear", align_corners=False, antialias=...)``:
    output ``i`` has centre ``c_i = scale * (i + 0.5)`` with ``scale = length / out_size``; input pixel
    ``j`` of the window weighs ``max(0, 1 - |j + 0.5 - c_i| / support)`` with ``support =
    max(scale, 1)`` when antialiasing (1 otherwise); the weights of each row are normalised over
    the window, which also reproduces the clamping at its borders.

    Args:
        start: First pixel of each sample's window. Shape: ``(B,)``, float.
        length: Window length in pixels (>= 1). Shape: ``(B,)``, float.
        in_size: Pixels along this axis of the full image.
        out_size: Output pixels along this axis.
        antialias: Widen the filter when down-scaling.

    Returns:
        Weights. Shape: ``(B, out_size, in_size)``, the dtype of ``start``.
    """
    scale = (length / out_size).unsqueeze(1)  # (B, 1)
    centre = scale * (torch.arange(out_size, device=start.device, dtype=start.dtype) + 0.5)  # (B, out)
    pixel = torch.arange(in_size, device=start.device, dtype=start.dtype) - start.unsqueeze(1)  # (B, in): j - start
    support = scale.clamp(min=1.0) if antialias else torch.ones_like(scale)
    distance = (pixel.unsqueeze(1) + 0.5 - centre.unsqueeze(2)).abs() / support.unsqueeze(2)  # (B, out, in)
    inside = (pixel >= 0) & (pixel < length.unsqueeze(1))  # (B, in)
    weights = (1.0 - distance).clamp(min=0.0).masked_fill(~inside.unsqueeze(1), 0.0)
    return weights / weights.sum(dim=2, keepdim=True)


def crop_matrices(
    boxes: Tensor,
    in_size: tuple[int, int],
    out_size: tuple[int, int],
    *,
    flip: Tensor | None = None,
    antialias: bool = True,
) -> tuple[Tensor, Tensor]:
    """Per-sample resized-crop (and horizontal flip) as interpolation matrices.

    Args:
        boxes: ``(top, left, height, width)`` of each sample's crop in input pixels (integers).
            Shape: ``(B, 4)``, float.
        in_size: Input ``(H, W)``.
        out_size: Output ``(H_out, W_out)``.
        flip: Optional per-sample horizontal flip after the crop. Shape: ``(B,)``, bool.
        antialias: Antialiased bilinear (``True``, torchvision's default) or plain bilinear.

    Returns:
        ``(rows, cols)`` with ``view = rows @ image @ cols.mT``. Shapes: ``(B, H_out, H)`` and
        ``(B, W_out, W)``.
    """
    top, left, height, width = boxes.unbind(1)
    rows = _interpolation_matrix(top, height, in_size[0], out_size[0], antialias)
    cols = _interpolation_matrix(left, width, in_size[1], out_size[1], antialias)
    if flip is not None:
        cols = torch.where(flip.reshape(-1, 1, 1), cols.flip(1), cols)
    return rows, cols


def resized_crop(
    images: Tensor, boxes: Tensor, size: tuple[int, int], *, flip: Tensor | None = None, antialias: bool = True
) -> Tensor:
    """Crop each sample to its own box, resize it to ``size`` (bilinear) and optionally flip it.

    Args:
        images: Float images. Shape: ``(B, C, H, W)``.
        boxes: ``(top, left, height, width)`` per sample (integer pixel values, inside the image).
            Shape: ``(B, 4)``.
        size: Output ``(H_out, W_out)``.
        flip: Optional per-sample horizontal flip. Shape: ``(B,)``, bool.
        antialias: See :func:`crop_matrices`.

    Returns:
        The crops. Shape: ``(B, C, H_out, W_out)``.
    """
    rows, cols = crop_matrices(boxes.to(images.dtype), tuple(images.shape[-2:]), size, flip=flip, antialias=antialias)
    return rows.unsqueeze(1) @ images @ cols.mT.unsqueeze(1)


def rgb_to_grayscale(images: Tensor) -> Tensor:
    """Luma of RGB images (a 1-channel image is its own luma).

    Args:
        images: Float images. Shape: ``(B, C, H, W)``, ``C`` in ``{1, 3}``.

    Returns:
        Luma. Shape: ``(B, 1, H, W)``.
    """
    if images.shape[1] == 1:
        return images
    r, g, b = images.unbind(1)
    return (r * GRAY_WEIGHTS[0] + g * GRAY_WEIGHTS[1] + b * GRAY_WEIGHTS[2]).unsqueeze(1)


def _blend(images: Tensor, reference: Tensor, factor: Tensor) -> Tensor:
    """``clamp(factor * images + (1 - factor) * reference, 0, 1)`` with a per-sample factor ``(B,)``."""
    f = _per_sample(factor, images)
    return (images * f + reference * (1.0 - f)).clamp(0.0, 1.0)


def adjust_brightness(images: Tensor, factor: Tensor) -> Tensor:
    """Scale each sample by its brightness factor (``(B,)``, >= 0); images ``(B, C, H, W)`` in ``[0, 1]``."""
    return (images * _per_sample(factor, images)).clamp(0.0, 1.0)


def adjust_contrast(images: Tensor, factor: Tensor) -> Tensor:
    """Blend each sample with the mean of its luma by its contrast factor (``(B,)``, >= 0)."""
    mean = rgb_to_grayscale(images).mean(dim=(-3, -2, -1), keepdim=True)
    return _blend(images, mean, factor)


def adjust_saturation(images: Tensor, factor: Tensor) -> Tensor:
    """Blend each sample with its luma image by its saturation factor (``(B,)``); 1-channel images pass."""
    if images.shape[1] == 1:
        return images
    return _blend(images, rgb_to_grayscale(images), factor)


def adjust_hue(images: Tensor, factor: Tensor) -> Tensor:
    """Rotate each sample's HSV hue by its factor (``(B,)`` in ``[-0.5, 0.5]``); 1-channel images pass.

    RGB to HSV as torchvision (Pillow's formula), and back with the closed form
    ``channel_n = max - (max - min) * clamp(min(k, 4 - k), 0, 1)``, ``k = (n + 6 h) mod 6``,
    ``n = 5, 3, 1`` for R, G, B (value = max, value·saturation = max − min).
    """
    if images.shape[1] == 1:
        return images
    r, g, b = images.unbind(1)
    maxc, minc = images.amax(dim=1), images.amin(dim=1)
    delta = maxc - minc
    safe = torch.where(delta > 0, delta, torch.ones_like(delta))
    rc, gc, bc = (maxc - r) / safe, (maxc - g) / safe, (maxc - b) / safe
    hue6 = torch.where(maxc == r, bc - gc, torch.where(maxc == g, 2.0 + rc - bc, 4.0 + gc - rc))
    hue = torch.remainder(hue6 / 6.0 + factor.to(images.dtype).reshape(-1, 1, 1), 1.0)
    # n = 5, 3, 1, made on the device (a tensor literal would be a blocking host-to-device copy)
    n = (5.0 - 2.0 * torch.arange(3, dtype=images.dtype, device=images.device)).reshape(1, 3, 1, 1)
    k = torch.remainder(n + 6.0 * hue.unsqueeze(1), 6.0)
    ramp = torch.minimum(k, 4.0 - k).clamp(0.0, 1.0)
    return maxc.unsqueeze(1) - delta.unsqueeze(1) * ramp


def hue_groups(factors: Tensor, order: Tensor) -> tuple[Tensor, list[int]]:
    """The sort that makes :func:`color_jitter`'s hue rotations contiguous slices, computed on the CPU.

    Args:
        factors: Jitter factors (CPU). Shape: ``(B, 4)``.
        order: Adjustment order per sample (CPU). Shape: ``(B, 4)``.

    Returns:
        ``(perm, counts)``: a stable permutation of the samples by the round in which they rotate
        their hue (samples with hue factor 0 last), ``(B,)`` int64; and ``counts[r]``, the number
        of samples rotating in round ``r`` (4 ints), the ``hue_counts`` of :func:`color_jitter` for
        the permuted batch.
    """
    rounds = (order == 3).to(torch.uint8).argmax(dim=1)
    rounds = torch.where(factors[:, 3] != 0, rounds, torch.full_like(rounds, 4))
    perm = torch.argsort(rounds, stable=True)
    return perm, torch.bincount(rounds, minlength=5)[:4].tolist()


def color_jitter(images: Tensor, factors: Tensor, order: Tensor, hue_counts: list[int] | None = None) -> Tensor:
    """``v2.ColorJitter`` with per-sample factors and a per-sample order of the four adjustments.

    Four rounds; in round ``r`` sample ``b`` applies op ``order[b, r]`` (0 brightness, 1 contrast,
    2 saturation, 3 hue: torchvision's ``fn_idx``). Brightness, contrast and saturation are one
    blend ``clamp(f x + (1 - f) ref)`` with ``ref`` = 0, the luma mean or the luma image, so a round
    costs one blend for the whole batch. A sample with the identity factors (1, 1, 1, 0: jitter
    not applied) comes out unchanged bit for bit.

    The hue rotation (the costly step) runs on the whole batch every round and is kept where the
    round's op is hue, unless ``hue_counts`` says the batch is sorted by hue round
    (:func:`hue_groups`, known on the CPU where the parameters were drawn): then each round rotates
    only its slice of rows, and the batch's hue work is done once, with no device sync.

    Args:
        images: Float images in ``[0, 1]``. Shape: ``(B, C, H, W)``.
        factors: Brightness, contrast, saturation and hue factors. Shape: ``(B, 4)``.
        order: A permutation of ``0..3`` per sample. Shape: ``(B, 4)``, int64.
        hue_counts: Optional rows rotating their hue in rounds 0..3 of a batch sorted by
            :func:`hue_groups`.

    Returns:
        Jittered images. Shape: ``(B, C, H, W)``.
    """
    out = images
    hue_factor = factors[:, 3]
    start = 0
    for step in range(4):
        op = order[:, step]
        blend_factor = torch.where(op == 3, torch.ones_like(hue_factor), factors.gather(1, op.unsqueeze(1)).squeeze(1))
        luma = rgb_to_grayscale(out)
        mean = luma.mean(dim=(-3, -2, -1), keepdim=True)
        reference = torch.where(
            _per_sample(op == 1, luma).bool(),
            mean.expand_as(luma),
            luma * _per_sample(op == 2, luma),
        )
        out = _blend(out, reference, blend_factor)
        if hue_counts is None:
            rotate = (op == 3) & (hue_factor != 0)
            out = torch.where(rotate.reshape(-1, 1, 1, 1), adjust_hue(out, hue_factor), out)
        elif hue_counts[step] > 0:
            stop = start + hue_counts[step]
            out[start:stop] = adjust_hue(out[start:stop], hue_factor[start:stop])
            start = stop
    return out


def blur_matrices(sigma: Tensor, kernel_size: int, size: int) -> Tensor:
    """Per-sample 1-D Gaussian blur with reflect padding as a banded ``(size, size)`` matrix.

    The kernel is torchvision's: weights ``g(t) ∝ exp(-t² / (2σ²))`` for ``t = -r..r``, ``r =
    kernel_size // 2``, normalised; padding ``"reflect"`` (the edge pixel not repeated), folded into
    the matrix: ``M[i, j] = g(j - i) + [j > 0] g(-j - i) + [j < n - 1] g(2(n - 1) - j - i)``. The
    ``2r + 1`` weights per sample are computed once and looked up by offset (``g = 0`` beyond ``r``). A sample with
    ``sigma <= 0`` gets the identity (no blur).

    Args:
        sigma: Standard deviation per sample; ``<= 0`` means no blur. Shape: ``(B,)``, float.
        kernel_size: Odd kernel size, ``kernel_size // 2 < size``.
        size: Image side along the blurred axis.

    Returns:
        Blur matrices, ``blurred = M @ x`` along that axis. Shape: ``(B, size, size)``.
    """
    radius = kernel_size // 2
    dtype, device = sigma.dtype, sigma.device
    blur = sigma > 0
    taps = torch.arange(-radius, radius + 1, dtype=dtype, device=device)
    safe_sigma = torch.where(blur, sigma, torch.ones_like(sigma)).unsqueeze(1)
    weights = torch.exp(-0.5 * (taps / safe_sigma) ** 2)
    weights = weights / weights.sum(dim=1, keepdim=True)  # (B, 2r + 1)
    identity = (taps == 0).to(dtype)
    weights = torch.where(blur.unsqueeze(1), weights, identity)
    # table[b, d + r + 1] = weight of offset d for |d| <= r; the two end slots (|d| > r) are zero
    table = torch.nn.functional.pad(weights, (1, 1))
    idx = torch.arange(size, device=device)
    i, j = idx.reshape(-1, 1), idx.reshape(1, -1)
    last = size - 1
    outside = torch.full_like(i + j, radius + 1)

    def slot(offset: Tensor) -> Tensor:
        return offset.clamp(-radius - 1, radius + 1) + radius + 1

    direct = slot(j - i)
    low = slot(torch.where(j > 0, -j - i, outside))  # reflected below 0
    high = slot(torch.where(j < last, 2 * last - j - i, outside))  # reflected above n - 1
    return table[:, direct] + table[:, low] + table[:, high]


def gaussian_blur(images: Tensor, sigma: Tensor, kernel_size: int) -> Tensor:
    """Blur each sample with its own ``sigma`` (same in both axes; ``<= 0``: unchanged).

    Args:
        images: Float images. Shape: ``(B, C, H, W)``, ``kernel_size // 2 < min(H, W)``.
        sigma: Standard deviation per sample. Shape: ``(B,)``.
        kernel_size: Odd kernel size (both axes).

    Returns:
        Blurred images. Shape: ``(B, C, H, W)``.
    """
    height, width = images.shape[-2:]
    sigma = sigma.to(images.dtype)
    rows = blur_matrices(sigma, kernel_size, height)
    cols = rows if width == height else blur_matrices(sigma, kernel_size, width)
    return rows.unsqueeze(1) @ images @ cols.mT.unsqueeze(1)


def solarize(images: Tensor, apply: Tensor, threshold: float = 0.5) -> Tensor:
    """Invert the pixels ``>= threshold`` of the samples where ``apply`` (``(B,)``, bool) holds."""
    inverted = torch.where(images >= threshold, 1.0 - images, images)
    return torch.where(apply.reshape(-1, 1, 1, 1), inverted, images)
