"""The objective registry and the objectives' hyperparameter configs (validation, command-line flags)."""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import re
import sys
import typing
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import torch
from _errors import assert_message
from distributed_scripts.trainer_utils import (
    fixed_views_collator,
    image_dataset,
    parameters,
    training_args,
    vit_encoder,
)
from torch import Tensor, nn
from transformers import HfArgumentParser

from hf_contrast.errors import InputError
from hf_contrast.objectives import (
    AlignUniformConfig,
    BinaryNCEConfig,
    CAREConfig,
    CAREMoCoConfig,
    CAREMoCoObjective,
    CAREObjective,
    LOCALConfig,
    Objective,
    ObjectiveConfig,
    SimCLRConfig,
    SimCLRObjective,
    SimOConfig,
    SupConConfig,
    VICRegConfig,
    available_objectives,
    build_objective,
    get_objective,
    register_objective,
)
from hf_contrast.objectives import registry as registry_module
from hf_contrast.training import (
    CARETrainer,
    ContrastiveTrainer,
    ContrastiveTrainingArguments,
    OCLTrainer,
    SimCLRTrainer,
    SupConTrainer,
    parse_args_with_objective,
)
from hf_contrast.views import ViewBuilder

EXPECTED = {"align_uniform", "binary_nce", "care", "care_moco", "local", "ocl", "pair", "simclr", "simo", "spectral",
            "supcon", "vicreg"}  # fmt: skip


@pytest.fixture(scope="module")
def images():
    return image_dataset(n=16, size=16)


# ---- registry ----------------------------------------------------------------------------------


def test_every_method_is_registered() -> None:
    assert set(available_objectives()) >= EXPECTED
    assert available_objectives() == sorted(available_objectives())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_registered_name_builds(name: str) -> None:
    cls = get_objective(name)
    objective = build_objective(name)
    assert type(objective) is cls and objective.name == name == cls.name
    assert isinstance(objective, Objective) and isinstance(objective, nn.Module)
    assert isinstance(objective.config, cls.config_class) and dataclasses.is_dataclass(objective.config)
    assert objective.get_config_dict() == dataclasses.asdict(cls.config_class())  # the defaults
    assert build_objective(objective) is objective  # an instance is returned as is


def test_unknown_name_lists_the_registered_names() -> None:
    with pytest.raises(ValueError, match="Unknown method 'byol'") as error:
        get_objective("byol")
    for name in EXPECTED:
        assert name in str(error.value)
    with pytest.raises(ValueError, match="Unknown method 'byol'"):
        build_objective("byol")
    with pytest.raises(ValueError, match="`objective` must be a method name or an Objective"):
        build_objective(3)  # type: ignore[arg-type]


def test_hyperparameters_by_name_or_by_instance() -> None:
    assert build_objective("care", n_splits=4, care_weight=0.1).config == CAREConfig(care_weight=0.1, n_splits=4)
    with pytest.raises(ValueError, match="already built CAREObjective"):
        build_objective(CAREObjective(), n_splits=4)
    with pytest.raises(ValueError, match=r"no hyperparameter\(s\) \['n_split'\]"):
        build_objective("care", n_split=4)
    with pytest.raises(ValueError, match="either `config` or hyperparameters"):
        CAREObjective(CAREConfig(), n_splits=4)
    with pytest.raises(ValueError, match="`config` must be a CAREConfig"):
        CAREObjective(SimCLRConfig())
    assert CAREMoCoObjective(CAREMoCoConfig(moco_queue_size=8)).config.moco_queue_size == 8


def test_a_name_cannot_be_registered_twice() -> None:
    with pytest.raises(ValueError, match="already registered"):

        @register_objective("care")
        class Other(SimCLRObjective):
            pass


def test_named_trainer_takes_another_objective_by_name(tmp_path, images) -> None:
    trainer = CARETrainer(
        model=vit_encoder(), args=training_args(tmp_path, per_device_train_batch_size=16, max_steps=1),
        train_dataset=images, objective="care_moco",
    )  # fmt: skip
    assert isinstance(trainer.objective, CAREMoCoObjective)
    trainer.train()
    assert trainer.objective.moco.num_enqueued == 16


# ---- a user's own objective --------------------------------------------------------------------


