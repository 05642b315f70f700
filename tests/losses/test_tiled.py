"""Tiled (memory-linear) losses equal the dense form: values, gradients, gradcheck, 2 processes.

The dense form (``tile_size=0``) is itself checked against reference loops and the peer libraries
in the per-loss test files; here every tiled loss is compared with it on random inputs, with tile
sizes that divide the batch, that leave an uneven last tile, and that are larger than the batch.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from _launch import free_port, launch_env, load_script
from torch import Tensor

from hf_contrast.losses import (
    AlignUniformLoss,
    BinaryNCELoss,
    InfoNCELoss,
    OCLoss,
    SupConLoss,
    binary_nce_loss,
    info_nce_loss,
    ocl_loss,
    supcon_loss,
    uniformity_loss,
)
from hf_contrast.losses.tiled import (
    ACCELERATOR_TILE_SIZE,
    AUTO_TILE_MIN_LOGITS,
    DEFAULT_TILE_SIZE,
    resolve_tile_size,
    tiled_row_logsumexp,
    tiled_symmetric_logsumexp,
    tiled_symmetric_uniformity_logsumexp,
    tiled_uniformity_logsumexp,
)

# name -> loss(z1, z2, labels, tile_size): every tiled loss, in one signature
LOSSES: dict[str, Callable[[Tensor, Tensor, Tensor, int], Tensor]] = {
    "info_nce": lambda z1, z2, y, tile: info_nce_loss(z1, z2, temperature=0.3, tile_size=tile),
    "info_nce_raw": lambda z1, z2, y, tile: info_nce_loss(
        z1 / 3, z2 / 3, temperature=0.7, normalize=False, tile_size=tile
    ),
    "supcon": lambda z1, z2, y, tile: supcon_loss(z1, y, temperature=0.1, tile_size=tile),
    "ocl": lambda z1, z2, y, tile: ocl_loss(z1, y, temperature=0.1, tile_size=tile),
    "ocl_raw": lambda z1, z2, y, tile: ocl_loss(z1 / 3, y, temperature=0.5, normalize=False, tile_size=tile),
    "uniformity": lambda z1, z2, y, tile: uniformity_loss(z1, t=2, tile_size=tile),
    "uniformity_raw": lambda z1, z2, y, tile: uniformity_loss(z1 / 3, t=1.5, normalize=False, tile_size=tile),
    "binary_nce_all": lambda z1, z2, y, tile: binary_nce_loss(z1, z2, 0.2, -3.0, "all", tile_size=tile),
}


def _inputs(batch: int, dim: int, dtype: torch.dtype, seed: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    g = torch.Generator().manual_seed(seed)
    z1 = torch.randn(batch, dim, generator=g, dtype=dtype)
    z2 = (z1 + 0.5 * torch.randn(batch, dim, generator=g, dtype=dtype)).requires_grad_(True)
    labels = torch.randint(0, 5, (batch,), generator=g)
    labels[-1] = 99  # one anchor without a positive: excluded from the mean in both forms
    return z1.requires_grad_(True), z2, labels


def _value_and_grads(name: str, z1: Tensor, z2: Tensor, labels: Tensor, tile: int) -> tuple[Tensor, Tensor, Tensor]:
    z1.grad = z2.grad = None
    loss = LOSSES[name](z1, z2, labels, tile)
    loss.backward()
    grad2 = z2.grad if z2.grad is not None else torch.zeros_like(z2)
    return loss.detach(), z1.grad.clone(), grad2.clone()


@pytest.mark.parametrize("name", sorted(LOSSES))
@pytest.mark.parametrize(("dtype", "tol"), [(torch.float64, 1e-5), (torch.float32, 1e-4)], ids=["float64", "float32"])
@pytest.mark.parametrize("tile", [4, 6, 64])  # divides B = 28, leaves a partial last tile, exceeds B
def test_tiled_equals_dense(name: str, dtype: torch.dtype, tol: float, tile: int) -> None:
    z1, z2, labels = _inputs(28, 16, dtype)
    dense = _value_and_grads(name, z1, z2, labels, tile=0)
    tiled = _value_and_grads(name, z1, z2, labels, tile=tile)
    assert dense[1].abs().max() > 1e-3  # the gradient comparison is not 0 == 0
    for got, expected in zip(tiled, dense, strict=True):
        torch.testing.assert_close(got, expected, rtol=tol, atol=tol)


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_uneven_last_tile(name: str) -> None:
    """B = 23 rows (InfoNCE: 46) in tiles of 5: every row and column block ends on a partial tile."""
    z1, z2, labels = _inputs(23, 6, torch.float64, seed=3)
    for got, expected in zip(_value_and_grads(name, z1, z2, labels, 5), _value_and_grads(name, z1, z2, labels, 0)):
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_gradcheck_float64_small_tiles(name: str) -> None:
    z1, z2, labels = _inputs(7, 4, torch.float64, seed=5)
    assert torch.autograd.gradcheck(lambda a, b: LOSSES[name](a, b, labels, 3), (z1, z2))


def test_gradcheck_learnable_temperature_and_bias() -> None:
    z1, z2, _ = _inputs(7, 4, torch.float64, seed=6)
    temperature = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)
    bias = torch.tensor(-2.0, dtype=torch.float64, requires_grad=True)

    def fn(a: Tensor, b: Tensor, t: Tensor, c: Tensor) -> Tensor:
        return binary_nce_loss(a, b, t, c, "all", tile_size=3)

    assert torch.autograd.gradcheck(fn, (z1, z2, temperature, bias))
    dense = torch.autograd.grad(binary_nce_loss(z1, z2, temperature, bias, tile_size=0), (temperature, bias))
    tiled = torch.autograd.grad(binary_nce_loss(z1, z2, temperature, bias, tile_size=3), (temperature, bias))
    for got, expected in zip(tiled, dense):
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)


def test_ocl_takes_absolute_negatives_before_the_max() -> None:
    """Opposite classes (cos = −1) weigh as much as identical ones in OCL's tiled denominator."""
    z = torch.tensor([[1.0, 0.0], [1.0, 0.0], [-1.0, 0.0], [-1.0, 0.0]], dtype=torch.float64)
    labels = torch.tensor([0, 0, 1, 1])
    # every anchor: positive s = 1/τ, two negatives |−1/τ| = 1/τ -> loss = log 3
    got = ocl_loss(z, labels, temperature=0.5, tile_size=1)
    torch.testing.assert_close(got, torch.tensor(3.0, dtype=torch.float64).log())
    assert supcon_loss(z, labels, temperature=0.5, tile_size=1) < got  # SupCon: negatives at −1/τ


