"""VICReg (docs/methods.md §9): reference loop, lightly, closed forms, invariances, gradients, errors."""

from __future__ import annotations

import math

import pytest
import torch

from hf_contrast.losses import VICRegLoss, vicreg_loss


def reference_vicreg(
    z1: torch.Tensor,
    z2: torch.Tensor,
    lam: float = 25.0,
    mu: float = 25.0,
    nu: float = 1.0,
    gamma: float = 1.0,
    eps: float = 1e-4,
) -> dict[str, float]:
    """Float64 loops written from docs/methods.md §9 (unbiased variance and covariance)."""
    a, b = z1.double().tolist(), z2.double().tolist()
    n, d = len(a), len(a[0])
    invariance = sum((a[i][k] - b[i][k]) ** 2 for i in range(n) for k in range(d)) / n / d

    def var_cov(z: list[list[float]]) -> tuple[float, float]:
        means = [sum(z[i][k] for i in range(n)) / n for k in range(d)]
        cov = [
            [sum((z[i][k] - means[k]) * (z[i][l] - means[l]) for i in range(n)) / (n - 1) for l in range(d)]
            for k in range(d)
        ]
        v = sum(max(0.0, gamma - math.sqrt(cov[k][k] + eps)) for k in range(d)) / d
        c = sum(cov[k][l] ** 2 for k in range(d) for l in range(d) if k != l) / d
        return v, c

    (v1, c1), (v2, c2) = var_cov(a), var_cov(b)
    terms = {"invariance": lam * invariance, "variance": mu * (v1 + v2) / 2, "covariance": nu * (c1 + c2)}
    terms["loss"] = sum(terms.values())
    return terms


def _views(
    seed: int, b: int = 10, d: int = 4, dtype: torch.dtype = torch.float32
) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    # scale 0.5 so that some dimensions have std < 1 and the variance hinge is active
    z1 = 0.5 * torch.randn(b, d, generator=g, dtype=dtype)
    return z1, z1 + 0.3 * torch.randn(b, d, generator=g, dtype=dtype)


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"invariance_weight": 1.0, "variance_weight": 2.0, "covariance_weight": 3.0, "gamma": 0.7, "eps": 1e-3}],
)
def test_matches_reference_loop(kwargs: dict[str, float]) -> None:
    z1, z2 = _views(0)
    names = {"invariance_weight": "lam", "variance_weight": "mu", "covariance_weight": "nu"}
    expected = reference_vicreg(z1, z2, **{names.get(k, k): v for k, v in kwargs.items()})
    out = VICRegLoss(**kwargs)(z1, z2)
    assert set(out) == {"invariance", "variance", "covariance", "loss"}
    for key, value in expected.items():
        assert out[key].item() == pytest.approx(value, rel=1e-5, abs=1e-6), key
    assert expected["variance"] > 0 and expected["covariance"] > 0  # every term exercised
    out64 = VICRegLoss(**kwargs)(z1.double(), z2.double())
    assert out64["loss"].item() == pytest.approx(expected["loss"], rel=1e-12)


@pytest.mark.parametrize("weights", [(25.0, 25.0, 1.0), (1.0, 0.5, 0.04)])
def test_equals_lightly(weights: tuple[float, float, float]) -> None:
    lightly_loss = pytest.importorskip("lightly.loss")
    lam, mu, nu = weights
    for seed, (b, d) in enumerate([(16, 8), (5, 12), (64, 32)]):
        z1, z2 = _views(seed, b, d)
        theirs = lightly_loss.VICRegLoss(lambda_param=lam, mu_param=mu, nu_param=nu, eps=1e-4)(z1, z2)
        ours = vicreg_loss(z1, z2, invariance_weight=lam, variance_weight=mu, covariance_weight=nu)
        torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-6)


def test_closed_forms() -> None:
    # Identical, decorrelated views with std > gamma: every term is 0.
    z = torch.tensor([[1.0, 1.0], [1.0, -1.0], [-1.0, 1.0], [-1.0, -1.0]])  # var 4/3, cov 0
    out = VICRegLoss()(z, z)
    for key in ("invariance", "variance", "covariance", "loss"):
        assert out[key].item() == pytest.approx(0.0, abs=1e-7), key
    # Collapsed (constant) identical views: only the variance hinge, mu * (gamma - sqrt(eps)).
    c = torch.full((6, 3), 0.7)
    assert vicreg_loss(c, c).item() == pytest.approx(25.0 * (1.0 - math.sqrt(1e-4)), rel=1e-6)
    assert vicreg_loss(c, c, gamma=2.0).item() == pytest.approx(25.0 * (2.0 - math.sqrt(1e-4)), rel=1e-6)
    # Views differing by a constant shift s in every coordinate: invariance = lambda * s^2.
    out = VICRegLoss()(z, z + 0.5)
    assert out["invariance"].item() == pytest.approx(25.0 * 0.25, rel=1e-6)


