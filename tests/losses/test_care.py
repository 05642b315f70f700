"""CARE: equivariance loss against docs/methods.md §4 reference loops, invariances, module, numerics."""

from __future__ import annotations

import math

import pytest
import torch

from hf_contrast.losses import CARELoss, care_equivariance_loss
from hf_contrast.losses.info_nce import info_nce_loss


def _orthogonal(d: int, generator: torch.Generator, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    q, r = torch.linalg.qr(torch.randn(d, d, generator=generator, dtype=torch.float64))
    return (q * torch.sign(torch.diagonal(r))).to(dtype)


def reference_equivariance(z1: torch.Tensor, z2: torch.Tensor, n_splits: int, normalize: bool = True) -> float:
    """docs/methods.md §4 written as loops over chunks and ordered pairs i != j, in float64."""
    z1, z2 = z1.double(), z2.double()
    if normalize:
        z1 = z1 / z1.norm(dim=1, keepdim=True)
        z2 = z2 / z2.norm(dim=1, keepdim=True)
    m = z1.shape[0] // n_splits
    total = 0.0
    for c in range(n_splits):
        rows = range(c * m, (c + 1) * m)
        chunk = 0.0
        for i in rows:
            for j in rows:
                if i != j:
                    g1 = float(z1[i] @ z1[j])
                    g2 = float(z2[i] @ z2[j])
                    chunk += (g1 - g2) ** 2
        total += 2.0 / m * chunk
    return total / n_splits


def reference_info_nce(z1: torch.Tensor, z2: torch.Tensor, temperature: float) -> float:
    """docs/methods.md §1 as a loop over the 2B anchors, in float64 (independent of info_nce.py)."""
    z = torch.cat([z1, z2]).double()
    z = z / z.norm(dim=1, keepdim=True)
    n = z.shape[0]
    b = n // 2
    total = 0.0
    for a in range(n):
        p = (a + b) % n
        s = [float(z[a] @ z[k]) / temperature for k in range(n)]
        total += -s[p] + math.log(sum(math.exp(s[k]) for k in range(n) if k != a))
    return total / n


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)


@pytest.mark.parametrize("n_splits", [1, 2, 4])
@pytest.mark.parametrize("normalize", [True, False])
def test_matches_reference_loop(gen: torch.Generator, n_splits: int, normalize: bool) -> None:
    z1 = torch.randn(12 if n_splits != 4 else 16, 5, generator=gen)
    z2 = torch.randn(z1.shape, generator=gen)
    got = care_equivariance_loss(z1, z2, n_splits=n_splits, normalize=normalize)
    assert got.dtype == torch.float32
    assert got.item() == pytest.approx(reference_equivariance(z1, z2, n_splits, normalize), rel=1e-5)


def test_matches_authors_scaling(gen: torch.Generator) -> None:
    """(2/m) Σ_{i≠j} = 2(m-1) × the mean over ordered pairs (the authors' code's scaling)."""
    z1, z2 = torch.randn(2, 24, 6, generator=gen, dtype=torch.float64)
    n_splits, m = 3, 8
    a = torch.nn.functional.normalize(z1, dim=1).view(n_splits, m, 6)
    b = torch.nn.functional.normalize(z2, dim=1).view(n_splits, m, 6)
    off = ~torch.eye(m, dtype=torch.bool)
    sq = (a @ a.transpose(1, 2) - b @ b.transpose(1, 2)).pow(2)[:, off]  # (S, m(m-1))
    expected = (2 * (m - 1) * sq.mean(dim=1)).mean()
    torch.testing.assert_close(care_equivariance_loss(z1, z2, n_splits=n_splits), expected)


@pytest.mark.parametrize("normalize", [True, False])
def test_zero_for_one_orthogonal_matrix_per_chunk(gen: torch.Generator, normalize: bool) -> None:
    n_splits, m, d = 4, 6, 5
    z1 = torch.randn(n_splits * m, d, generator=gen, dtype=torch.float64)
    qs = [_orthogonal(d, gen) for _ in range(n_splits)]
    assert not torch.allclose(qs[0], qs[1])  # really a different rotation per chunk
    z2 = torch.cat([z1[c * m : (c + 1) * m] @ qs[c].T for c in range(n_splits)])
    assert care_equivariance_loss(z1, z2, n_splits=n_splits, normalize=normalize).item() < 1e-20
    # float32 inputs: zero up to rounding.
    assert care_equivariance_loss(z1.float(), z2.float(), n_splits=n_splits).item() < 1e-10
    # The chunking is real: the same views scored as one chunk are not equivariant.
    assert care_equivariance_loss(z1, z2, n_splits=1, normalize=normalize).item() > 1e-2


