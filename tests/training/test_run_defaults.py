"""The defaults that shape a run are said: the image-size rule, the start-up summary, the card's training set-up,
fp16/bf16 on a CPU, CPU threads (hf_contrast.training.run_setup / run_setup / scripts)."""

from __future__ import annotations

import logging
import warnings

import datasets
import numpy as np
import pytest
import torch
from _errors import assert_message
from _images import png_bytes
from _tiny import tiny_text_encoder, tiny_timm_encoder, tiny_tokenizer
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_contrast.errors import InputError
from hf_contrast.training import (
    ContrastiveTrainer,
    ContrastiveTrainingArguments,
    choose_image_size,
    resolve_image_size,
)
from hf_contrast.training import cli as scripts_module
from hf_contrast.training import run_setup as run_setup_module
from hf_contrast.training.run_setup import MAX_RESIZE_FACTOR, data_image_sizes


def _png(height: int, width: int, seed: int = 0) -> bytes:
    return png_bytes(np.random.default_rng(seed).integers(0, 255, (height, width, 3), dtype=np.uint8))


def _images(sizes: list[tuple[int, int]], decode: bool = False) -> datasets.Dataset:
    """Rows of PNG bytes of the given (height, width), labels 0/1 alternating."""
    rows = {
        "image": [{"bytes": _png(h, w, i), "path": None} for i, (h, w) in enumerate(sizes)],
        "label": [i % 2 for i in range(len(sizes))],
    }
    features = datasets.Features({"image": datasets.Image(decode=decode), "label": datasets.Value("int64")})
    return datasets.Dataset.from_dict(rows, features=features)


def _default_size(encoder) -> tuple[int, int]:
    return tuple(int(v) for v in encoder.data_config["input_size"][1:])


_ENCODER = None


def _shared_encoder():
    """One from-scratch tiny encoder for the rule's tests (``choose_image_size`` changes nothing in it)."""
    global _ENCODER
    if _ENCODER is None:
        _ENCODER = tiny_timm_encoder()
    _ENCODER.config.backbone_pretrained = False
    return _ENCODER


@pytest.fixture(scope="module")
def encoder_default() -> tuple[int, int]:
    return _default_size(_shared_encoder())


# ---- the image-size rule ----------------------------------------------------------------------


@settings(max_examples=12, deadline=None)
@given(side=st.integers(8, 400), decode=st.booleans())
def test_a_from_scratch_encoder_trains_at_the_images_own_size(side: int, decode: bool) -> None:
    encoder = _shared_encoder()
    default = _default_size(encoder)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        choice = choose_image_size(encoder, None, _images([(side, side)] * 5, decode=decode))
    assert choice.size == (side, side) and choice.rule == "data"
    assert "own size" in choice.describe() and f"{side}x{side} px" in choice.describe()
    assert choice.resize_factor == 1.0
    assert not [w for w in caught if "resize" in str(w.message)]  # the views do not resize the data
    assert _default_size(encoder) == default  # choosing changes nothing


@settings(max_examples=15, deadline=None)
@given(
    data_side=st.integers(8, 300),
    explicit=st.one_of(st.none(), st.integers(8, 300)),
    pretrained=st.booleans(),
)
def test_the_rule_order_and_the_resize_warning(data_side: int, explicit: int | None, pretrained: bool) -> None:
    encoder = _shared_encoder()
    default = _default_size(encoder)
    encoder.config.backbone_pretrained = pretrained
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        choice = choose_image_size(encoder, explicit, _images([(data_side, data_side)] * 3))
    if explicit is not None:
        expected, rule = (explicit, explicit), "argument"
    elif pretrained:
        expected, rule = default, "pretrained"
    else:
        expected, rule = (data_side, data_side), "data"
    encoder.config.backbone_pretrained = False
    assert (choice.size, choice.rule) == (expected, rule)
    factor = max(expected[0] / data_side, data_side / expected[0])
    assert choice.resize_factor == pytest.approx(factor)
    resize_warnings = [str(w.message) for w in caught if "resize" in str(w.message)]
    if factor > MAX_RESIZE_FACTOR:
        assert (
            len(resize_warnings) == 1 and f"{factor:.1f}x" in resize_warnings[0] and "image_size" in resize_warnings[0]
        )
    else:
        assert not resize_warnings


