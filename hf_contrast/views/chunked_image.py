"""CARE equivariance views: one augmentation pair per chunk of the batch, applied batched.

CARE (https://arxiv.org/abs/2306.13924, Algorithm 1; docs/methods.md §4) cuts the batch into
``n_splits`` chunks of ``m = B / n_splits`` samples; chunk ``c`` draws ONE augmentation pair
``(ã1_c, ã2_c)`` and applies it to every sample of the chunk, and each chunk draws a fresh pair.
A ``torchvision.transforms.v2`` transform called on a batched tensor ``(m, C, H, W)`` samples a
single set of random parameters for the whole tensor, so each chunk is augmented in two batched
calls on whatever device it lives on (the GPU in training). The Python loop runs over the
``n_splits`` chunks, never over samples.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from typing import Any

import torch
from torch import Tensor

from hf_contrast.errors import InputError
from hf_contrast.seeding import seeded_cpu_rng
from hf_contrast.tensor_checks import check_int
from hf_contrast.views.image_transforms import simclr_transform, simclr_transform_from_data_config
from hf_contrast.views.transform_steps import ImageSize

__all__ = ["ChunkedAugmentation"]


class ChunkedAugmentation:
    """Chunk-shared augmentation pairs for CARE's equivariance views.

    Paper: https://arxiv.org/abs/2306.13924 (Algorithm 1); docs/methods.md §4. The batch is cut into
    ``n_splits`` consecutive chunks; for each chunk two independent calls of ``transform`` on the
    whole chunk give ``ã1_c`` and ``ã2_c``, so all samples of a chunk share their augmentation and
    every chunk (and each of the two views) draws fresh parameters.

    Randomness: parameters come from torch's global CPU generator (``torch.manual_seed`` makes a
    run reproducible). Pass ``generator`` to make the views depend only on it: each chunk then
    runs under a forked global generator seeded from ``generator``, leaving the global state
    untouched.

    Args:
        n_splits: Number of chunks ``S``; it must divide the batch size.
        transform: A random transform that maps a batched image tensor ``(m, C, H, W)`` to a
            batched tensor with one parameter draw per call (any ``torchvision.transforms.v2``
            pipeline does), with the same output size at every call, e.g. :func:`simclr_transform`.
        generator: Optional CPU ``torch.Generator`` that seeds every chunk's draws.

    Raises:
        ValueError: if ``n_splits`` is not a positive int or ``transform`` is not callable.

    >>> aug = ChunkedAugmentation.simclr(2, image_size=16, mean=(0.5,) * 3, std=(0.5,) * 3)
    >>> v1, v2_ = aug(torch.rand(8, 3, 20, 20))
    >>> v1.shape, v2_.shape
    (torch.Size([8, 3, 16, 16]), torch.Size([8, 3, 16, 16]))
    """

    def __init__(
        self,
        n_splits: int,
        transform: Callable[[Tensor], Tensor],
        *,
        generator: torch.Generator | None = None,
    ) -> None:
        check_int("n_splits", n_splits, 1)
        if not callable(transform):
            raise InputError(f"`transform` must be callable, got {type(transform).__name__}.")
        if generator is not None and not isinstance(generator, torch.Generator):
            raise InputError(f"`generator` must be a CPU torch.Generator or None, got {generator!r}.")
        if generator is not None and generator.device.type != "cpu":
            raise InputError(f"`generator` must be a CPU torch.Generator, got one on {generator.device}.")
        self.n_splits = n_splits
        self.transform = transform
        self.generator = generator

    @classmethod
    def simclr(
        cls,
        n_splits: int,
        image_size: ImageSize,
        mean: Sequence[float],
        std: Sequence[float],
        *,
        generator: torch.Generator | None = None,
        **kwargs: Any,
    ) -> ChunkedAugmentation:
        """Chunked SimCLR augmentation (the family CARE uses); ``kwargs`` go to :func:`simclr_transform`."""
        return cls(n_splits, simclr_transform(image_size, mean, std, **kwargs), generator=generator)

    @classmethod
    def from_data_config(
        cls,
        n_splits: int,
        data_config: Mapping[str, Any],
        *,
        generator: torch.Generator | None = None,
        **kwargs: Any,
    ) -> ChunkedAugmentation:
        """Chunked SimCLR augmentation sized from a timm data config (``encoder.data_config``)."""
        return cls(n_splits, simclr_transform_from_data_config(data_config, **kwargs), generator=generator)

    def _rng(self) -> Any:
        if self.generator is None:
            return nullcontext()
        seed = int(torch.randint(0, 2**62, (1,), generator=self.generator))
        return seeded_cpu_rng(seed)

    def _view(self, chunk: Tensor) -> Tensor:
        with self._rng():
            out = self.transform(chunk)
        if not isinstance(out, Tensor):
            raise InputError(f"`transform` must return a tensor, got {type(out).__name__}.")
        return out.as_subclass(Tensor)

    def __call__(self, images: Tensor) -> tuple[Tensor, Tensor]:
        """Return the two equivariance views of a batch.

        Args:
            images: Un-normalised images, float in ``[0, 1]`` (or ``uint8``), on any device.
                Shape: ``(B, C, H, W)`` with ``B`` divisible by ``n_splits``.

        Returns:
            ``(view1, view2)``, normalised float tensors on the same device; rows
            ``c*m:(c+1)*m`` of ``view1`` (resp. ``view2``) share one augmentation ``ã1_c``
            (resp. ``ã2_c``). Shape: ``(B, C', H', W')`` each.

        Raises:
            ValueError: if ``images`` is not a rank-4 tensor, ``B`` is not divisible by
                ``n_splits``, or the transform's output sizes differ between chunks.
        """
        if not isinstance(images, Tensor) or images.ndim != 4:
            got = tuple(images.shape) if isinstance(images, Tensor) else type(images).__name__
            raise InputError(f"`images` must be a tensor of shape (B, C, H, W), got {got}.")
        if not images.is_floating_point() and images.dtype != torch.uint8:
            raise InputError(f"`images` must be float in [0, 1] or uint8, got dtype {images.dtype}.")
        batch = images.shape[0]
        if batch == 0 or batch % self.n_splits != 0:
            raise InputError(
                f"`images` batch size {batch} must be a positive multiple of `n_splits`={self.n_splits} "
                f"(each chunk shares one augmentation); change the batch size or `n_splits`."
            )
        views1: list[Tensor] = []
        views2: list[Tensor] = []
        for chunk in images.split(batch // self.n_splits):  # loop over the S chunks only
            views1.append(self._view(chunk))
            views2.append(self._view(chunk))
        shapes = {tuple(v.shape[1:]) for v in views1 + views2}
        if len(shapes) != 1:
            raise InputError(
                f"`transform` must produce one output size for every chunk (use a fixed-size crop), "
                f"got {sorted(shapes)}."
            )
        return torch.cat(views1), torch.cat(views2)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n_splits={self.n_splits}, transform={self.transform!r})"
