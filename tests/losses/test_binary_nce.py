"""Binary NCE (docs/methods.md §9): reference loops, closed forms, learnable parameters, errors."""

from __future__ import annotations

import math

import pytest
import torch

from hf_contrast.losses import BinaryNCELoss, binary_nce_loss


def _log_sigmoid(x: float) -> float:
    return -math.log1p(math.exp(-x)) if x >= 0 else x - math.log1p(math.exp(x))


def reference_binary_nce(
    z1: torch.Tensor, z2: torch.Tensor, temperature: float, bias: float, negatives: str, normalize: bool = True
) -> float:
    """Float64 loops written from docs/methods.md §9."""
    a, b = z1.double().tolist(), z2.double().tolist()
    n = len(a)
    if normalize:
        unit = lambda v: [x / max(math.sqrt(sum(y * y for y in v)), 1e-12) for x in v]  # noqa: E731
        a, b = [unit(v) for v in a], [unit(v) for v in b]
    total = 0.0
    for i in range(n):
        for j in range(n):
            if negatives == "shifted" and j not in (i, (i + 1) % n):
                continue
            s = sum(x * y for x, y in zip(a[i], b[j])) / temperature + bias
            total += _log_sigmoid(s if i == j else -s)
    return -total / n


def _views(seed: int, b: int = 9, d: int = 5, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    z1 = torch.randn(b, d, generator=g, dtype=dtype)
    return z1, z1 + 0.8 * torch.randn(b, d, generator=g, dtype=dtype)


@pytest.mark.parametrize("negatives", ["all", "shifted"])
@pytest.mark.parametrize("temperature,bias,normalize", [(0.1, None, True), (0.5, 1.5, True), (2.0, -0.5, False)])
def test_matches_reference_loop(negatives: str, temperature: float, bias: float | None, normalize: bool) -> None:
    z1, z2 = _views(0)
    b = {"all": -10.0, "shifted": 0.0}[negatives] if bias is None else bias
    expected = reference_binary_nce(z1, z2, temperature, b, negatives, normalize)
    got = binary_nce_loss(z1, z2, temperature=temperature, bias=bias, negatives=negatives, normalize=normalize)
    assert got.item() == pytest.approx(expected, rel=1e-5)
    got64 = binary_nce_loss(z1.double(), z2.double(), temperature, bias, negatives, normalize)
    assert got64.item() == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("negatives,bias", [("all", -10.0), ("shifted", 0.0), ("all", 3.0)])
def test_closed_form_zero_similarities(negatives: str, bias: float) -> None:
    # All logits equal the bias: -log sigmoid(b) - (number of negatives per row) * log sigmoid(-b).
    b_size = 6
    z = torch.zeros(b_size, 4)  # normalisation of a zero row stays zero: no division by zero
    n_neg = b_size - 1 if negatives == "all" else 1
    expected = -_log_sigmoid(bias) - n_neg * _log_sigmoid(-bias)
    got = binary_nce_loss(z, z, bias=bias, negatives=negatives)
    assert got.item() == pytest.approx(expected, rel=1e-6)
    assert binary_nce_loss(z, z, negatives="shifted").item() == pytest.approx(2 * math.log(2), rel=1e-6)


def test_shifted_equals_all_for_two_samples() -> None:
    # With B = 2 the shifted negative j = i + 1 mod 2 is the only negative.
    z1, z2 = _views(1, b=2)
    torch.testing.assert_close(
        binary_nce_loss(z1, z2, bias=0.3, negatives="shifted"), binary_nce_loss(z1, z2, bias=0.3, negatives="all")
    )


def test_normalize_makes_it_scale_invariant() -> None:
    z1, z2 = _views(2, dtype=torch.float64)
    loss = binary_nce_loss(z1, z2)
    torch.testing.assert_close(binary_nce_loss(3.0 * z1, 0.2 * z2), loss)
    assert not torch.allclose(binary_nce_loss(3.0 * z1, z2, normalize=False), binary_nce_loss(z1, z2, normalize=False))


def test_shifted_uses_only_the_next_sample() -> None:
    # The gradient of z1[0] involves z2[0] (its positive) and z2[1] (its shifted negative) only.
    z1, z2 = _views(3, b=6, dtype=torch.float64)

    def grad_of_first_row(w: torch.Tensor) -> torch.Tensor:
        a = z1.clone().requires_grad_(True)
        binary_nce_loss(a, w, negatives="shifted").backward()
        return a.grad[0]

    w = z2.clone()
    w[3] = torch.randn(5, dtype=torch.float64)
    torch.testing.assert_close(grad_of_first_row(w), grad_of_first_row(z2), rtol=0, atol=0)
    w[1] = torch.randn(5, dtype=torch.float64)
    assert not torch.allclose(grad_of_first_row(w), grad_of_first_row(z2))


def test_functional_equals_module() -> None:
    z1, z2 = _views(4)
    for negatives in ("all", "shifted"):
        module = BinaryNCELoss(temperature=0.3, negatives=negatives)
        torch.testing.assert_close(module(z1, z2), binary_nce_loss(z1, z2, 0.3, None, negatives), rtol=0, atol=0)
    module = BinaryNCELoss(temperature=0.3, bias=-2.0, learnable_temperature=True, learnable_bias=True)
    torch.testing.assert_close(module(z1, z2), binary_nce_loss(z1, z2, 0.3, -2.0), rtol=1e-6, atol=1e-6)
    assert module.get_config_dict() == {
        "temperature": 0.3,
        "bias": -2.0,
        "negatives": "all",
        "learnable_temperature": True,
        "learnable_bias": True,
        "normalize": True,
        "tile_size": None,
    }
    assert BinaryNCELoss(negatives="shifted").get_config_dict()["bias"] == 0.0
    assert "zhai2023sigmoid" in module.citation


def test_learnable_parameters_receive_gradients() -> None:
    z1, z2 = _views(5)
    module = BinaryNCELoss(learnable_temperature=True, learnable_bias=True)
    assert {name for name, _ in module.named_parameters()} == {"log_temperature", "bias"}
    assert module.temperature.item() == pytest.approx(0.1, rel=1e-6)  # parametrised through its log
    module(z1, z2).backward()
    assert module.log_temperature.grad is not None and module.log_temperature.grad.abs() > 0
    assert module.bias.grad is not None and module.bias.grad.abs() > 0
    # One optimizer step changes both, and the temperature stays positive (it is exp(log)).
    torch.optim.SGD(module.parameters(), lr=1.0).step()
    assert module.bias.item() != -10.0 and module.temperature.item() != pytest.approx(0.1)
    assert module.temperature.item() > 0
    assert list(BinaryNCELoss().parameters()) == []  # fixed by default


def test_gradcheck_embeddings_temperature_and_bias() -> None:
    z1, z2 = _views(6, b=5, d=3, dtype=torch.float64)
    log_t = torch.tensor(math.log(0.5), dtype=torch.float64, requires_grad=True)
    bias = torch.tensor(-1.0, dtype=torch.float64, requires_grad=True)
    for negatives in ("all", "shifted"):
        inputs = (z1.clone().requires_grad_(True), z2.clone().requires_grad_(True), log_t, bias)
        assert torch.autograd.gradcheck(
            lambda a, b, lt, c: binary_nce_loss(a, b, temperature=lt.exp(), bias=c, negatives=negatives), inputs
        )


def test_bf16_autocast_is_float32_and_close() -> None:
    torch.manual_seed(7)
    layer = torch.nn.Linear(8, 6)
    x1 = torch.randn(16, 8)
    x2 = x1 + 0.2 * torch.randn(16, 8)
    for negatives in ("all", "shifted"):
        reference = binary_nce_loss(layer(x1), layer(x2), negatives=negatives)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h1, h2 = layer(x1), layer(x2)
            assert h1.dtype == torch.bfloat16
            loss = binary_nce_loss(h1, h2, negatives=negatives)
        assert loss.dtype == torch.float32 and torch.isfinite(loss)
        torch.testing.assert_close(loss, reference, rtol=1e-2, atol=1e-2)


def test_error_unknown_negatives() -> None:
    with pytest.raises(ValueError, match=r"`negatives` must be one of \('all', 'shifted'\), got 'hard'"):
        binary_nce_loss(torch.randn(4, 2), torch.randn(4, 2), negatives="hard")
    with pytest.raises(ValueError, match="`negatives` must be one of"):
        BinaryNCELoss(negatives="random")


def test_error_non_positive_temperature() -> None:
    with pytest.raises(ValueError, match="`temperature` must be > 0, got 0.0"):
        binary_nce_loss(torch.randn(4, 2), torch.randn(4, 2), temperature=0.0)
    with pytest.raises(ValueError, match="`temperature` must be > 0, got -1.0"):
        binary_nce_loss(torch.randn(4, 2), torch.randn(4, 2), temperature=torch.tensor(-1.0))
    with pytest.raises(ValueError, match="`temperature` must be > 0"):
        BinaryNCELoss(temperature=-0.1)


def test_error_tensor_hyperparameter_with_several_elements() -> None:
    with pytest.raises(
        ValueError, match=r"`temperature` must be a number or a floating-point tensor with one element"
    ):
        binary_nce_loss(torch.randn(4, 2), torch.randn(4, 2), temperature=torch.ones(4))
    with pytest.raises(ValueError, match=r"`bias` must be a number or a floating-point tensor with one element"):
        binary_nce_loss(torch.randn(4, 2), torch.randn(4, 2), bias=torch.zeros(2, 1))


def test_error_non_finite_bias() -> None:
    with pytest.raises(ValueError, match="`bias` must be a finite number"):
        binary_nce_loss(torch.randn(4, 2), torch.randn(4, 2), bias=float("nan"))
    with pytest.raises(ValueError, match="`bias` must be finite"):
        binary_nce_loss(torch.randn(4, 2), torch.randn(4, 2), bias=torch.tensor(float("-inf")))
    with pytest.raises(ValueError, match="`bias` must be a finite number"):
        BinaryNCELoss(bias=float("inf"))


def test_error_batch_of_one() -> None:
    with pytest.raises(ValueError, match=r"at least 2 samples.*\(1, 2\)"):
        binary_nce_loss(torch.randn(1, 2), torch.randn(1, 2), negatives="shifted")


def test_error_shape_mismatch() -> None:
    with pytest.raises(ValueError, match=r"`z1` and `z2` must have the same shape, got \(4, 2\) and \(3, 2\)"):
        binary_nce_loss(torch.randn(4, 2), torch.randn(3, 2))


def test_error_non_finite_embeddings() -> None:
    z = torch.randn(4, 2)
    z[2, 0] = float("nan")
    with pytest.raises(ValueError, match="`z1` contains NaN"):
        binary_nce_loss(z, torch.randn(4, 2))