def test_supcon_without_positive_raises_in_tiled_form() -> None:
    with pytest.raises(ValueError, match="no anchor has a positive"):
        supcon_loss(torch.randn(5, 4), torch.arange(5), tile_size=2)


def test_large_logits_stay_finite() -> None:
    z1 = torch.randn(16, 4) * 1e3
    z1.requires_grad_(True)
    loss = info_nce_loss(z1, z1.detach() + 1.0, temperature=1e-3, normalize=False, tile_size=5)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(z1.grad).all()
    expected = info_nce_loss(z1.detach(), z1.detach() + 1.0, temperature=1e-3, normalize=False, tile_size=0)
    torch.testing.assert_close(loss.detach(), expected, rtol=1e-5, atol=1e-3)


def test_autocast_computes_in_float32() -> None:
    z1, _, labels = _inputs(20, 8, torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        tiled = supcon_loss(z1, labels, tile_size=6)
        tiled.backward()
    assert tiled.dtype == torch.float32 and z1.grad.dtype == torch.float32
    torch.testing.assert_close(tiled, supcon_loss(z1, labels, tile_size=0), rtol=1e-5, atol=1e-5)


def test_row_logsumexp_matches_torch_logsumexp() -> None:
    g = torch.Generator().manual_seed(0)
    a, c = torch.randn(9, 3, generator=g, dtype=torch.float64), torch.randn(13, 3, generator=g, dtype=torch.float64)
    lse, pos = tiled_row_logsumexp(a, c, offset=2, tile_size=4)
    logits = a @ c.T
    logits[torch.arange(9), torch.arange(9) + 2] = float("-inf")
    torch.testing.assert_close(lse, torch.logsumexp(logits, dim=1))
    assert not pos.any()


@pytest.mark.parametrize(("labelled", "abs_negatives"), [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("tile", [1, 4, 5, 64])
def test_symmetric_form_equals_general_form(labelled: bool, abs_negatives: bool, tile: int) -> None:
    """One process's losses use the symmetric form (each off-diagonal block once): it equals the
    general rows × columns form on ``(x, x)``, values and gradients of both outputs."""
    g = torch.Generator().manual_seed(tile)
    x = torch.randn(23, 5, generator=g, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, 4, (23,), generator=g) if labelled else None
    w_lse, w_pos = torch.randn(23, generator=g, dtype=torch.float64), torch.randn(23, generator=g, dtype=torch.float64)
    results = []
    for lse, pos in (
        tiled_symmetric_logsumexp(x, labels, abs_negatives, tile),
        tiled_row_logsumexp(x, x, labels, labels, 0, abs_negatives, 7),
    ):
        objective = (lse * w_lse).sum() + ((pos * w_pos).sum() if labelled else 0.0)
        results.append((lse.detach(), pos.detach(), *torch.autograd.grad(objective, x)))
    assert results[1][2].abs().max() > 1e-3 and (not labelled or results[1][1].abs().max() > 1e-3)
    for got, expected in zip(*results, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("tile", [1, 4, 64])
def test_symmetric_uniformity_equals_general_form(tile: int) -> None:
    g = torch.Generator().manual_seed(tile)
    a = torch.randn(19, 4, generator=g, dtype=torch.float64, requires_grad=True)
    weights = torch.randn(19, generator=g, dtype=torch.float64)
    sq = a.pow(2).sum(dim=1)
    sym = tiled_symmetric_uniformity_logsumexp(a, sq, 0.7, tile)
    general = tiled_uniformity_logsumexp(a, a, sq, sq, 0, 0.7, 5)
    grads = [torch.autograd.grad((lse * weights).sum(), a, retain_graph=True)[0] for lse in (sym, general)]
    assert grads[1].abs().max() > 1e-3
    torch.testing.assert_close(sym, general, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-10, atol=1e-10)


def test_gradcheck_symmetric_and_general_forms_with_labels() -> None:
    """Both custom backwards on their own, labels and OCL's |s| included (the general form with
    distinct anchors and candidates and an offset, as under ``gather_distributed=True``)."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(9, 3, generator=g, dtype=torch.float64, requires_grad=True)
    c = torch.randn(13, 3, generator=g, dtype=torch.float64, requires_grad=True)
    y, yc = torch.randint(0, 3, (9,), generator=g), torch.randint(0, 3, (13,), generator=g)
    yc[2:11] = y  # candidates[2:11] stand for the anchors themselves (offset 2)

    def symmetric(a: Tensor) -> Tensor:
        lse, pos = tiled_symmetric_logsumexp(a, y, True, 4)
        return lse + 0.3 * pos

    def general(a: Tensor, b: Tensor) -> Tensor:
        lse, pos = tiled_row_logsumexp(a, b, y, yc, 2, True, 4)
        return lse + 0.3 * pos

    assert torch.autograd.gradcheck(symmetric, (x,))
    assert torch.autograd.gradcheck(general, (x, c))


def test_auto_threshold_and_argument_checks() -> None:
    side = int(AUTO_TILE_MIN_LOGITS**0.5)
    assert resolve_tile_size(None, side, side) == 0
    assert resolve_tile_size(None, side + 1, side) == DEFAULT_TILE_SIZE
    assert resolve_tile_size(0, 10**6, 10**6) == 0 and resolve_tile_size(16, 2, 2) == 16
    assert resolve_tile_size(None, side + 1, side, "cuda") == ACCELERATOR_TILE_SIZE
    assert resolve_tile_size(None, side, side, "cuda") == 0 and resolve_tile_size(8, 9, 9, "cuda") == 8
    for bad in (-1, 2.5, True, "64"):
        with pytest.raises(ValueError, match="`tile_size`"):
            info_nce_loss(torch.randn(4, 3), torch.randn(4, 3), tile_size=bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="`tile_size`"):
            SupConLoss(tile_size=bad)  # type: ignore[arg-type]


def test_modules_pass_tile_size() -> None:
    z1, z2, labels = _inputs(12, 5, torch.float64)
    pairs = [
        (InfoNCELoss(tile_size=5)(z1, z2), info_nce_loss(z1, z2, tile_size=0)),
        (SupConLoss(tile_size=5)(z1, labels), supcon_loss(z1, labels, tile_size=0)),
        (OCLoss(tile_size=5)(z1, labels), ocl_loss(z1, labels, tile_size=0)),
        (AlignUniformLoss(tile_size=5)(z1, z2)["loss"], AlignUniformLoss(tile_size=0)(z1, z2)["loss"]),
        (BinaryNCELoss(tile_size=5)(z1, z2), BinaryNCELoss(tile_size=0)(z1, z2)),
    ]
    for got, expected in pairs:
        torch.testing.assert_close(got, expected)
    assert InfoNCELoss(tile_size=5).get_config_dict()["tile_size"] == 5


# --------------------------------------------------------------------------------------------
# 2 real processes (gloo): tiled + gather_distributed equals dense, and one process on the batch
# --------------------------------------------------------------------------------------------
SCRIPT = Path(__file__).parents[1] / "distributed_scripts" / "tiled_losses.py"


@pytest.mark.distributed
def test_two_processes_tiled_equal_dense_and_one_process(tmp_path: Path) -> None:
    command = [
        sys.executable, "-m", "torch.distributed.run",
        "--nproc_per_node", "2", "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
        str(SCRIPT), str(tmp_path), "3",
    ]  # fmt: skip
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=120, env=launch_env())
    if done.returncode != 0:
        pytest.fail(f"torchrun failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    script = load_script("tiled_losses", SCRIPT)
    model, x1, x2, labels = script.build_problem()
    for name in script.LOSSES:
        # Tiled == dense on every rank (uniformity's distributed value is a per-process estimate).
        for rank, results in enumerate(ranks):
            tiled, dense = results[f"{name}/tiled"], results[f"{name}/dense"]
            torch.testing.assert_close(tiled["loss"], dense["loss"], rtol=0, atol=1e-5, msg=f"{name} rank {rank}")
            for got, expected in zip(tiled["grads"], dense["grads"], strict=True):
                torch.testing.assert_close(got, expected, rtol=0, atol=1e-5, msg=f"{name} rank {rank} gradient")
        if name == "uniformity":
            continue
        # ... and the mean over the ranks is one process's dense loss on the global batch.
        single_loss, single_grads = script.loss_and_grads(
            name, model, x1, x2, labels, gather_distributed=False, tile_size=0
        )
        mean_loss = torch.stack([results[f"{name}/tiled"]["loss"] for results in ranks]).mean()
        torch.testing.assert_close(mean_loss, single_loss, rtol=0, atol=1e-5, msg=name)
        for got, expected in zip(ranks[0][f"{name}/tiled"]["grads"], single_grads, strict=True):
            torch.testing.assert_close(got, expected, rtol=0, atol=1e-5, msg=f"{name} gradient")
        assert any(g.abs().max() > 1e-3 for g in single_grads)