def test_images_of_different_sizes_train_at_the_backbone_default_with_a_warning(encoder_default) -> None:
    encoder = _shared_encoder()
    with pytest.warns(UserWarning, match=r"backbone's default input size.*differ in size.*image_size"):
        choice = choose_image_size(encoder, None, _images([(40, 40), (48, 40), (40, 40)]))
    assert choice.size == encoder_default and choice.rule == "default"
    assert set(choice.data_sizes) == {(40, 40), (48, 40)} and choice.rows_read == 3


def test_a_size_set_on_the_encoder_wins_over_the_data() -> None:
    encoder = tiny_timm_encoder()
    encoder.set_image_size(48)
    choice = choose_image_size(encoder, None, _images([(40, 40)] * 2))
    assert (choice.size, choice.rule) == ((48, 48), "encoder")


def test_non_square_images_and_the_headers_read() -> None:
    data = _images([(36, 52)] * 50)
    sizes, rows = data_image_sizes(data, max_rows=7)
    assert sizes == [(36, 52)] and rows == 7  # (height, width), at most max_rows rows read
    assert choose_image_size(_shared_encoder(), None, data).size == (36, 52)


def test_a_text_encoder_has_no_image_size() -> None:
    class Text:
        data_config = None

    assert choose_image_size(Text(), None, _images([(32, 32)])) is None


@pytest.mark.parametrize(
    ("options", "pieces"),
    [
        ({"image_size": "0.1"}, ["`image_size`", "[1, 65536]"]),
        ({"image_size": [32, 32]}, ["`image_size`", "[32, 32]"]),
        ({"image_size": 0}, ["`image_size`", "got 0"]),
        ({"image_size": 10**30}, ["`image_size`", "[1, 65536]"]),
        ({"image_column": ["image"]}, ["`image_column`", "['image']"]),
    ],
)
def test_choose_image_size_names_a_bad_argument(options, pieces) -> None:
    """`image_size="0.1"` / a list raised int()'s ValueError / TypeError, 0 a ZeroDivisionError, a list as the
    column "unhashable type"."""
    with pytest.raises(InputError) as caught:
        choose_image_size(_shared_encoder(), dataset=_images([(20, 20)] * 2), **options)
    assert_message(caught, *pieces)


def test_training_length_names_what_is_no_training_arguments(tmp_path) -> None:
    """None raised AttributeError; a `TrainingArguments` says its length."""
    with pytest.raises(InputError) as caught:
        scripts_module.training_length(None)
    assert_message(caught, "`training_args`", "TrainingArguments", "NoneType")
    args = ContrastiveTrainingArguments(output_dir=str(tmp_path), max_steps=150, report_to="none", use_cpu=True)
    assert scripts_module.training_length(args) == "150 steps"


# ---- the trainer: the size it trains at, the start-up summary, the card ------------------------


def _args(tmp_path, **overrides) -> ContrastiveTrainingArguments:
    options = dict(
        output_dir=str(tmp_path / "out"), max_steps=1, per_device_train_batch_size=4, use_cpu=True, report_to="none",
        disable_tqdm=True, save_strategy="no", logging_steps=1, seed=0,
    )  # fmt: skip
    options.update(overrides)
    return ContrastiveTrainingArguments(**options)


def test_the_trainer_trains_at_the_data_size_logs_the_setup_and_writes_it_in_the_card(tmp_path, caplog) -> None:
    from hf_contrast.objectives import get_objective

    encoder = tiny_timm_encoder()

    objective = get_objective("care")(get_objective("care").config_class(n_splits=2))
    trainer = ContrastiveTrainer(
        model=encoder, args=_args(tmp_path), objective=objective, train_dataset=_images([(40, 40)] * 8)
    )
    assert encoder.data_config["input_size"][1:] == (40, 40)  # evaluators and the saved model take the size
    assert trainer.image_size_choice.rule == "data"
    with caplog.at_level(logging.INFO, logger="hf_contrast"):
        trainer.train()
    setup_logs = [r.getMessage() for r in caplog.records if "Run set-up" in r.getMessage()]
    assert len(setup_logs) == 1  # once
    text = setup_logs[0]
    assert "image size" in text and "40x40 px (the training images' own size)" in text
    assert "precision" in text and ": fp32" in text
    assert f"1 process(es) × {torch.get_num_threads()} CPU thread(s)" in text
    assert "4 = 4 per device × 1 accumulation step(s) × 1 process(es)" in text
    assert "chunks of m = 2" in text
    trainer.save_model(str(tmp_path / "model"))
    card = (tmp_path / "model" / "README.md").read_text()
    assert "- **Image size:** 40x40 px (the training images' own size)" in card
    assert "- **Precision:** fp32" in card and "- **Chunks:**" in card and "- **Processes:** 1 process(es)" in card


