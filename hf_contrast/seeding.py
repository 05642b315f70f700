"""Seeded blocks of random draws that leave the caller's random state as it was."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["seeded_cpu_rng"]


@contextmanager
def seeded_cpu_rng(seed: int) -> Iterator[None]:
    """Run a block with the global CPU generator seeded to ``seed``, restoring it afterwards.

    torchvision v2 draws all random parameters with the global CPU generator (also for images on
    an accelerator), so forking that generator alone makes a transform call reproducible. Accelerator
    generators are neither forked nor reseeded: dropout on a GPU keeps its own stream.
    """
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(seed)
        yield
