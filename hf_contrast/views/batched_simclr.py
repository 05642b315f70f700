"""SimCLR/BYOL views made on the batch's device, with per-sample (or per-chunk) random parameters.

The per-sample pipeline (``simclr_transform`` in the DataLoader) crops and jitters one image at a
time on the CPU; :class:`BatchedSimCLRViews` takes the decoded ``uint8`` batch once, on the
accelerator, and makes a view of every sample in a few batched tensor ops
(:mod:`hf_contrast.views.batched_ops`), each sample with its own parameters drawn from
torchvision's distributions (:mod:`hf_contrast.views.batched_params`). The same object makes
CARE's chunk-shared views (``chunk_size=m``: one parameter set per chunk of ``m`` rows).

Recipe (SimCLR, Chen et al. 2020, https://arxiv.org/abs/2002.05709, appendix A; solarisation from
BYOL, Grill et al. 2020, https://arxiv.org/abs/2006.07733): random resized crop (bilinear) →
horizontal flip → colour jitter with probability ``jitter_p`` (per-sample random order) →
grayscale → Gaussian blur → solarisation → normalisation; the parameters are a
:class:`~hf_contrast.views.SimCLRRecipe`, the one definition ``simclr_transform`` also reads.

Differences from the per-sample ``uint8`` pipeline: colour maths run in float32 without rounding
to ``uint8`` after each step (torchvision rounds after each op on ``uint8`` images: the views differ
by about 1.3/255 on average and 6/255 at most, ``tests/views/test_device_views.py``), and resampling is
always bilinear (antialiased by default, as there).
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

import hf_contrast.views.batched_ops as ops
from hf_contrast.errors import InputError
from hf_contrast.tensor_checks import check_bool, check_int, check_size
from hf_contrast.views.batched_params import (
    ViewParams,
    jitter_ranges,
    sample_bernoulli,
    sample_color_jitter,
    sample_resized_crop,
    sample_uniform,
)
from hf_contrast.views.cuda_graphs import CUDAGraphs
from hf_contrast.views.simclr_recipe import SimCLRRecipe
from hf_contrast.views.transform_steps import check_mean_std, read_data_config

__all__ = ["BatchedSimCLRViews"]

#: On a CPU, several views are made in one pass up to this many bytes of float32 output, a pass each above it.
#: Measured on a 2-core x86-64 CPU, 32-px views: 4 views of 32 images (1.5 MiB) 7.6 ms in one pass vs 9.4 ms apart;
#: of 128 images (6 MiB) 37.7 vs 26.0 ms; 2 views of 512 images 77 vs 57 ms.
_CPU_ONE_PASS_BYTES = 2 * 2**20

#: On CUDA, the view pass is replayed from a CUDA graph (``cuda_graphs=True``) while its largest float32 tensor (the
#: rows at the input size or the views) stays under this many bytes: where the images are small the pass is a few
#: hundred tiny kernels whose launches bound the step; above it the kernels run long enough to hide their launches,
#: and a graph would keep its memory pool (the pass's peak memory) reserved for nothing. CIFAR's 32-px views of a
#: 512-image batch, four views each (CARE): 24 MiB.
_CUDA_GRAPH_MAX_BYTES = 64 * 2**20


def views_compile_mode(mode: str | None) -> str | None:
    """The ``torch.compile`` mode of the view pass for a requested ``mode``: the same, without CUDA graphs (their
    outputs are overwritten by the next replay, while a batch's views are still read by the model, itself compiled:
    "accessing tensor output of CUDAGraphs that has been overwritten by a subsequent run")."""
    return {"reduce-overhead": None, "max-autotune": "max-autotune-no-cudagraphs"}.get(mode, mode)


#: ``torch.compile``'s keyword arguments (``mode``, ``dynamic``, ``fullgraph``, ``backend``, ``options``, ...).
_COMPILE_ARGUMENTS = frozenset(inspect.signature(torch.compile).parameters) - {"model"}


def _compile_options(compile: object) -> dict[str, Any]:
    """``compile`` as ``torch.compile`` keyword arguments: a mapping of its parameter names."""
    if not isinstance(compile, Mapping) or not set(compile) <= _COMPILE_ARGUMENTS:
        unknown = sorted(map(repr, set(compile) - _COMPILE_ARGUMENTS)) if isinstance(compile, Mapping) else []
        accepted = ", ".join(sorted(_COMPILE_ARGUMENTS))
        raise InputError(
            f"`compile` must be None or a dict of torch.compile arguments ({accepted}), got "
            + (f"the unknown key(s) {', '.join(unknown)}." if unknown else f"{compile!r}.")
        )
    return dict(compile)


class BatchedSimCLRViews:
    """Random SimCLR/BYOL views of a ``uint8`` (or ``[0, 1]`` float) batch, made on its device.

    Usage (one generator per batch; calls in a fixed order, so a resumed run redraws the same views)::

        views = BatchedSimCLRViews(32, mean, std, seed=0)
        g = views.generator(batch_index)                       # CPU generator seeded by (seed, index)
        x = batch["pixel_values_eq"].to("cuda", non_blocking=True)   # (B, C, H, W) uint8, sent once
        v1, v2 = views(x, g), views(x, g)                      # per-sample views (SimCLR, SupCon)
        e1, e2 = views(x, g, chunk_size=m), views(x, g, chunk_size=m)   # CARE's chunk-shared views

    In training, ``ContrastiveTrainingArguments(views_on_device=True)`` does this for every image
    objective (:class:`~hf_contrast.views.DeviceViews`).

    Args:
        image_size: Output side ``S`` or ``(H, W)``.
        mean: Per-channel normalisation mean; its length must equal the input's channels.
        std: Per-channel normalisation standard deviation; its length must equal the input's channels.
        antialias: Antialiased bilinear resampling (``simclr_transform``'s setting) or plain bilinear.
        seed: Seed of :meth:`generator` (per-batch generators for exact resume).
        cuda_graphs: On CUDA, eager passes of small views (below 64 MiB of float32) are captured in a CUDA graph
            once per batch shape and replayed (:class:`~hf_contrast.views.cuda_graphs.CUDAGraphs`): one launch
            instead of about 370, the same views (the hue rotation computed for every row, as with ``compile``).
            ``False`` launches every operation. No effect on a CPU or with ``compile``.
        compile: ``None`` (eager), or the keyword arguments of ``torch.compile`` (``{}`` for its defaults, e.g.
            ``{"backend": "inductor", "mode": None}``) for the view pass: the pass becomes a few fused kernels
            instead of about 370 launches (what ``ContrastiveTrainingArguments(torch_compile=True)`` asks for
            with device views). The same views up to float rounding (the colour jitter's hue rotation is
            computed for every row in every round and kept where it applies, instead of grouping the rows on
            the host, which would give the compiler a new shape per batch). The views outlive the pass's next
            call and feed another compiled module, so ``torch.compile``'s CUDA graphs (which reuse their outputs'
            memory at the next replay) are left out of it: ``mode="reduce-overhead"`` compiles the pass with the
            default mode and ``"max-autotune"`` as ``"max-autotune-no-cudagraphs"`` (:func:`views_compile_mode`).
        **recipe: Fields of :class:`~hf_contrast.views.SimCLRRecipe` to change (``scale``, ``ratio``,
            ``hflip_p``, ``jitter_strength``, ``jitter_p``, ``grayscale_p``, ``blur_p``,
            ``blur_kernel``, ``blur_sigma``, ``solarize_p``, ``solarize_threshold``): the defaults
            are ``simclr_transform``'s, defined once there.

    Raises:
        ValueError: on an invalid size, recipe field, kernel or mean/std pair.
    """

    def __init__(
        self,
        image_size: int | tuple[int, int],
        mean: Sequence[float],
        std: Sequence[float],
        *,
        antialias: bool = True,
        seed: int | None = None,
        cuda_graphs: bool = True,
        compile: Mapping[str, Any] | None = None,
        **recipe: Any,
    ) -> None:
        self.image_size = check_size("image_size", image_size)
        self.mean, self.std = check_mean_std(mean, std)
        self.recipe = r = SimCLRRecipe.of(**recipe)
        self.jitter_ranges = jitter_ranges(*r.jitter)
        self.jitter_p = r.jitter_p if r.jitter_applies else 0.0
        self.blur_kernel = r.kernel_for(self.image_size)
        self.antialias = check_bool("antialias", antialias)
        self.seed = check_int("seed", seed, 0, allow_none=True)
        self._norm: dict[torch.device, tuple[Tensor, Tensor]] = {}
        self.cuda_graphs = check_bool("cuda_graphs", cuda_graphs)  # "no" is a true string
        self._graphs = CUDAGraphs("Device views") if self.cuda_graphs else None
        self.compile = None if compile is None else _compile_options(compile)
        self._compiled = None
        if compile is not None:
            options = {**self.compile, "mode": views_compile_mode(self.compile.get("mode"))}
            self._compiled = torch.compile(self._static_pass, **options)

    @classmethod
    def from_data_config(cls, data_config: Mapping[str, Any], **kwargs: Any) -> BatchedSimCLRViews:
        """Sized and normalised from a timm data config (``input_size``, ``mean``, ``std``).

        The config's ``interpolation`` is not used: device views always resample bilinearly.
        """
        size, mean, std, _ = read_data_config(data_config)
        return cls(size, mean, std, **kwargs)

    def generator(self, batch_index: int, process_index: int = 0, *, stream: int = 0) -> torch.Generator:
        """A CPU generator seeded from ``(seed, stream, batch_index, process_index)``: the views of one batch.

        Args:
            batch_index: Position of the batch in its stream (restored on resume).
            process_index: The process's rank in distributed training, so that processes draw
                different parameters for their local rows.
            stream: Which sequence of batches: 0 for training, 1 for evaluation (separate, so an
                evaluation never shifts the training views).

        Raises:
            ValueError: if the views were built without ``seed`` or an index is negative.
        """
        if self.seed is None:
            raise InputError("`seed` is required for per-batch generators; build BatchedSimCLRViews(..., seed=...).")
        for name, value in (("batch_index", batch_index), ("process_index", process_index), ("stream", stream)):
            check_int(name, value, 0)
        key = [self.seed, stream, batch_index, process_index]
        state = np.random.SeedSequence(key).generate_state(1, dtype=np.uint64)[0]
        return torch.Generator().manual_seed(int(state >> np.uint64(1)))

    def sample(self, n: int, input_size: tuple[int, int], generator: torch.Generator | None = None) -> ViewParams:
        """Draw ``n`` independent parameter sets on the CPU (a fixed number of draws per call).

        Args:
            n: Number of parameter sets.
            input_size: ``(H, W)`` of the images the crops are taken from.
            generator: CPU generator (``None``: torch's global one).

        Returns:
            The parameters, on the CPU.
        """
        height, width = input_size
        boxes = sample_resized_crop(n, height, width, self.recipe.scale, self.recipe.ratio, generator)
        flip = sample_bernoulli(n, self.recipe.hflip_p, generator)
        factors, order = sample_color_jitter(n, self.jitter_ranges, self.jitter_p, generator)
        gray = sample_bernoulli(n, self.recipe.grayscale_p, generator)
        blur = sample_bernoulli(n, self.recipe.blur_p, generator)
        sigma = sample_uniform(n, *self.recipe.blur_sigma, generator=generator)
        solar = sample_bernoulli(n, self.recipe.solarize_p, generator)
        return ViewParams(
            boxes=boxes,
            flip=flip,
            jitter_factors=factors,
            jitter_order=order,
            grayscale=gray,
            blur_sigma=torch.where(blur, sigma, 0.0),
            solarize=solar,
        )

    def _normalisation(self, device: torch.device) -> tuple[Tensor, Tensor]:
        if device not in self._norm:
            mean = torch.tensor(self.mean, dtype=torch.float32).reshape(1, -1, 1, 1)
            std = torch.tensor(self.std, dtype=torch.float32).reshape(1, -1, 1, 1)
            self._norm[device] = (mean.to(device), std.to(device))
        return self._norm[device]

    def apply(self, images: Tensor, params: ViewParams, repeats: int = 1) -> Tensor:
        """Make the views of ``images`` with given per-sample parameters.

        Args:
            images: ``uint8`` or ``[0, 1]`` float images on any device. Shape: ``(B, C, H, W)``,
                ``C = len(mean)``.
            params: ``repeats × B`` parameter sets on the CPU (:meth:`sample`); they go to the images'
                device in one copy. Set ``r * B + i`` makes a view of image ``i``. The colour jitter's hue
                rounds are grouped from them on the CPU
                (:func:`~hf_contrast.views.batched_ops.hue_groups`): the batch is processed in
                that order and put back in its own order at the end.

            repeats: How many views of each image ``params`` holds.

        Returns:
            Normalised float32 views. Shape: ``(repeats × B, C, *image_size)``.
        """
        with torch.autocast(images.device.type, enabled=False):  # float32 maths inside a bf16/fp16 autocast
            return self._apply(images, params, repeats)

    def _apply(self, images: Tensor, params: ViewParams, repeats: int = 1) -> Tensor:
        device = images.device
        if self._compiled is not None:
            return self._compiled(images, params.packed_on(device), repeats, *self._normalisation(device))
        if self._graphs is not None and device.type == "cuda" and self._graph_fits(images, len(params)):
            mean, std = self._normalisation(device)
            graphed = functools.partial(self._static_pass, repeats=repeats, mean=mean, std=std)
            key = (tuple(images.shape), images.dtype, device, repeats)
            return self._graphs(key, graphed, images, params.packed_on(device))
        jitter = self.jitter_p > 0 and images.shape[1] == 3
        perm = hue_counts = None
        if jitter:
            perm, hue_counts = ops.hue_groups(params.jitter_factors, params.jitter_order)
            params = params.select(perm)
            rows = perm % images.shape[0] if repeats > 1 else perm  # the image each (sorted) parameter set views
            both = torch.stack([perm, rows])
            both = (both.pin_memory() if device.type == "cuda" else both).to(device, non_blocking=True)
            perm, rows = both[0], both[1]
            images = images.index_select(0, rows)
        elif repeats > 1:
            images = images.repeat(repeats, 1, 1, 1)
        x = self._pass(images, params.to(device), hue_counts, *self._normalisation(device))
        if perm is not None:
            x = torch.empty_like(x).index_copy_(0, perm, x)
        return x

    def _graph_fits(self, images: Tensor, rows: int) -> bool:
        """Whether the pass's largest float32 tensor (``rows`` rows at the input or output size) is under
        :data:`_CUDA_GRAPH_MAX_BYTES`."""
        pixels = max(math.prod(images.shape[-2:]), math.prod(self.image_size))
        return 4 * rows * images.shape[1] * pixels <= _CUDA_GRAPH_MAX_BYTES

    def _static_pass(self, images: Tensor, packed: Tensor, repeats: int, mean: Tensor, std: Tensor) -> Tensor:
        """The pass whose shapes follow from its inputs' alone, what ``torch.compile`` compiles and a CUDA graph
        replays: ``repeats`` views of every image of ``images`` (``(B, C, H, W)``) with the parameter sets ``packed``
        (:meth:`ViewParams.packed_on <hf_contrast.views.ViewParams.packed_on>`, ``(repeats × B, 16)``, set
        ``r * B + i`` for image ``i``), unpacked on the device, the hue rotation computed for every row."""
        rows = images.repeat(repeats, 1, 1, 1) if repeats > 1 else images
        return self._pass(rows, ViewParams.unpack(packed), None, mean, std)

    def _pass(self, images: Tensor, p: ViewParams, hue_counts: list[int] | None, mean: Tensor, std: Tensor) -> Tensor:
        """The views of ``images`` (``(N, C, H, W)``, one row per parameter set of ``p``, on one device).

        ``hue_counts``: the rows are sorted by hue round (:func:`~hf_contrast.views.batched_ops.hue_groups`), or
        ``None`` (the rotation computed for every row every round and kept where it applies).
        """
        x = images.float().div_(255.0) if images.dtype == torch.uint8 else images.float()
        x = ops.resized_crop(x, p.boxes, self.image_size, flip=p.flip, antialias=self.antialias)
        if self.jitter_p > 0 and x.shape[1] == 3:
            x = ops.color_jitter(x, p.jitter_factors, p.jitter_order, hue_counts)
        if self.recipe.grayscale_p > 0 and x.shape[1] == 3:
            x = torch.where(p.grayscale.reshape(-1, 1, 1, 1), ops.rgb_to_grayscale(x).expand_as(x), x)
        if self.recipe.blur_p > 0:
            x = ops.gaussian_blur(x, p.blur_sigma, self.blur_kernel)
        if self.recipe.solarize_p > 0:
            x = ops.solarize(x, p.solarize, self.recipe.solarize_threshold)
        return (x - mean) / std

    def __call__(
        self, images: Tensor, generator: torch.Generator | None = None, *, chunk_size: int | None = None
    ) -> Tensor:
        """One random view of every sample (or one shared view per chunk of ``chunk_size`` rows).

        Args:
            images: ``uint8`` or ``[0, 1]`` float images on any device. Shape: ``(B, C, H, W)``
                with ``C = len(mean)``.
            generator: CPU generator of the parameter draws (``None``: torch's global one); e.g.
                :meth:`generator` of the batch index.
            chunk_size: ``m``: rows ``c*m:(c+1)*m`` share one parameter set, each chunk its own
                (CARE's equivariance views, https://arxiv.org/abs/2306.13924, Algorithm 1);
                ``None``: every row its own.

        Returns:
            Normalised float32 views on the images' device. Shape: ``(B, C, *image_size)``.

        Raises:
            ValueError: on a tensor that is not ``(B, C, H, W)`` uint8/float with ``C = len(mean)``,
                or a ``chunk_size`` that does not divide ``B``.
        """
        self._check_images(images)
        return self.apply(images, self._draw(images, generator, chunk_size))

    def _check_images(self, images: Tensor) -> None:
        if not isinstance(images, Tensor) or images.ndim != 4:
            got = tuple(images.shape) if isinstance(images, Tensor) else type(images).__name__
            raise InputError(f"`images` must be a tensor of shape (B, C, H, W), got {got}.")
        if images.dtype != torch.uint8 and not images.is_floating_point():
            raise InputError(f"`images` must be uint8 or float in [0, 1], got dtype {images.dtype}.")
        channels = images.shape[1]
        if channels != len(self.mean):
            raise InputError(
                f"`images` has {channels} channels but `mean`/`std` have {len(self.mean)}; convert the images "
                f"(e.g. `raw_image_transform(size, n_channels={len(self.mean)})`) or pass matching mean/std."
            )
        if images.shape[0] == 0:
            raise InputError("`images` is an empty batch (B = 0).")

    def many(
        self,
        images: Tensor,
        generator: torch.Generator | None,
        chunk_sizes: Sequence[int | None],
        order: Sequence[int] | None = None,
    ) -> list[Tensor]:
        """Several random views of the batch made in ONE batched pass: the same views as calling
        ``self(images, generator, chunk_size=c)`` for each ``c`` of ``chunk_sizes`` in turn (the parameters are
        drawn in that order), with the kernels of one call instead of ``len(chunk_sizes)``. On a CPU, once the
        views would exceed :data:`_CPU_ONE_PASS_BYTES` of float32, each view gets a pass of its own instead (the
        same views; faster there, where a pass's working set leaves the cache, and no kernel launches to save).

        Args:
            images: As :meth:`__call__`. Shape: ``(B, C, H, W)``.
            generator: CPU generator of the parameter draws.
            chunk_sizes: Per view: ``None`` (every row its own parameters) or ``m`` (chunks of ``m`` rows share
                one set, CARE's equivariance views).
            order: How the views lie in memory (a permutation of the view numbers; default: as drawn): the views
                are consecutive slices of one ``(V × B, C, *image_size)`` tensor in this order, so concatenating
                them in this order (:meth:`ImageViews.merge <hf_contrast.views.ImageViews.merge>`) copies nothing.

        Returns:
            One normalised float32 tensor per view, in the order of ``chunk_sizes``. Shape: ``(B, C, *image_size)``
            each.
        """
        self._check_images(images)
        batch, count = images.shape[0], len(chunk_sizes)
        drawn = [self._draw(images, generator, chunk) for chunk in chunk_sizes]
        order = list(range(count)) if order is None else [int(i) for i in order]
        if sorted(order) != list(range(count)):
            raise InputError(f"`order` must be a permutation of 0..{count - 1}, got {order}.")
        view_bytes = count * batch * images.shape[1] * math.prod(self.image_size) * 4
        if self._compiled is None and images.device.type == "cpu" and view_bytes > _CPU_ONE_PASS_BYTES:
            return [self.apply(images, params) for params in drawn]  # the same views, one pass each
        made = self.apply(images, ViewParams.cat([drawn[i] for i in order]), repeats=count).split(batch)
        views: list[Tensor] = [made[0]] * count
        for slot, view in enumerate(order):
            views[view] = made[slot]
        return views

    def _draw(self, images: Tensor, generator: torch.Generator | None, chunk_size: int | None) -> ViewParams:
        """The parameters of one view of ``images`` (one per row, or one per chunk of ``chunk_size`` rows)."""
        batch = images.shape[0]
        if chunk_size is None:
            return self.sample(batch, tuple(images.shape[-2:]), generator)
        if not isinstance(chunk_size, int) or chunk_size < 1 or batch % chunk_size != 0:
            raise InputError(
                f"`chunk_size` must be a positive int dividing the batch size {batch}, got {chunk_size!r}."
            )
        return self.sample(batch // chunk_size, tuple(images.shape[-2:]), generator).repeat_interleave(chunk_size)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(image_size={self.image_size}, {self.recipe}, blur_kernel={self.blur_kernel}, "
            f"antialias={self.antialias}, seed={self.seed}"
            + ("" if self.cuda_graphs else ", cuda_graphs=False")
            + ("" if self.compile is None else f", compile={self.compile}")
            + ")"
        )
