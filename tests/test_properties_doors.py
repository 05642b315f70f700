"""Property: the doors users walk through first — ``ContrastiveEncoder.from_backbone`` / ``from_pretrained`` /
``encode`` / ``encode_texts``, the data loaders, ``ContrastiveTrainingArguments`` and the trainers' constructors —
give a valid result or an ``InputError`` naming the argument (``tests/_properties.py``).

Each call here builds a tiny model or reads a generated folder, so the example counts are a fraction of the
profile's. A case marked ``xfail(strict=True, reason="finding: ...")`` is a finding outside the area this suite's
fixes touched: it turns red once fixed, and the mark goes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from _properties import (
    assert_package_error_or_result,
    bad_names,
    bad_numbers,
    tensors,
    wrong_types,
)
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hf_contrast.data import load_image_dataset, load_sts_pairs, load_text_dataset
from hf_contrast.encoding import encode_texts
from hf_contrast.hub_ids import is_hub_repo_id
from hf_contrast.models import ContrastiveEncoder, HubUnavailableError
from hf_contrast.training import ContrastiveTrainingArguments, SimCLRTrainer

FEW = settings(max_examples=max(1, settings().max_examples // 2))
FEWER = settings(max_examples=max(1, settings().max_examples // 4))


def rows_of(n: int | None, dim: int):
    """Check ``n`` rows of ``dim`` values; ``n=None``: one input given alone (a string), one ``(dim,)`` vector as
    sentence-transformers returns it."""
    shape = (dim,) if n is None else (n, dim)

    def check(result: Any) -> None:
        result = torch.as_tensor(np.asarray(result)) if not isinstance(result, torch.Tensor) else result
        assert tuple(result.shape) == shape, f"got shape {tuple(result.shape)} for {n} inputs"
        assert bool(torch.isfinite(result).all()), "encode returned non-finite embeddings instead of an error"

    return check


TEXT_INPUTS = st.one_of(
    wrong_types,
    st.lists(
        st.one_of(st.text(max_size=6), st.none(), st.integers(), st.lists(st.text(max_size=3), max_size=2)), max_size=3
    ),
    tensors(max_rank=4, max_side=4),
)
IMAGE_INPUTS = st.one_of(
    wrong_types,
    st.lists(st.text(max_size=6), max_size=3),
    tensors(max_rank=4, max_side=4),
    st.builds(lambda c, s: torch.rand(2, c, s, s), st.sampled_from([1, 2, 4]), st.sampled_from([8, 32])),
    st.builds(lambda v: torch.full((2, 3, 32, 32), v), st.sampled_from([float("nan"), float("inf")])),
)


@FEW
@given(inputs=TEXT_INPUTS)
def test_text_encode(text_encoder: ContrastiveEncoder, inputs: Any) -> None:
    n = len(inputs) if isinstance(inputs, list) else None if isinstance(inputs, str) else 1
    assert_package_error_or_result(
        lambda: text_encoder.encode(inputs, show_progress_bar=False), ("inputs", "sentences"), rows_of(n, 32)
    )


@FEW
@given(
    argument=st.sampled_from(["texts", "batch_size", "output", "max_length", "progress"]),
    value=st.one_of(TEXT_INPUTS, bad_numbers, bad_names),
)
@example(argument="progress", value=torch.tensor([]))  # torch's RuntimeError from the progress bar's `bool(progress)`
@example(argument="texts", value=torch.tensor(1.5))  # TypeError: iteration over a 0-d tensor
@example(argument="texts", value=("a cat", "the dog"))  # a tuple is a sequence of strings: encoded
@example(argument="texts", value={"a": 1})  # a dict: its keys were encoded as one row, its values lost
@example(argument="texts", value={"a cat", "the dog"})  # a set: rows in no order the caller could match
def test_encode_texts(text_encoder: ContrastiveEncoder, argument: str, value: Any) -> None:
    """``texts=None`` raised TypeError; an empty list was named `dataset`, a list holding an int `text`."""
    options = {"texts": ["a cat", "the dog"], "batch_size": 2, argument: value}
    n = len(options["texts"]) if isinstance(options["texts"], (list, tuple)) else -1  # a tuple is a sequence too
    assert_package_error_or_result(lambda: encode_texts(text_encoder, **options), (argument,), rows_of(n, 32))


def test_one_sentence_encodes_to_one_vector(text_encoder: ContrastiveEncoder) -> None:
    """The case the property above draws from ``wrong_types``: one string is one (dim,) vector, as
    sentence-transformers' ``encode``; a list of one string is one row."""
    one = text_encoder.encode("0.1", show_progress_bar=False)
    rows = text_encoder.encode(["0.1"], show_progress_bar=False)
    assert tuple(one.shape) == (32,) and tuple(rows.shape) == (1, 32)
    torch.testing.assert_close(torch.as_tensor(one), torch.as_tensor(rows)[0])


@FEW
@given(inputs=IMAGE_INPUTS)
def test_image_encode(timm_encoder: ContrastiveEncoder, inputs: Any) -> None:
    # a list or a (N, C, H, W) batch gives N rows; one image given alone ((C, H, W) or (H, W)) one vector
    n = len(inputs) if isinstance(inputs, list) or getattr(inputs, "ndim", None) == 4 else None
    assert_package_error_or_result(
        lambda: timm_encoder.encode(inputs, show_progress_bar=False),
        ("inputs", "images", "pixel_values"),
        rows_of(n, 96),
    )


