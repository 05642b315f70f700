"""LOCAL framework pieces (docs/methods.md §3a): latent correlation, class weights, alpha, total."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from _errors import assert_message

from hf_contrast.losses import ocl_loss, supcon_loss
from hf_contrast.losses.local import (
    LOCALLoss,
    inverse_frequency_weights,
    latent_correlation_embedding,
    local_alpha,
    local_loss,
)


def _maps(seed: int, b: int = 4) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randn(b, 3, 8, 8, generator=g),
        torch.randn(b, 5, 4, 4, generator=g),
        torch.randn(b, 2, 2, 2, generator=g),
    ]


def test_latent_correlation_matches_concatenate_then_average() -> None:
    pre, post = _maps(0), _maps(1)
    size = (4, 4)
    resized = []
    for a, b in zip(pre, post):
        d = a - b
        if d.shape[-1] >= 4:
            resized.append(F.adaptive_avg_pool2d(d, size))
        else:
            resized.append(F.interpolate(d, size=size, mode="bilinear", align_corners=False))
    reference = torch.cat(resized, dim=1).mean(dim=1).flatten(1)
    reference = reference / reference.norm(dim=1, keepdim=True)
    got = latent_correlation_embedding(pre, post, output_size=4)
    assert got.shape == (4, 16)
    torch.testing.assert_close(got, reference)


def test_latent_correlation_default_size_and_zero_difference() -> None:
    pre = _maps(0)
    assert latent_correlation_embedding(pre, _maps(1)).shape == (4, 64)  # first map's 8x8
    same = latent_correlation_embedding(pre, pre)
    assert torch.isfinite(same).all() and same.abs().max() == 0


def test_latent_correlation_errors() -> None:
    pre, post = _maps(0), _maps(1)
    with pytest.raises(ValueError, match="equal length"):
        latent_correlation_embedding(pre, post[:2])
    with pytest.raises(ValueError, match="must have the same shape"):
        latent_correlation_embedding(pre[:1], [post[1]])
    with pytest.raises(ValueError, match="output_size"):
        latent_correlation_embedding(pre, post, output_size=(0, 2))


def test_inverse_frequency_weights() -> None:
    w = inverse_frequency_weights([10, 5, 1])
    raw = torch.tensor([1 / 10, 1 / 5, 1.0])
    torch.testing.assert_close(w, raw / raw.mean())
    assert math.isclose(float(w.mean()), 1.0, rel_tol=1e-6)
    with pytest.raises(ValueError, match=r"classes \[1\] have no samples"):
        inverse_frequency_weights([3, 0])
    with pytest.raises(ValueError, match=">= 2 classes"):
        inverse_frequency_weights([3])
    # proportions give the same weights as counts
    torch.testing.assert_close(inverse_frequency_weights([0.5, 0.25, 0.05]), w)


@pytest.mark.parametrize(
    "counts",
    [[1.0, math.inf], [math.inf] * 3, torch.full((3,), math.inf, dtype=torch.float16), [1e-320, 1.0]],
    ids=["one-infinite", "all-infinite", "float16-infinite", "subnormal"],
)
def test_inverse_frequency_weights_refuse_counts_without_finite_weights(counts: list[float]) -> None:
    # an infinite count gave its class a weight of 0 (all infinite: NaN weights); a subnormal one an infinite weight
    with pytest.raises(ValueError, match="`class_counts` must be finite numbers of samples"):
        inverse_frequency_weights(counts)


def test_local_alpha_schedules() -> None:
    assert local_alpha(0) == 1.0
    assert local_alpha(3) == 0.25
    assert local_alpha(3, "constant", 0.7) == 0.7
    with pytest.raises(ValueError, match="schedule"):
        local_alpha(1, "cosine")
    with pytest.raises(ValueError, match="alpha"):
        local_alpha(1, alpha=1.5)


def _inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    b = 6
    return (
        torch.randn(b, 8, generator=g),
        torch.randn(b, 8, generator=g),
        torch.randn(b, 16, generator=g),
        torch.randn(b, 3, generator=g),
        torch.tensor([0, 1, 0, 2, 1, 0]),
    )


@pytest.mark.parametrize("contrastive, fn", [("ocl", ocl_loss), ("supcon", supcon_loss)])
def test_local_loss_composition(contrastive, fn) -> None:
    e_pre, e_post, latent, logits, labels = _inputs()
    weights = inverse_frequency_weights([3, 2, 1])
    alpha, beta, tau = 0.4, 0.5, 0.2
    z = F.normalize(F.normalize(e_pre, dim=1) - F.normalize(e_post, dim=1), dim=1)
    expected = alpha * (fn(z, labels, temperature=tau) + beta * fn(latent, labels, temperature=tau)) + (
        1 - alpha
    ) * F.cross_entropy(logits, labels, weight=weights)
    got = local_loss(e_pre, e_post, latent, logits, labels, weights, alpha, beta, tau, contrastive)
    torch.testing.assert_close(got, expected)


def test_local_loss_without_positive_pairs_keeps_classifier_term() -> None:
    e_pre, e_post, latent, logits, _ = _inputs()
    labels = torch.tensor([0, 1, 2, 3, 4, 5])
    logits = torch.randn(6, 6)
    with pytest.warns(UserWarning, match="no two pairs"):
        got = local_loss(e_pre, e_post, latent, logits, labels, alpha=0.5)
    torch.testing.assert_close(got, 0.5 * F.cross_entropy(logits, labels))


def test_local_loss_errors() -> None:
    e_pre, e_post, latent, logits, labels = _inputs()
    with pytest.raises(ValueError, match="`projections_pre` and `projections_post`"):
        local_loss(e_pre, e_post[:, :4], latent, logits, labels)
    with pytest.raises(ValueError, match="`labels`"):
        local_loss(e_pre, e_post, latent, logits, labels[:3])
    with pytest.raises(ValueError, match="`logits`"):
        local_loss(e_pre, e_post, latent, logits[:3], labels)
    with pytest.raises(ValueError, match="`alpha`"):
        local_loss(e_pre, e_post, latent, logits, labels, alpha=-0.1)
    with pytest.raises(ValueError, match="`beta`"):
        local_loss(e_pre, e_post, latent, logits, labels, beta=-1.0)
    with pytest.raises(ValueError, match="`contrastive`"):
        local_loss(e_pre, e_post, latent, logits, labels, contrastive="triplet")
    with pytest.raises(ValueError, match="`class_weights`"):
        local_loss(e_pre, e_post, latent, logits, labels, class_weights=torch.ones(2))


def test_local_module_terms_sum_and_classifier_gradients() -> None:
    torch.manual_seed(0)
    loss = LOCALLoss(embedding_dim=8, num_classes=3, class_counts=[3, 2, 1], beta=0.5)
    r_pre, r_post = torch.randn(6, 8, requires_grad=True), torch.randn(6, 8)
    e_pre, e_post = torch.randn(6, 4), torch.randn(6, 4)
    labels = torch.tensor([0, 1, 0, 2, 1, 0])
    terms = loss(r_pre, r_post, e_pre, e_post, labels, _maps(0, 6), _maps(1, 6), alpha=0.3)
    assert set(terms) == {"contrastive", "latent", "classification", "loss"}
    torch.testing.assert_close(terms["loss"], terms["contrastive"] + terms["latent"] + terms["classification"])
    latent = latent_correlation_embedding(_maps(0, 6), _maps(1, 6))
    logits = loss.classify(r_pre, r_post)
    expected = local_loss(e_pre, e_post, latent, logits, labels, loss.class_weights, 0.3, 0.5)
    torch.testing.assert_close(terms["loss"], expected)
    terms["loss"].backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in loss.classifier.parameters())
    assert r_pre.grad is not None
    with pytest.raises(ValueError, match="`class_counts` must have 3 entries"):
        LOCALLoss(embedding_dim=8, num_classes=3, class_counts=[1, 2])


def _local_label_out_of_range() -> None:
    z = torch.randn(4, 8)
    local_loss(z, z + 0.1, None, torch.randn(4, 3), torch.tensor([0, 0, 5, 1]))


LOCAL_DOORS: list[tuple[str, Callable[[], object], type[Exception], tuple[str, ...]]] = [
    ("local_loss label >= K", _local_label_out_of_range, ValueError, ("`labels`", "holds 5", "0..2", "`num_classes`")),
    ("local_loss negative label",
     lambda: local_loss(torch.randn(2, 4), torch.randn(2, 4), None, torch.randn(2, 3), torch.tensor([0, -1])),
     ValueError, ("`labels`", "holds -1", "remap the labels")),
    ("LOCALLoss(embedding_dim='8')", lambda: LOCALLoss(embedding_dim="8", num_classes=3), ValueError,
     ("`embedding_dim`", "'8'", "integer in [1, 1048576]")),
    ("LOCALLoss(num_classes=2.0)", lambda: LOCALLoss(embedding_dim=8, num_classes=2.0), ValueError,
     ("`num_classes`", "2.0", "integer in [2, 1048576]")),
]  # fmt: skip


@pytest.mark.parametrize(("name", "call", "error", "pieces"), LOCAL_DOORS, ids=[case[0] for case in LOCAL_DOORS])
def test_bad_local_arguments_name_argument_value_and_fix(name, call, error, pieces) -> None:
    with pytest.raises(error) as caught:
        call()
    assert_message(caught, *pieces)