def test_a_reloaded_encoder_keeps_its_trained_size(tmp_path) -> None:
    from hf_contrast.models import ContrastiveEncoder

    encoder = tiny_timm_encoder()
    encoder.set_image_size(40)
    encoder.save_pretrained(tmp_path / "m")
    loaded = ContrastiveEncoder.from_pretrained(tmp_path / "m")
    choice = choose_image_size(loaded, None, _images([(64, 64)] * 2), warn=False)
    assert (choice.size, choice.rule) == ((40, 40), "encoder")


# ---- precision on a CPU ----------------------------------------------------------------------


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CPU-only machine")
def test_bf16_without_an_accelerator_is_refused_naming_the_fix(tmp_path) -> None:
    with pytest.raises(InputError, match=r"`bf16=True`.*use_cpu=True"):
        ContrastiveTrainingArguments(output_dir=str(tmp_path), bf16=True)
    assert ContrastiveTrainingArguments(
        output_dir=str(tmp_path), bf16=True, use_cpu=True
    ).bf16  # CPU autocast: allowed


def test_fp16_on_a_cpu_warns_at_init_and_the_summary_says_fp32(tmp_path) -> None:
    with pytest.warns(UserWarning, match=r"`fp16=True` has no effect on a CPU"):
        trainer = ContrastiveTrainer(
            model=tiny_timm_encoder(),
            args=_args(tmp_path, fp16=True),
            objective="simclr",
            train_dataset=_images([(32, 32)] * 4),
        )
    from hf_contrast.training.run_setup import describe_run

    assert describe_run(trainer)["precision"].startswith("fp32 (`fp16=True` has no effect on a CPU)")


# ---- CPU threads ----------------------------------------------------------------------------


class _Args:
    world_size = 1
    device = torch.device("cpu")


def test_threads_one_plain_process_uses_every_core(monkeypatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
    before = torch.get_num_threads()
    try:
        threads = scripts_module.set_cpu_threads(_Args())
        assert threads == run_setup_module.usable_cores() == torch.get_num_threads()
        assert scripts_module.cpu_threads_source() == "every usable core (OMP_NUM_THREADS unset)"
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("under_accelerate", [False, True])
def test_threads_the_users_omp_num_threads_is_never_overridden(monkeypatch, under_accelerate: bool) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    if under_accelerate:
        monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "no")
    else:
        monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert scripts_module.set_cpu_threads(_Args()) == 1
        source = scripts_module.cpu_threads_source()
        assert source.startswith("OMP_NUM_THREADS=1")
        assert ("--num_cpu_threads_per_process" in source) == under_accelerate
    finally:
        torch.set_num_threads(before)


LAUNCH_PROBE = """
import sys, warnings
sys.path.insert(0, sys.argv[1])
from distributed_scripts.trainer_utils import image_dataset, training_args, vit_encoder
from hf_contrast.training import ContrastiveTrainer
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    trainer = ContrastiveTrainer(model=vit_encoder(), args=training_args(sys.argv[2]), train_dataset=image_dataset(),
                                 objective="simclr")
    trainer.train()
print("WARNED:", any("started one" in str(w.message) for w in caught))
print("PROCESSES:", trainer.run_setup["processes"])
trainer.accelerator.wait_for_everyone()
trainer.accelerator.end_training()  # a process group left open aborts the processes at exit
"""