def test_invariant_to_a_common_translation() -> None:
    z1, z2 = _views(1, dtype=torch.float64)
    shift = torch.randn(1, 4, dtype=torch.float64)
    torch.testing.assert_close(vicreg_loss(z1 + shift, z2 + shift), vicreg_loss(z1, z2))


def test_functional_equals_module_and_terms_sum() -> None:
    z1, z2 = _views(2)
    kwargs = {"invariance_weight": 5.0, "variance_weight": 10.0, "covariance_weight": 2.0, "gamma": 1.5, "eps": 1e-3}
    module = VICRegLoss(**kwargs)
    out = module(z1, z2)
    torch.testing.assert_close(out["loss"], vicreg_loss(z1, z2, **kwargs), rtol=0, atol=0)
    torch.testing.assert_close(out["loss"], out["invariance"] + out["variance"] + out["covariance"])
    assert module.get_config_dict() == kwargs
    assert VICRegLoss().get_config_dict() == {
        "invariance_weight": 25.0,
        "variance_weight": 25.0,
        "covariance_weight": 1.0,
        "gamma": 1.0,
        "eps": 1e-4,
    }
    assert "bardes2022vicreg" in module.citation


def test_gradcheck() -> None:
    z1, z2 = _views(3, b=6, d=3, dtype=torch.float64)
    z1.requires_grad_(True)
    z2.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a, b: vicreg_loss(a, b, gamma=1.2), (z1, z2))


def test_bf16_autocast_is_float32_and_close() -> None:
    torch.manual_seed(4)
    layer = torch.nn.Linear(8, 6)
    x1 = torch.randn(32, 8)
    x2 = x1 + 0.1 * torch.randn(32, 8)
    reference = vicreg_loss(layer(x1), layer(x2))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        h1, h2 = layer(x1), layer(x2)
        assert h1.dtype == torch.bfloat16
        out = VICRegLoss()(h1, h2)
    assert all(v.dtype == torch.float32 and torch.isfinite(v) for v in out.values())
    torch.testing.assert_close(out["loss"], reference, rtol=1e-2, atol=1e-2)


def test_error_shape_mismatch() -> None:
    with pytest.raises(ValueError, match=r"`z1` and `z2` must have the same shape"):
        vicreg_loss(torch.zeros(4, 2), torch.zeros(4, 3))


def test_error_wrong_rank() -> None:
    with pytest.raises(ValueError, match=r"`z1` must have shape \(B, D\)"):
        vicreg_loss(torch.zeros(4), torch.zeros(4))


def test_error_batch_of_one() -> None:
    with pytest.raises(ValueError, match=r"at least 2 samples.*\(1, 2\)"):
        vicreg_loss(torch.zeros(1, 2), torch.zeros(1, 2))


def test_error_non_finite() -> None:
    z = torch.zeros(4, 2)
    z[0, 0] = float("inf")
    with pytest.raises(ValueError, match="`z1` contains NaN or infinite"):
        vicreg_loss(z, torch.zeros(4, 2))


@pytest.mark.parametrize("name", ["invariance_weight", "variance_weight", "covariance_weight"])
def test_error_negative_weight(name: str) -> None:
    with pytest.raises(ValueError, match=rf"`{name}` must be >= 0, got -1.0"):
        vicreg_loss(torch.randn(4, 2), torch.randn(4, 2), **{name: -1.0})
    with pytest.raises(ValueError, match=rf"`{name}` must be >= 0"):
        VICRegLoss(**{name: -1.0})


@pytest.mark.parametrize("name", ["gamma", "eps"])
def test_error_non_positive_gamma_or_eps(name: str) -> None:
    with pytest.raises(ValueError, match=rf"`{name}` must be > 0, got 0.0"):
        vicreg_loss(torch.randn(4, 2), torch.randn(4, 2), **{name: 0.0})
    with pytest.raises(ValueError, match=rf"`{name}` must be > 0"):
        VICRegLoss(**{name: -0.5})
