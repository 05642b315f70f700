"""Alignment and uniformity against docs/methods.md §6 reference loops, the authors' code, closed forms."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from _launch import free_port, launch_env

from hf_contrast.losses import AlignUniformLoss, alignment_loss, uniformity_loss


def reference_alignment(x: torch.Tensor, y: torch.Tensor, alpha: float, normalize: bool = True) -> float:
    x, y = x.double(), y.double()
    if normalize:
        x, y = F.normalize(x, dim=1), F.normalize(y, dim=1)
    return sum(float((x[i] - y[i]).norm()) ** alpha for i in range(x.shape[0])) / x.shape[0]


def reference_uniformity(x: torch.Tensor, t: float, normalize: bool = True) -> float:
    """log mean_{i<j} exp(-t ||x_i - x_j||²) as a pair loop, max-subtracted, in float64."""
    x = x.double()
    if normalize:
        x = F.normalize(x, dim=1)
    logits = [-t * float((x[i] - x[j]).pow(2).sum()) for i in range(x.shape[0]) for j in range(i + 1, x.shape[0])]
    top = max(logits)
    return top + math.log(sum(math.exp(v - top) for v in logits) / len(logits))


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)


@pytest.mark.parametrize("alpha", [1.0, 2.0, 3.0])
@pytest.mark.parametrize("normalize", [True, False])
def test_alignment_matches_reference_loop(gen: torch.Generator, alpha: float, normalize: bool) -> None:
    x, y = torch.randn(2, 10, 5, generator=gen)
    got = alignment_loss(x, y, alpha=alpha, normalize=normalize)
    assert got.dtype == torch.float32
    assert got.item() == pytest.approx(reference_alignment(x, y, alpha, normalize), rel=1e-5)


@pytest.mark.parametrize("t", [0.5, 2.0])
@pytest.mark.parametrize("normalize", [True, False])
def test_uniformity_matches_reference_loop(gen: torch.Generator, t: float, normalize: bool) -> None:
    x = torch.randn(12, 5, generator=gen)
    got = uniformity_loss(x, t=t, normalize=normalize)
    assert got.dtype == torch.float32
    assert got.item() == pytest.approx(reference_uniformity(x, t, normalize), rel=1e-5, abs=1e-6)


def test_uniformity_matches_authors_pdist_code(gen: torch.Generator) -> None:
    x = F.normalize(torch.randn(32, 16, generator=gen), dim=1)
    for t in (1.0, 2.0):
        expected = torch.pdist(x, p=2).pow(2).mul(-t).exp().mean().log()
        torch.testing.assert_close(uniformity_loss(x, t=t), expected, rtol=1e-5, atol=1e-5)


def test_alignment_matches_authors_code(gen: torch.Generator) -> None:
    x, y = F.normalize(torch.randn(2, 16, 8, generator=gen), dim=-1)
    torch.testing.assert_close(alignment_loss(x, y), (x - y).norm(p=2, dim=1).pow(2).mean())


def test_closed_forms() -> None:
    e = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    assert alignment_loss(e[:1], e[1:]).item() == pytest.approx(2.0)  # orthogonal unit pair
    assert alignment_loss(e, e).item() == 0.0
    antipodal = torch.tensor([[1.0, 0.0], [-1.0, 0.0]])
    assert uniformity_loss(antipodal, t=2).item() == pytest.approx(-8.0)
    assert uniformity_loss(torch.ones(5, 3)).item() == pytest.approx(0.0, abs=1e-6)  # collapsed
    # Regular simplex of 3 points on the circle: every squared distance is 3.
    angles = torch.tensor([0.0, 2 * math.pi / 3, 4 * math.pi / 3])
    simplex = torch.stack([angles.cos(), angles.sin()], dim=1)
    assert uniformity_loss(simplex, t=2).item() == pytest.approx(-6.0, abs=1e-5)


def test_uniformity_stable_for_large_t(gen: torch.Generator) -> None:
    x = torch.eye(6, 8) + 0.05 * torch.randn(6, 8, generator=gen)  # all squared distances ≈ 2
    naive = torch.pdist(F.normalize(x, dim=1)).pow(2).mul(-500.0).exp().mean().log()
    assert not torch.isfinite(naive)  # exp underflows: log(0)
    got = uniformity_loss(x, t=500.0)
    assert torch.isfinite(got)
    assert got.item() == pytest.approx(reference_uniformity(x, 500.0), rel=1e-5)


def test_gradcheck_float64(gen: torch.Generator) -> None:
    x = torch.randn(6, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    y = torch.randn(6, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    for normalize in (True, False):
        assert torch.autograd.gradcheck(lambda a: uniformity_loss(a, t=2, normalize=normalize), (x,))
        for alpha in (2.0, 3.0):
            assert torch.autograd.gradcheck(
                lambda a, b: alignment_loss(a, b, alpha=alpha, normalize=normalize), (x, y)
            )


def test_alignment_gradient_finite_for_identical_pairs() -> None:
    x = torch.randn(4, 3, requires_grad=True)
    alignment_loss(x, x.detach()).backward()
    assert torch.isfinite(x.grad).all()


def test_bf16_autocast_finite_and_close_to_float32(gen: torch.Generator) -> None:
    x1, x2 = torch.randn(2, 32, 16, generator=gen)
    weight = torch.randn(8, 16, generator=gen) / 4
    module = AlignUniformLoss()
    ref = module(x1 @ weight.T, x2 @ weight.T)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        z1, z2 = F.linear(x1, weight), F.linear(x2, weight)
        assert z1.dtype == torch.bfloat16
        got = module(z1, z2)
    same_inputs = module(z1.float(), z2.float())
    for key in ("align", "uniform", "loss"):
        assert got[key].dtype == torch.float32
        assert torch.isfinite(got[key])
        torch.testing.assert_close(got[key], ref[key], rtol=1e-2, atol=1e-2)
        torch.testing.assert_close(got[key], same_inputs[key])  # float32 math inside


def test_module_equals_functional(gen: torch.Generator) -> None:
    z1, z2 = torch.randn(2, 12, 6, generator=gen)
    module = AlignUniformLoss(align_weight=0.5, uniform_weight=2.0, alpha=3, t=1.5)
    out = module(z1, z2)
    assert set(out) == {"align", "uniform", "loss"}
    torch.testing.assert_close(out["align"], 0.5 * alignment_loss(z1, z2, alpha=3))
    expected_u = 2.0 * (uniformity_loss(z1, t=1.5) + uniformity_loss(z2, t=1.5)) / 2
    torch.testing.assert_close(out["uniform"], expected_u)
    torch.testing.assert_close(out["loss"], out["align"] + out["uniform"])
    assert module.get_config_dict() == {
        "align_weight": 0.5,
        "uniform_weight": 2.0,
        "alpha": 3.0,
        "t": 1.5,
        "normalize": True,
        "gather_distributed": False,
        "tile_size": None,
    }
    assert "Alignment and Uniformity on the Hypersphere" in AlignUniformLoss.citation


def test_gather_distributed_without_process_group_is_local(gen: torch.Generator) -> None:
    x = torch.randn(8, 4, generator=gen)
    torch.testing.assert_close(uniformity_loss(x, gather_distributed=True), uniformity_loss(x))


_WORKER = textwrap.dedent(
    """
    import sys, torch, torch.distributed as dist
    import torch.nn.functional as F
    from hf_contrast.losses import uniformity_loss
    from process_end import finish_process
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    full = torch.randn(10, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    sizes = [4, 6]  # unequal local batches
    start = sum(sizes[:rank])
    x = full[start:start + sizes[rank]].clone().requires_grad_()
    loss = uniformity_loss(x, t=2, gather_distributed=True)
    loss.backward()
    # Reference: one process on the whole batch, the authors' form (every ordered pair of distinct rows).
    xf = full.clone().requires_grad_()
    ref = torch.pdist(F.normalize(xf, dim=1)).pow(2).mul(-2).exp().mean().log()
    # Every rank computes the global value; the gather's backward sums the ranks' gradients to each row's owner,
    # so a rank holds `world` times its rows' share, and DDP's mean over ranks gives the one-process gradient.
    g = torch.autograd.grad(ref, xf)[0]
    assert torch.allclose(loss.detach(), ref.detach(), atol=1e-10), (loss, ref)
    assert torch.allclose(x.grad, world * g[start:start + sizes[rank]], atol=1e-10), (x.grad, g)
    with open(f"{sys.argv[1]}.{rank}", "w") as f:  # a file per rank: stdout lines can interleave
        f.write("OK")
    finish_process()  # every rank waits, then leaves without closing the group (see process_end.py)
    """
)


@pytest.mark.distributed
def test_uniformity_gather_two_processes(tmp_path: Path) -> None:
    """Real 2-process gloo run, unequal local batches: each rank's value is one process's on the whole batch, and its
    gradient that process's share (times the ranks, which DDP's mean divides out)."""
    script = tmp_path / "worker.py"
    script.write_text(_WORKER)
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
        "--master_port", str(free_port()), str(script), str(tmp_path / "ok"),
    ]  # fmt: skip
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=launch_env())
    assert result.returncode == 0, result.stdout + result.stderr
    assert [(tmp_path / f"ok.{rank}").read_text() for rank in (0, 1)] == ["OK", "OK"]


# ----------------------------------------------------------------------------- errors


def test_error_shape_mismatch() -> None:
    with pytest.raises(ValueError, match=r"`x` and `y` must have the same shape, got \(4, 3\) and \(5, 3\)"):
        alignment_loss(torch.randn(4, 3), torch.randn(5, 3))


def test_error_wrong_rank() -> None:
    with pytest.raises(ValueError, match=r"`x` must have shape \(B, D\)"):
        uniformity_loss(torch.randn(4))
    with pytest.raises(ValueError, match=r"`y` must have shape \(B, D\)"):
        alignment_loss(torch.randn(4, 3), torch.randn(4, 3, 1))


def test_error_non_positive_alpha() -> None:
    with pytest.raises(ValueError, match=r"`alpha` must be > 0, got 0.0"):
        alignment_loss(torch.randn(4, 3), torch.randn(4, 3), alpha=0)


def test_error_non_positive_t() -> None:
    with pytest.raises(ValueError, match=r"`t` must be > 0, got -1.0"):
        uniformity_loss(torch.randn(4, 3), t=-1)


def test_error_single_row() -> None:
    with pytest.raises(ValueError, match=r"`x` must have at least 2 rows.*got shape \(1, 3\)"):
        uniformity_loss(torch.randn(1, 3))


def test_error_non_finite() -> None:
    x = torch.randn(4, 3)
    x[1, 1] = float("nan")
    with pytest.raises(ValueError, match=r"`x` contains NaN or infinite values"):
        uniformity_loss(x)


def test_error_negative_weights() -> None:
    with pytest.raises(ValueError, match=r"`align_weight` must be >= 0"):
        AlignUniformLoss(align_weight=-1.0)
    with pytest.raises(ValueError, match=r"`uniform_weight` must be >= 0"):
        AlignUniformLoss(uniform_weight=-1.0)


@pytest.mark.parametrize("alpha", [0.5, 1.0, 1.5, 2.0, 3.0])
def test_alignment_gradient_is_zero_on_identical_pairs_and_analytic_elsewhere(alpha: float) -> None:
    g = torch.Generator().manual_seed(4)
    x = torch.randn(4, 5, generator=g, dtype=torch.float64, requires_grad=True)
    y = x.detach().clone()
    y[2:] += torch.randn(2, 5, generator=g, dtype=torch.float64)  # rows 0, 1 identical
    alignment_loss(x, y, alpha=alpha, normalize=False).backward()
    d = x.detach() - y
    norm = d.norm(dim=1, keepdim=True)
    want = torch.where(norm > 0, alpha * norm.clamp(min=1e-300) ** (alpha - 2) * d, torch.zeros_like(d)) / 4
    assert torch.isfinite(x.grad).all()
    torch.testing.assert_close(x.grad, want, rtol=1e-12, atol=1e-12)
    assert torch.equal(x.grad[:2], torch.zeros(2, 5, dtype=torch.float64))
