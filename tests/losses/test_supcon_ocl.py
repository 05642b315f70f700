"""SupCon (docs/methods.md §2) and OCL (§3): reference loops, PML, geometry of the minima, errors."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from pytorch_metric_learning.losses import SupConLoss as PMLSupConLoss

from hf_contrast.losses import OCLoss, SupConLoss, ocl_loss, supcon_loss
from hf_contrast.losses.supcon import flatten_views

LossFn = Callable[..., torch.Tensor]
BOTH = pytest.mark.parametrize("loss_fn", [supcon_loss, ocl_loss], ids=["supcon", "ocl"])


def reference_loss(z: torch.Tensor, labels: torch.Tensor, temperature: float, absolute_negatives: bool) -> float:
    """Plain loop over anchors, float64, written from docs/methods.md §2 (SupCon) and §3 (OCL)."""
    z = z.double()
    z = z / z.norm(dim=1, keepdim=True).clamp_min(1e-12)
    y = labels.tolist()
    n = len(y)
    losses = []
    for i in range(n):
        positives = [p for p in range(n) if p != i and y[p] == y[i]]
        if not positives:
            continue  # excluded from the mean, not counted as zero
        s = [float(z[i] @ z[b]) / temperature for b in range(n)]
        denominator = 0.0
        for b in range(n):
            if b == i:
                continue
            negative = y[b] != y[i]
            denominator += math.exp(abs(s[b]) if (negative and absolute_negatives) else s[b])
        losses.append(-sum(s[p] - math.log(denominator) for p in positives) / len(positives))
    return sum(losses) / len(losses)


def simplex(n_classes: int, dim: int) -> torch.Tensor:
    """Unit vertices of a regular simplex centred at 0: pairwise cosine −1/(K−1)."""
    v = torch.eye(n_classes, dim, dtype=torch.float64)
    v[:, :n_classes] -= 1.0 / n_classes
    return v / v.norm(dim=1, keepdim=True)


def random_rotation(dim: int, seed: int) -> torch.Tensor:
    q, _ = torch.linalg.qr(torch.randn(dim, dim, dtype=torch.float64, generator=torch.Generator().manual_seed(seed)))
    return q


LABELS = torch.tensor([0, 0, 1, 1, 1, 2, 3, 3, 0, 4])  # classes 2 and 4 have no positive


@pytest.mark.parametrize("temperature", [0.05, 0.1, 1.0])
@pytest.mark.parametrize(("loss_fn", "absolute"), [(supcon_loss, False), (ocl_loss, True)], ids=["supcon", "ocl"])
def test_matches_reference_loop(loss_fn: LossFn, absolute: bool, temperature: float) -> None:
    z = torch.randn(len(LABELS), 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    got = loss_fn(z, LABELS, temperature)
    assert got.item() == pytest.approx(reference_loss(z, LABELS, temperature, absolute), rel=1e-10)


@BOTH
def test_anchors_without_positive_are_excluded_not_zero(loss_fn: LossFn) -> None:
    z = torch.randn(len(LABELS), 6, dtype=torch.float64)
    keep = torch.tensor([y not in (2, 4) for y in LABELS.tolist()])
    all_anchors = loss_fn(z, LABELS)
    # Excluding singleton anchors leaves the loss a mean over the 8 anchors with a positive; the
    # singletons still act as negatives, so they cannot simply be dropped from the batch.
    assert all_anchors.item() != pytest.approx(loss_fn(z[keep], LABELS[keep]).item())
    absolute = loss_fn is ocl_loss
    per_anchor_mean_with_zeros = reference_loss(z, LABELS, 0.1, absolute) * keep.sum().item() / len(LABELS)
    assert all_anchors.item() != pytest.approx(per_anchor_mean_with_zeros)
    assert all_anchors.item() == pytest.approx(reference_loss(z, LABELS, 0.1, absolute), rel=1e-10)


@pytest.mark.parametrize("temperature", [0.1, 0.5])
def test_supcon_equals_pytorch_metric_learning(temperature: float) -> None:
    g = torch.Generator().manual_seed(1)
    z = torch.randn(24, 8, generator=g)
    labels = torch.randint(0, 5, (24,), generator=g)
    expected = PMLSupConLoss(temperature=temperature)(z, labels)
    torch.testing.assert_close(supcon_loss(z, labels, temperature), expected, rtol=1e-5, atol=1e-6)


def test_ocl_differs_from_supcon_only_through_negatives() -> None:
    # With all negatives at non-negative similarity |s| = s, so OCL == SupCon.
    z = torch.rand(8, 5, generator=torch.Generator().manual_seed(2))  # positive entries: cos >= 0
    labels = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    torch.testing.assert_close(ocl_loss(z, labels), supcon_loss(z, labels))
    z[::2] *= -1  # now some negatives are anti-aligned: OCL counts them as |s|, SupCon as s
    assert ocl_loss(z, labels).item() > supcon_loss(z, labels).item()


@pytest.mark.parametrize("counts", [(3, 3, 3, 3), (5, 2, 3, 2)], ids=["balanced", "imbalanced"])
def test_ocl_prefers_orthonormal_classes_and_supcon_the_simplex(counts: tuple[int, ...]) -> None:
    n_classes, dim = len(counts), 8
    labels = torch.repeat_interleave(torch.arange(n_classes), torch.tensor(counts))
    rotation = random_rotation(dim, seed=3)  # neither configuration is axis-aligned
    orthonormal = (torch.eye(n_classes, dim, dtype=torch.float64) @ rotation)[labels]
    regular_simplex = (simplex(n_classes, dim) @ rotation)[labels]
    assert ocl_loss(orthonormal, labels).item() < ocl_loss(regular_simplex, labels).item()
    if counts[0] == counts[1]:  # SupCon's optimum is the simplex for balanced classes
        assert supcon_loss(regular_simplex, labels).item() < supcon_loss(orthonormal, labels).item()


def test_ocl_closed_form_at_orthonormal_collapse() -> None:
    # Collapsed, pairwise orthogonal classes: positives s = 1/τ, negatives |s| = 0, so
    # ℓ_i = −1/τ + log((n_y − 1)·exp(1/τ) + (N − n_y)).
    counts, tau = torch.tensor([4, 2, 3]), 0.2
    labels = torch.repeat_interleave(torch.arange(3), counts)
    z = torch.eye(3, 5, dtype=torch.float64)[labels]
    n = int(counts.sum())
    expected = sum(c * (-1 / tau + math.log((c - 1) * math.exp(1 / tau) + n - c)) for c in counts.tolist()) / n
    assert ocl_loss(z, labels, tau).item() == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(("module_cls", "loss_fn"), [(SupConLoss, supcon_loss), (OCLoss, ocl_loss)])
def test_module_matches_function_and_exposes_config(module_cls: type, loss_fn: LossFn) -> None:
    z, labels = torch.randn(10, 4), torch.tensor([0, 1, 2, 0, 1, 2, 0, 1, 2, 3])
    module = module_cls(temperature=0.3, normalize=False)
    torch.testing.assert_close(module(z, labels), loss_fn(z, labels, temperature=0.3, normalize=False))
    torch.testing.assert_close(module_cls()(z, labels), loss_fn(z, labels, temperature=0.1))
    assert module.get_config_dict() == {
        "temperature": 0.3,
        "normalize": False,
        "gather_distributed": False,
        "tile_size": None,
    }


def test_citations() -> None:
    assert "Khosla, Prannay" in SupConLoss.citation and SupConLoss.citation.startswith("@")
    assert "Latent Orthonormal Contrastive Learning" in OCLoss.citation and OCLoss.citation.startswith("@")


@BOTH
def test_gather_distributed_without_process_group_is_identity(loss_fn: LossFn) -> None:
    z, labels = torch.randn(8, 4), torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    torch.testing.assert_close(loss_fn(z, labels, gather_distributed=True), loss_fn(z, labels))


@BOTH
def test_gradcheck_float64(loss_fn: LossFn) -> None:
    z = torch.randn(6, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(4), requires_grad=True)
    labels = torch.tensor([0, 0, 1, 1, 2, 0])
    assert torch.autograd.gradcheck(lambda x: loss_fn(x, labels, temperature=0.3), (z,))


@BOTH
def test_bf16_autocast_is_float32_and_close(loss_fn: LossFn) -> None:
    g = torch.Generator().manual_seed(5)
    layer = torch.nn.Linear(16, 8)
    x, labels = torch.randn(32, 16, generator=g), torch.randint(0, 4, (32,), generator=g)
    reference = loss_fn(layer(x), labels)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        z = layer(x)
        assert z.dtype == torch.bfloat16
        loss = loss_fn(z, labels)
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    assert loss.item() == pytest.approx(reference.item(), abs=1e-2)


@BOTH
def test_large_logits_are_stable(loss_fn: LossFn) -> None:
    z = torch.randn(8, 4) * 1e3
    labels = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    assert torch.isfinite(loss_fn(z, labels, temperature=1e-3, normalize=False))


def test_flatten_views_is_view_major() -> None:
    views = torch.randn(3, 4, 5)
    labels = torch.tensor([7, 8, 7, 9])
    z, y = flatten_views(views, labels)
    assert z.shape == (12, 5) and y.tolist() == [7, 8, 7, 9] * 3
    torch.testing.assert_close(z[4 + 2], views[1, 2])
    z_list, y_list = flatten_views(list(views), labels)
    torch.testing.assert_close(z_list, z)
    assert torch.equal(y_list, y)
    # Two views of singletons: every anchor's positive is its other view.
    assert torch.isfinite(supcon_loss(*flatten_views(views[:2], torch.arange(4))))


# --- errors: one per bad input ------------------------------------------------------------


@BOTH
def test_rejects_wrong_rank(loss_fn: LossFn) -> None:
    with pytest.raises(ValueError, match=r"`z` must have shape \(N, D\)"):
        loss_fn(torch.randn(2, 4, 3), torch.tensor([0, 0]))


@BOTH
def test_rejects_integer_embeddings(loss_fn: LossFn) -> None:
    with pytest.raises(ValueError, match=r"`z` must be a floating-point tensor"):
        loss_fn(torch.ones(4, 3, dtype=torch.int64), torch.tensor([0, 0, 1, 1]))


@BOTH
def test_rejects_non_finite(loss_fn: LossFn) -> None:
    z = torch.randn(4, 3)
    z[0, 0] = float("inf")
    with pytest.raises(ValueError, match=r"`z` contains NaN or infinite"):
        loss_fn(z, torch.tensor([0, 0, 1, 1]))


@BOTH
def test_rejects_non_positive_temperature(loss_fn: LossFn) -> None:
    with pytest.raises(ValueError, match=r"`temperature` must be > 0, got 0.0"):
        loss_fn(torch.randn(4, 3), torch.tensor([0, 0, 1, 1]), temperature=0.0)


@pytest.mark.parametrize("module_cls", [SupConLoss, OCLoss])
def test_module_rejects_non_positive_temperature(module_cls: type) -> None:
    with pytest.raises(ValueError, match=r"`temperature` must be > 0"):
        module_cls(temperature=-1.0)


@BOTH
def test_rejects_labels_of_wrong_length(loss_fn: LossFn) -> None:
    with pytest.raises(ValueError, match=r"`labels` must have shape \(4,\).*got \(3,\)"):
        loss_fn(torch.randn(4, 3), torch.tensor([0, 0, 1]))


@BOTH
def test_rejects_labels_of_wrong_rank(loss_fn: LossFn) -> None:
    with pytest.raises(ValueError, match=r"`labels` must have shape \(4,\).*got \(4, 1\)"):
        loss_fn(torch.randn(4, 3), torch.tensor([[0], [0], [1], [1]]))


@BOTH
def test_rejects_float_labels(loss_fn: LossFn) -> None:
    with pytest.raises(ValueError, match=r"`labels` must have an integer dtype"):
        loss_fn(torch.randn(4, 3), torch.tensor([0.0, 0.0, 1.0, 1.0]))


@BOTH
def test_rejects_batch_without_positive_pair(loss_fn: LossFn) -> None:
    with pytest.raises(ValueError, match=r"`labels`: no anchor has a positive: got 8 samples of 8 distinct classes"):
        loss_fn(torch.randn(8, 3), torch.arange(8))


def test_flatten_views_rejects_views_of_different_shapes() -> None:
    with pytest.raises(ValueError, match=r"`z_views` must all have the same \(B, D\) shape"):
        flatten_views([torch.randn(4, 3), torch.randn(5, 3)], torch.arange(4))


def test_flatten_views_rejects_labels_of_wrong_length() -> None:
    with pytest.raises(ValueError, match=r"`labels` must have shape \(4,\)"):
        flatten_views(torch.randn(2, 4, 3), torch.arange(3))


@pytest.mark.parametrize("loss", [supcon_loss, ocl_loss])
def test_one_class_batch_warns_and_is_the_positives_only_loss(loss) -> None:
    z = torch.nn.functional.normalize(torch.randn(4, 8, generator=torch.Generator().manual_seed(0)), dim=1)
    with pytest.warns(RuntimeWarning, match="one class, so there are no negatives"):
        got = loss(z, torch.zeros(4, dtype=torch.long), temperature=0.5)
    logits = z @ z.T / 0.5  # reference: every other sample is a positive; no negative, so OCL = SupCon
    log_prob = logits - torch.logsumexp(
        logits.masked_fill(torch.eye(4, dtype=torch.bool), -math.inf), dim=1, keepdim=True
    )
    want = -(log_prob.masked_fill(torch.eye(4, dtype=torch.bool), 0).sum(dim=1) / 3).mean()
    torch.testing.assert_close(got, want)
