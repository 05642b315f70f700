"""Losses on raw (unnormalised) embeddings at large and small norms: SimO, AFCL, spectral and VICReg match float64
from 1e-6 to 1e9 (SimO and AFCL to 1e10); beyond float32's range the error names the fix
(:func:`hf_contrast.tensor_checks`' finite-result check)."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from _errors import assert_message

from hf_contrast.losses import afcl_loss, simo_loss, spectral_contrastive_loss, vicreg_loss


def _value_and_grad(
    loss: Callable[[torch.Tensor], torch.Tensor], e: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    e = e.detach().clone().requires_grad_(True)
    value = loss(e)
    value.backward()
    return value.detach(), e.grad


RAW_LOSSES = [
    ("simo y=0", lambda e: simo_loss(e, 0.0)),
    ("simo y=0.3", lambda e: simo_loss(e, 0.3)),
    ("simo y=1", lambda e: simo_loss(e, 1.0)),
    ("afcl", lambda e: afcl_loss(e, n_classes=4)),
    ("spectral", lambda e: spectral_contrastive_loss(e[:4], e[4:])),
    ("vicreg", lambda e: vicreg_loss(e[:4], e[4:])),
]


@pytest.mark.parametrize("scale", [1e-6, 1.0, 1e9])
@pytest.mark.parametrize(("name", "loss"), RAW_LOSSES, ids=[case[0] for case in RAW_LOSSES])
def test_raw_losses_match_float64_at_large_and_small_norms(name, loss, scale: float) -> None:
    e = torch.randn(8, 4, generator=torch.Generator().manual_seed(1)) * scale  # D = 4: representable at 1e9
    value, grad = _value_and_grad(loss, e)
    value64, grad64 = _value_and_grad(loss, e.double())
    assert torch.isfinite(value) and value.dtype == torch.float32
    torch.testing.assert_close(value.double(), value64, rtol=2e-5, atol=0)
    torch.testing.assert_close(grad.double(), grad64, rtol=2e-4, atol=2e-5 * grad64.abs().max().item())


@pytest.mark.parametrize(("name", "loss"), RAW_LOSSES[:4], ids=[case[0] for case in RAW_LOSSES[:4]])
def test_simo_and_afcl_are_finite_and_correct_at_norm_1e10(name, loss) -> None:
    e = torch.nn.functional.normalize(torch.randn(8, 16, generator=torch.Generator().manual_seed(2)), dim=1) * 1e10
    torch.testing.assert_close(loss(e).double(), loss(e.double()), rtol=2e-5, atol=0)


@pytest.mark.parametrize(("name", "loss"), RAW_LOSSES[4:], ids=[case[0] for case in RAW_LOSSES[4:]])
def test_a_loss_beyond_float32_is_an_error_naming_the_fix(name, loss) -> None:
    e = torch.randn(8, 64, generator=torch.Generator().manual_seed(3)) * 1e10
    assert math.isinf(loss(e.double()).item()) is False and abs(loss(e.double()).item()) > 3.5e38  # truly too large
    with pytest.raises(ValueError) as caught:
        loss(e)
    assert_message(caught, "`z1`, `z2`", "beyond the range of torch.float32", "float64 inputs (`.double()`)")


def test_a_vicreg_gamma_that_overflows_its_weighted_term_is_named() -> None:
    """The variance term is at most ``gamma``: a huge ``gamma`` times the default weight 25 overflows float32. The
    error named only `variance_weight`=25 (the default the user never set), not the `gamma` they did (found by the
    property suite under a random seed)."""
    z = torch.randn(8, 4, generator=torch.Generator().manual_seed(4))
    with pytest.raises(ValueError) as caught:
        vicreg_loss(z, z + 0.1, gamma=2e37)
    assert_message(caught, "`variance_weight`=25 and `gamma`=2e+37", "beyond the range of torch.float32", "gamma = 1")
