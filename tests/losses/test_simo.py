"""SimO and AFCL against docs/methods.md §5 reference loops, closed forms, module, numerics."""

from __future__ import annotations

import pytest
import torch

from hf_contrast.losses import AFCLLoss, SimOLoss, afcl_loss, simo_loss


def reference_simo(e: torch.Tensor, y: float, eps: float = 1e-6) -> float:
    """docs/methods.md §5 as a loop over the unordered pairs i < j, in float64."""
    e = e.double()
    m = e.shape[0]
    d_sum = o_sum = 0.0
    n_pairs = 0
    for i in range(m):
        for j in range(i + 1, m):
            d_sum += float((e[i] - e[j]).pow(2).sum())
            o_sum += float(e[i] @ e[j]) ** 2
            n_pairs += 1
    return (y * d_sum / (eps + o_sum) + (1 - y) * o_sum / (eps + d_sum)) / n_pairs


def reference_afcl(e: torch.Tensor, n_classes: int, olean: float, eps: float = 1e-6) -> tuple[float, float, float]:
    """The three AFCL terms from explicit per-class / per-index groups (class-major rows)."""
    k = e.shape[0] // n_classes
    classes = [e[c * k : (c + 1) * k] for c in range(n_classes)]
    same = sum(reference_simo(classes[c], 1.0, eps) for c in range(n_classes))
    means = torch.stack([classes[c].double().mean(dim=0) for c in range(n_classes)])
    mean = reference_simo(means, olean, eps)
    diff = sum(reference_simo(torch.stack([classes[c][j] for c in range(n_classes)]), olean, eps) for j in range(k))
    return same, mean, diff


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)


@pytest.mark.parametrize("m", [2, 3, 7])
@pytest.mark.parametrize("y", [0.0, 0.3, 1.0])
def test_simo_matches_reference_loop(gen: torch.Generator, m: int, y: float) -> None:
    e = torch.randn(m, 5, generator=gen)
    got = simo_loss(e, y)
    assert got.shape == () and got.dtype == torch.float32
    assert got.item() == pytest.approx(reference_simo(e, y), rel=1e-5)