@pytest.mark.distributed
def test_a_launch_asked_for_two_processes_that_starts_one_is_said(tmp_path) -> None:
    """`accelerate launch --num_processes 2` without `--multi_gpu` runs ONE process (accelerate's simple launcher):
    the trainer warns before training and the run set-up (log and card) says it. A real launch."""
    import subprocess
    import sys
    from pathlib import Path

    from _launch import free_port, launch_env

    script = tmp_path / "probe.py"
    script.write_text(LAUNCH_PROBE)
    command = [
        sys.executable, "-m", "accelerate.commands.launch", "--cpu", "--num_processes", "2", "--num_machines", "1",
        "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(free_port()), str(script),
        str(Path(__file__).parents[1]), str(tmp_path / "run"),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, env=launch_env())
    assert done.returncode == 0, done.stderr[-3000:]
    assert "WARNED: True" in done.stdout, done.stdout + done.stderr[-2000:]
    assert "1 process(es)" in done.stdout and "asked for several and started one (no `--multi_gpu`)" in done.stdout


@pytest.mark.parametrize(
    ("env", "world_size", "said"),
    [
        ({"MASTER_ADDR": "127.0.0.1", "ACCELERATE_MIXED_PRECISION": "no"}, 1, True),  # simple launcher, 2 asked
        ({"ACCELERATE_MIXED_PRECISION": "no"}, 1, False),  # `accelerate launch --cpu`: one process asked
        ({"MASTER_ADDR": "127.0.0.1", "ACCELERATE_MIXED_PRECISION": "no", "WORLD_SIZE": "2"}, 2, False),  # --multi_gpu
        ({"MASTER_ADDR": "127.0.0.1"}, 1, False),  # not accelerate launch (a plain python in a cluster job)
    ],
)
def test_the_single_process_launch_signature(monkeypatch, env: dict, world_size: int, said: bool) -> None:
    from types import SimpleNamespace

    from hf_contrast.training.run_setup import launched_fewer_processes

    for name in ("MASTER_ADDR", "ACCELERATE_MIXED_PRECISION", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    why = launched_fewer_processes(SimpleNamespace(world_size=world_size))
    assert (why is not None) == said
    if said:
        assert "started one: it starts several only with `--multi_gpu`" in why


def test_resolve_image_size_decides_once_stores_it_in_the_encoder_and_keeps_the_first_decision() -> None:
    """The one decision of a run: the rule's size stored in the encoder's data config (what views, evaluators and the
    card read); the same call again (a script before its evaluators, then the trainer) returns that decision, with
    its reason, and warns no second time; another ``image_size`` is a new decision."""
    encoder = tiny_timm_encoder()
    encoder.config.backbone_pretrained = False
    data = _images([(20, 20)] * 3)
    first = resolve_image_size(encoder, None, data)
    assert (first.size, first.rule) == ((20, 20), "data")
    assert tuple(encoder.data_config["input_size"][1:]) == (20, 20)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second decision would warn again (or find "the encoder's" size)
        assert resolve_image_size(encoder, None, data) is first
    encoder.set_image_size(28)  # resized by hand since: the same call describes the encoder's size, not the old one
    resized = resolve_image_size(encoder, None, data)
    assert (resized.size, resized.rule) == ((28, 28), "encoder")
    again = resolve_image_size(encoder, 24, data)
    assert (again.size, again.rule) == ((24, 24), "argument")
    assert tuple(encoder.data_config["input_size"][1:]) == (24, 24)
    text = tiny_text_encoder(tiny_tokenizer())
    assert resolve_image_size(text, 24, data) is None and text.data_config is None


def test_a_decision_made_before_the_trainer_is_the_trainers(tmp_path) -> None:
    """The script decides the size once before its evaluators; the trainer finds the same decision: the Wahba
    views, the encoder's data config and the run's logged choice agree (images 20 px, no ``--image_size``)."""
    encoder = tiny_timm_encoder()
    encoder.config.backbone_pretrained = False
    data = _images([(20, 20)] * 8, decode=True)
    choice = resolve_image_size(encoder, None, data)
    args = ContrastiveTrainingArguments(output_dir=str(tmp_path), report_to="none", per_device_train_batch_size=4)
    trainer = ContrastiveTrainer(model=encoder, args=args, objective="simclr", train_dataset=data)
    assert trainer.image_size_choice is choice and choice.rule == "data"
    assert tuple(trainer.views.data_config()["input_size"][1:]) == (20, 20)


# ---- negatives across processes ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("objective", "gathers"),
    [
        ("simclr", True),
        ("spectral", True),
        ("supcon", True),
        ("care", True),
        ("vicreg", False),
        ("binary_nce", False),
        ("simo", True),
        ("care_moco", False),
    ],  # fmt: skip
)
def test_gather_distributed_is_said_where_it_applies_and_warned_where_it_does_not(tmp_path, objective, gathers):  # noqa: ANN001, ANN201
    """VICReg, binary NCE, LOCAL and CARE-MoCo never compare across processes: `gather_distributed=True` did nothing,
    silently. It is warned about when the trainer is built, and the run set-up (log and card) says where negatives come
    from. SimO scores the class groups of every process as one batch (docs/methods.md §5)."""
    from distributed_scripts.trainer_utils import image_dataset, training_args, vit_encoder

    from hf_contrast.objectives import SimOObjective
    from hf_contrast.training.run_setup import describe_run

    chosen = SimOObjective(classes_per_batch=2, samples_per_class=8) if objective == "simo" else objective
    build = lambda: ContrastiveTrainer(  # noqa: E731
        model=vit_encoder(), args=training_args(tmp_path, gather_distributed=True, per_device_train_batch_size=16),
        objective=chosen,
        train_dataset=image_dataset(n=64, size=16, n_classes=8),
    )  # fmt: skip
    if gathers:
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)  # nothing said: the flag applies
            trainer = build()
        assert describe_run(trainer)["negatives"] == "from the batches of all 1 process(es) (`gather_distributed`)"
    else:
        with pytest.warns(UserWarning, match=r"`gather_distributed=True` does not apply to \w+Objective.*ignored"):
            trainer = build()
        name = type(trainer.objective).__name__
        assert (
            describe_run(trainer)["negatives"] == f"each process's own (`gather_distributed` does not apply to {name})"
        )
    trainer.args.gather_distributed = False
    assert "negatives" not in describe_run(trainer)  # one process, no flag: nothing to say


