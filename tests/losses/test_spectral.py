"""Spectral contrastive loss (docs/methods.md §9): reference loop, closed forms, invariances, gradients."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from _launch import free_port, launch_env

from hf_contrast.losses import SpectralContrastiveLoss, spectral_contrastive_loss


def reference_spectral(z1: torch.Tensor, z2: torch.Tensor) -> float:
    """Float64 double loop written from docs/methods.md §9."""
    a, b = z1.double().tolist(), z2.double().tolist()
    n = len(a)
    dot = lambda u, v: sum(x * y for x, y in zip(u, v))  # noqa: E731
    positive = sum(dot(a[i], b[i]) for i in range(n))
    negative = sum(dot(a[i], b[j]) ** 2 for i in range(n) for j in range(n) if i != j)
    return -2.0 / n * positive + negative / (n * (n - 1))


@pytest.mark.parametrize("shape", [(12, 5), (4, 9), (2, 2)])  # D < B (Gram path), D > B (similarity path)
def test_matches_reference_loop(shape: tuple[int, int]) -> None:
    g = torch.Generator().manual_seed(0)
    z1, z2 = torch.randn(*shape, generator=g), torch.randn(*shape, generator=g)
    expected = reference_spectral(z1, z2)
    assert spectral_contrastive_loss(z1, z2).item() == pytest.approx(expected, rel=1e-5, abs=1e-5)
    z1, z2 = z1.double(), z2.double()
    assert spectral_contrastive_loss(z1, z2).item() == pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_gram_and_similarity_paths_agree() -> None:
    # B = D is the boundary: compare with D = B + 1 by zero-padding one dimension (same loss).
    g = torch.Generator().manual_seed(1)
    z1, z2 = torch.randn(6, 6, generator=g, dtype=torch.float64), torch.randn(6, 6, generator=g, dtype=torch.float64)
    pad = lambda z: torch.cat([z, torch.zeros(6, 1, dtype=z.dtype)], dim=1)  # noqa: E731
    torch.testing.assert_close(spectral_contrastive_loss(z1, z2), spectral_contrastive_loss(pad(z1), pad(z2)))


def test_closed_forms() -> None:
    # Orthonormal rows, identical views scaled by c: -2 c^2 (no cross-sample overlap).
    for c in (0.5, 1.0, 2.0):
        z = c * torch.eye(5)
        assert spectral_contrastive_loss(z, z).item() == pytest.approx(-2 * c**2, rel=1e-6)
    # Every embedding equal to v: -2|v|^2 + |v|^4, minimal (-1) at |v| = 1.
    v = torch.tensor([0.6, 0.8]) * 1.5
    z = v.expand(7, 2).clone()
    assert spectral_contrastive_loss(z, z).item() == pytest.approx(-2 * 1.5**2 + 1.5**4, rel=1e-6)


def test_invariant_to_a_global_rotation_but_not_to_scale() -> None:
    g = torch.Generator().manual_seed(2)
    z1, z2 = torch.randn(10, 4, generator=g, dtype=torch.float64), torch.randn(10, 4, generator=g, dtype=torch.float64)
    q, _ = torch.linalg.qr(torch.randn(4, 4, generator=g, dtype=torch.float64))
    loss = spectral_contrastive_loss(z1, z2)
    torch.testing.assert_close(spectral_contrastive_loss(z1 @ q.T, z2 @ q.T), loss)
    assert not torch.allclose(spectral_contrastive_loss(2 * z1, 2 * z2), loss)  # raw, not normalised


def test_functional_equals_module() -> None:
    g = torch.Generator().manual_seed(3)
    z1, z2 = torch.randn(8, 3, generator=g), torch.randn(8, 3, generator=g)
    module = SpectralContrastiveLoss()
    torch.testing.assert_close(module(z1, z2), spectral_contrastive_loss(z1, z2), rtol=0, atol=0)
    assert module.get_config_dict() == {"gather_distributed": False}
    assert "haochen2021provable" in module.citation


@pytest.mark.parametrize("shape", [(6, 3), (3, 6)])
def test_gradcheck(shape: tuple[int, int]) -> None:
    g = torch.Generator().manual_seed(4)
    z1 = torch.randn(*shape, generator=g, dtype=torch.float64, requires_grad=True)
    z2 = torch.randn(*shape, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(spectral_contrastive_loss, (z1, z2))


def test_bf16_autocast_is_float32_and_close() -> None:
    torch.manual_seed(5)
    layer = torch.nn.Linear(8, 6)
    x1, x2 = torch.randn(16, 8), torch.randn(16, 8)
    reference = spectral_contrastive_loss(layer(x1), layer(x2))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        h1, h2 = layer(x1), layer(x2)
        assert h1.dtype == torch.bfloat16
        loss = spectral_contrastive_loss(h1, h2)
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    torch.testing.assert_close(loss, reference, rtol=1e-2, atol=1e-2)


def test_error_not_a_tensor() -> None:
    with pytest.raises(ValueError, match="`z1` must be a torch.Tensor"):
        spectral_contrastive_loss([[1.0, 2.0]], torch.zeros(1, 2))  # type: ignore[arg-type]


def test_error_wrong_rank() -> None:
    with pytest.raises(ValueError, match=r"`z2` must have shape \(B, D\)"):
        spectral_contrastive_loss(torch.zeros(4, 2), torch.zeros(4, 2, 1))


def test_error_integer_dtype() -> None:
    with pytest.raises(ValueError, match="`z1` must be a floating-point tensor"):
        spectral_contrastive_loss(torch.zeros(4, 2, dtype=torch.long), torch.zeros(4, 2))


def test_error_shape_mismatch() -> None:
    with pytest.raises(ValueError, match=r"`z1` and `z2` must have the same shape, got \(4, 2\) and \(5, 2\)"):
        spectral_contrastive_loss(torch.zeros(4, 2), torch.zeros(5, 2))


def test_error_batch_of_one() -> None:
    with pytest.raises(ValueError, match=r"at least 2 samples.*\(1, 3\)"):
        spectral_contrastive_loss(torch.zeros(1, 3), torch.zeros(1, 3))


def test_error_non_finite() -> None:
    z = torch.zeros(4, 2)
    z[1, 1] = float("nan")
    with pytest.raises(ValueError, match="`z2` contains NaN"):
        spectral_contrastive_loss(torch.zeros(4, 2), z)


_WORKER = textwrap.dedent(
    """
    import json, sys
    import torch, torch.distributed as dist
    from hf_contrast.losses import spectral_contrastive_loss
    from process_end import finish_process

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # same global data and model on every process
    model = torch.nn.Linear(5, 3, dtype=torch.float64)
    x1, x2 = torch.randn(8, 5, dtype=torch.float64), torch.randn(8, 5, dtype=torch.float64)
    local = slice(0, 3) if rank == 0 else slice(3, 8)  # unequal local batch sizes
    loss = spectral_contrastive_loss(model(x1[local]), model(x2[local]), gather_distributed=True)
    loss.backward()
    dist_values = [loss.detach().clone(), model.weight.grad.clone(), model.bias.grad.clone()]
    for t in dist_values:  # what DDP/Accelerate do: average over processes
        dist.all_reduce(t)
        t /= world
    if rank == 0:
        model.zero_grad()
        single = spectral_contrastive_loss(model(x1), model(x2))  # one process, whole batch
        single.backward()
        diffs = [float((a - b).abs().max()) for a, b in zip(dist_values, [single, model.weight.grad, model.bias.grad])]
        with open(sys.argv[1], "w") as f:
            json.dump({"loss": float(single), "max_diff": max(diffs)}, f)
    finish_process()  # every rank waits, then leaves without closing the group (see process_end.py)
    """
)


@pytest.mark.distributed
def test_gather_distributed_equals_single_process(tmp_path: Path) -> None:
    worker = tmp_path / "worker.py"
    worker.write_text(_WORKER)
    port = free_port()
    result_file = tmp_path / "result.json"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_port",
        str(port),
        str(worker),
        str(result_file),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=launch_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(result_file.read_text())
    assert result["loss"] != 0.0
    assert result["max_diff"] < 1e-10  # loss and both parameter gradients
