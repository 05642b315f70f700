"""A pair method is one object: ``@register_pair_loss("name")`` on a loss ``nn.Module`` (hf_contrast.objectives.pair);
the package's own pair methods are their losses too (their configs derived, not declared again)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
import torch
from _tiny import tiny_timm_encoder
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from hf_contrast.losses import BinaryNCELoss, InfoNCELoss, VICRegLoss
from hf_contrast.objectives import (
    BinaryNCEConfig,
    BinaryNCEObjective,
    SimCLRConfig,
    SimCLRObjective,
    VICRegConfig,
    VICRegObjective,
    build_objective,
    get_objective,
    register_pair_loss,
)
from hf_contrast.objectives import registry as registry_module
from hf_contrast.objectives.config import _argument_help
from hf_contrast.tensor_checks import check_non_negative


@pytest.fixture
def registry() -> Iterator[None]:
    """The methods registered by a test are gone after it (the registry is the process's)."""
    saved = dict(registry_module._REGISTRY)
    yield
    registry_module._REGISTRY.clear()
    registry_module._REGISTRY.update(saved)


def _pull_loss() -> type[nn.Module]:
    class CosinePull(nn.Module):
        """``weight · mean(1 - cos(z1, z2)) + spread · mean(z1 · z2ᵀ)²``.

        Args:
            weight: Pull: weight >= 0 of the
                alignment term.
            spread: Pull: weight >= 0 of the spread term.
            gather_distributed: Set by the trainer.
        """

        def __init__(self, weight: float = 1.0, spread: float = 0.5, gather_distributed: bool = False) -> None:
            super().__init__()
            self.weight = check_non_negative("weight", weight)
            self.spread = check_non_negative("spread", spread)
            self.gather_distributed = gather_distributed

        def forward(self, z1: torch.Tensor, z2: torch.Tensor) -> dict[str, torch.Tensor]:
            z1, z2 = nn.functional.normalize(z1, dim=-1), nn.functional.normalize(z2, dim=-1)
            terms = {
                "align": self.weight * (1 - (z1 * z2).sum(-1)).mean(),
                "spread": self.spread * (z1 @ z2.T).pow(2).mean(),
            }
            return {**terms, "loss": terms["align"] + terms["spread"]}

    return CosinePull


@dataclasses.dataclass
class _Script:
    method: str = dataclasses.field(default="simclr", metadata={"help": "The method."})


def test_a_registered_loss_is_a_method_whose_flags_are_its_constructor(registry, tmp_path) -> None:
    from hf_contrast.training import ContrastiveTrainer, ContrastiveTrainingArguments, parse_args_with_objective

    loss_class = register_pair_loss("test_pull")(_pull_loss())
    objective_class = get_objective("test_pull")
    assert loss_class.objective_class is objective_class and objective_class.loss_class is loss_class
    fields = {
        f.name: (f.type, f.default, f.metadata.get("help")) for f in dataclasses.fields(objective_class.config_class)
    }
    assert fields == {  # gather_distributed is the trainer's: no flag
        "weight": (float, 1.0, "Pull: weight >= 0 of the alignment term."),
        "spread": (float, 0.5, "Pull: weight >= 0 of the spread term."),
    }
    with pytest.raises(ValueError, match="`spread` must be >= 0, got -1.0"):  # the loss's own check, at the door
        build_objective("test_pull", spread=-1)

    argv = ["--method", "test_pull", "--weight", "2.5", "--output_dir", str(tmp_path)]
    script, _, config = parse_args_with_objective((_Script, ContrastiveTrainingArguments), method="simclr", args=argv)
    assert script.method == "test_pull" and dataclasses.asdict(config) == {"weight": 2.5, "spread": 0.5}

    args = ContrastiveTrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=4, max_steps=2, logging_steps=1, image_size=16,
        report_to="none", gather_distributed=True,
    )  # fmt: skip
    data = _images(8)
    trainer = ContrastiveTrainer(
        model=tiny_timm_encoder(), args=args, objective=build_objective("test_pull", weight=2.5), train_dataset=data
    )
    trainer.train()
    assert isinstance(trainer.objective.loss, loss_class)
    assert trainer.objective.loss.weight == 2.5 and trainer.objective.loss.gather_distributed is True
    logged = [h for h in trainer.state.log_history if "loss" in h]
    assert logged and {"loss_align", "loss_spread"} <= set(logged[0])
    assert trainer.objective.get_config_dict() == {"weight": 2.5, "spread": 0.5}


def _images(n: int):
    import datasets
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)) for _ in range(n)]
    return datasets.Dataset.from_dict({"image": images, "label": [i % 2 for i in range(n)]})