def test_invariant_to_one_global_orthogonal_matrix(gen: torch.Generator) -> None:
    z1, z2 = torch.randn(2, 16, 6, generator=gen, dtype=torch.float64)
    q = _orthogonal(6, gen)
    before = care_equivariance_loss(z1, z2, n_splits=4)
    after = care_equivariance_loss(z1 @ q.T, z2 @ q.T, n_splits=4)
    assert before.item() > 0.1
    torch.testing.assert_close(after, before, rtol=1e-12, atol=1e-12)


def test_positive_when_not_orthogonally_related(gen: torch.Generator) -> None:
    n_splits, m, d = 2, 6, 5
    z1 = torch.randn(n_splits * m, d, generator=gen, dtype=torch.float64)
    q = _orthogonal(d, gen)
    # A different rotation for every sample (not one per chunk).
    per_sample = torch.stack([z1[i] @ _orthogonal(d, gen).T for i in range(n_splits * m)])
    assert care_equivariance_loss(z1, per_sample, n_splits=n_splits).item() > 1e-2
    # One chunk rotated, the other sheared by a non-orthogonal linear map.
    shear = torch.eye(d, dtype=torch.float64)
    shear[0, 1] = 0.8
    z2 = torch.cat([z1[:m] @ q.T, z1[m:] @ shear.T])
    per_chunk_ok = care_equivariance_loss(z1[:m], z2[:m], n_splits=1)
    assert per_chunk_ok.item() < 1e-20
    assert care_equivariance_loss(z1, z2, n_splits=n_splits).item() > 1e-3
    # Without normalisation a scaling is not an isometry either.
    assert care_equivariance_loss(z1, 2.0 * z1, n_splits=n_splits, normalize=False).item() > 1.0


