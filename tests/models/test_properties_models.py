"""Property: the models' small doors (the poolings, ``ProjectionHead``, the head sizes of
``ContrastiveEncoderConfig``, the exports and ``save_pretrained``) give a valid result or an ``InputError`` naming
the argument; and the regression cases they found."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from _errors import assert_message
from _properties import assert_package_error_or_result, bad_names, bad_numbers, near_tensors, tensors, wrong_types
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hf_contrast.errors import InputError
from hf_contrast.models import (
    ContrastiveEncoderConfig,
    ProjectionHead,
    cls_pool,
    export_native,
    export_sentence_transformers,
    export_timm,
    export_transformers,
    max_pool,
    mean_pool,
)
from hf_contrast.models.heads import MAX_HEAD_LAYERS, MAX_HEAD_WIDTH

SIZES = st.one_of(bad_numbers, wrong_types, bad_names, st.integers(-3, 40))
#: The encoders are session-wide and read-only (the exports only read them); `monkeypatch.chdir` holds for every
#: example of the test.
FIXTURES_OK = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])


def pooled(result: Any) -> None:
    assert isinstance(result, torch.Tensor) and result.ndim == 2, f"expected (B, F), got {result!r:.80}"


@pytest.mark.parametrize("pool", [mean_pool, cls_pool, max_pool], ids=lambda f: f.__name__)
@given(
    hidden_states=st.one_of(tensors(max_rank=4, max_side=4), near_tensors((2, 3, 4)), wrong_types),
    attention_mask=st.one_of(st.none(), tensors(max_rank=3, max_side=4), near_tensors((2, 3)), wrong_types),
)
def test_poolings_pool_or_name_the_argument(pool: Any, hidden_states: Any, attention_mask: Any) -> None:
    assert_package_error_or_result(
        lambda: pool(hidden_states, attention_mask), ("hidden_states", "attention_mask"), pooled
    )


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_max_pool_leaves_padding_out_in_every_float_dtype(dtype: torch.dtype) -> None:
    """float16 raised "value cannot be converted to type c10::Half without overflow" (padding was set to -1e9):
    a half-precision text encoder with `pooling="max"` could not encode. Padding never wins, in any dtype."""
    states = torch.tensor([[[1.0, -5.0], [3.0, -7.0], [9.0, 9.0]]], dtype=dtype)
    mask = torch.tensor([[1, 1, 0]])
    assert max_pool(states, mask).tolist() == [[3.0, -5.0]]
    assert max_pool(states, None).tolist() == [[9.0, 9.0]]


def test_a_half_precision_text_encoder_with_max_pooling_encodes(text_encoder) -> None:
    """The same through the model: encoding with float16 weights matches encoding with float32 ones."""
    import copy

    from hf_contrast.encoding import encode_texts

    encoder = copy.deepcopy(text_encoder)
    encoder.config.pooling = "max"
    texts = ["a cat", "the dog runs fast"]
    full = encode_texts(encoder, texts)
    half = encode_texts(encoder.half(), texts)
    torch.testing.assert_close(half.float(), full, atol=2e-2, rtol=2e-2)


@given(
    argument=st.sampled_from(["input_dim", "hidden_dim", "output_dim", "num_layers", "norm"]),
    value=st.one_of(SIZES, st.sampled_from(["layernorm", "batchnorm", "none", None])),
)
def test_projection_head_builds_or_names_the_argument(argument: str, value: Any) -> None:
    sizes = {"input_dim": 4, "hidden_dim": 8, "output_dim": 3, "num_layers": 2, "norm": "batchnorm"}
    assert_package_error_or_result(lambda: ProjectionHead(**{**sizes, argument: value}), (argument,))


@given(
    argument=st.sampled_from(
        [
            "projection_dim",
            "projection_hidden_dim",
            "projection_layers",
            "embedding_dim",
            "max_seq_length",
            "num_labels",
        ]
    ),
    value=SIZES,
)
def test_config_head_sizes_are_checked_when_the_config_is_built(argument: str, value: Any) -> None:
    """A head of 10**30 units failed in torch's allocator when the model was built (an OverflowError, or a
    RuntimeError asking for terabytes at 2**40); now the config refuses it."""
    assert_package_error_or_result(
        lambda: ContrastiveEncoderConfig(backbone="resnet18", backbone_type="timm", **{argument: value}), (argument,)
    )


@pytest.mark.parametrize(
    ("argument", "value", "bound"),
    [
        ("projection_dim", MAX_HEAD_WIDTH + 1, "[1, 1048576]"),
        ("projection_hidden_dim", 2**40, "[1, 1048576]"),
        ("projection_layers", MAX_HEAD_LAYERS + 1, "[1, 64]"),
        ("num_labels", 10**30, "[0, 1048576]"),
    ],
)
def test_config_bounds_are_named(argument: str, value: int, bound: str) -> None:
    with pytest.raises(InputError) as caught:
        ContrastiveEncoderConfig(backbone="resnet18", backbone_type="timm", **{argument: value})
    assert_message(caught, f"`{argument}`", bound, str(value))
    ContrastiveEncoderConfig(backbone="resnet18", backbone_type="timm", **{argument: 64})  # in range: built


def _exported(path: Any) -> None:
    """The folder written, holding the backbone's weights and config."""
    assert isinstance(path, Path) and (path / "config.json").is_file(), f"no export at {path!r}"


EXPORTS = [export_native, export_timm, export_transformers, export_sentence_transformers]


@FIXTURES_OK
@pytest.mark.parametrize("export", EXPORTS, ids=lambda f: f.__name__)
@given(
    argument=st.sampled_from(["save_dir", "state_dict"]),
    value=st.one_of(
        wrong_types,
        bad_names,
        st.sampled_from([b"out", "a\0b", ""]),
        st.dictionaries(st.text(max_size=4), tensors(max_rank=2, max_side=3), max_size=2),
    ),
)
def test_exports_write_or_name_the_argument(
    export: Any, argument: str, value: Any, timm_encoder, text_encoder, tmp_path_factory, monkeypatch
) -> None:
    """`save_dir=None` / bytes / a NUL character and a `state_dict` that is no dict of tensors raised TypeError,
    AttributeError or ValueError from os and pathlib. (A relative folder is written under a temporary working
    directory: a first version of this test filled the checkout with folders named by hypothesis.)"""
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))
    encoder = text_encoder if export in (export_transformers, export_sentence_transformers) else timm_encoder
    options = {"save_dir": tmp_path_factory.mktemp("export") / "out", "state_dict": None, argument: value}
    if argument == "save_dir" and isinstance(value, str) and value and "\0" not in value:
        options["save_dir"] = tmp_path_factory.mktemp("export") / value.replace("/", "_")  # a name, in a new folder
    assert_package_error_or_result(lambda: export(encoder, **options), (argument, "encoder"), _exported)


@pytest.mark.parametrize("folder", [None, b"out", "", "a\0b", 3])
def test_save_pretrained_names_a_folder_that_is_no_path(timm_encoder, folder: Any) -> None:
    with pytest.raises(InputError) as caught:
        timm_encoder.save_pretrained(folder)
    assert_message(caught, "`save_directory`", "folder path", repr(folder))
