"""InfoNCE / NT-Xent (docs/methods.md §1): reference loop, closed form, lightly, gradients, errors."""

from __future__ import annotations

import math

import pytest
import torch
from _errors import assert_message
from lightly.loss import NTXentLoss

from hf_contrast.losses import InfoNCELoss, info_nce_loss


def reference_info_nce(z1: torch.Tensor, z2: torch.Tensor, temperature: float, normalize: bool = True) -> float:
    """Plain loop over anchors, float64, written from docs/methods.md §1."""
    z = torch.cat([z1, z2]).double()
    if normalize:
        z = z / z.norm(dim=1, keepdim=True).clamp_min(1e-12)
    n = z.shape[0]
    b = n // 2
    total = 0.0
    for a in range(n):
        p = a + b if a < b else a - b
        s = [float(z[a] @ z[c]) / temperature for c in range(n)]
        total += -s[p] + math.log(sum(math.exp(s[c]) for c in range(n) if c != a))
    return total / n


@pytest.mark.parametrize("temperature", [0.07, 0.5, 2.0])
@pytest.mark.parametrize("normalize", [True, False])
def test_matches_reference_loop(temperature: float, normalize: bool) -> None:
    g = torch.Generator().manual_seed(0)
    z1, z2 = torch.randn(6, 5, generator=g), torch.randn(6, 5, generator=g)
    if not normalize:  # keep raw dot products moderate
        z1, z2 = z1 / 3, z2 / 3
    got = info_nce_loss(z1.double(), z2.double(), temperature, normalize=normalize)
    assert got.item() == pytest.approx(reference_info_nce(z1, z2, temperature, normalize), rel=1e-10)


@pytest.mark.parametrize("batch", [2, 5, 16])  # B = 1: an error (below)
def test_all_equal_similarities_give_log_2b_minus_1(batch: int) -> None:
    z = torch.randn(1, 7).expand(batch, 7)
    assert info_nce_loss(z, z, temperature=0.3).item() == pytest.approx(math.log(2 * batch - 1), rel=1e-6)


@pytest.mark.parametrize("temperature", [0.1, 0.5])
def test_equals_lightly_ntxent(temperature: float) -> None:
    g = torch.Generator().manual_seed(1)
    z1, z2 = torch.randn(16, 8, generator=g), torch.randn(16, 8, generator=g)
    expected = NTXentLoss(temperature=temperature)(z1, z2)
    torch.testing.assert_close(info_nce_loss(z1, z2, temperature), expected, rtol=1e-6, atol=1e-6)


def test_large_logits_are_stable() -> None:
    z1 = torch.randn(8, 4) * 1e3
    loss = info_nce_loss(z1, z1 + 1.0, temperature=1e-3, normalize=False)
    assert torch.isfinite(loss)


def test_gather_distributed_without_process_group_is_identity() -> None:
    z1, z2 = torch.randn(8, 4), torch.randn(8, 4)
    torch.testing.assert_close(info_nce_loss(z1, z2, gather_distributed=True), info_nce_loss(z1, z2))


def test_module_matches_function_and_exposes_config() -> None:
    z1, z2 = torch.randn(8, 4), torch.randn(8, 4)
    module = InfoNCELoss(temperature=0.2, normalize=False)
    torch.testing.assert_close(module(z1, z2), info_nce_loss(z1, z2, temperature=0.2, normalize=False))
    assert module.get_config_dict() == {
        "temperature": 0.2,
        "normalize": False,
        "gather_distributed": False,
        "tile_size": None,
    }
    assert "Chen, Ting" in InfoNCELoss.citation and InfoNCELoss.citation.startswith("@")


def test_default_temperature_is_half() -> None:
    z1, z2 = torch.randn(8, 4), torch.randn(8, 4)
    torch.testing.assert_close(info_nce_loss(z1, z2), info_nce_loss(z1, z2, temperature=0.5))
    assert InfoNCELoss().temperature == 0.5


def test_gradcheck_float64() -> None:
    g = torch.Generator().manual_seed(2)
    z1 = torch.randn(4, 3, dtype=torch.float64, generator=g, requires_grad=True)
    z2 = torch.randn(4, 3, dtype=torch.float64, generator=g, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: info_nce_loss(a, b, temperature=0.4), (z1, z2))


def test_bf16_autocast_is_float32_and_close() -> None:
    g = torch.Generator().manual_seed(3)
    layer = torch.nn.Linear(16, 8)
    x1, x2 = torch.randn(32, 16, generator=g), torch.randn(32, 16, generator=g)
    reference = info_nce_loss(layer(x1), layer(x2), temperature=0.1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        z1, z2 = layer(x1), layer(x2)
        assert z1.dtype == torch.bfloat16  # the embeddings really are low precision
        loss = info_nce_loss(z1, z2, temperature=0.1)
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    assert loss.item() == pytest.approx(reference.item(), abs=1e-2)


# --- errors: one per bad input ------------------------------------------------------------


def test_rejects_shape_mismatch() -> None:
    with pytest.raises(ValueError, match=r"`z1` and `z2` must have the same shape"):
        info_nce_loss(torch.randn(4, 3), torch.randn(5, 3))


def test_rejects_wrong_rank() -> None:
    with pytest.raises(ValueError, match=r"`z1` must have shape \(B, D\)"):
        info_nce_loss(torch.randn(4, 3, 2), torch.randn(4, 3, 2))


def test_rejects_integer_dtype() -> None:
    with pytest.raises(ValueError, match=r"`z2` must be a floating-point tensor"):
        info_nce_loss(torch.randn(4, 3), torch.ones(4, 3, dtype=torch.long))


def test_rejects_non_finite() -> None:
    z = torch.randn(4, 3)
    z[1, 2] = float("nan")
    with pytest.raises(ValueError, match=r"`z1` contains NaN or infinite"):
        info_nce_loss(z, torch.randn(4, 3))


@pytest.mark.parametrize("temperature", [0.0, -0.5])
def test_rejects_non_positive_temperature(temperature: float) -> None:
    with pytest.raises(ValueError, match=r"`temperature` must be > 0"):
        info_nce_loss(torch.randn(4, 3), torch.randn(4, 3), temperature=temperature)


def test_module_rejects_non_positive_temperature_at_construction() -> None:
    with pytest.raises(ValueError, match=r"`temperature` must be > 0"):
        InfoNCELoss(temperature=0.0)


def test_info_nce_of_one_sample_is_an_error() -> None:
    with pytest.raises(ValueError) as caught:
        info_nce_loss(torch.randn(1, 8), torch.randn(1, 8))
    assert_message(caught, "`z1`", "(1, 8)", "loss is 0", "batch size >= 2")