def test_a_loss_that_cannot_be_a_method_is_refused_naming_what_to_fix(registry) -> None:
    class NoDefault(nn.Module):
        def __init__(self, weight: float) -> None:
            super().__init__()

    class NoType(nn.Module):
        def __init__(self, weight=1.0) -> None:  # noqa: ANN001
            super().__init__()

    class DictDefault(nn.Module):
        def __init__(self, weights: dict = {"a": 1.0}) -> None:  # noqa: B006
            super().__init__()

    with pytest.raises(TypeError, match=r"DictDefault\(weights\): the default \{'a': 1.0\} is a dict.*take a list"):
        register_pair_loss("test_bad")(DictDefault)
    for loss_class in (NoDefault, NoType):
        with pytest.raises(TypeError, match=rf"{loss_class.__name__}\(weight\): .*a default and a type annotation"):
            register_pair_loss("test_bad")(loss_class)
    with pytest.raises(TypeError, match="takes the method's name"):
        register_pair_loss(3)  # before any class is decorated
    with pytest.raises(TypeError, match="decorates an nn.Module class"):
        register_pair_loss("test_bad")(lambda z1, z2: z1.sum())
    register_pair_loss("test_pull_once")(_pull_loss())
    with pytest.raises(ValueError, match="already registered"):
        register_pair_loss("test_pull_once")(_pull_loss())


def test_a_list_default_is_a_multi_value_flag_and_never_shared(registry, tmp_path) -> None:
    from hf_contrast.training import ContrastiveTrainingArguments, parse_args_with_objective

    class Weighted(nn.Module):
        """Args:
        weights: Per-term weights.
        """

        def __init__(self, weights: list[float] = [1.0, 2.0]) -> None:  # noqa: B006
            super().__init__()
            self.weights = weights

        def forward(self, z1: torch.Tensor, z2: torch.Tensor) -> torch.Tensor:
            return self.weights[0] * (z1 - z2).pow(2).mean()

    register_pair_loss("test_weighted")(Weighted)
    argv = ["--method", "test_weighted", "--weights", "3", "4", "--output_dir", str(tmp_path)]
    _, _, config = parse_args_with_objective((_Script, ContrastiveTrainingArguments), method="simclr", args=argv)
    assert config.weights == [3.0, 4.0]
    first, second = build_objective("test_weighted").config, build_objective("test_weighted").config
    assert first.weights == [1.0, 2.0] and first.weights is not second.weights


def test_the_packages_pair_methods_are_their_losses_with_the_same_flags_as_before() -> None:
    """SimCLR, VICReg and binary NCE name their loss; their configs, derived from the losses' hyperparameters with
    help text, keep the former names, fields, defaults and help."""
    expected = {
        SimCLRObjective: (SimCLRConfig, InfoNCELoss, {"temperature": 0.5}),
        VICRegObjective: (
            VICRegConfig,
            VICRegLoss,
            {"invariance_weight": 25.0, "variance_weight": 25.0, "covariance_weight": 1.0},
        ),
        BinaryNCEObjective: (
            BinaryNCEConfig,
            BinaryNCELoss,
            {"temperature": 0.1, "negatives": "all", "learnable_temperature": False, "learnable_bias": False},
        ),
    }
    for objective_class, (config_class, loss_class, defaults) in expected.items():
        assert objective_class.config_class is config_class and objective_class.loss_class is loss_class
        assert config_class.__name__ == objective_class.__name__.removesuffix("Objective") + "Config"
        assert dataclasses.asdict(config_class()) == defaults
        source = {f.name: f for f in dataclasses.fields(loss_class.hyperparameters_class)}
        for f in dataclasses.fields(config_class):
            assert f.metadata == {"help": source[f.name].metadata["help"]}
    simclr = build_objective("simclr", temperature=0.3)
    assert dataclasses.asdict(simclr.config) == {"temperature": 0.3}


_NAMES = st.from_regex(r"[a-z][a-z_]{0,8}", fullmatch=True)
_WORDS = st.text(alphabet="abcdefghij >=τ.", min_size=1, max_size=20).map(str.strip).filter(bool)


@settings(max_examples=50, deadline=None)
@given(
    st.dictionaries(
        st.from_regex(r"[a-z][a-z_]{0,8}", fullmatch=True),
        st.lists(_WORDS, min_size=1, max_size=3),
        min_size=1,
        max_size=4,
    ),
    st.sampled_from([4, 8]),
)
def test_argument_help_reads_back_every_argument_of_an_args_section(
    entries: dict[str, list[str]], indent: int
) -> None:
    """A Google-style ``Args:`` section (continuation lines deeper, a section after it) parses back to each
    argument's text, its lines joined by a space."""
    lines = ["Summary line.", "", "Args:"]
    for name, parts in entries.items():
        lines.append(" " * indent + f"{name}: {parts[0]}")
        lines += [" " * (indent + 4) + part for part in parts[1:]]
    lines += ["", "Returns:", " " * indent + "nothing: at all."]
    assert _argument_help("\n".join(lines)) == {name: " ".join(parts) for name, parts in entries.items()}
