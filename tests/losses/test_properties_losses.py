"""Property: every loss of ``hf_contrast.losses`` (pure function, ``nn.Module`` constructor and forward) gives a
finite loss or an ``InputError`` naming the argument, whatever it is given (``tests/_properties.py``).

One argument at a time is replaced by a generated bad value (wrong type, wrong dtype / rank / size,
empty, NaN / inf / huge / tiny values, a bad hyperparameter) while the others stay valid.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
from _properties import (
    any_bad,
    assert_package_error_or_result,
    bad_names,
    bad_numbers,
    finite_scalar,
    near_tensors,
    tiny_temperatures,
    wrong_types,
)
from hypothesis import assume, given
from hypothesis import strategies as st

from hf_contrast.errors import InputError
from hf_contrast.losses import (
    AFCLLoss,
    AlignUniformLoss,
    BinaryNCELoss,
    CARELoss,
    CAREMoCoLoss,
    InfoNCELoss,
    LOCALLoss,
    OCLoss,
    SimOLoss,
    SpectralContrastiveLoss,
    SupConLoss,
    VICRegLoss,
    afcl_loss,
    alignment_loss,
    binary_nce_loss,
    care_equivariance_loss,
    flatten_views,
    info_nce_loss,
    inverse_frequency_weights,
    latent_correlation_embedding,
    local_alpha,
    local_loss,
    moco_info_nce_loss,
    ocl_loss,
    pair_difference,
    simo_loss,
    spectral_contrastive_loss,
    supcon_loss,
    uniformity_loss,
    vicreg_loss,
)
from hf_contrast.tensor_checks import MIN_TEMPERATURE

B, D = 4, 3
_gen = torch.Generator().manual_seed(0)


def _z(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=_gen)


LABELS = torch.tensor([0, 1, 0, 1])
HYPER = st.one_of(bad_numbers, wrong_types, near_tensors(()), near_tensors((2,)))
FLAG = st.one_of(wrong_types, bad_numbers)
#: A temperature: the bad hyperparameters plus temperatures below MIN_TEMPERATURE (7.6e-64 made ocl_loss NaN).
TEMPERATURE = st.one_of(HYPER, tiny_temperatures)
NAME = bad_names
# a size argument: bad values, but none that would allocate gigabytes when accepted
SMALL_SIZE = st.one_of(
    wrong_types, st.sampled_from([0, -1, -3, 1.5, float("nan"), float("inf"), True]), st.integers(1, 6)
)


def finite_tensor(result: Any) -> None:
    """A tensor result (embeddings, weights): floating point and finite; a tuple: each tensor in it."""
    items = result if isinstance(result, tuple) else (result,)
    for item in items:
        assert isinstance(item, torch.Tensor), f"expected a tensor, got {type(item).__name__}"
        if item.is_floating_point():
            assert bool(torch.isfinite(item).all()), "returned non-finite values instead of an error"


def finite_group_losses(result: Any) -> None:
    """simo_loss: a finite scalar for one group ``(m, D)``, one finite value per group ``(G,)`` for ``(G, m, D)``."""
    assert isinstance(result, torch.Tensor) and result.is_floating_point(), f"expected a float tensor, got {result!r}"
    assert result.ndim in (0, 1), f"expected a scalar or one loss per group, got shape {tuple(result.shape)}"
    assert bool(torch.isfinite(result).all()), "returned non-finite values instead of an error"


def finite_number(result: Any) -> None:
    assert isinstance(result, float) and math.isfinite(result), f"got {result!r}"


@dataclass
class Case:
    """An entry point, its valid arguments, and for each argument to corrupt.

    For each such argument: its strategy and the names an error may blame.
    """

    name: str
    call: Callable[..., Any]
    valid: Callable[[], dict[str, Any]]
    bad: dict[str, tuple[st.SearchStrategy[Any], tuple[str, ...]]]
    check: Callable[[Any], None] = finite_scalar
    marks: dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:
        return self.name


def pair(
    a: str = "z1", b: str = "z2", shape: tuple[int, ...] = (B, D)
) -> dict[str, tuple[st.SearchStrategy[Any], tuple[str, ...]]]:
    return {a: (any_bad(shape), (a, b)), b: (any_bad(shape), (a, b))}


def labelled(z: str = "z") -> dict[str, tuple[st.SearchStrategy[Any], tuple[str, ...]]]:
    return {z: (any_bad((B, D)), (z, "labels")), "labels": (any_bad((B,)), ("labels", z))}


def _forward(module: Callable[[], torch.nn.Module]) -> Callable[..., Any]:
    return lambda **kwargs: module()(**kwargs)


CASES = [
    Case(
        "info_nce_loss",
        info_nce_loss,
        lambda: {"z1": _z(B, D), "z2": _z(B, D)},
        {
            **pair(),
            "temperature": (TEMPERATURE, ("temperature",)),
            "tile_size": (HYPER, ("tile_size",)),
            "normalize": (FLAG, ("normalize",)),
            "gather_distributed": (FLAG, ("gather_distributed",)),
        },
    ),
    Case(
        "supcon_loss",
        supcon_loss,
        lambda: {"z": _z(B, D), "labels": LABELS},
        {**labelled(), "temperature": (TEMPERATURE, ("temperature",)), "tile_size": (HYPER, ("tile_size",))},
    ),
    Case(
        "ocl_loss",
        ocl_loss,
        lambda: {"z": _z(B, D), "labels": LABELS},
        {**labelled(), "temperature": (TEMPERATURE, ("temperature",)), "normalize": (FLAG, ("normalize",))},
    ),
    Case(
        "flatten_views",
        flatten_views,
        lambda: {"z_views": _z(2, B, D), "labels": LABELS},
        {
            "z_views": (
                st.one_of(any_bad((2, B, D)), st.lists(near_tensors((B, D)), max_size=3)),
                ("z_views", "labels"),
            ),
            "labels": (any_bad((B,)), ("labels", "z_views")),
        },
        check=finite_tensor,
    ),
    Case(
        "local_loss",
        local_loss,
        lambda: {
            "projections_pre": _z(B, D),
            "projections_post": _z(B, D),
            "latent": _z(B, 5),
            "logits": _z(B, 2),
            "labels": LABELS,
            "class_weights": torch.ones(2),
        },
        {
            **pair("projections_pre", "projections_post"),
            "latent": (any_bad((B, 5)), ("latent",)),
            "logits": (any_bad((B, 2)), ("logits", "labels", "class_weights")),
            "labels": (any_bad((B,)), ("labels", "logits")),
            "class_weights": (any_bad((2,)), ("class_weights", "logits")),
            "alpha": (HYPER, ("alpha",)),
            "beta": (HYPER, ("beta",)),
            "temperature": (TEMPERATURE, ("temperature",)),
            "contrastive": (NAME, ("contrastive",)),
        },
    ),
    Case(
        "latent_correlation_embedding",
        latent_correlation_embedding,
        lambda: {"maps_pre": [_z(B, 2, 3, 3)], "maps_post": [_z(B, 2, 3, 3)]},
        {
            "maps_pre": (
                st.one_of(st.lists(any_bad((B, 2, 3, 3)), max_size=2), wrong_types),
                ("maps_pre", "maps_post"),
            ),
            "maps_post": (
                st.one_of(st.lists(any_bad((B, 2, 3, 3)), max_size=2), wrong_types),
                ("maps_pre", "maps_post"),
            ),
            "output_size": (st.one_of(SMALL_SIZE, st.tuples(SMALL_SIZE, SMALL_SIZE)), ("output_size",)),
        },
        check=finite_tensor,
    ),
    Case(
        "inverse_frequency_weights",
        inverse_frequency_weights,
        lambda: {"class_counts": [3, 1]},
        {
            "class_counts": (
                st.one_of(any_bad((3,)), wrong_types, st.lists(bad_numbers, max_size=4)),
                ("class_counts",),
            )
        },
        check=finite_tensor,
    ),
    Case(
        "local_alpha",
        local_alpha,
        lambda: {"epoch": 1},
        {"epoch": (HYPER, ("epoch",)), "alpha": (HYPER, ("alpha",)), "schedule": (NAME, ("schedule",))},
        check=finite_number,
    ),
    Case(
        "pair_difference",
        pair_difference,
        lambda: {"projections_pre": _z(B, D), "projections_post": _z(B, D)},
        pair("projections_pre", "projections_post"),
        check=finite_tensor,
    ),
    Case(
        "care_equivariance_loss",
        care_equivariance_loss,
        lambda: {"z1": _z(B, D), "z2": _z(B, D), "n_splits": 2},
        {**pair(), "n_splits": (HYPER, ("n_splits",)), "normalize": (FLAG, ("normalize",))},
    ),
    Case(
        "moco_info_nce_loss",
        moco_info_nce_loss,
        lambda: {"q": _z(B, D), "k": _z(B, D), "queue": _z(6, D)},
        {**pair("q", "k"), "queue": (any_bad((6, D)), ("queue",)), "temperature": (TEMPERATURE, ("temperature",))},
    ),
    Case(
        "simo_loss",
        simo_loss,
        lambda: {"e": _z(B, D), "y": 0.5},
        {"e": (any_bad((B, D)), ("e",)), "y": (st.one_of(HYPER, any_bad((1,))), ("y",)), "eps": (HYPER, ("eps",))},
        check=finite_group_losses,
    ),
    Case(
        "afcl_loss",
        afcl_loss,
        lambda: {"e": _z(B, D), "n_classes": 2},
        {
            "e": (any_bad((B, D)), ("e", "n_classes")),
            "n_classes": (HYPER, ("n_classes",)),
            "olean": (HYPER, ("olean",)),
            "eps": (HYPER, ("eps",)),
        },
    ),
    Case(
        "alignment_loss",
        alignment_loss,
        lambda: {"x": _z(B, D), "y": _z(B, D)},
        {**pair("x", "y"), "alpha": (HYPER, ("alpha",)), "normalize": (FLAG, ("normalize",))},
    ),
    Case(
        "uniformity_loss",
        uniformity_loss,
        lambda: {"x": _z(B, D)},
        {"x": (any_bad((B, D)), ("x",)), "t": (HYPER, ("t",)), "tile_size": (HYPER, ("tile_size",))},
    ),
    Case("spectral_contrastive_loss", spectral_contrastive_loss, lambda: {"z1": _z(B, D), "z2": _z(B, D)}, pair()),
    Case(
        "vicreg_loss",
        vicreg_loss,
        lambda: {"z1": _z(B, D), "z2": _z(B, D)},
        {
            **pair(),
            "invariance_weight": (HYPER, ("invariance_weight",)),
            "variance_weight": (HYPER, ("variance_weight",)),
            "covariance_weight": (HYPER, ("covariance_weight",)),
            "gamma": (HYPER, ("gamma",)),
            "eps": (HYPER, ("eps",)),
        },
    ),
    Case(
        "binary_nce_loss",
        binary_nce_loss,
        lambda: {"z1": _z(B, D), "z2": _z(B, D)},
        {
            **pair(),
            "temperature": (TEMPERATURE, ("temperature",)),
            "bias": (HYPER, ("bias",)),
            "negatives": (NAME, ("negatives",)),
            "tile_size": (HYPER, ("tile_size",)),
        },
    ),
    # the modules' forwards (their constructors: test_loss_module_constructors)
    Case("InfoNCELoss.forward", _forward(InfoNCELoss), lambda: {"z1": _z(B, D), "z2": _z(B, D)}, pair()),
    Case("SupConLoss.forward", _forward(SupConLoss), lambda: {"z": _z(B, D), "labels": LABELS}, labelled()),
    Case("OCLoss.forward", _forward(OCLoss), lambda: {"z": _z(B, D), "labels": LABELS}, labelled()),
    Case(
        "CARELoss.forward",
        _forward(lambda: CARELoss(n_splits=2)),
        lambda: {"z1_inv": _z(B, D), "z2_inv": _z(B, D)},
        {**pair("z1_inv", "z2_inv"), "z1_eq": (any_bad((B, D)), ("z1_eq", "z2_eq", "z1", "z2"))},
    ),
    Case(
        "CAREMoCoLoss.forward",
        _forward(lambda: CAREMoCoLoss(n_splits=2)),
        lambda: {"q": _z(B, D), "k": _z(B, D), "queue": _z(6, D), "z1_eq": _z(B, D), "z2_eq": _z(B, D)},
        {**pair("q", "k"), "queue": (any_bad((6, D)), ("queue",)), "z1_eq": (any_bad((B, D)), ("z1", "z2"))},
    ),
    Case(
        "LOCALLoss.forward",
        _forward(lambda: LOCALLoss(embedding_dim=D, num_classes=2)),
        lambda: {
            "embeddings_pre": _z(B, D),
            "embeddings_post": _z(B, D),
            "projections_pre": _z(B, D),
            "projections_post": _z(B, D),
            "labels": LABELS,
        },
        {
            **pair("embeddings_pre", "embeddings_post"),
            **pair("projections_pre", "projections_post"),
            "labels": (any_bad((B,)), ("labels",)),
            "alpha": (HYPER, ("alpha",)),
            "maps_pre": (st.lists(any_bad((B, 2, 3, 3)), max_size=2), ("maps_pre", "maps_post")),
        },
    ),
    Case(
        "SimOLoss.forward",
        _forward(lambda: SimOLoss(y=0.5)),
        lambda: {"e": _z(B, D)},
        {"e": (any_bad((B, D)), ("e",))},
    ),
    Case(
        "AFCLLoss.forward",
        _forward(lambda: AFCLLoss(n_classes=2)),
        lambda: {"e": _z(B, D)},
        {"e": (any_bad((B, D)), ("e", "n_classes"))},
    ),
    Case("AlignUniformLoss.forward", _forward(AlignUniformLoss), lambda: {"z1": _z(B, D), "z2": _z(B, D)}, pair()),
    Case(
        "SpectralContrastiveLoss.forward",
        _forward(SpectralContrastiveLoss),
        lambda: {"z1": _z(B, D), "z2": _z(B, D)},
        pair(),
    ),
    Case("VICRegLoss.forward", _forward(VICRegLoss), lambda: {"z1": _z(B, D), "z2": _z(B, D)}, pair()),
    Case("BinaryNCELoss.forward", _forward(BinaryNCELoss), lambda: {"z1": _z(B, D), "z2": _z(B, D)}, pair()),
]

#: Findings not fixed yet (strict: the case turns red once fixed; then remove the entry).
FINDINGS: dict[tuple[str, str], str] = {}

PARAMS = [
    pytest.param(
        case,
        argument,
        id=f"{case.name}-{argument}",
        marks=[pytest.mark.xfail(strict=True, reason=FINDINGS[case.name, argument])]
        if (case.name, argument) in FINDINGS
        else [],
    )
    for case in CASES
    for argument in case.bad
]


@pytest.mark.parametrize(("case", "argument"), PARAMS)
@given(data=st.data())
def test_loss_gives_a_finite_loss_or_names_the_argument(case: Case, argument: str, data: st.DataObject) -> None:
    strategy, names = case.bad[argument]
    kwargs = case.valid()
    kwargs[argument] = data.draw(strategy, label=argument)
    assert_package_error_or_result(lambda: case.call(**kwargs), names, case.check)


MODULES: dict[type[torch.nn.Module], dict[str, Any]] = {
    InfoNCELoss: {},
    SupConLoss: {},
    OCLoss: {},
    CARELoss: {},
    CAREMoCoLoss: {},
    LOCALLoss: {"embedding_dim": D, "num_classes": 2},
    SimOLoss: {"y": 0.5},
    AFCLLoss: {"n_classes": 2},
    AlignUniformLoss: {},
    SpectralContrastiveLoss: {},
    VICRegLoss: {},
    BinaryNCELoss: {},
}


_LOCAL_WIDTHS = ("embedding_dim", "num_classes", "classifier_hidden_dim")


@pytest.mark.parametrize("module", list(MODULES), ids=lambda m: m.__name__)
@given(data=st.data())
def test_loss_module_constructors_name_the_hyperparameter(module: type[torch.nn.Module], data: st.DataObject) -> None:
    required = MODULES[module]
    names = (
        sorted(module.hyperparameters_class.__dataclass_fields__) if hasattr(module, "hyperparameters_class") else []
    )
    names = names or ["temperature", "bias", "negatives"]
    argument = data.draw(st.sampled_from(names), label="hyperparameter")
    value = data.draw(st.one_of(HYPER, NAME), label=argument)
    # a valid but huge classifier width (up to LOCAL's MAX_WIDTH) is the user's to allocate: 37,040 features want an
    # 11 GB classifier, which the allocator refuses or the machine's OOM killer answers; not an input error
    assume(not (module is LOCALLoss and isinstance(value, int) and value > 4096 and argument in _LOCAL_WIDTHS))
    kwargs = {**required, argument: value}
    if module is LOCALLoss and argument != "class_counts":
        kwargs.setdefault("class_counts", None)

    def check(loss: Any) -> None:
        assert isinstance(loss, torch.nn.Module)

    assert_package_error_or_result(lambda: module(**kwargs), (argument,), check)


@given(counts=st.one_of(any_bad((2,)), wrong_types, st.lists(bad_numbers, max_size=4)))
def test_local_loss_class_counts(counts: Any) -> None:
    assert_package_error_or_result(
        lambda: LOCALLoss(embedding_dim=D, num_classes=2, class_counts=counts), ("class_counts",), lambda m: None
    )


# ---- temperatures: one bound for every loss that takes one (tensor_checks.MIN_TEMPERATURE) -------------------

TEMPERATURE_LOSSES = {
    "info_nce_loss": lambda t: info_nce_loss(_z(B, D), _z(B, D), temperature=t),
    "supcon_loss": lambda t: supcon_loss(_z(B, D), LABELS, temperature=t),
    "ocl_loss": lambda t: ocl_loss(_z(B, D), LABELS, temperature=t),
    "moco_info_nce_loss": lambda t: moco_info_nce_loss(_z(B, D), _z(B, D), _z(6, D), temperature=t),
    "binary_nce_loss": lambda t: binary_nce_loss(_z(B, D), _z(B, D), temperature=t),
    "binary_nce_loss shifted": lambda t: binary_nce_loss(_z(B, D), _z(B, D), temperature=t, negatives="shifted"),
    "local_loss": lambda t: local_loss(_z(B, D), _z(B, D), _z(B, 5), _z(B, 2), LABELS, torch.ones(2), temperature=t),
    "CARELoss": lambda t: CARELoss(temperature=t, n_splits=2)(_z(B, D), _z(B, D))["loss"],
    "CAREMoCoLoss": lambda t: CAREMoCoLoss(temperature=t, n_splits=2)(
        _z(B, D), _z(B, D), _z(6, D), _z(B, D), _z(B, D)
    )["loss"],
}


@pytest.mark.parametrize("name", list(TEMPERATURE_LOSSES))
@given(exponent=st.floats(min_value=math.log10(MIN_TEMPERATURE), max_value=4.0))
def test_every_temperature_from_the_minimum_up_gives_a_finite_loss(name: str, exponent: float) -> None:
    temperature = max(10.0**exponent, MIN_TEMPERATURE)
    loss = TEMPERATURE_LOSSES[name](temperature)
    loss = loss["loss"] if isinstance(loss, dict) else loss
    assert bool(torch.isfinite(loss)), f"{name}(temperature={temperature}) = {loss}"


@pytest.mark.parametrize("name", list(TEMPERATURE_LOSSES))
@given(temperature=tiny_temperatures)
def test_a_temperature_below_the_minimum_is_refused_naming_it(name: str, temperature: Any) -> None:
    with pytest.raises(InputError, match=r"`temperature` must be >= 1e-06, got .*: similarities divided"):
        TEMPERATURE_LOSSES[name](temperature)


def test_an_integer_hyperparameter_of_any_size_reaches_torch_as_a_float() -> None:
    z1, z2 = _z(B, D), _z(B, D)
    # Python ints used to reach torch arithmetic as they were: OverflowError 'int too big to convert'
    assert torch.equal(binary_nce_loss(z1, z2, temperature=10**30), binary_nce_loss(z1, z2, temperature=1e30))
    assert torch.equal(
        binary_nce_loss(z1, z2, temperature=1, bias=-10), binary_nce_loss(z1, z2, temperature=1.0, bias=-10.0)
    )
    assert torch.equal(vicreg_loss(z1, z2, invariance_weight=10**30), vicreg_loss(z1, z2, invariance_weight=1e30))
    queue = _z(6, D)
    assert torch.equal(
        moco_info_nce_loss(z1, z2, queue, temperature=10**30), moco_info_nce_loss(z1, z2, queue, temperature=1e30)
    )


@pytest.mark.parametrize(
    ("call", "named"),
    [
        (lambda: binary_nce_loss(_z(B, D), _z(B, D), bias=1e300), "`bias`=1e+300"),
        (lambda: binary_nce_loss(_z(B, D), _z(B, D), bias=torch.tensor(3e38)), "`bias`=3e+38"),
        (lambda: vicreg_loss(_z(B, D), _z(B, D), variance_weight=1e300), "`variance_weight`=1e+300"),
        (lambda: vicreg_loss(_z(B, D), _z(B, D), covariance_weight=1e300), "`covariance_weight`=1e+300"),
        (lambda: vicreg_loss(_z(B, D), _z(B, D), invariance_weight=1e300), "`invariance_weight`=1e+300"),
        (lambda: vicreg_loss(_z(B, D), _z(B, D), gamma=1e300), "`gamma`=1e+300"),
        (lambda: alignment_loss(3 * torch.eye(B, D), -torch.eye(B, D), alpha=1e300), "`alpha`=1e+300"),
        (lambda: uniformity_loss(_z(B, D), t=1e300), "`t`=1e+300"),
        (lambda: CARELoss(care_weight=1e300, n_splits=2)(_z(B, D), _z(B, D)), "`care_weight`=1e+300"),
        (
            lambda: CAREMoCoLoss(care_weight=10**40, n_splits=2)(_z(B, D), _z(B, D), _z(6, D), _z(B, D), _z(B, D)),
            "`care_weight`=1e+40",
        ),
        (lambda: AlignUniformLoss(align_weight=1e300)(_z(B, D), _z(B, D)), "`align_weight`=1e+300"),
        (lambda: AlignUniformLoss(uniform_weight=1e300)(_z(B, D), _z(B, D)), "`uniform_weight`=1e+300"),
    ],
    ids=[
        "bnce-bias",
        "bnce-bias-tensor",
        "vicreg-variance",
        "vicreg-covariance",
        "vicreg-invariance",
        "vicreg-gamma",
        "align-alpha",
        "uniform-t",
        "care-weight",
        "care-moco-weight",
        "align-weight",
        "uniform-weight",
    ],
)
def test_a_hyperparameter_that_overflows_the_loss_is_named(call: Callable[[], Any], named: str) -> None:
    with pytest.raises(InputError, match=re.escape(named)):
        call()


def test_modules_name_their_own_arguments() -> None:
    good = _z(B, D)
    for module, kwargs, name in [
        (CARELoss(n_splits=2), {"z1_inv": "x", "z2_inv": good}, "`z1_inv`"),
        (CARELoss(n_splits=2), {"z1_inv": good, "z2_inv": good[:2]}, "`z1_inv` and `z2_inv` must have the same shape"),
        (
            CARELoss(n_splits=2),
            {"z1_inv": good, "z2_inv": good, "z1_eq": good, "z2_eq": good[:, :2]},
            "`z1_eq` and `z2_eq`",
        ),
        (CAREMoCoLoss(n_splits=2), {"q": good, "k": good, "queue": _z(6, D), "z1_eq": good, "z2_eq": 1.0}, "`z2_eq`"),
        (AlignUniformLoss(), {"z1": good, "z2": "x"}, "`z2`"),
        (AlignUniformLoss(), {"z1": good[:1], "z2": good[:1]}, "`z1` must have at least 2 rows"),
    ]:
        with pytest.raises(InputError, match=re.escape(name)):
            module(**kwargs)
