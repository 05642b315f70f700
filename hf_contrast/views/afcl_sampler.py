"""Batch sampler for anchor-free contrastive learning (SimO): C classes × k samples, class-major.

SimO's AFCL objective (https://arxiv.org/abs/2410.05233, Algorithm 2; docs/methods.md §5) reshapes a
batch of embeddings to ``(C, k, D)``: ``k`` samples from each of ``C`` distinct classes, in
class-major order. The paper found training unstable when a batch covers many classes and draws
fewer than half of the classes per batch; :class:`AFCLBatchSampler` enforces that.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Sampler

import hf_contrast.distributed as distributed
from hf_contrast.errors import InputError
from hf_contrast.tensor_checks import check_int

__all__ = ["AFCLBatchSampler"]


def _check_labels_1d(labels: Any) -> torch.Tensor:
    try:
        array = labels if isinstance(labels, torch.Tensor) else torch.as_tensor(np.asarray(labels))
    except (TypeError, ValueError) as error:
        raise InputError(f"`labels` must be a 1-D sequence of int class ids, got {type(labels).__name__}.") from error
    if array.ndim != 1 or array.numel() == 0:
        raise InputError(
            f"`labels` must be a non-empty 1-D sequence of int class ids, got shape {tuple(array.shape)}."
        )
    if array.is_floating_point() or array.is_complex() or array.dtype == torch.bool:
        raise InputError(f"`labels` must hold int class ids, got dtype {array.dtype}.")
    return array.detach().cpu().long()


class AFCLBatchSampler(Sampler[list[int]]):
    """Yield class-major batches of ``classes_per_batch × samples_per_class`` dataset indices.

    Paper: https://arxiv.org/abs/2410.05233 (SimO / AFCL); docs/methods.md §5. Every batch lists ``k``
    indices of class ``c_1``, then ``k`` of ``c_2``, ..., ``k`` of ``c_C``, so that the embeddings
    reshape to ``(C, k, D)``. The ``C`` classes of a batch are distinct and drawn uniformly
    (without replacement within the batch); ``C`` must be fewer than half the number of classes
    (the paper's stability fix).

    Epoch: ``floor(N / (C·k·R))`` batches per replica (``ceil`` with ``drop_last=False``), where
    ``N = len(labels)`` and ``R = num_replicas``, i.e. about one pass over the data in total
    (or ``batches_per_epoch`` if given).
    Every batch is full; ``drop_last`` only rounds the epoch length. Classes are drawn uniformly, whatever
    their size (class-balanced: small classes are revisited within an epoch, large ones are not
    exhausted). Within a class, samples are taken in random cycles -- a fresh permutation of the
    class whenever fewer than ``k`` of the current one remain (those few are skipped for that
    cycle) -- so no index repeats inside a batch or inside a cycle. With ``replacement=True``
    the ``k`` samples of a class are drawn with replacement, which allows classes with fewer than
    ``k`` samples. With ``shuffle=False`` classes are taken in sorted order, ``C`` at a time,
    cyclically, and samples in dataset order (deterministic, same every epoch).

    Order and distribution: the batch stream of an epoch depends only on ``seed + epoch``; the
    epoch is set by :meth:`set_epoch` and advances by one after every complete iteration (so it
    changes even if nobody calls ``set_epoch``). Replica ``r`` of ``R`` gets global batches
    ``r, r+R, r+2R, ...``: the replicas' batches are distinct and equally many. Under
    ``torch.distributed`` ``num_replicas``/``rank`` default to the process group's. When the
    ``DataLoader`` is prepared by Accelerate (or ``transformers.Trainer``), Accelerate already
    shards the batches across processes: pass ``num_replicas=1, rank=0`` there.

    Args:
        labels: Class id of every dataset item (list, NumPy array or tensor). Shape: ``(N,)``.
        classes_per_batch: ``C``, the number of distinct classes per batch, ``2C < n_classes``.
        samples_per_class: ``k``, the number of samples of each class per batch.
        batch_size: Optional total batch size; if given it must equal ``C·k``.
        shuffle: Draw classes and samples at random (default) or deterministically.
        seed: Base seed, shared by all replicas.
        drop_last: Round the per-replica epoch length down (default) or up.
        replacement: Draw the ``k`` samples of a class with replacement.
        num_replicas: Number of processes sharing the stream; default ``world_size()``.
        rank: This process's index in ``[0, num_replicas)``; default ``rank()``.
        batches_per_epoch: Optional fixed number of batches per replica and epoch, replacing
            the ``N / (C·k·R)`` default (e.g. to define epochs by iterations).
        distinct_across: ``A``, the consecutive batches of the stream that hold ``A·C`` distinct classes (batches
            ``0 .. A-1``, ``A .. 2A-1``, …): the batches one step gives ``A`` processes, which SimO with
            ``gather_distributed=True`` scores as one batch. The stream's length is then a multiple of ``A`` (its
            last batches are dropped) and ``2·A·C`` must be fewer than the classes. Default 1: each batch alone.

    Raises:
        ValueError: if ``labels`` is not a non-empty 1-D int sequence, ``C`` or ``k`` is not a
            positive int, ``2C >= n_classes``, ``batch_size != C·k``, a class has fewer than
            ``k`` samples while ``replacement=False``, ``rank`` is outside ``[0, num_replicas)``,
            or the data is too small for one batch per replica.

    >>> sampler = AFCLBatchSampler([0, 0, 1, 1, 2, 2, 3, 3, 4, 4], classes_per_batch=2, samples_per_class=2)
    >>> len(sampler), [len(b) for b in sampler]
    (2, [4, 4])
    """

    def __init__(
        self,
        labels: Sequence[int] | np.ndarray | torch.Tensor,
        classes_per_batch: int,
        samples_per_class: int,
        *,
        batch_size: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = True,
        replacement: bool = False,
        num_replicas: int | None = None,
        rank: int | None = None,
        batches_per_epoch: int | None = None,
        distinct_across: int = 1,
    ) -> None:
        label_tensor = _check_labels_1d(labels)
        self.classes_per_batch = check_int("classes_per_batch", classes_per_batch, 1)
        self.distinct_across = check_int("distinct_across", distinct_across, 1)
        self.samples_per_class = check_int("samples_per_class", samples_per_class, 1)
        self.batch_size = self.classes_per_batch * self.samples_per_class
        if batch_size is not None and batch_size != self.batch_size:
            raise InputError(
                f"`batch_size`={batch_size} must equal `classes_per_batch` × `samples_per_class` = "
                f"{self.classes_per_batch} × {self.samples_per_class} = {self.batch_size}."
            )
        classes, counts = torch.unique(label_tensor, return_counts=True)
        n_classes = classes.numel()
        if 2 * self.classes_per_batch * self.distinct_across >= n_classes:
            if self.distinct_across == 1:
                raise InputError(
                    f"`classes_per_batch`={self.classes_per_batch} must be fewer than half the number of classes "
                    f"({n_classes} in `labels`), i.e. at most {(n_classes - 1) // 2} (SimO's stability fix)."
                )
            most = (n_classes - 1) // (2 * self.distinct_across)
            fix = f"use `classes_per_batch` ≤ {most}" if most else "too few classes for that many batches"
            raise InputError(
                f"`classes_per_batch`={self.classes_per_batch} × `distinct_across`={self.distinct_across} = "
                f"{self.classes_per_batch * self.distinct_across} classes, in {self.distinct_across} batches "
                f"scored as one, must be fewer than half the number of classes ({n_classes} in `labels`): {fix} "
                "(SimO's stability fix)."
            )
        if not replacement:
            small = [(int(c), int(n)) for c, n in zip(classes, counts) if n < self.samples_per_class]
            if small:
                shown = ", ".join(f"class {c} has {n}" for c, n in small[:5]) + (" ..." if len(small) > 5 else "")
                raise InputError(
                    f"every class needs at least `samples_per_class`={self.samples_per_class} samples when "
                    f"`replacement=False`, but {shown}; pass `replacement=True` or drop those classes."
                )
        if num_replicas is None:
            self.num_replicas = distributed.world_size()
        else:
            self.num_replicas = check_int("num_replicas", num_replicas, 1)
        self.rank = distributed.rank() if rank is None else rank
        if not isinstance(self.rank, (int, np.integer)) or not 0 <= self.rank < self.num_replicas:
            raise InputError(f"`rank` must be an int in [0, {self.num_replicas}), got {self.rank!r}.")
        n_items = label_tensor.numel()
        per_round = self.batch_size * self.num_replicas
        if batches_per_epoch is not None:
            self.num_batches = check_int("batches_per_epoch", batches_per_epoch, 1)
        else:
            self.num_batches = n_items // per_round if drop_last else math.ceil(n_items / per_round)
        whole = self.distinct_across // math.gcd(self.distinct_across, self.num_replicas)  # replica batches per window
        if batches_per_epoch is not None and self.num_batches % whole:
            raise InputError(
                f"`batches_per_epoch`={batches_per_epoch} must be a multiple of {whole}: with `distinct_across`="
                f"{self.distinct_across} over {self.num_replicas} replica(s) the stream ends on a whole window."
            )
        self.num_batches -= self.num_batches % whole  # the stream ends with a whole window
        if self.num_batches == 0:
            raise InputError(
                f"`labels` has {n_items} items, fewer than one batch of {self.batch_size} for each of "
                f"{self.num_replicas} replicas; use smaller batches or `drop_last=False`."
            )
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.drop_last = bool(drop_last)
        self.replacement = bool(replacement)
        self.epoch = 0
        order = torch.argsort(label_tensor, stable=True)
        self._class_ids = classes.tolist()
        self._class_indices = [chunk.tolist() for chunk in torch.split(order, counts.tolist())]

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose batch order the next iteration yields (same on every replica)."""
        self.epoch = int(epoch)

    def __len__(self) -> int:
        """Number of batches this replica yields per epoch."""
        return self.num_batches

    def _global_batches(self, epoch: int) -> list[list[int]]:
        """The first ``num_batches · num_replicas`` batches of the epoch's stream."""
        generator = torch.Generator().manual_seed(self.seed + epoch)
        n_classes, c, k = len(self._class_ids), self.classes_per_batch, self.samples_per_class
        queues: list[list[int]] = [[] for _ in range(n_classes)]
        cursor = [0] * n_classes  # deterministic order: position in the class's list

        def take(cls: int) -> list[int]:
            members = self._class_indices[cls]
            if self.replacement:
                if self.shuffle:
                    picks = torch.randint(len(members), (k,), generator=generator).tolist()
                else:
                    picks = [(cursor[cls] + j) % len(members) for j in range(k)]
                    cursor[cls] = (cursor[cls] + k) % len(members)
                return [members[p] for p in picks]
            if len(queues[cls]) < k:  # start a new cycle; the < k leftovers wait for the next one
                full = len(members) // k * k
                if self.shuffle:
                    perm = torch.randperm(len(members), generator=generator).tolist()
                else:
                    perm = range(len(members))
                queues[cls] = [members[p] for p in perm][:full][::-1]  # reversed: pop() from the end
            return [queues[cls].pop() for _ in range(k)]

        batches = []
        window = self.distinct_across  # batches drawn together: distinct classes across them
        for w in range(self.num_batches * self.num_replicas // window):
            if self.shuffle:
                chosen = torch.randperm(n_classes, generator=generator)[: c * window].tolist()
            else:
                chosen = [(w * c * window + j) % n_classes for j in range(c * window)]
            for b in range(window):
                batches.append([index for cls in chosen[b * c : (b + 1) * c] for index in take(cls)])
        return batches

    def __iter__(self) -> Iterator[list[int]]:
        """Yield this replica's batches of the current epoch, then advance the epoch by one."""
        batches = self._global_batches(self.epoch)
        yield from batches[self.rank :: self.num_replicas]
        self.epoch += 1

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(classes_per_batch={self.classes_per_batch}, "
            f"samples_per_class={self.samples_per_class}, num_batches={self.num_batches}, shuffle={self.shuffle}, "
            f"replacement={self.replacement}, num_replicas={self.num_replicas}, rank={self.rank}"
            + (f", distinct_across={self.distinct_across})" if self.distinct_across > 1 else ")")
        )
