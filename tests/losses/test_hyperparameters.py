"""Hyperparameters declared once, validated once, with one vocabulary of checks (issue 15).

* one vocabulary: the scalar argument checks are defined in ``hf_contrast/tensor_checks.py`` only; no
  module re-implements them (``require``/``is_int``/``is_real``, a ``check_size`` of its own, a new private
  ``_check_*``) — the few private checks that remain are domain checks, listed below with their reason;
* declared once: each loss module's constructor arguments, ``get_config_dict()`` and ``extra_repr()`` all
  come from its hyperparameter dataclass;
* validated once: an objective config checks a field it shares with its loss with the loss's declared
  check, so the message is the same and comes before training.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path
from typing import get_type_hints

import numpy as np
import pytest
import torch

import hf_contrast.losses as losses
from hf_contrast.losses.hyperparameters import HyperparameterModule, Hyperparameters
from hf_contrast.objectives import ObjectiveConfig, available_objectives, get_objective
from hf_contrast.objectives.align_uniform import AlignUniformConfig
from hf_contrast.objectives.care import CAREConfig, CAREMoCoConfig
from hf_contrast.objectives.local import LOCALConfig
from hf_contrast.objectives.pair import BinaryNCEConfig, SimCLRConfig, VICRegConfig
from hf_contrast.objectives.simo import SimOConfig
from hf_contrast.objectives.supervised import SupConConfig
from hf_contrast.tensor_checks import (
    check_choice,
    check_int,
    check_range,
    check_size,
    check_temperature,
    check_unit_interval,
)

PACKAGE = Path(__file__).resolve().parents[2] / "hf_contrast"
VOCABULARY = PACKAGE / "tensor_checks.py"

# Names of the vocabulary: defined in tensor_checks.py and nowhere else.
VOCABULARY_NAMES = {
    "check_positive",
    "check_non_negative",
    "check_unit_interval",
    "check_temperature",
    "check_probability",
    "check_int",
    "check_bool",
    "check_choice",
    "check_name",
    "check_range",
    "check_size",
    "require",
    "is_int",
    "is_real",
}

# Private checks that are not scalar-argument duplicates, with why they stay where they are.
DOMAIN_CHECKS = {
    ("training/cli.py", "_check_config_types"): "a .json config's values against their fields' types",
    ("training/cli.py", "_check_no_shared_fields"): "a method's fields against the script's dataclasses",
    ("training/arguments.py", "_check_trackers_installed"): "`report_to` trackers against the installed integrations",
    ("training/checkpointing.py", "_check_resumed_run"): "a checkpoint's run settings against the resuming trainer's",
    ("models/adapters/timm.py", "_check_timm_embedding"): "a timm model's pooled output, by a dry forward pass",
    (
        "training/arguments.py",
        "_check_bf16_device",
    ): "bf16 against the machine's devices (before transformers refuses it)",
    ("views/afcl_sampler.py", "_check_labels_1d"): "a label sequence converted to a tensor",
    ("training/cli.py", "_check_choices"): "a .json config's values against their fields' Literal "
    "choices (argparse checks flags only)",
    ("training/arguments.py", "_check_schedule"): "max_steps / save_steps / eval_steps / output_dir that "
    "transformers accepts and does not honour",
    ("views/batched_simclr.py", "_check_images"): "a (B, C, H, W) uint8/float image batch whose C matches mean/std",
    ("views/device_views.py", "_check_chunks"): "an image batch whose B is a positive multiple of `n_splits`",
    ("views/batched_params.py", "_check_generator"): "a torch.Generator's device",
    ("losses/binary_nce.py", "_check_scalar_tensor"): "a one-element float tensor (learnable values)",
    ("losses/binary_nce.py", "_check_temperature"): "a number or a tensor, read only on the CPU",
    ("losses/binary_nce.py", "_check_bias"): "a number or a tensor, read only on the CPU",
    ("losses/simo.py", "_check_label"): "a soft label, scalar or one per group",
    ("losses/care.py", "_check_chunks"): "n_splits against the batch size",
    ("data/images.py", "_check_columns"): "dataset columns",
    ("views/image_collators.py", "_check_fields"): "an image collator's fields (transforms, columns, seed, index)",
    ("data/text.py", "_check_text"): "dataset text columns",
    ("evaluation/probe_evaluator.py", "_check_classes"): "the fit split's classes and the score split's coverage",
    ("models/pooling.py", "_check_states"): "token states (B, L, F) and their attention mask (B, L)",
    ("plots.py", "_check_log_history"): "a Trainer's log_history: a list of dicts",
    ("plots.py", "_check_names"): "curve prefixes / metric names: a string or a sequence of strings",
    ("plots.py", "_check_title"): "a figure title: any str ('' means the default title, which check_name refuses)",
}


def _functions() -> list[tuple[str, str]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append((path.relative_to(PACKAGE).as_posix(), node.name))
    return found


def test_vocabulary_checks_are_defined_in_tensor_checks_only() -> None:
    elsewhere = [(p, n) for p, n in _functions() if n in VOCABULARY_NAMES and p != "tensor_checks.py"]
    assert not elsewhere, f"use hf_contrast.tensor_checks instead of re-defining {elsewhere}"
    defined = {n for p, n in _functions() if p == "tensor_checks.py"}
    assert VOCABULARY_NAMES - {"check_probability", "require", "is_int", "is_real"} <= defined


def test_no_new_private_scalar_checks() -> None:
    private = {(p, n) for p, n in _functions() if n.startswith("_check_") and p != "tensor_checks.py"}
    new = sorted(private - set(DOMAIN_CHECKS))
    assert not new, (
        f"private checks {new}: use hf_contrast.tensor_checks (or, for a domain check that is no scalar "
        "duplicate, list it in DOMAIN_CHECKS with its reason)"
    )
    gone = sorted(set(DOMAIN_CHECKS) - private)
    assert not gone, f"DOMAIN_CHECKS lists checks that no longer exist: {gone}"


def test_vocabulary_messages_name_argument_value_and_expectation() -> None:
    cases = [
        (lambda: check_int("n_splits", 0, 1), "`n_splits` must be an integer >= 1, got 0."),
        (lambda: check_int("k", 7, 1, maximum=5, fix="5 neighbours."),
         "`k` must be an integer in [1, 5], got 7; 5 neighbours."),
        (lambda: check_int("n", True, 1), "`n` must be an integer >= 1, got True."),
        (lambda: check_int("max_length", 1, 2, allow_none=True),
         "`max_length` must be an integer >= 2 or None, got 1."),
        (lambda: check_unit_interval("moco_momentum", 1.0, include_one=False),
         "`moco_momentum` must be in [0, 1), got 1.0."),
        (lambda: check_unit_interval("hflip_p", "0.5"), "`hflip_p` must be a number, got '0.5' of type str."),
        (lambda: check_choice("n_views", True, (1, 2)), "`n_views` must be one of (1, 2), got True."),
        (lambda: check_choice("flag", 0, (False, True)), "`flag` must be one of (False, True), got 0."),
        (lambda: check_choice("n_views", np.array([2, 2]), (2,)),  # no single truth value: no match, no crash
         "`n_views` must be one of (2,), got array([2, 2])."),
        (lambda: check_range("scale", (0.9, 0.1), 0.0, 1.0),
         "`scale` must be a pair (lo, hi) with 0.0 < lo <= hi <= 1.0, got (0.9, 0.1)."),
        (lambda: check_size("image_size", (8, True)),
         "`image_size` must be an int or a pair (H, W) of ints, got (8, True)."),
        (lambda: check_temperature("temperature", 0), "`temperature` must be > 0, got 0.0."),
    ]  # fmt: skip
    for call, message in cases:
        with pytest.raises(ValueError) as error:
            call()
        assert str(error.value) == message
    assert check_int("n", torch.tensor(3).item(), 1) == 3 and check_size("s", 4) == (4, 4)
    assert check_temperature("temperature", 10**30) == 1e30 and isinstance(check_temperature("t", 1), float)
    with pytest.raises(ValueError, match=r"^`tau` must be >= 1e-06, got 1e-07: "):
        check_temperature("tau", 1e-7)


# ---- declared once -----------------------------------------------------------------------------

REQUIRED = {"SimOLoss": {"y": 0.5}, "AFCLLoss": {"n_classes": 3}, "LOCALLoss": {"embedding_dim": 4, "num_classes": 3}}
LOSS_CLASSES = sorted(
    (name for name in losses.__all__ if isinstance(getattr(losses, name), type) and name.endswith("Loss")),
)


@pytest.mark.parametrize("name", LOSS_CLASSES)
def test_every_loss_module_declares_its_hyperparameters_once(name: str) -> None:
    cls = getattr(losses, name)
    declared = cls.hyperparameters_class
    assert issubclass(declared, Hyperparameters) and declared is not Hyperparameters
    fields = [f.name for f in dataclasses.fields(declared)]
    loss = cls(**REQUIRED.get(name, {}))
    config = loss.get_config_dict()
    assert list(config) == fields
    expected = declared(**REQUIRED.get(name, {}))
    if name == "BinaryNCELoss":  # bias=None means the default of the negatives
        expected.bias = -10.0
    assert config == dataclasses.asdict(expected)
    assert all(f"{k}={v!r}" in repr(loss) for k, v in config.items())
    if "__init__" not in cls.__dict__ or cls.__dict__["__init__"] is HyperparameterModule.__init__:
        assert list(inspect.signature(cls).parameters) == fields  # help() shows the hyperparameters


@pytest.mark.parametrize("name", LOSS_CLASSES)
def test_every_declared_hyperparameter_is_checked_at_construction(name: str) -> None:
    cls = getattr(losses, name)
    for f in dataclasses.fields(cls.hyperparameters_class):
        bad = "not-a-valid-value" if f.name not in ("contrastive", "negatives") else "unknown"
        with pytest.raises(ValueError, match=f"`{f.name}`"):
            cls(**(REQUIRED.get(name, {}) | {f.name: bad}))


def test_a_hyperparameter_two_losses_take_is_declared_once() -> None:
    """CARE-MoCo's ``care_weight`` and ``n_splits`` are CARE's: one default, one check, one help text."""
    care = {f.name: f for f in dataclasses.fields(losses.CARELoss.hyperparameters_class)}
    moco = {f.name: f for f in dataclasses.fields(losses.CAREMoCoLoss.hyperparameters_class)}
    for name in ("care_weight", "n_splits"):
        assert (moco[name].default, moco[name].metadata) == (care[name].default, care[name].metadata)
    with pytest.raises(ValueError) as from_care:
        losses.CARELoss(care_weight=-1.0)
    with pytest.raises(ValueError) as from_moco:
        losses.CAREMoCoLoss(care_weight=-1.0)
    assert str(from_moco.value) == str(from_care.value)
    source = (Path(losses.__file__).parent / "moco.py").read_text(encoding="utf-8")
    assert "care_weight: float = hyperparameter(" not in source


def test_positional_arguments_follow_the_declaration_order() -> None:
    assert losses.CARELoss(0.3, 0.1, 2).get_config_dict()["n_splits"] == 2
    assert losses.VICRegLoss(1.0, 2.0, 3.0).covariance_weight == 3.0


# ---- validated once -----------------------------------------------------------------------------

SHARED = [
    (SimCLRConfig, losses.InfoNCELoss, "temperature", 0.0),
    (VICRegConfig, losses.VICRegLoss, "variance_weight", -1.0),
    (BinaryNCEConfig, losses.BinaryNCELoss, "negatives", "hard"),
    (BinaryNCEConfig, losses.BinaryNCELoss, "learnable_bias", 1),
    (SupConConfig, losses.SupConLoss, "temperature", float("inf")),
    (CAREConfig, losses.CARELoss, "n_splits", 0),
    (CAREConfig, losses.CARELoss, "care_weight", -0.1),
    (CAREMoCoConfig, losses.CAREMoCoLoss, "temperature", -1.0),
    (AlignUniformConfig, losses.AlignUniformLoss, "uniform_weight", -1.0),
    (AlignUniformConfig, losses.InfoNCELoss, "temperature", 0.0),
    (SimOConfig, losses.AFCLLoss, "olean", 1.5),
    (LOCALConfig, losses.LOCALLoss, "contrastive", "triplet"),
    (LOCALConfig, losses.LOCALLoss, "beta", -2.0),
]


@pytest.mark.parametrize(("config_class", "loss_class", "field", "bad"), SHARED)
def test_objective_config_fails_with_its_loss_message(config_class, loss_class, field, bad) -> None:
    with pytest.raises(ValueError) as from_loss:
        loss_class(**(REQUIRED.get(loss_class.__name__, {}) | {field: bad}))
    with pytest.raises(ValueError) as from_config:
        config_class(**{field: bad})
    assert str(from_config.value) == str(from_loss.value)
    assert f"`{field}`" in str(from_config.value)


# ---- objective configs derive their loss fields (declared once) ---------------------------------

OBJECTIVES = PACKAGE / "objectives"
LOSS_HYPERPARAMETERS = sorted(
    {getattr(losses, name).hyperparameters_class for name in LOSS_CLASSES}, key=lambda cls: cls.__name__
)
# Config fields named like a hyperparameter of an unrelated loss (not the same hyperparameter), with why.
HOMONYMS = {
    ("LOCALConfig", "alpha"): "LOCAL's weight α of the contrastive terms, not align/uniform's distance exponent",
}


def _registered_configs() -> list[type[ObjectiveConfig]]:
    configs = {get_objective(name).config_class for name in available_objectives()}
    return sorted(configs - {ObjectiveConfig}, key=lambda cls: cls.__name__)


@pytest.mark.parametrize("config_class", _registered_configs(), ids=lambda cls: cls.__name__)
def test_no_objective_config_repeats_a_loss_field(config_class) -> None:
    """A config field named like a loss hyperparameter is derived from it (``loss_field``): its default, help
    and check are the loss's, never written a second time."""
    loss_names = {f.name for cls in LOSS_HYPERPARAMETERS for f in dataclasses.fields(cls)}
    for f in dataclasses.fields(config_class):
        if f.name not in loss_names or (config_class.__name__, f.name) in HOMONYMS:
            continue
        assert f.name in config_class.loss_fields, (
            f"{config_class.__name__}.{f.name} repeats a loss hyperparameter: declare it with "
            f"`loss_field(<the loss's Hyperparameters>)` instead of `field(...)`"
        )
        # resolved annotations: HfArgumentParser replaces a dataclass field's string type by the class it names
        ours, theirs = get_type_hints(config_class)[f.name], get_type_hints(config_class.loss_fields[f.name])[f.name]
        assert ours == theirs, f"{config_class.__name__}.{f.name}: {ours} but the loss says {theirs}"
        assert f.metadata.get("help"), f"{config_class.__name__}.{f.name} has no --help text"
    for name in config_class.loss_fields:
        assert (config_class.__name__, name) not in HOMONYMS


