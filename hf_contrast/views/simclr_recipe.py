"""``SimCLRRecipe``: the random parameters of the SimCLR/BYOL augmentation, defined and checked once.

Both view pipelines read them from here: :func:`~hf_contrast.views.simclr_transform` (per sample,
``torchvision.transforms.v2``, in the DataLoader) and :class:`~hf_contrast.views.BatchedSimCLRViews`
(a whole ``uint8`` batch on its device), so the two cannot drift apart.

Recipe (SimCLR, Chen et al. 2020, https://arxiv.org/abs/2002.05709, appendix A; solarisation from
BYOL, Grill et al. 2020, https://arxiv.org/abs/2006.07733): random resized crop → horizontal flip
→ colour jitter with probability ``jitter_p`` → grayscale → Gaussian blur → solarisation.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from hf_contrast.errors import InputError
from hf_contrast.tensor_checks import check_non_negative, check_range, check_size, check_unit_interval
from hf_contrast.views.transform_steps import ImageSize

__all__ = ["SimCLRRecipe", "check_jitter_strength", "default_blur_kernel"]

#: The strongest colour jitter accepted: ``s = 10`` scales brightness, contrast and saturation by up to 9x (SimCLR's
#: strongest is ``s = 1``); at ``s = 1e308`` the factors left float32's range and the first jitter raised torch's
#: RuntimeError.
MAX_JITTER_STRENGTH = 10.0
#: The crop's aspect ratios (width / height) accepted lie in ``[1 / MAX_ASPECT, MAX_ASPECT]``: torchvision's crop of a
#: more extreme shape can round a side to 0 pixels (``ratio=(1/64, 1/64)`` on a 20-pixel image did).
MAX_ASPECT = 10.0
#: The smallest blur standard deviation accepted (in pixels); a float32 sigma of 0 is refused by the blur.
MIN_BLUR_SIGMA = 1e-3


def check_jitter_strength(value: object) -> float:
    """Check a colour jitter strength ``s`` in ``[0, MAX_JITTER_STRENGTH]``; return it as a float."""
    s = check_non_negative("jitter_strength", value)
    if s > MAX_JITTER_STRENGTH:
        raise InputError(
            f"`jitter_strength` must be at most {MAX_JITTER_STRENGTH:g} (SimCLR's strongest is 1.0, CARE's 0.5), "
            f"got {s:g}."
        )
    return s


def default_blur_kernel(image_size: ImageSize) -> int:
    """SimCLR's blur kernel: about 10% of the image side, odd, at least 3.

    >>> default_blur_kernel(224), default_blur_kernel(32)
    (23, 3)
    """
    side = min(check_size("image_size", image_size))
    return max(3, int(0.1 * side) // 2 * 2 + 1)


@dataclass(frozen=True)
class SimCLRRecipe:
    """The SimCLR/BYOL augmentation's parameters (defaults: SimCLR's, with CARE's/MoCo-v2's jitter strength).

    Attributes:
        scale: ``RandomResizedCrop``'s area fraction range.
        ratio: ``RandomResizedCrop``'s aspect-ratio (width / height) range.
        hflip_p: Probability of a horizontal flip.
        jitter_strength: ``s`` of ``ColorJitter(0.8s, 0.8s, 0.8s, 0.2s)``; ``s=0.5`` gives the
            ``ColorJitter(0.4, 0.4, 0.4, 0.1)`` of CARE / MoCo-v2 / lightly; 0: no jitter.
        jitter_p: Probability of applying the colour jitter.
        grayscale_p: Probability of a grayscale conversion.
        blur_p: Probability of a Gaussian blur (SimCLR leaves blur out on CIFAR: pass 0 there).
        blur_kernel: Odd kernel size; ``None``: :func:`default_blur_kernel` of the output size.
        blur_sigma: Range of the blur's standard deviation (drawn uniformly).
        solarize_p: Probability of solarisation (BYOL: 0 and 0.2 for its two views).
        solarize_threshold: Solarisation threshold on the ``[0, 1]`` scale.

    Raises:
        ValueError: naming the field, on a value out of range.
    """

    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0)
    hflip_p: float = 0.5
    jitter_strength: float = 0.5
    jitter_p: float = 0.8
    grayscale_p: float = 0.2
    blur_p: float = 0.5
    blur_kernel: int | None = None
    blur_sigma: tuple[float, float] = (0.1, 2.0)
    solarize_p: float = 0.0
    solarize_threshold: float = 0.5

    def __post_init__(self) -> None:
        checked: dict[str, Any] = {
            "scale": check_range("scale", self.scale, 0.0, 1.0),
            "ratio": check_range("ratio", self.ratio, 0.0, math.inf),
            "blur_sigma": check_range("blur_sigma", self.blur_sigma, 0.0, math.inf),
            "jitter_strength": check_jitter_strength(self.jitter_strength),
            "solarize_threshold": check_unit_interval("solarize_threshold", self.solarize_threshold),
        }
        for name in ("hflip_p", "jitter_p", "grayscale_p", "blur_p", "solarize_p"):
            checked[name] = check_unit_interval(name, getattr(self, name))
        if not 1 / MAX_ASPECT <= checked["ratio"][0] <= checked["ratio"][1] <= MAX_ASPECT:
            raise InputError(
                f"`ratio` must lie within [{1 / MAX_ASPECT:g}, {MAX_ASPECT:g}] (the crop's width / height; SimCLR's"
                f" is (3/4, 4/3)), got {self.ratio!r}."
            )
        if checked["blur_sigma"][0] < MIN_BLUR_SIGMA:
            raise InputError(f"`blur_sigma` must start at {MIN_BLUR_SIGMA:g} pixels or more, got {self.blur_sigma!r}.")
        kernel = self.blur_kernel
        if kernel is not None and (
            not isinstance(kernel, int) or isinstance(kernel, bool) or kernel <= 0 or kernel % 2 == 0
        ):
            raise InputError(f"`blur_kernel` must be a positive odd int (or None: ~10% of the side), got {kernel!r}.")
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    @classmethod
    def of(cls, **fields: Any) -> SimCLRRecipe:
        """The recipe with ``fields`` changed from the defaults.

        Raises:
            ValueError: on a name that is not a field (listing the fields), or a value out of range.
        """
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(fields) - set(names))
        if unknown:
            raise InputError(f"Unknown SimCLR recipe parameter(s) {unknown}; the parameters are {names}.")
        return cls(**fields)

    @property
    def jitter(self) -> tuple[float, float, float, float]:
        """``ColorJitter``'s ``(brightness, contrast, saturation, hue)``: ``(0.8s, 0.8s, 0.8s, min(0.2s, 0.5))``."""
        s = float(self.jitter_strength)
        return 0.8 * s, 0.8 * s, 0.8 * s, min(0.2 * s, 0.5)

    @property
    def jitter_applies(self) -> bool:
        """Whether the colour jitter can change an image (``jitter_p > 0`` and ``jitter_strength > 0``)."""
        return self.jitter_p > 0 and self.jitter_strength > 0

    def kernel_for(self, image_size: ImageSize) -> int:
        """The blur kernel for views of ``image_size``: ``blur_kernel``, else :func:`default_blur_kernel`.

        Raises:
            ValueError: when views are blurred (``blur_p > 0``) and the kernel's reflect padding
                (``kernel // 2``) is not below the image's shorter side.
        """
        kernel = default_blur_kernel(image_size) if self.blur_kernel is None else self.blur_kernel
        side = min(check_size("image_size", image_size))
        if self.blur_p > 0 and kernel // 2 >= side:
            raise InputError(
                f"`blur_kernel`={kernel} needs an output side above {kernel // 2} (reflect padding), got "
                f"image_size={image_size!r}; pass a smaller `blur_kernel`, a larger `image_size` or `blur_p=0`."
            )
        return kernel
