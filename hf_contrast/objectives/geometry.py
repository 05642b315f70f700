"""What the geometry did during training: statistics an objective logs next to its loss terms.

- :func:`negative_cosine_counts` — of the pairs of different classes in a batch, how many have a negative
  cosine similarity. SupCon and OCL log the fraction as ``negative_cos_below_zero``: OCL's loss equals
  SupCon's on a batch where it is 0 (OCL takes ``|cos|`` of those pairs), so a run where it stays 0 trains
  exactly as SupCon would (docs/methods.md §3).
- :func:`class_mean_abs_cosine` — the mean ``|cos|`` between the class means of a class-major batch, which
  SimO drives to 0 (orthogonal classes); logged as ``class_mean_abs_cos``.
- :class:`GeometryMonitor` — accumulates such ratios on the device during training (no host sync per step)
  and reads them once per log, where the Trainer syncs anyway, averaged over processes.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor

import hf_contrast.distributed as distributed

from ..tensor_checks import l2_normalize

__all__ = ["negative_cosine_counts", "class_mean_abs_cosine", "GeometryMonitor"]


@torch.no_grad()
def negative_cosine_counts(z: Tensor, labels: Tensor, block_size: int = 4096) -> tuple[Tensor, Tensor]:
    """``(pairs of different labels with cos < 0, pairs of different labels)``, ordered pairs, as device tensors.

    The cosine matrix is built ``block_size`` rows at a time, so memory stays ``block_size × N`` however
    large the batch (the losses' tiled forms never build it either).

    Args:
        z: Embeddings (any norm). Shape: ``(N, D)``.
        labels: Integer class of each row. Shape: ``(N,)``.
        block_size: Rows of the cosine matrix per block.

    Returns:
        Two scalar ``int64`` tensors on ``z``'s device; their ratio is the fraction of negative pairs with a
        negative cosine (rows of the same label, a sample's own views included, are not negative pairs).

    >>> z = torch.tensor([[1.0, 0.0], [-1.0, 0.1], [0.0, 1.0]])
    >>> [int(c) for c in negative_cosine_counts(z, torch.tensor([0, 1, 1]))]
    [2, 4]
    """
    unit = l2_normalize(z.detach().float())
    labels = labels.to(z.device)
    below = torch.zeros((), dtype=torch.long, device=z.device)
    total = torch.zeros((), dtype=torch.long, device=z.device)
    for start in range(0, unit.shape[0], block_size):
        rows = slice(start, start + block_size)
        negative = labels[rows, None] != labels[None, :]
        below += (negative & (unit[rows] @ unit.T < 0)).sum()
        total += negative.sum()
    return below, total


@torch.no_grad()
def class_mean_abs_cosine(embeddings: Tensor, n_classes: int) -> Tensor:
    """Mean ``|cos|`` between the means of the ``n_classes`` consecutive, equal groups of a class-major batch.

    Args:
        embeddings: Class-major rows, ``n_classes`` groups of ``N / n_classes``. Shape: ``(N, D)``.
        n_classes: Number of groups ``C >= 2``.

    Returns:
        A scalar float tensor in ``[0, 1]``: 0 when the class means are mutually orthogonal.

    >>> e = torch.tensor([[1.0, 0.0], [2.0, 0.0], [0.0, 1.0], [0.0, 3.0]])
    >>> float(class_mean_abs_cosine(e, 2))
    0.0
    """
    n, dim = embeddings.shape
    means = l2_normalize(embeddings.detach().float().reshape(n_classes, n // n_classes, dim).mean(dim=1))
    cos = (means @ means.T).abs()
    off_diagonal = ~torch.eye(n_classes, dtype=torch.bool, device=cos.device)
    return cos[off_diagonal].mean()


class GeometryMonitor:
    """Named ratios ``Σ numerator / Σ denominator`` accumulated on the device between logs.

    :meth:`add` costs no host sync; :meth:`drain` reads every ratio once (summed over processes when
    distributed: every process must call it at the same steps, as the Trainer's ``log`` does) and resets
    the interval. :meth:`totals` gives the sums since the monitor was built (one read).
    """

    def __init__(self) -> None:
        self._interval: dict[str, Tensor] = {}
        self._total: dict[str, Tensor] = {}
        #: Training steps (micro-batches) recorded since the monitor was built.
        self.steps = 0

    def add(self, name: str, numerator: Tensor, denominator: Tensor | float = 1.0) -> None:
        """Add one batch's ``numerator`` and ``denominator`` (device tensors or numbers) to ``name``."""
        device = numerator.device if isinstance(numerator, Tensor) else None
        dtype = torch.float32 if device is not None and device.type == "mps" else torch.float64  # MPS has no float64
        value = torch.stack([torch.as_tensor(x, dtype=dtype, device=device) for x in (numerator, denominator)])
        for store in (self._interval, self._total):
            store[name] = store[name] + value if name in store else value

    def count_step(self) -> None:
        """One more training micro-batch recorded."""
        self.steps += 1

    def drain(self) -> dict[str, float]:
        """``{name: ratio}`` over the interval since the last call (and all processes); resets the interval."""
        interval, self._interval = self._interval, {}
        sums = _reduced(interval)
        return {name: num / den for name, (num, den) in sums.items() if den > 0}

    def totals(self) -> dict[str, tuple[float, float]]:
        """``{name: (Σ numerator, Σ denominator)}`` since the monitor was built, on this process."""
        return _reduced(self._total, over_processes=False)


def _reduced(sums: dict[str, Tensor], over_processes: bool = True) -> dict[str, tuple[float, float]]:
    """The sums (over processes: every process records the same names, the objective adds them every step),
    read from the device at once."""
    names = sorted(sums)
    if not names:
        return {}
    stacked = torch.stack([sums[name] for name in names])
    if over_processes and distributed.world_size() > 1:
        dist.all_reduce(stacked, op=dist.ReduceOp.SUM)
    return {name: (float(num), float(den)) for name, (num, den) in zip(names, stacked.tolist())}