def _loss_field_overrides() -> list[tuple[str, str, str, object]]:
    """``(file, field, keyword, value)`` of every ``default=`` / ``help=`` given to ``loss_field`` in objectives/."""
    found = []
    for path in sorted(OBJECTIVES.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.AnnAssign) and isinstance(node.value, ast.Call):
                call = node.value
                if getattr(call.func, "id", None) == "loss_field":
                    for keyword in call.keywords:
                        found.append((path.name, node.target.id, keyword.arg, ast.literal_eval(keyword.value)))
    return found


def test_loss_field_overrides_only_what_differs_from_the_loss() -> None:
    """``loss_field(..., default=/help=)`` only where the objective's value differs from the loss's (an equal
    one would be the repetition ``loss_field`` removes); every objective file declares no field by hand that
    a loss of the same config declares."""
    overrides = _loss_field_overrides()
    assert overrides, "the align/uniform SimCSE temperature overrides InfoNCE's default"
    configs = {cls.__name__: cls for cls in _registered_configs()}
    for file, name, keyword, value in overrides:
        owners = [c for c in configs.values() if name in inspect.get_annotations(c) and name in c.loss_fields]
        assert owners, (file, name)
        for config_class in owners:
            source = {s.name: s for s in dataclasses.fields(config_class.loss_fields[name])}[name]
            loss_value = source.default if keyword == "default" else source.metadata.get("help")
            assert value != loss_value, f"{file}: loss_field({name}) repeats the loss's {keyword} {value!r}"


