"""LOCAL: latent orthonormal contrastive learning for paired inputs (docs/methods.md §3a).

Paper: "LOCAL: Latent Orthonormal Contrastive Learning for Paired Images". A shared encoder sees both images of a pair
``(x_pre, x_post)``; three signals are combined:

- ``z = n(e_pre - e_post)``: the difference of the L2-normalised projections, trained with OCL
  (or SupCon for the paper's L-SCL baseline);
- ``l``: the latent feature-correlation embedding of the backbone's stage maps
  (:func:`latent_correlation_embedding`), trained with the same contrastive loss, weight ``beta``;
- a classifier MLP on ``concat(r_pre, r_post)`` trained with class-weighted cross-entropy.

``Total = alpha * (C(z) + beta * C(l)) + (1 - alpha) * WCE``, ``alpha`` decreasing over training
(:func:`local_alpha`).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import MISSING, dataclass
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from hf_contrast.errors import InputError

from ..tensor_checks import (
    check_choice,
    check_embeddings,
    check_index_range,
    check_int,
    check_labels,
    check_non_negative,
    check_same_shape,
    check_size,
    check_temperature,
    check_unit_interval,
    compute_dtype,
    l2_normalize,
    value_checks_enabled,
)
from .hyperparameters import HyperparameterModule, Hyperparameters, hyperparameter
from .ocl import OCLoss, ocl_loss
from .supcon import supcon_loss

__all__ = [
    "LOCALLoss",
    "inverse_frequency_weights",
    "latent_correlation_embedding",
    "local_alpha",
    "local_loss",
    "pair_difference",
]

#: The largest classifier width or class count LOCALLoss builds (a bigger one cannot be allocated: 2**20 × 2**20 floats
#: are 4 TiB), so a typo fails with a named argument instead of inside torch's allocator.
MAX_WIDTH = 2**20

_CONTRASTIVE = {"ocl": ocl_loss, "supcon": supcon_loss}


def latent_correlation_embedding(
    maps_pre: Sequence[Tensor],
    maps_post: Sequence[Tensor],
    output_size: int | tuple[int, int] | None = None,
) -> Tensor:
    """The latent hierarchical feature-correlation embedding ``l`` of LOCAL.

    For every stage ``i``: ``C_i = maps_pre[i] - maps_post[i]`` (the paper's ``W_i = [I, -I]``),
    resized to one spatial size (adaptive average pooling down, bilinear up-sampling up),
    concatenated on channels and averaged over all channels into one map, flattened and
    L2-normalised.

    Args:
        maps_pre: Stage feature maps of the pre images. Shape: each ``(B, C_i, H_i, W_i)``.
        maps_post: Same stages for the post images, same shapes as ``maps_pre``.
        output_size: Common spatial size ``(H, W)`` (or ``S`` for ``(S, S)``). Default: the
            size of the first (highest-resolution) map.

    Returns:
        ``l``. Shape: ``(B, H * W)``, unit rows (an all-zero difference stays zero).

    Raises:
        ValueError: if the lists are empty, differ in length, or a pair of maps differs in shape.
    """
    for name, maps in (("maps_pre", maps_pre), ("maps_post", maps_post)):
        if isinstance(maps, Tensor) or not isinstance(maps, Sequence) or isinstance(maps, (str, bytes)):
            raise InputError(
                f"`{name}` must be a list of (B, C, H, W) feature maps (one per stage), got {type(maps).__name__}."
            )
    if len(maps_pre) == 0 or len(maps_pre) != len(maps_post):
        raise InputError(
            f"`maps_pre` and `maps_post` must be non-empty sequences of equal length, got "
            f"{len(maps_pre)} and {len(maps_post)} maps."
        )
    for i, (a, b) in enumerate(zip(maps_pre, maps_post)):
        check_embeddings(f"maps_pre[{i}]", a, ndim=4, shape_doc="(B, C, H, W)")
        check_embeddings(f"maps_post[{i}]", b, ndim=4, shape_doc="(B, C, H, W)")
        check_same_shape(f"maps_pre[{i}]", a, f"maps_post[{i}]", b)
        if a.shape[0] != maps_pre[0].shape[0]:
            raise InputError(
                f"all maps must share the batch size {maps_pre[0].shape[0]}, `maps_pre[{i}]` has {a.shape[0]}."
            )
    size = tuple(maps_pre[0].shape[-2:]) if output_size is None else check_size("output_size", output_size)

    total = None
    n_channels = 0
    for a, b in zip(maps_pre, maps_post):
        diff = (a - b).float()
        h, w = diff.shape[-2:]
        if h >= size[0] and w >= size[1]:
            diff = F.adaptive_avg_pool2d(diff, size)
        else:
            diff = F.interpolate(diff, size=size, mode="bilinear", align_corners=False)
        # The mean over the concatenated channels is the sum of each stage's channel sums
        # divided by the total channel count: no concatenation is materialised.
        channel_sum = diff.sum(dim=1)
        total = channel_sum if total is None else total + channel_sum
        n_channels += diff.shape[1]
    latent = (total / n_channels).flatten(1)
    return l2_normalize(latent)


def pair_difference(projections_pre: Tensor, projections_post: Tensor) -> Tensor:
    """LOCAL's pair representation ``z = n(n(e_pre) - n(e_post))`` (the paper's ``W = [I, -I]``).

    Shape: ``(B, P)`` and ``(B, P)`` -> ``(B, P)``, float32 (or float64), unit rows (an all-zero
    difference stays zero).
    """
    check_embeddings("projections_pre", projections_pre)
    check_embeddings("projections_post", projections_post)
    check_same_shape("projections_pre", projections_pre, "projections_post", projections_post)
    dtype = compute_dtype(projections_pre, projections_post)
    return l2_normalize(l2_normalize(projections_pre.to(dtype)) - l2_normalize(projections_post.to(dtype)))


def inverse_frequency_weights(class_counts: Sequence[int] | Tensor) -> Tensor:
    """Class weights ``1 / frequency``, normalised to mean 1, for LOCAL's weighted cross-entropy.

    Args:
        class_counts: Number of training samples of each class. Shape: ``(K,)``.

    Returns:
        Weights. Shape: ``(K,)``, float32, mean 1.

    Raises:
        ValueError: if there are fewer than 2 classes or a count is not positive and finite.

    >>> inverse_frequency_weights([3, 1])
    tensor([0.5000, 1.5000])
    """
    try:
        counts = torch.as_tensor(class_counts, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError) as error:
        raise InputError(
            f"`class_counts` must be a 1-D sequence of positive sample counts, one per class, got {class_counts!r}."
        ) from error
    if counts.ndim != 1 or counts.numel() < 2:
        raise InputError(f"`class_counts` must be a 1-D sequence over >= 2 classes, got shape {tuple(counts.shape)}.")
    if not bool((counts > 0).all()):
        empty = [i for i, c in enumerate(counts.tolist()) if c <= 0]
        raise InputError(
            f"`class_counts` must be positive for every class (1/frequency weights); classes {empty} have no samples."
        )
    weights = 1.0 / counts
    weights = weights / weights.mean()
    # an infinite count (its weight would be 0), or one so small that 1/count overflows
    if not bool(torch.isfinite(torch.cat([counts, weights])).all()):
        raise InputError(
            f"`class_counts` must be finite numbers of samples with finite 1/frequency weights, got "
            f"{counts.tolist()}. Pass the number of training samples of each class."
        )
    return weights.float()


def local_alpha(epoch: float, schedule: str = "inverse_epoch", alpha: float = 1.0) -> float:
    """LOCAL's weight ``alpha`` between the contrastive terms and the classifier's WCE.

    Args:
        epoch: The current (possibly fractional) epoch, starting at 0.
        schedule: ``"inverse_epoch"``: ``alpha / (1 + epoch)`` (decreasing, the paper's choice);
            ``"constant"``: ``alpha``.
        alpha: The initial / constant value, in ``[0, 1]``.

    >>> local_alpha(1)
    0.5
    """
    alpha = check_unit_interval("alpha", alpha)
    epoch = check_non_negative("epoch", epoch)
    if epoch < 0:
        raise InputError(f"`epoch` must be >= 0, got {epoch}.")
    if schedule == "inverse_epoch":
        return alpha / (1.0 + float(epoch))
    if schedule == "constant":
        return alpha
    raise InputError(f"`schedule` must be 'inverse_epoch' or 'constant', got {schedule!r}.")


def _has_positive_pair(labels: Tensor) -> bool:
    return labels.unique().numel() < labels.numel()


def _local_terms(
    projections_pre: Tensor,
    projections_post: Tensor,
    latent: Tensor | None,
    logits: Tensor,
    labels: Tensor,
    class_weights: Tensor | None,
    alpha: float,
    beta: float,
    temperature: float,
    contrastive: str,
) -> dict[str, Tensor]:
    check_embeddings("projections_pre", projections_pre)
    check_embeddings("projections_post", projections_post)
    check_same_shape("projections_pre", projections_pre, "projections_post", projections_post)
    n = projections_pre.shape[0]
    check_labels(labels, n)
    labels = labels.long()  # int32 labels: cross-entropy takes int64 (torch < 2.7 refuses Int)
    check_embeddings("logits", logits, shape_doc="(B, K)")
    if logits.shape[0] != n:
        raise InputError(f"`logits` must have {n} rows (one per pair), got shape {tuple(logits.shape)}.")
    alpha = check_unit_interval("alpha", alpha)
    beta = check_non_negative("beta", beta)
    check_temperature("temperature", temperature)
    check_choice("contrastive", contrastive, _CONTRASTIVE)
    check_index_range(
        "labels",
        labels,
        logits.shape[1],
        fix="the classifier has one logit per class: build `LOCALLoss` with "
        "`num_classes` = the number of classes of the dataset (largest label + 1), or remap the labels to 0..K-1.",
    )
    if latent is not None:
        check_embeddings("latent", latent, shape_doc="(B, D_L)")
        if latent.shape[0] != n:
            raise InputError(f"`latent` must have {n} rows (one per pair), got shape {tuple(latent.shape)}.")
    if class_weights is not None:
        check_embeddings("class_weights", class_weights, ndim=1, shape_doc=f"({logits.shape[1]},)")
        if class_weights.shape != (logits.shape[1],):
            raise InputError(
                f"`class_weights` must have shape ({logits.shape[1]},) (one weight per class), got "
                f"{tuple(class_weights.shape)}."
            )
        if value_checks_enabled(class_weights) and (
            bool((class_weights < 0).any()) or not bool(class_weights.sum() > 0)
        ):
            raise InputError(
                "`class_weights` must be >= 0 with a positive sum (e.g. `inverse_frequency_weights(class_counts)`), "
                f"got {class_weights.tolist()}."
            )

    contrastive_fn = _CONTRASTIVE[contrastive]
    z = pair_difference(projections_pre, projections_post)
    zero = z.sum() * 0.0
    if _has_positive_pair(labels):
        term_z = contrastive_fn(z, labels, temperature=temperature)
        term_l = contrastive_fn(latent, labels, temperature=temperature) if latent is not None and beta > 0 else zero
    else:
        warnings.warn(
            f"LOCAL: no two pairs of the batch share a label ({n} pairs); the contrastive terms are 0 for this batch.",
            stacklevel=3,
        )
        term_z = term_l = zero
    weight = None if class_weights is None else class_weights.to(device=logits.device, dtype=torch.float32)
    wce = F.cross_entropy(logits.float(), labels, weight=weight)
    terms = {
        "contrastive": alpha * term_z,
        "latent": alpha * beta * term_l,
        "classification": (1.0 - alpha) * wce,
    }
    terms["loss"] = terms["contrastive"] + terms["latent"] + terms["classification"]
    if value_checks_enabled(terms["loss"]) and not bool(torch.isfinite(terms["loss"])):
        raise InputError(
            f"the LOCAL loss of finite inputs is not finite with `temperature`={temperature} and `beta`={beta}: "
            "similarities / temperature or the weighted latent term overflow float32; use a temperature >= 1e-3 "
            "and a `beta` of order 1."
        )
    return terms


def local_loss(
    projections_pre: Tensor,
    projections_post: Tensor,
    latent: Tensor | None,
    logits: Tensor,
    labels: Tensor,
    class_weights: Tensor | None = None,
    alpha: float = 1.0,
    beta: float = 1.0,
    temperature: float = 0.1,
    contrastive: str = "ocl",
) -> Tensor:
    """The LOCAL objective ``alpha * (C(z) + beta * C(l)) + (1 - alpha) * WCE``.

    Args:
        projections_pre: Projections ``e_pre`` of the pre images. Shape: ``(B, P)``.
        projections_post: Projections ``e_post`` of the post images. Shape: ``(B, P)``.
        latent: Latent correlation embedding ``l`` (:func:`latent_correlation_embedding`), or
            ``None`` to leave the latent term out. Shape: ``(B, D_L)``.
        logits: Classifier logits on ``concat(r_pre, r_post)``. Shape: ``(B, K)``.
        labels: Class of each pair. Shape: ``(B,)``, integer.
        class_weights: Cross-entropy class weights (:func:`inverse_frequency_weights`), or
            ``None`` for plain cross-entropy. Shape: ``(K,)``.
        alpha: Contrastive vs classification weight in ``[0, 1]`` (:func:`local_alpha`).
        beta: Weight of the latent term, ``>= 0``.
        temperature: Temperature of the contrastive loss, ``> 0``.
        contrastive: ``"ocl"`` (LOCAL) or ``"supcon"`` (the paper's L-SCL baseline).

    Returns:
        The scalar total. A batch in which no two pairs share a label has zero contrastive
        terms (with a warning): with small, skewed batches this happens, and the classifier
        term still trains.

    Raises:
        ValueError: on shape, label, or hyperparameter errors (argument named in the message).
    """
    return _local_terms(
        projections_pre, projections_post, latent, logits, labels, class_weights, alpha, beta, temperature, contrastive
    )["loss"]


def _optional_size(name: str, size: object) -> object:
    """A hyperparameter check: ``None`` or an image size (an int or ``(H, W)``), kept as given."""
    if size is not None:
        check_size(name, size)
    return size


@dataclass
class LOCALHyperparameters(Hyperparameters):
    """:class:`LOCALLoss`'s hyperparameters, declared once (see :mod:`.hyperparameters`)."""

    embedding_dim: int = hyperparameter(MISSING, partial(check_int, minimum=1, maximum=MAX_WIDTH))
    num_classes: int = hyperparameter(MISSING, partial(check_int, minimum=2, maximum=MAX_WIDTH))
    beta: float = hyperparameter(1.0, check_non_negative, help="LOCAL: weight β >= 0 of the latent OCL term.")
    temperature: float = hyperparameter(0.1, check_temperature, help="LOCAL: temperature τ > 0 of the OCL terms.")
    contrastive: str = hyperparameter(
        "ocl", partial(check_choice, choices=_CONTRASTIVE), help="LOCAL: 'ocl' (LOCAL) or 'supcon' (L-SCL baseline)."
    )
    classifier_hidden_dim: int | None = hyperparameter(
        None, partial(check_int, minimum=1, maximum=MAX_WIDTH, allow_none=True)
    )
    latent_size: int | tuple[int, int] | None = hyperparameter(None, _optional_size)


class LOCALLoss(HyperparameterModule):
    """LOCAL (or L-SCL with ``contrastive="supcon"``) with its classifier MLP.

    The module owns the classification network (an MLP with one hidden layer on
    ``concat(r_pre, r_post)``), so a trainer must put this module's parameters in the optimizer.

    Args:
        embedding_dim: Width ``F`` of the encoder's pooled features ``r``.
        num_classes: Number of classes ``K``.
        class_counts: (keyword only, data rather than a hyperparameter) Training-set count of each
            class, for the 1/frequency weights; ``None`` for unweighted cross-entropy.
        beta: Weight of the latent term. temperature: contrastive temperature.
        contrastive: ``"ocl"`` or ``"supcon"``.
        classifier_hidden_dim: Hidden width of the classifier (default ``embedding_dim``).
        latent_size: Spatial size of the latent correlation map (see
            :func:`latent_correlation_embedding`).

    Shape:
        ``forward(embeddings_pre, embeddings_post, projections_pre, projections_post, labels,
        maps_pre=None, maps_post=None, alpha=1.0)`` with embeddings ``(B, F)``, projections
        ``(B, P)``, labels ``(B,)`` and maps as in :func:`latent_correlation_embedding`;
        returns ``{"contrastive", "latent", "classification", "loss"}`` (weighted terms and total).
    """

    citation = OCLoss.citation  # the same (LOCAL) paper
    hyperparameters_class = LOCALHyperparameters

    def __init__(self, *args: Any, class_counts: Sequence[int] | Tensor | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # the LOCALHyperparameters
        num_classes, hidden = self.num_classes, self.classifier_hidden_dim or self.embedding_dim
        self.classifier = nn.Sequential(
            nn.Linear(2 * self.embedding_dim, hidden), nn.ReLU(inplace=True), nn.Linear(hidden, num_classes)
        )
        if class_counts is not None:
            weights = inverse_frequency_weights(class_counts)
            if weights.numel() != num_classes:
                raise InputError(f"`class_counts` must have {num_classes} entries, got {weights.numel()}.")
            self.register_buffer("class_weights", weights)
        else:
            self.class_weights = None

    def classify(self, embeddings_pre: Tensor, embeddings_post: Tensor) -> Tensor:
        """Logits of the pair classifier on ``concat(n(r_pre), n(r_post))``. Shape: ``(B, K)``."""
        for name, embeddings in (("embeddings_pre", embeddings_pre), ("embeddings_post", embeddings_post)):
            check_embeddings(name, embeddings, shape_doc=f"(B, {self.embedding_dim})")
            if embeddings.shape[1] != self.embedding_dim:
                raise InputError(
                    f"`{name}` must have {self.embedding_dim} features (`embedding_dim`), got shape "
                    f"{tuple(embeddings.shape)}."
                )
        check_same_shape("embeddings_pre", embeddings_pre, "embeddings_post", embeddings_post)
        weight = self.classifier[0].weight
        embeddings_pre, embeddings_post = embeddings_pre.to(weight.dtype), embeddings_post.to(weight.dtype)
        return self.classifier(torch.cat([l2_normalize(embeddings_pre), l2_normalize(embeddings_post)], dim=1))

    def forward(
        self,
        embeddings_pre: Tensor,
        embeddings_post: Tensor,
        projections_pre: Tensor,
        projections_post: Tensor,
        labels: Tensor,
        maps_pre: Sequence[Tensor] | None = None,
        maps_post: Sequence[Tensor] | None = None,
        alpha: float = 1.0,
    ) -> dict[str, Tensor]:
        latent = None
        if maps_pre is not None and maps_post is not None and self.beta > 0:
            latent = latent_correlation_embedding(maps_pre, maps_post, self.latent_size)
        logits = self.classify(embeddings_pre, embeddings_post)
        return _local_terms(
            projections_pre,
            projections_post,
            latent,
            logits,
            labels,
            self.class_weights,
            alpha,
            self.beta,
            self.temperature,
            self.contrastive,
        )
