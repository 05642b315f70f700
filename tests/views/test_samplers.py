"""AFCL batch sampler: class-major C × k batches, epochs, replicas, errors."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections import Counter

import numpy as np
import pytest
import torch
from _launch import free_port, launch_env
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader, TensorDataset

from hf_contrast.views import AFCLBatchSampler


def _labels(n_classes: int = 10, per_class: int = 20, seed: int = 0) -> list[int]:
    labels = [c for c in range(n_classes) for _ in range(per_class)]
    rng = np.random.default_rng(seed)
    rng.shuffle(labels)
    return labels


def _class_major_ok(batch: list[int], labels: list[int], c: int, k: int) -> bool:
    groups = [[labels[i] for i in batch[g * k : (g + 1) * k]] for g in range(c)]
    return all(len(set(g)) == 1 for g in groups) and len({g[0] for g in groups}) == c


@pytest.mark.parametrize("replacement", [False, True])
@pytest.mark.parametrize("shuffle", [True, False])
def test_batches_are_class_major_with_distinct_classes(shuffle: bool, replacement: bool) -> None:
    labels = _labels()
    sampler = AFCLBatchSampler(labels, 3, 4, shuffle=shuffle, replacement=replacement, num_replicas=1, rank=0)
    batches = list(sampler)
    assert len(batches) == len(sampler) == 200 // 12
    for batch in batches:
        assert len(batch) == 12 and _class_major_ok(batch, labels, 3, 4)
        if not replacement:
            assert len(set(batch)) == 12  # no index twice in a batch


def test_embeddings_reshape_to_classes_by_samples() -> None:
    labels = torch.tensor(_labels())
    batch = next(iter(AFCLBatchSampler(labels, 4, 5, num_replicas=1, rank=0)))
    grid = labels[batch].view(4, 5)
    assert torch.all(grid == grid[:, :1]) and grid[:, 0].unique().numel() == 4


def test_without_replacement_a_class_cycles_through_all_its_samples() -> None:
    """Within a class, no index repeats before (almost) all of the class has been used."""
    labels = _labels(n_classes=5, per_class=12)
    sampler = AFCLBatchSampler(labels, 2, 4, num_replicas=1, rank=0)
    taken: dict[int, list[int]] = {}
    for batch in sampler:
        for index in batch:
            taken.setdefault(labels[index], []).append(index)
    for sequence in taken.values():
        for start in range(0, len(sequence) - 12 + 1, 12):  # each full cycle of 12 = 3 groups of 4
            assert len(set(sequence[start : start + 12])) == 12


def test_classes_are_drawn_uniformly() -> None:
    labels = [0] * 200 + [1] * 20 + [2] * 20 + [3] * 20 + [4] * 20 + [5] * 20  # imbalanced
    sampler = AFCLBatchSampler(labels, 2, 4, num_replicas=1, rank=0, replacement=True)
    counts = Counter()
    for epoch in range(20):
        sampler.set_epoch(epoch)
        counts.update(labels[i] for batch in sampler for i in batch[::4])  # first index of each class group
    freq = np.array([counts[c] for c in range(6)], dtype=float)
    assert freq.min() / freq.max() > 0.7  # each class in about 1/3 of the batches, regardless of its size


def test_epoch_determinism_and_change() -> None:
    labels = _labels()
    a = AFCLBatchSampler(labels, 3, 4, seed=1, num_replicas=1, rank=0)
    b = AFCLBatchSampler(labels, 3, 4, seed=1, num_replicas=1, rank=0)
    for sampler in (a, b):
        sampler.set_epoch(5)
    assert list(a) == list(b)
    a.set_epoch(5)
    first = list(a)
    a.set_epoch(6)
    assert list(a) != first
    assert list(AFCLBatchSampler(labels, 3, 4, seed=2, num_replicas=1, rank=0)) != list(
        AFCLBatchSampler(labels, 3, 4, seed=1, num_replicas=1, rank=0)
    )


def test_epoch_advances_after_a_full_pass() -> None:
    sampler = AFCLBatchSampler(_labels(), 3, 4, num_replicas=1, rank=0)
    first, second = list(sampler), list(sampler)
    assert sampler.epoch == 2 and first != second
    sampler.set_epoch(0)
    assert list(sampler) == first


def test_shuffle_false_is_the_same_every_epoch() -> None:
    sampler = AFCLBatchSampler(_labels(), 3, 4, shuffle=False, num_replicas=1, rank=0)
    assert list(sampler) == list(sampler)


@pytest.mark.parametrize("drop_last", [True, False])
def test_len_matches_iteration_count_and_rounding(drop_last: bool) -> None:
    labels = _labels(n_classes=7, per_class=10)  # 70 items, batches of 3 × 4 = 12, 2 replicas: 70 / 24
    for rank in (0, 1):
        sampler = AFCLBatchSampler(labels, 3, 4, drop_last=drop_last, num_replicas=2, rank=rank)
        assert len(sampler) == (2 if drop_last else 3) == len(list(sampler))


def test_replicas_partition_the_global_stream() -> None:
    labels = _labels(n_classes=9, per_class=40)
    world = [AFCLBatchSampler(labels, 2, 5, seed=3, num_replicas=3, rank=r) for r in range(3)]
    single = AFCLBatchSampler(labels, 2, 5, seed=3, num_replicas=1, rank=0)
    per_rank = [list(s) for s in world]
    assert len({len(b) for b in per_rank}) == 1 and len(per_rank[0]) == len(world[0]) == 360 // 30
    stream = list(single)
    interleaved = [per_rank[i % 3][i // 3] for i in range(3 * len(per_rank[0]))]
    assert interleaved == stream[: len(interleaved)]  # replica r gets global batches r, r+3, ...

    # a short epoch uses less than one cycle of every class: then no index is shared by two replicas
    short = [list(AFCLBatchSampler(labels, 2, 5, num_replicas=3, rank=r, batches_per_epoch=2)) for r in range(3)]
    flat = [{index for batch in batches for index in batch} for batches in short]
    assert sum(map(len, flat)) == 3 * 2 * 10 and not (flat[0] & flat[1] or flat[0] & flat[2] or flat[1] & flat[2])


def test_works_as_a_dataloader_batch_sampler() -> None:
    labels = torch.tensor(_labels())
    data = TensorDataset(torch.arange(len(labels)), labels)
    loader = DataLoader(data, batch_sampler=AFCLBatchSampler(labels, 3, 4, num_replicas=1, rank=0))
    assert len(loader) == 16
    for indices, batch_labels in loader:
        assert batch_labels.shape == (12,) and torch.equal(batch_labels, labels[indices])


def test_defaults_replicas_from_the_process_group(monkeypatch: pytest.MonkeyPatch) -> None:
    from hf_contrast import distributed

    monkeypatch.setattr(distributed, "world_size", lambda: 4)
    monkeypatch.setattr(distributed, "rank", lambda: 3)
    sampler = AFCLBatchSampler(_labels(), 3, 4)
    assert (sampler.num_replicas, sampler.rank, len(sampler)) == (4, 3, 200 // 48)


@pytest.mark.distributed
def test_two_real_processes_get_distinct_batches(tmp_path) -> None:
    script = tmp_path / "worker.py"
    script.write_text(
        textwrap.dedent(
            """
            import json, sys
            import torch.distributed as dist
            from hf_contrast.views import AFCLBatchSampler
            from process_end import finish_process
            dist.init_process_group("gloo")
            labels = [c for c in range(10) for _ in range(30)]
            sampler = AFCLBatchSampler(labels, 3, 5, seed=4)
            sampler.set_epoch(2)
            out = {"rank": sampler.rank, "replicas": sampler.num_replicas, "batches": list(sampler)}
            with open(sys.argv[1] + f".{dist.get_rank()}", "w") as f:
                json.dump(out, f)
            finish_process()  # every rank waits, then leaves without closing the group (see process_end.py)
            """
        )
    )
    result_base = str(tmp_path / "out")
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_port",
        str(free_port()),
        str(script),
        result_base,
    ]
    completed = subprocess.run(cmd, env=launch_env(), capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr[-2000:]
    import json

    outs = [json.load(open(f"{result_base}.{r}")) for r in (0, 1)]
    assert [(o["rank"], o["replicas"]) for o in outs] == [(0, 2), (1, 2)]
    assert len(outs[0]["batches"]) == len(outs[1]["batches"]) == 300 // 30
    reference = AFCLBatchSampler([c for c in range(10) for _ in range(30)], 3, 5, seed=4, num_replicas=2, rank=1)
    reference.set_epoch(2)
    assert outs[1]["batches"] == list(reference)
    assert not set(map(tuple, outs[0]["batches"])) & set(map(tuple, outs[1]["batches"]))


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("labels", "kwargs", "match"),
    [
        ([0, 1, 2, 3, 4, 5], {"classes_per_batch": 3}, "`classes_per_batch`=3 must be fewer than half .* \\(6 in"),
        ([0] * 4 + [1] * 4 + [2] * 4 + [3] * 4 + [4] * 2, {}, "class 4 has 2"),
        ([[0, 1], [1, 0]], {}, "`labels` must be a non-empty 1-D sequence"),
        ([], {}, "`labels` must be a non-empty 1-D sequence"),
        ([0.0, 1.0, 2.0, 3.0, 4.0], {}, "`labels` must hold int class ids, got dtype torch.float"),
        (["a", "b"], {}, "`labels` must be a 1-D sequence of int class ids"),
        (
            _labels(),
            {"batch_size": 10},
            "`batch_size`=10 must equal `classes_per_batch` × `samples_per_class` = 2 × 4",
        ),
        (_labels(), {"samples_per_class": 0}, "`samples_per_class` must be an integer >= 1, got 0"),
        (_labels(), {"classes_per_batch": 1.5}, "`classes_per_batch` must be an integer >= 1"),
        (_labels(), {"rank": 2, "num_replicas": 2}, "`rank` must be an int in \\[0, 2\\), got 2"),
        (_labels(per_class=4), {"num_replicas": 8, "rank": 0}, "fewer than one batch of 8 for each of 8 replicas"),
        (_labels(), {"distinct_across": 0}, "`distinct_across` must be an integer >= 1, got 0"),
        (
            _labels(),
            {"distinct_across": 2, "batches_per_epoch": 3},
            "`batches_per_epoch`=3 must be a multiple of 2: with `distinct_across`=2 over 1 replica",
        ),
        (_labels(), {"distinct_across": 3}, "`classes_per_batch`=2 × `distinct_across`=3 = 6 classes"),
    ],
)
def test_errors(labels: object, kwargs: dict, match: str) -> None:
    args = {"classes_per_batch": 2, "samples_per_class": 4} | kwargs
    if "num_replicas" not in args:
        args |= {"num_replicas": 1, "rank": args.get("rank", 0)}
    with pytest.raises(ValueError, match=match):
        AFCLBatchSampler(labels, **args)


def test_replacement_allows_small_classes() -> None:
    labels = [0] * 4 + [1] * 4 + [2] * 4 + [3] * 4 + [4] * 2
    batches = list(AFCLBatchSampler(labels, 2, 4, replacement=True, num_replicas=1, rank=0, seed=0))
    assert batches and all(_class_major_ok(b, labels, 2, 4) for b in batches)


@settings(max_examples=60, deadline=None)
@given(
    n_classes=st.integers(3, 12),
    per_class=st.integers(2, 9),
    c=st.integers(1, 3),
    k=st.integers(1, 3),
    across=st.integers(1, 4),
    replicas=st.integers(1, 3),
    shuffle=st.booleans(),
    replacement=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_batches_scored_as_one_hold_distinct_classes(
    n_classes, per_class, c, k, across, replicas, shuffle, replacement, seed
) -> None:
    """`distinct_across=A` (SimO with `gather_distributed=True` on A processes): each aligned window of A batches of
    the stream holds A·C distinct classes, class-major, k samples each; the stream ends with a whole window; and the
    window's batches, joined, are the batch a sampler of A·C classes per batch draws (the same seed): A processes
    score what one process on A times the classes would."""
    labels = _labels(n_classes, per_class, seed)
    options = dict(shuffle=shuffle, replacement=replacement, seed=seed)
    if 2 * c * across >= n_classes or (not replacement and per_class < k):
        with pytest.raises(ValueError):
            AFCLBatchSampler(labels, c, k, distinct_across=across, num_replicas=1, rank=0, **options)
        return
    try:
        sampler = AFCLBatchSampler(labels, c, k, distinct_across=across, num_replicas=replicas, rank=0, **options)
    except ValueError as error:  # too little data for one whole window
        assert "fewer than one batch" in str(error)
        return
    stream = sampler._global_batches(0)
    assert len(stream) % across == 0 and len(stream) == len(sampler) * replicas
    one = AFCLBatchSampler(labels, c * across, k, num_replicas=1, rank=0, **options)._global_batches(0)
    for w in range(len(stream) // across):
        window = stream[w * across : (w + 1) * across]
        assert all(_class_major_ok(batch, labels, c, k) for batch in window)
        joined = [index for batch in window for index in batch]
        assert _class_major_ok(joined, labels, c * across, k)  # A·C distinct classes
        if w < len(one):
            assert joined == one[w]