@dataclasses.dataclass
class _MineConfig(ObjectiveConfig):
    scale: float = dataclasses.field(default=2.0, metadata={"help": "Mine: scale > 0 of the distance."})

    def validate(self) -> None:
        if not self.scale > 0:
            raise ValueError(f"`scale` must be > 0, got {self.scale!r}.")


class _MineObjective(Objective):
    """Mean squared distance of the two views' normalised projections, times ``scale``, plus a learnable
    offset whose square is a second term (an objective-owned parameter)."""

    config_class = _MineConfig

    def setup(self, views: ViewBuilder, train_dataset: Any) -> None:
        self.offset = nn.Parameter(torch.tensor(1.0))

    def forward(self, model: nn.Module, inputs: Mapping[str, Any], views: ViewBuilder) -> dict[str, Tensor]:
        z1, z2 = views.projections(model, views.augmented(inputs, 2))
        z1, z2 = nn.functional.normalize(z1, dim=1), nn.functional.normalize(z2, dim=1)
        distance = self.config.scale * (z1 - z2).pow(2).sum(1).mean()
        offset = self.offset.pow(2)
        return {"distance": distance, "offset": offset, "loss": distance + offset}


@pytest.fixture
def mine() -> Iterator[type[Objective]]:
    cls = register_objective("mine")(_MineObjective)
    try:
        yield cls
    finally:
        registry_module._REGISTRY.pop("mine", None)


def test_a_user_registered_objective_trains_by_name(tmp_path, images, mine) -> None:
    assert "mine" in available_objectives()
    model = vit_encoder()
    before = parameters(model)
    args = training_args(tmp_path, max_steps=3, learning_rate=0.05)
    trainer = ContrastiveTrainer(
        model=model, args=args, train_dataset=images, objective="mine", data_collator=fixed_views_collator
    )
    assert isinstance(trainer.objective, mine) and trainer.objective.config.scale == 2.0
    trainer.train()
    assert any(not torch.equal(before[k], p) for k, p in parameters(model).items())
    assert trainer.objective.offset.item() < 1.0  # its own parameter is trained
    logged = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logged) == 3
    for entry in logged:
        assert entry["loss"] == pytest.approx(entry["loss_distance"] + entry["loss_offset"], rel=1e-5)
    # with hyperparameters, by name
    other = ContrastiveTrainer(
        model=vit_encoder(), args=args, train_dataset=images, objective=build_objective("mine", scale=0.5)
    )
    assert other.objective.config.scale == 0.5
    with pytest.raises(ValueError, match="`scale`"):
        build_objective("mine", scale=-1.0)


# ---- configs: validation and command-line flags ------------------------------------------------

CONFIGS = [CAREConfig, CAREMoCoConfig, SimCLRConfig, VICRegConfig, BinaryNCEConfig, SupConConfig, SimOConfig,
           AlignUniformConfig, LOCALConfig]  # fmt: skip

# Out-of-range values, field by field (type errors are checked for every field below).
BAD_VALUES = [
    (CAREConfig, "temperature", 0.0),
    (CAREConfig, "care_weight", -1.0),
    (CAREConfig, "n_splits", 0),
    (CAREMoCoConfig, "moco_momentum", 1.0),
    (CAREMoCoConfig, "moco_queue_size", 0),
    (CAREMoCoConfig, "temperature", -0.2),
    (SimCLRConfig, "temperature", 0.0),
    (VICRegConfig, "invariance_weight", -1.0),
    (VICRegConfig, "variance_weight", math.inf),
    (VICRegConfig, "covariance_weight", -0.1),
    (BinaryNCEConfig, "temperature", 0.0),
    (BinaryNCEConfig, "negatives", "some"),
    (SupConConfig, "temperature", -1.0),
    (SupConConfig, "n_views", 3),
    (SimOConfig, "classes_per_batch", 1),
    (SimOConfig, "samples_per_class", 1),
    (SimOConfig, "olean", 1.5),
    (SimOConfig, "n_views", 3),
    (AlignUniformConfig, "align_weight", math.nan),
    (AlignUniformConfig, "uniform_weight", -0.5),
    (AlignUniformConfig, "simcse_weight", -1.0),
    (AlignUniformConfig, "temperature", 0.0),
    (AlignUniformConfig, "task_loss_weight", -1.0),
    (LOCALConfig, "temperature", 0.0),
    (LOCALConfig, "beta", -1.0),
    (LOCALConfig, "alpha", 2.0),
    (LOCALConfig, "alpha_schedule", "cosine"),
    (LOCALConfig, "contrastive", "triplet"),
    (LOCALConfig, "num_labels", 1),
]