def test_a_config_names_a_loss_field_only_for_a_second_loss() -> None:
    """The fields of a method's own loss come from its ``loss_config`` base, never named again in a class body:
    ``loss_field`` is left for a second loss the method adds (align/uniform's SimCSE term, InfoNCE's temperature at
    SimCSE's 0.05). Fails on a config that lists its loss's fields one by one (as SimO, LOCAL, CARE-MoCo and
    align/uniform once did)."""
    from hf_contrast.objectives.config import ObjectiveConfig as Base

    by_hand = []
    for config_class in [c for c in _registered_configs() if c.__module__.startswith("hf_contrast.")]:
        own_losses = {  # the hyperparameters of the losses whose loss_config the config subclasses
            hyperparameters
            for base in config_class.__mro__
            if base.__name__.endswith("LossConfig") and base.__module__.startswith("hf_contrast.losses")
            for hyperparameters in base.loss_fields.values()
        }
        assert own_losses, f"{config_class.__name__} is not derived from its loss (`loss_config(TheLoss)`)"
        for base in config_class.__mro__:
            if base is Base or not issubclass(base, Base) or base.__module__.startswith("hf_contrast.losses"):
                continue
            for name in inspect.get_annotations(base):
                if name in base.loss_fields:
                    assert base.loss_fields[name] not in own_losses, (
                        f"{base.__name__}.{name} repeats a field of its own loss: take it from `loss_config`"
                    )
                    by_hand.append((base.__name__, name))
    assert sorted(set(by_hand)) == [("AlignUniformConfig", "temperature")]