def test_simo_closed_forms() -> None:
    orthogonal = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    # Dsum = 2, Osum = 0: dissimilar label gives 0, similar label 2 / eps.
    assert simo_loss(orthogonal, 0.0).item() == 0.0
    assert simo_loss(orthogonal, 1.0, eps=0.5).item() == pytest.approx(4.0)
    # Identical vectors: Dsum = 0, Osum = ||v||^4 = 4; y = 1 gives 0, y = 0 gives 4 / eps.
    same = torch.tensor([[1.0, 1.0], [1.0, 1.0]], dtype=torch.float64)
    assert simo_loss(same, 1.0).item() == 0.0
    assert simo_loss(same, 0.0, eps=0.5).item() == pytest.approx(8.0)
    # (1, 0) and (1, 1): d = 1, o = 1, so the value is 1 / (1 + eps) whatever y.
    e = torch.tensor([[1.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
    for y in (0.0, 0.25, 1.0):
        assert simo_loss(e, y, eps=0.5).item() == pytest.approx(1 / 1.5)
    # Standard basis of R^3: P = 3, Dsum = 6, Osum = 0 -> y * 6 / eps / 3.
    assert simo_loss(torch.eye(3, dtype=torch.float64), 0.5, eps=0.5).item() == pytest.approx(2.0)


def test_simo_grouped_equals_stacked_calls(gen: torch.Generator) -> None:
    e = torch.randn(4, 5, 3, generator=gen)
    got = simo_loss(e, 0.2)
    assert got.shape == (4,)
    torch.testing.assert_close(got, torch.stack([simo_loss(g, 0.2) for g in e]))


def test_simo_per_group_labels(gen: torch.Generator) -> None:
    e = torch.randn(3, 4, 6, generator=gen)
    y = torch.tensor([0.0, 0.5, 1.0])
    torch.testing.assert_close(simo_loss(e, y), torch.stack([simo_loss(g, float(v)) for g, v in zip(e, y)]))
    torch.testing.assert_close(simo_loss(e, torch.tensor(0.5)), simo_loss(e, 0.5))


def test_simo_tight_group_keeps_precision(gen: torch.Generator) -> None:
    """Nearly identical rows: Dsum from centred rows, not m·Σ||e||² − ||Σe||² (cancellation)."""
    center = 3.0 * torch.randn(1, 8, generator=gen)
    e = center + 1e-4 * torch.randn(6, 8, generator=gen)  # float32 input
    assert simo_loss(e, 1.0).item() == pytest.approx(reference_simo(e, 1.0), rel=1e-3)


def test_simo_nearly_orthogonal_group_keeps_precision(gen: torch.Generator) -> None:
    """Nearly orthogonal rows: Osum from the masked Gram matrix, not ||G||² − Σ G_ii²."""
    e = 3.0 * torch.eye(6, 8) + 1e-4 * torch.randn(6, 8, generator=gen)
    assert simo_loss(e, 0.0).item() == pytest.approx(reference_simo(e, 0.0), rel=1e-3)


def test_simo_gradcheck_float64(gen: torch.Generator) -> None:
    e = torch.randn(2, 4, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: simo_loss(t, 0.3, eps=1e-3), (e,))
    assert torch.autograd.gradcheck(lambda t: simo_loss(t[0], 1.0), (e,))


def _bf16_check(fn, x: torch.Tensor, weight: torch.Tensor) -> None:
    """bf16 autocast: finite, float32, within 1e-2 of the float32 pipeline, and computed in
    float32 (equal to the float32 loss of the very same bf16 embeddings)."""
    ref = fn(x @ weight.T)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        z = torch.nn.functional.linear(x, weight)
        assert z.dtype == torch.bfloat16
        got = fn(z)
    assert got.dtype == torch.float32
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, ref, rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(got, fn(z.float()), rtol=1e-5, atol=1e-6)


def test_bf16_autocast_finite_and_close_to_float32(gen: torch.Generator) -> None:
    x = torch.randn(24, 16, generator=gen)
    weight = torch.randn(8, 16, generator=gen) / 4
    _bf16_check(lambda z: simo_loss(z.view(4, 6, 8), 0.5), x, weight)
    _bf16_check(lambda z: afcl_loss(z, n_classes=3), x, weight)


def test_simo_module(gen: torch.Generator) -> None:
    e = torch.randn(3, 4, 5, generator=gen)
    module = SimOLoss(y=0.2)
    torch.testing.assert_close(module(e[0]), simo_loss(e[0], 0.2))
    torch.testing.assert_close(module(e), simo_loss(e, 0.2).sum())
    assert module.get_config_dict() == {"y": 0.2, "eps": 1e-6}
    assert "Anchor-Free Contrastive Loss" in SimOLoss.citation


# ----------------------------------------------------------------------------- AFCL


@pytest.mark.parametrize(("n_classes", "k"), [(2, 2), (3, 4), (5, 3)])
@pytest.mark.parametrize("olean", [0.0, 0.01, 0.5])
def test_afcl_matches_reference_loop(gen: torch.Generator, n_classes: int, k: int, olean: float) -> None:
    e = torch.randn(n_classes * k, 6, generator=gen)
    same, mean, diff = reference_afcl(e, n_classes, olean)
    out = AFCLLoss(n_classes, olean=olean)(e)
    assert out["same"].item() == pytest.approx(same, rel=1e-5)
    assert out["mean"].item() == pytest.approx(mean, rel=1e-5)
    assert out["diff"].item() == pytest.approx(diff, rel=1e-5)
    assert afcl_loss(e, n_classes, olean=olean).item() == pytest.approx(same + mean + diff, rel=1e-5)
    torch.testing.assert_close(out["loss"], out["same"] + out["mean"] + out["diff"])


def test_afcl_flat_equals_grouped(gen: torch.Generator) -> None:
    e = torch.randn(3, 4, 5, generator=gen)
    torch.testing.assert_close(afcl_loss(e.reshape(12, 5), 3), afcl_loss(e, 3))
    # The layout matters: sample-major rows are a different batch.
    assert not torch.allclose(afcl_loss(e.transpose(0, 1).reshape(12, 5), 3), afcl_loss(e, 3))


def test_afcl_module_equals_functional(gen: torch.Generator) -> None:
    e = torch.randn(12, 5, generator=gen)
    module = AFCLLoss(n_classes=4, olean=0.05, eps=1e-5)
    torch.testing.assert_close(module(e)["loss"], afcl_loss(e, 4, olean=0.05, eps=1e-5))
    assert module.get_config_dict() == {"n_classes": 4, "olean": 0.05, "eps": 1e-5, "gather_distributed": False}
    assert AFCLLoss.citation == SimOLoss.citation


def test_afcl_gradcheck_float64(gen: torch.Generator) -> None:
    e = torch.randn(6, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: afcl_loss(t, 3, olean=0.1, eps=1e-3), (e,))


# ----------------------------------------------------------------------------- errors


def test_error_group_smaller_than_two() -> None:
    with pytest.raises(ValueError, match=r"`e` must have at least 2 samples per group.*\(3, 1, 4\)"):
        simo_loss(torch.randn(3, 1, 4), 1.0)


@pytest.mark.parametrize("shape", [(4,), (2, 2, 2, 2)])
def test_error_wrong_rank(shape: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match=r"`e` must have shape \(m, D\) or \(G, m, D\)"):
        simo_loss(torch.randn(shape), 1.0)


@pytest.mark.parametrize("y", [-0.1, 1.5])
def test_error_label_outside_unit_interval(y: float) -> None:
    with pytest.raises(ValueError, match=r"`y` must be in \[0, 1\]"):
        simo_loss(torch.randn(3, 4), y)


def test_error_tensor_label_values() -> None:
    with pytest.raises(ValueError, match=r"`y` must have values in \[0, 1\]"):
        simo_loss(torch.randn(2, 3, 4), torch.tensor([0.5, 2.0]))


def test_error_tensor_label_shape() -> None:
    with pytest.raises(ValueError, match=r"`y` must be a scalar or shape \(2,\).*got shape \(3,\)"):
        simo_loss(torch.randn(2, 3, 4), torch.tensor([0.5, 0.5, 0.5]))


def test_error_non_positive_eps() -> None:
    with pytest.raises(ValueError, match=r"`eps` must be > 0, got 0.0"):
        simo_loss(torch.randn(3, 4), 1.0, eps=0.0)


def test_error_non_finite() -> None:
    e = torch.randn(3, 4)
    e[0, 0] = float("inf")
    with pytest.raises(ValueError, match=r"`e` contains NaN or infinite values"):
        simo_loss(e, 1.0)


def test_error_afcl_rows_not_divisible() -> None:
    with pytest.raises(ValueError, match=r"10 rows are not divisible by `n_classes`=3"):
        afcl_loss(torch.randn(10, 4), n_classes=3)


def test_error_afcl_grouped_class_mismatch() -> None:
    with pytest.raises(ValueError, match=r"must have `n_classes`=3 rows on axis 0"):
        afcl_loss(torch.randn(4, 3, 5), n_classes=3)


def test_error_afcl_one_sample_per_class() -> None:
    with pytest.raises(
        ValueError, match=r"k >= 2 samples per class .*, got k=1 for `n_classes`=3 \(3 rows\): give at least 6"
    ):
        afcl_loss(torch.randn(3, 4), n_classes=3)  # the classes asked for are the fix as much as the rows: both named


@pytest.mark.parametrize("bad", [1, 0, 2.0])
def test_error_afcl_n_classes(bad: object) -> None:
    with pytest.raises(ValueError, match=r"`n_classes` must be an integer >= 2"):
        afcl_loss(torch.randn(4, 4), n_classes=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"`n_classes` must be an integer >= 2"):
        AFCLLoss(n_classes=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("olean", [-0.01, 1.01])
def test_error_olean_outside_unit_interval(olean: float) -> None:
    with pytest.raises(ValueError, match=r"`olean` must be in \[0, 1\]"):
        afcl_loss(torch.randn(6, 4), n_classes=3, olean=olean)
    with pytest.raises(ValueError, match=r"`olean` must be in \[0, 1\]"):
        AFCLLoss(n_classes=3, olean=olean)


def test_error_afcl_wrong_rank() -> None:
    with pytest.raises(ValueError, match=r"`e` must have shape \(C\*k, D\) class-major or \(C, k, D\)"):
        afcl_loss(torch.randn(12), n_classes=3)


def test_error_module_label() -> None:
    with pytest.raises(ValueError, match=r"`y` must be in \[0, 1\], got 2.0"):
        SimOLoss(y=2.0)