@pytest.mark.parametrize(
    ("config_cls", "field", "value"), BAD_VALUES, ids=[f"{c.__name__}.{f}" for c, f, _ in BAD_VALUES]
)
def test_config_rejects_out_of_range_values_naming_the_field(config_cls, field: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"`{field}`"):
        config_cls(**{field: value})


def _wrong_type(annotation: Any) -> object:
    """A value of the wrong type for a field annotated ``annotation``."""
    base = {t for t in typing.get_args(annotation) if t is not type(None)} or {annotation}
    if base == {bool}:
        return "yes"  # a truthy string is not a bool
    if base == {int}:
        return 2.5
    if base == {float}:
        return "0.1"
    if base == {str}:
        return ""
    raise AssertionError(f"no wrong value for {annotation!r}")


FIELDS = [(cls, f.name) for cls in CONFIGS for f in dataclasses.fields(cls)]


@pytest.mark.parametrize(("config_cls", "field"), FIELDS, ids=[f"{c.__name__}.{f}" for c, f in FIELDS])
def test_every_config_field_rejects_a_value_of_the_wrong_type(config_cls, field: str) -> None:
    hints = typing.get_type_hints(config_cls)
    with pytest.raises(ValueError, match=f"`{field}`"):
        config_cls(**{field: _wrong_type(hints[field])})


def test_every_registered_config_is_checked_here() -> None:
    registered = {get_objective(name).config_class for name in available_objectives()}
    assert registered - {ObjectiveConfig} == set(CONFIGS)


def test_training_arguments_and_a_config_parse_from_the_command_line(tmp_path) -> None:
    parser = HfArgumentParser((ContrastiveTrainingArguments, CAREConfig))
    args, config = parser.parse_args_into_dataclasses(
        ["--output_dir", str(tmp_path), "--care_weight", "0.005", "--n_splits", "4", "--temperature", "0.2",
         "--share_views", "--image_size", "32"]
    )  # fmt: skip
    assert (config.care_weight, config.n_splits, config.temperature, config.share_views) == (0.005, 4, 0.2, True)
    assert args.image_size == 32 and args.remove_unused_columns is False
    assert CAREObjective(config).config is config
    with pytest.raises(ValueError, match="`n_splits`"):
        parser.parse_args_into_dataclasses(["--output_dir", str(tmp_path), "--n_splits", "0"])


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_config_parses_next_to_the_training_arguments(tmp_path, name: str) -> None:
    """No config field clashes with a training argument (HfArgumentParser would refuse the duplicate flag)."""
    config_cls = get_objective(name).config_class
    parser = HfArgumentParser((ContrastiveTrainingArguments, config_cls))
    _, config = parser.parse_args_into_dataclasses(["--output_dir", str(tmp_path)])
    assert config == config_cls()
    for f in dataclasses.fields(config_cls):
        assert f.metadata.get("help"), f"{config_cls.__name__}.{f.name} has no --help text"


# ---- a new loss and its objective: two files and two registration lines -----------------------

NEW_LOSS = """
from dataclasses import dataclass

from torch import nn

from hf_contrast.losses.hyperparameters import HyperparameterModule, Hyperparameters, hyperparameter
from hf_contrast.tensor_checks import check_positive


@dataclass
class ScaledDistanceHyperparameters(Hyperparameters):
    scale: float = hyperparameter(2.0, check_positive, help="Scaled distance: scale > 0 of the distance.")


class ScaledDistanceLoss(HyperparameterModule):
    hyperparameters_class = ScaledDistanceHyperparameters

    def forward(self, z1, z2):
        z1, z2 = nn.functional.normalize(z1, dim=1), nn.functional.normalize(z2, dim=1)
        return self.scale * (z1 - z2).pow(2).sum(1).mean()
"""
NEW_OBJECTIVE = """
from dataclasses import dataclass

from hf_contrast.objectives import ObjectiveConfig, loss_field, register_objective
from hf_contrast.objectives.pair import PairObjective

from .scaled_distance_loss import ScaledDistanceHyperparameters, ScaledDistanceLoss


@dataclass
class ScaledDistanceConfig(ObjectiveConfig):
    scale: float = loss_field(ScaledDistanceHyperparameters)


@register_objective("scaled_distance")
class ScaledDistanceObjective(PairObjective):
    config_class = ScaledDistanceConfig

    def build_loss(self, views):
        return ScaledDistanceLoss(self.config.scale)
"""