@FEW
@given(data=st.data())
def test_encode_options(timm_encoder: ContrastiveEncoder, data: st.DataObject) -> None:
    argument = data.draw(
        st.sampled_from(["batch_size", "output", "normalize_embeddings", "convert_to_numpy", "device"]),
        label="argument",
    )
    value = data.draw(st.one_of(wrong_types, bad_numbers, bad_names), label=argument)
    images = torch.rand(2, 3, 32, 32)
    assert_package_error_or_result(
        lambda: timm_encoder.encode(images, show_progress_bar=False, **{argument: value}), (argument,), None
    )


@FEWER
@given(backbone=bad_names, data=st.data())
def test_from_backbone_bad_name_or_kwargs(backbone: Any, data: st.DataObject) -> None:
    kwargs = data.draw(
        st.one_of(
            st.just({}),
            st.dictionaries(
                st.sampled_from(["projection_dim", "pooling", "backbone_kwargs", "pretrained"]),
                st.one_of(wrong_types, bad_numbers, bad_names),
                max_size=1,
            ),
        ),
        label="kwargs",
    )
    names = ("backbone", *kwargs)

    def call() -> Any:
        # Offline (conftest sets HF_HUB_OFFLINE=1), a valid Hub id that is not a timm name or a folder cannot be
        # checked: HubUnavailableError (an OSError, not a bad input) is the answer, and it must name the value.
        # An invalid id, a missing path or a wrong type must still be an InputError naming `backbone`.
        try:
            return ContrastiveEncoder.from_backbone(backbone, **{"pretrained": False, **kwargs})
        except HubUnavailableError as error:
            assert isinstance(backbone, str) and is_hub_repo_id(backbone), (
                f"HubUnavailableError for a non-Hub-id {backbone!r}"
            )
            assert f"`backbone`={backbone!r}" in str(error), str(error)
            return None

    assert_package_error_or_result(call, names, None)


FOLDERS = st.sampled_from(["missing", "empty", "file", "only_config", "bad_config", "weights_only"])


def _folder(tmp_path: Path, kind: str) -> Path:
    folder = tmp_path / kind
    if kind == "missing":
        return folder
    if kind == "file":
        folder.write_text("not a model")
        return folder
    folder.mkdir(exist_ok=True)
    if kind == "only_config":
        (folder / "config.json").write_text('{"model_type": "hf_contrast"}')
    elif kind == "bad_config":
        (folder / "config.json").write_text("{not json")
    elif kind == "weights_only":
        (folder / "model.safetensors").write_bytes(b"\x00" * 16)
    return folder


@FEW
@given(kind=FOLDERS)
def test_from_pretrained_bad_folder(tmp_path: Path, kind: str) -> None:
    folder = _folder(tmp_path, kind)
    assert_package_error_or_result(
        lambda: ContrastiveEncoder.from_pretrained(folder), (str(folder), folder.name), None
    )


@FEW
@given(kind=FOLDERS, loader=st.sampled_from(["image", "text", "sts"]))
def test_loaders_bad_folder(tmp_path: Path, kind: str, loader: str) -> None:
    folder = _folder(tmp_path, kind)
    call = {
        "image": lambda: load_image_dataset(folder),
        "text": lambda: load_text_dataset(folder),
        "sts": lambda: load_sts_pairs(folder),
    }[loader]
    assert_package_error_or_result(call, (str(folder), folder.name, "path_or_id", "path"), None)


@FEW
@given(data=st.data())
def test_loaders_bad_arguments(tmp_path: Path, data: st.DataObject) -> None:
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("sentence1\tsentence2\tscore\na cat\ta dog\t1.0\na man\ta woman\t2.5\n")
    argument = data.draw(
        st.sampled_from(["sentence1_column", "sentence2_column", "score_column", "split", "delimiter"]),
        label="argument",
    )
    value = data.draw(st.one_of(bad_names, wrong_types), label=argument)
    assert_package_error_or_result(
        lambda: load_sts_pairs(tsv, **{argument: value}, cache_dir=str(tmp_path / "cache")),
        (argument, str(value)),
        None,
    )


ARGUMENT_FIELDS = [
    "gather_distributed",
    "nonfinite_policy",
    "gradient_cache_size",
    "image_column",
    "text_column",
    "label_column",
    "on_bad_image",
    "max_length",
    "image_size",
    "views_on_device",
    "eval_representation",
    "knn_k",
    "knn_temperature",
]


@FEW
@given(data=st.data())
def test_training_arguments(tmp_path: Path, data: st.DataObject) -> None:
    argument = data.draw(st.sampled_from(ARGUMENT_FIELDS), label="argument")
    value = data.draw(st.one_of(wrong_types, bad_numbers, bad_names), label=argument)
    assert_package_error_or_result(
        lambda: ContrastiveTrainingArguments(
            output_dir=str(tmp_path), use_cpu=True, report_to="none", **{argument: value}
        ),
        (argument,),
        None,
    )


@FEWER
@given(
    model=st.one_of(wrong_types, st.just(torch.nn.Linear(2, 2))),
    dataset=st.one_of(
        wrong_types,
        st.lists(st.dictionaries(bad_names.filter(lambda n: isinstance(n, str)), wrong_types, max_size=2), max_size=2),
    ),
)
def test_trainer_constructor(tmp_path: Path, timm_encoder: ContrastiveEncoder, model: Any, dataset: Any) -> None:
    args = ContrastiveTrainingArguments(
        output_dir=str(tmp_path), use_cpu=True, report_to="none", max_steps=1, disable_tqdm=True
    )
    assert_package_error_or_result(
        lambda: SimCLRTrainer(model=model, args=args, train_dataset=[{"image": torch.rand(3, 32, 32)}] * 4),
        ("model",),
        None,
    )
    assert_package_error_or_result(
        lambda: SimCLRTrainer(model=timm_encoder, args=args, train_dataset=dataset),
        ("train_dataset", "image", "column"),
        None,
    )