# ---- text length --------------------------------------------------------------------------------


def test_the_text_length_and_where_it_came_from_are_said(tmp_path) -> None:
    """A text run's truncation shapes its result as an image run's size does: the run set-up (log and card) says it,
    and which rule chose it (it said nothing; MiniLM's 256 came from its sentence-transformers config, unseen)."""
    from _tiny import TINY_VOCAB, tiny_bert_config
    from transformers import BertTokenizerFast

    from hf_contrast.models import ContrastiveEncoder
    from hf_contrast.training.run_setup import describe_run

    texts = datasets.Dataset.from_dict({"text": ["a b", "c d", "e f", "g h"]})
    unlimited = BertTokenizerFast(vocab={t: i for i, t in enumerate(TINY_VOCAB)}, model_max_length=int(1e30))
    cut = "at most {} tokens, longer texts cut ({})"
    cases = [
        (dict(max_length=20), {}, tiny_tokenizer(), cut.format(20, "the training arguments' `max_length`")),
        ({}, dict(max_seq_length=30), tiny_tokenizer(), cut.format(30, "the encoder's `max_seq_length`")),
        ({}, {}, tiny_tokenizer(), cut.format(64, "the tokenizer's `model_max_length`")),
        ({}, {}, unlimited, cut.format(128, "the default: neither the encoder nor the tokenizer sets a length")),
    ]
    for arguments, config, tokenizer, said in cases:
        encoder = ContrastiveEncoder.from_text_config(
            tiny_bert_config(max_position_embeddings=256), tokenizer=tokenizer, projection_dim=8, **config
        )
        trainer = ContrastiveTrainer(
            model=encoder, args=_args(tmp_path, per_device_train_batch_size=4, **arguments), objective="simclr",
            train_dataset=texts,
        )  # fmt: skip
        assert describe_run(trainer)["text length"] == said
        assert trainer.views.max_length() == int(said.split()[2])
    image_trainer = ContrastiveTrainer(
        model=tiny_timm_encoder(), args=_args(tmp_path), objective="simclr", train_dataset=_images([(32, 32)] * 4)
    )
    assert "text length" not in describe_run(image_trainer)