def test_every_loss_field_default_help_and_check_comes_from_the_loss() -> None:
    for config_class in _registered_configs():
        for f in dataclasses.fields(config_class):
            if f.name not in config_class.loss_fields:
                continue
            source = {s.name: s for s in dataclasses.fields(config_class.loss_fields[f.name])}[f.name]
            if (config_class.__name__, f.name) != ("AlignUniformConfig", "temperature"):  # SimCSE's 0.05
                assert f.default == source.default, (config_class.__name__, f.name)
                assert f.metadata["help"] == source.metadata["help"], (config_class.__name__, f.name)
            assert set(f.metadata) == {"help"}  # HfArgumentParser passes the metadata on to argparse


def test_a_method_config_declares_only_its_own_fields_after_its_losss() -> None:
    """``class CAREConfig(loss_config(CARELoss))``: the loss's hyperparameters with help text come from the loss
    (one base class per loss), in the loss's order, then the method's own fields; the fields, defaults and checks
    are the ones these configs had when each was declared by hand (SimO's and LOCAL's once listed the loss's
    fields among their own: the same fields and defaults, in this order now)."""
    from hf_contrast.losses import AFCLLoss, AlignUniformLoss, CARELoss, CAREMoCoLoss, LOCALLoss, SupConLoss
    from hf_contrast.objectives import loss_config

    assert loss_config(SupConLoss) is loss_config(SupConLoss)  # SupCon and OCL share one
    expected = {
        CAREConfig: (CARELoss, {"temperature": 0.5, "care_weight": 0.01, "n_splits": 8, "share_views": False}),
        CAREMoCoConfig: (
            CAREMoCoLoss,
            {
                "temperature": 0.2,  # MoCo's queue InfoNCE, not CARE's 0.5
                "care_weight": 0.01,
                "n_splits": 8,
                "share_views": False,
                "moco_momentum": 0.99,
                "moco_queue_size": 4096,
            },
        ),
        SupConConfig: (SupConLoss, {"temperature": 0.1, "n_views": 2}),
        SimOConfig: (
            AFCLLoss,
            {"olean": 0.01, "classes_per_batch": 4, "samples_per_class": 8, "n_views": 1, "replacement": False},
        ),
        LOCALConfig: (
            LOCALLoss,
            {
                "beta": 1.0,
                "temperature": 0.1,
                "contrastive": "ocl",
                "alpha": 1.0,
                "alpha_schedule": "inverse_epoch",
                "num_labels": None,
                "pre_column": "image_pre",
                "post_column": "image_post",
            },
        ),
        AlignUniformConfig: (
            AlignUniformLoss,
            {
                "align_weight": 1.0,
                "uniform_weight": 1.0,
                "simcse_weight": 0.0,
                "temperature": 0.05,
                "task_loss_weight": 1.0,
            },
        ),
    }
    for config_class, (loss_class, defaults) in expected.items():
        assert issubclass(config_class, loss_config(loss_class))
        assert dataclasses.asdict(config_class()) == defaults
        assert list(dataclasses.asdict(config_class())) == list(defaults)
        own = inspect.get_annotations(config_class)
        derived = {f.name for f in dataclasses.fields(loss_config(loss_class))}
        assert not own.keys() & derived, f"{config_class.__name__} declares {own.keys() & derived} a second time"
        for name in derived:
            assert config_class.loss_fields[name] is loss_class.hyperparameters_class, (config_class.__name__, name)
    assert issubclass(CAREMoCoConfig, CAREConfig)  # share_views and its check: CARE's
    with pytest.raises(ValueError, match="`share_views` must be True or False"):
        CAREMoCoConfig(share_views=3)
    with pytest.raises(ValueError, match="`temperature` must be > 0"):
        CAREMoCoConfig(temperature=0.0)
    with pytest.raises(ValueError, match="`care_weight` must be >= 0"):
        CAREConfig(care_weight=-1.0)
    with pytest.raises(ValueError, match="`share_views` must be True or False"):
        CAREConfig(share_views=3)