def test_gradcheck_float64(gen: torch.Generator) -> None:
    z1 = torch.randn(8, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    z2 = torch.randn(8, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    for normalize in (True, False):
        assert torch.autograd.gradcheck(
            lambda a, b: care_equivariance_loss(a, b, n_splits=2, normalize=normalize), (z1, z2)
        )


def test_bf16_autocast_finite_and_close_to_float32(gen: torch.Generator) -> None:
    x1, x2 = torch.randn(2, 32, 16, generator=gen)
    weight = torch.randn(8, 16, generator=gen) / 4
    ref = care_equivariance_loss(x1 @ weight.T, x2 @ weight.T, n_splits=4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        z1, z2 = torch.nn.functional.linear(x1, weight), torch.nn.functional.linear(x2, weight)
        assert z1.dtype == torch.bfloat16
        got = care_equivariance_loss(z1, z2, n_splits=4)
    assert got.dtype == torch.float32
    assert torch.isfinite(got)
    torch.testing.assert_close(got, ref, rtol=1e-2, atol=1e-2)
    # The math itself ran in float32: same value as float32 on the same bf16 embeddings.
    torch.testing.assert_close(got, care_equivariance_loss(z1.float(), z2.float(), n_splits=4))


# ----------------------------------------------------------------------------- CARELoss


def test_module_terms_match_functional_and_reference(gen: torch.Generator) -> None:
    z1_inv, z2_inv = torch.randn(2, 12, 6, generator=gen)
    z1_eq, z2_eq = torch.randn(2, 8, 6, generator=gen)  # B_eq may differ from B
    loss = CARELoss(temperature=0.5, care_weight=0.1, n_splits=2)
    out = loss(z1_inv, z2_inv, z1_eq, z2_eq)
    assert set(out) == {"invariance", "equivariance", "loss"}
    expected_eq = 0.1 * care_equivariance_loss(z1_eq, z2_eq, n_splits=2)
    torch.testing.assert_close(out["equivariance"], expected_eq)
    torch.testing.assert_close(out["invariance"], info_nce_loss(z1_inv, z2_inv, temperature=0.5))
    assert out["invariance"].item() == pytest.approx(reference_info_nce(z1_inv, z2_inv, 0.5), rel=1e-5)
    assert out["equivariance"].item() == pytest.approx(0.1 * reference_equivariance(z1_eq, z2_eq, 2), rel=1e-5)
    torch.testing.assert_close(out["loss"], out["invariance"] + out["equivariance"])


def test_module_shares_invariance_views_when_no_equivariance_views(gen: torch.Generator) -> None:
    z1, z2 = torch.randn(2, 16, 6, generator=gen)
    out = CARELoss(care_weight=0.01, n_splits=4)(z1, z2)
    torch.testing.assert_close(out["equivariance"], 0.01 * care_equivariance_loss(z1, z2, n_splits=4))


def test_module_zero_weight_and_backward(gen: torch.Generator) -> None:
    z1 = torch.randn(8, 4, generator=gen, requires_grad=True)
    z2 = torch.randn(8, 4, generator=gen)
    out = CARELoss(care_weight=0.0, n_splits=2)(z1, z2)
    assert out["equivariance"].item() == 0.0
    torch.testing.assert_close(out["loss"], out["invariance"])
    out["loss"].backward()
    assert z1.grad is not None and torch.isfinite(z1.grad).all()


def test_gather_distributed_without_process_group_is_local(gen: torch.Generator) -> None:
    z1, z2 = torch.randn(2, 8, 4, generator=gen)
    a = CARELoss(n_splits=2)(z1, z2)
    b = CARELoss(n_splits=2, gather_distributed=True)(z1, z2)
    torch.testing.assert_close(a["loss"], b["loss"])


def test_config_and_citation() -> None:
    loss = CARELoss()
    assert loss.get_config_dict() == {
        "temperature": 0.5,
        "care_weight": 0.01,
        "n_splits": 8,
        "normalize": True,
        "gather_distributed": False,
    }
    assert "Rotationally Equivariant Contrastive Learning" in CARELoss.citation
    assert CARELoss.citation.startswith("@inproceedings{")


# ----------------------------------------------------------------------------- errors


def test_error_n_splits_not_dividing_batch() -> None:
    with pytest.raises(ValueError, match=r"`n_splits` must divide the batch size: got n_splits=3 for a batch of 8"):
        care_equivariance_loss(torch.randn(8, 4), torch.randn(8, 4), n_splits=3)


@pytest.mark.parametrize("bad", [0, -2, 2.0, True, None])
def test_error_n_splits_not_positive_int(bad: object) -> None:
    with pytest.raises(ValueError, match=r"`n_splits` must be an integer >= 1"):
        care_equivariance_loss(torch.randn(8, 4), torch.randn(8, 4), n_splits=bad)  # type: ignore[arg-type]


def test_error_chunk_of_one_sample() -> None:
    with pytest.raises(ValueError, match=r"chunks of 1 sample.*at least 2 samples"):
        care_equivariance_loss(torch.randn(4, 4), torch.randn(4, 4), n_splits=4)


def test_error_shape_mismatch() -> None:
    with pytest.raises(ValueError, match=r"`z1` and `z2` must have the same shape, got \(8, 4\) and \(8, 5\)"):
        care_equivariance_loss(torch.randn(8, 4), torch.randn(8, 5), n_splits=2)


def test_error_wrong_rank() -> None:
    with pytest.raises(ValueError, match=r"`z1` must have shape \(B, D\)"):
        care_equivariance_loss(torch.randn(2, 4, 4), torch.randn(2, 4, 4), n_splits=2)


def test_error_non_finite() -> None:
    z = torch.randn(8, 4)
    z[3, 1] = float("nan")
    with pytest.raises(ValueError, match=r"`z2` contains NaN or infinite values"):
        care_equivariance_loss(torch.randn(8, 4), z, n_splits=2)


def test_error_integer_embeddings() -> None:
    with pytest.raises(ValueError, match=r"`z1` must be a floating-point tensor"):
        care_equivariance_loss(torch.ones(8, 4, dtype=torch.long), torch.randn(8, 4), n_splits=2)


def test_error_negative_care_weight() -> None:
    with pytest.raises(ValueError, match=r"`care_weight` must be >= 0, got -0.1"):
        CARELoss(care_weight=-0.1)


def test_error_non_positive_temperature() -> None:
    with pytest.raises(ValueError, match=r"`temperature` must be > 0, got 0.0"):
        CARELoss(temperature=0.0)


def test_error_module_n_splits() -> None:
    with pytest.raises(ValueError, match=r"`n_splits` must be an integer >= 1, got 0"):
        CARELoss(n_splits=0)


def test_error_only_one_equivariance_view() -> None:
    z = torch.randn(8, 4)
    with pytest.raises(ValueError, match=r"`z1_eq` and `z2_eq` must be given together"):
        CARELoss(n_splits=2)(z, z, z1_eq=z)