@dataclasses.dataclass
class _Script:
    method: str = dataclasses.field(default="simclr", metadata={"help": "The method."})


@pytest.fixture
def new_method(tmp_path, monkeypatch) -> Iterator[Any]:
    package = tmp_path / "my_methods"
    package.mkdir()
    (package / "scaled_distance_loss.py").write_text(NEW_LOSS)
    (package / "scaled_distance_objective.py").write_text(NEW_OBJECTIVE)
    (package / "__init__.py").write_text(  # the two registration lines
        "from .scaled_distance_loss import ScaledDistanceLoss\n"
        "from .scaled_distance_objective import ScaledDistanceObjective\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        yield importlib.import_module("my_methods")
    finally:
        registry_module._REGISTRY.pop("scaled_distance", None)
        for name in [m for m in sys.modules if m == "my_methods" or m.startswith("my_methods.")]:
            del sys.modules[name]


def test_a_new_loss_and_objective_are_two_files_and_two_registration_lines(tmp_path, images, new_method, capsys):
    """Its hyperparameter is declared once, in the loss: the objective's config, its flag and --help text,
    its check and the saved config all follow, and the trainer trains it by name."""
    objective_class = get_objective("scaled_distance")
    field = dataclasses.fields(objective_class.config_class)[0]
    assert (field.name, field.default, field.metadata["help"]) == (
        "scale", 2.0, "Scaled distance: scale > 0 of the distance.",
    )  # fmt: skip
    with pytest.raises(ValueError) as from_loss:
        new_method.ScaledDistanceLoss(scale=0.0)
    with pytest.raises(ValueError) as from_config:
        build_objective("scaled_distance", scale=0.0)
    assert str(from_config.value) == str(from_loss.value) == "`scale` must be > 0, got 0.0."
    types = (_Script, ContrastiveTrainingArguments)
    argv = ["--output_dir", str(tmp_path), "--method", "scaled_distance"]
    with pytest.raises(SystemExit):
        parse_args_with_objective(types, method="simclr", args=[*argv, "--help"])
    assert "Scaled distance: scale > 0 of the distance. (default: 2.0)" in " ".join(capsys.readouterr().out.split())
    script, args, config = parse_args_with_objective(types, method="simclr", args=[*argv, "--scale", "0.5"])
    assert (script.method, config.scale) == ("scaled_distance", 0.5)
    trainer = ContrastiveTrainer(
        model=vit_encoder(), args=training_args(tmp_path, max_steps=1), train_dataset=images,
        objective=objective_class(config), data_collator=fixed_views_collator,
    )  # fmt: skip
    trainer.train()
    assert trainer.objective.get_config_dict() == {"scale": 0.5}
    assert trainer.objective.loss.get_config_dict() == {"scale": 0.5}


@pytest.mark.parametrize("field", ["learning_rate", "seed", "method"])
def test_a_hyperparameter_named_like_a_script_argument_is_refused_naming_both(tmp_path, field) -> None:
    """A user's objective whose config declares a field that ``TrainingArguments`` (or the script) already has:
    one flag cannot set two fields; argparse's "conflicting option string" traceback becomes one message."""
    config_class = dataclasses.make_dataclass("ClashConfig", [(field, float, dataclasses.field(default=1.0))])
    objective_class = type("ClashObjective", (_MineObjective,), {"config_class": config_class})
    register_objective("clash")(objective_class)
    try:
        with pytest.raises(InputError) as caught:
            parse_args_with_objective(
                (_Script, ContrastiveTrainingArguments), method="simclr",
                args=["--output_dir", str(tmp_path), "--method", "clash"],
            )  # fmt: skip
    finally:
        registry_module._REGISTRY.pop("clash", None)
    owner = "_Script" if field == "method" else "ContrastiveTrainingArguments"
    assert f"--method clash's hyperparameters (ClashConfig) and {owner} both declare ['{field}']" in str(caught.value)
    assert f"'clash_{field}'" in str(caught.value)


@pytest.mark.parametrize("name", [3, None, "", "  ", ("care",)])
def test_a_method_name_that_is_not_a_string_is_refused_at_registration(name) -> None:
    expected = r"`register_objective` takes the method's name .* got " + re.escape(repr(name))
    with pytest.raises(TypeError, match=expected):
        register_objective(name)


@pytest.mark.parametrize(
    ("method", "flags", "expected"),
    [
        ("simo", ["--classes_per_batch", "3", "--samples_per_class", "5"], 15),  # derived: C × k
        ("simo", [], 4 * 8),  # SimO's defaults (C = 4, k = 8), not the script's default of 128
        ("simo", ["--classes_per_batch", "3", "--per_device_train_batch_size", "12"], 12),  # named: kept
        ("simo", ["--classes_per_batch", "3", "--per_device_train_batch_size=12"], 12),
        ("care", [], 128),  # no class-major batches: the default stands
    ],
)
def test_class_major_methods_derive_the_batch_size_unless_it_is_named(tmp_path, method, flags, expected) -> None:
    """``run_care.py --method simo`` and ``run_simo.py`` alike: the batch of a class-major method is C × k."""
    types = (_Script, ContrastiveTrainingArguments)
    argv = ["--output_dir", str(tmp_path), "--method", method, *flags]
    defaults = {"per_device_train_batch_size": 128}
    _, args, _ = parse_args_with_objective(types, method="care", defaults=defaults, args=argv)
    assert args.per_device_train_batch_size == expected
    config_file = tmp_path / "args.json"  # a .json config file follows the same rule
    named = dict(zip(flags[::2], flags[1::2])) if all("=" not in f for f in flags) else {}
    config_file.write_text(
        json.dumps({"output_dir": str(tmp_path), "method": method, **{k[2:]: int(v) for k, v in named.items()}})
    )
    if named or not flags:
        _, args, _ = parse_args_with_objective(types, method="care", defaults=defaults, args=[str(config_file)])
        assert args.per_device_train_batch_size == expected


@pytest.mark.parametrize("flag", ["--per_device_train_batch", "--per_device_train_batch_s", "--classes_per"])
def test_an_abbreviated_flag_is_refused_naming_it(tmp_path, capsys, flag) -> None:
    """argparse would take ``--per_device_train_batch 12`` as the batch size, unseen by the class-major rule,
    which would then replace it with C × k: abbreviations are refused, naming the flag."""
    types = (_Script, ContrastiveTrainingArguments)
    with pytest.raises(SystemExit):
        parse_args_with_objective(types, method="simo", args=["--output_dir", str(tmp_path), flag, "12"])
    assert f"unrecognized arguments: {flag} 12 (flags are spelled out in full" in capsys.readouterr().err


@pytest.mark.parametrize("trainer_cls", [SupConTrainer, OCLTrainer])
def test_supervised_trainer_rejects_a_one_class_dataset(tmp_path, trainer_cls) -> None:
    with pytest.raises(ValueError) as caught:
        trainer_cls(model=vit_encoder(), args=training_args(tmp_path), train_dataset=image_dataset(n=8, n_classes=1))
    assert_message(caught, "`train_dataset`", "single class (0)", "`label_column`='label'", "2 or more classes")


def test_ocl_rejects_fewer_projection_dimensions_than_classes(tmp_path) -> None:
    encoder = vit_encoder(projection_dim=2)
    with pytest.raises(ValueError) as caught:
        OCLTrainer(model=encoder, args=training_args(tmp_path), train_dataset=image_dataset(n=16, n_classes=8))
    assert_message(caught, "8 classes", "`projection_dim` is 2", "`projection_dim` >= 8", "objective='supcon'")
    SupConTrainer(model=encoder, args=training_args(tmp_path), train_dataset=image_dataset(n=16, n_classes=8))  # fine


def test_batch_size_one_is_rejected_before_training(tmp_path) -> None:
    args = training_args(tmp_path, per_device_train_batch_size=1)
    with pytest.raises(ValueError) as caught:
        SimCLRTrainer(model=vit_encoder(), args=args, train_dataset=image_dataset(n=8))
    assert_message(caught, "`per_device_train_batch_size`=1", "SimCLRObjective", "loss is 0", "Use 2 or more")
