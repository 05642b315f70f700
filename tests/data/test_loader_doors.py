"""The loaders' and ProbeEvaluator's doors: missing paths, folder layouts, text files, unseen classes."""

from __future__ import annotations

import os
import shutil
import warnings

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from hf_contrast.data import (
    load_image_dataset,
    load_image_splits,
    load_sts_pairs,
    load_text_dataset,
    make_long_tailed,
)
from hf_contrast.data.folder_layout import image_files_by_split
from hf_contrast.data.sources import resolve_source
from hf_contrast.errors import InputError, InputTypeError, MissingPathError
from hf_contrast.metrics.probes import UnseenClassWarning, probe_scores, unseen_classes


def _png(path, value=0):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("L", (2, 2), value).save(path)


# ---- 1. sources: a missing local path is never sent to the Hub ----


@pytest.mark.parametrize(
    "text", ["/no/such/folder", "./missing", "../missing", "~/missing-hf-contrast", "a/b/c", "x.csv"]
)
def test_missing_local_path_names_argument_and_working_directory(text, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(MissingPathError, match=r"`path_or_id`=.*does not exist.*working directory") as info:
        resolve_source("path_or_id", text, "image folder")
    assert str(tmp_path) in str(info.value)
    assert isinstance(info.value, FileNotFoundError) and isinstance(info.value, ValueError)


def test_missing_folder_whose_parent_exists_is_local(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    with pytest.raises(MissingPathError, match="`dataset`='data/fmnist'"):
        load_image_splits("data/fmnist")  # "data/fmnist" would be a valid Hub id: data/ existing makes it local


def test_hub_id_and_bad_strings(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_source("path_or_id", "user/name", "image folder") == (False, "user/name")
    with pytest.raises(InputError, match="neither an existing local path"):
        resolve_source("path_or_id", "a b", "image folder")
    with pytest.raises(InputTypeError, match="`path_or_id` must be a path"):
        load_image_dataset(3)
    with pytest.raises(InputError, match="`path_or_id` is empty"):
        load_image_dataset("")


def test_unreachable_hub_says_hub_and_suggests_local(monkeypatch, tmp_path):
    import datasets

    monkeypatch.chdir(tmp_path)

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'user/name' on the Hub")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(ConnectionError, match=r"read as a Hub dataset id.*pass a local image folder"):
        load_image_dataset("user/name")


# ---- 2. image folder layouts ----


def test_nested_class_folders_are_an_error(tmp_path):
    for rel in ("cat/indoor/1.png", "dog/outdoor/1.png"):
        _png(tmp_path / rel)
    with pytest.raises(InputError, match=r"`path_or_id`=.*sub-folders \('cat/indoor/', 'dog/outdoor/'\)"):
        load_image_dataset(tmp_path)


def test_split_layout_without_train_names_the_splits(tmp_path):
    for rel in ("test/cat/1.png", "test/dog/1.png", "val/cat/1.png", "val/dog/1.png"):
        _png(tmp_path / rel)
    with pytest.raises(
        InputError, match=r"`dataset`=.*no 'train' split \(its splits: \['test', 'validation'\]\).*train/"
    ):
        load_image_splits(str(tmp_path))
    assert sorted(load_image_dataset(tmp_path, split=None)) == ["test", "validation"]  # readable as is


@pytest.mark.parametrize(
    ("files", "message"),
    [
        (["train/cat/1.png", "train/dog/1.png", "bird/1.png"], "mixes split folders"),
        (["1.png", "2.png"], "no class folders"),
        (["cat/1.png", "dog/1.png", "3.png"], "holds both images"),
        (["cat/1.png", "cat/2.png"], "single class folder"),
        (["val/cat/1.png", "validation/dog/1.png"], "several folders for the 'validation' split"),
        ([], "holds no image file"),
    ],
)
def test_refused_layouts(tmp_path, files, message):
    (tmp_path / "root").mkdir()
    for rel in files:
        _png(tmp_path / "root" / rel)
    with pytest.raises(InputError, match=f"`path_or_id`=.*{message}"):
        load_image_dataset(tmp_path / "root")


def test_file_instead_of_folder(tmp_path):
    _png(tmp_path / "cat" / "1.png")
    with pytest.raises(InputError, match=r"`path_or_id`=.*is a file; pass the image folder"):
        load_image_dataset(tmp_path / "cat" / "1.png")


def test_flat_folder_loads_unlabelled(tmp_path):
    for i in range(3):
        _png(tmp_path / f"{i}.png")
    assert len(load_image_dataset(tmp_path, label_column=None)) == 3


def test_split_words_in_file_names_are_not_splits(tmp_path):
    """datasets' default patterns would make `test_1.png` a test split; the folders decide."""
    for rel in ("cat/train_1.png", "cat/test_2.png", "dog/test_1.png"):
        _png(tmp_path / rel)
    data = load_image_dataset(tmp_path, split=None)
    assert list(data) == ["train"] and len(data["train"]) == 3


_NAME = st.sampled_from(["cat", "dog", "bird", "fish"])
_SPLIT = st.sampled_from(["train", "test", "val"])
_LEAF = st.tuples(st.booleans(), st.integers(1, 2))  # (nested one level deeper, number of images)
_TREE = st.one_of(
    st.dictionaries(_NAME, _LEAF, max_size=3),  # root/<class>/...
    st.dictionaries(
        _SPLIT, st.dictionaries(_NAME, _LEAF, max_size=3), min_size=1, max_size=2
    ),  # root/<split>/<class>/...
)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tree=_TREE)
def test_generated_layouts_load_correctly_or_raise_naming_the_argument(tmp_path, tree):
    root = tmp_path / "root"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir()
    split_layout = any(isinstance(v, dict) for v in tree.values())
    splits = tree if split_layout else {"train": tree}
    expected, nested = {}, False
    for split, classes in splits.items():
        for name, (deeper, count) in classes.items():
            for i in range(count):
                rel = (f"{split}/" if split_layout else "") + name + ("/sub" if deeper else "") + f"/{i}.png"
                _png(root / rel, 40 * i)
            nested |= deeper
            if not deeper:
                expected.setdefault({"val": "validation"}.get(split, split), {})[name] = count
    all_classes = sorted({c for counts in expected.values() for c in counts})
    should_load = not nested and len(all_classes) >= 2  # a split without classes is no folder on disk
    if not should_load:
        with pytest.raises(InputError, match="`path_or_id`="), warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            load_image_dataset(root, split=None, cache_dir=str(tmp_path / "cache"))
        return
    data = load_image_dataset(root, split=None, cache_dir=str(tmp_path / "cache"))
    assert sorted(data) == sorted(expected)
    for split, counts in expected.items():
        names = data[split].features["label"].names
        assert names == all_classes  # class names are exactly the class folders
        got = {}
        for y in data[split]["label"]:
            got[names[y]] = got.get(names[y], 0) + 1
        assert got == counts


@pytest.mark.parametrize(
    "layout",
    [
        {"train": ["cat", "dog"], "test": ["cat"]},  # test/ is read first and has one class folder
        {"train": ["cat"], "validation": ["cat", "dog"]},  # train/ is read first and has one class folder
        {"train": ["cat", "dog"], "val": ["dog"], "test": ["cat"]},
    ],
)
def test_a_split_with_fewer_class_folders_keeps_its_labels(tmp_path, layout):
    """datasets' imagefolder decides labels split by split from the classes seen so far: a split read first with one
    class folder got labels None on every row (found by a random-seed run of the property above), while the
    features said ClassLabel. Every row is labelled from its class folder."""
    root = tmp_path / "root"
    for split, classes in layout.items():
        for name in classes:
            _png(root / split / name / "0.png")
    data = load_image_dataset(root, split=None, cache_dir=str(tmp_path / "cache"))
    for split, classes in layout.items():
        part = data[{"val": "validation"}.get(split, split)]
        names = part.features["label"].names
        assert names == sorted({c for cs in layout.values() for c in cs})
        assert sorted(names[y] for y in part["label"]) == sorted(classes)


def test_image_files_by_split_lists_every_file(tmp_path):
    for rel in ("train/a/1.png", "train/b/1.png", "test/a/2.png", "test/b/2.png", "test/b/.hidden.png"):
        _png(tmp_path / rel)
    files = image_files_by_split(tmp_path, "path_or_id", labelled=True)
    assert {k: len(v) for k, v in files.items()} == {"train": 2, "test": 2}


# ---- 3. text loaders ----


@pytest.mark.parametrize(
    ("name", "content", "kwargs", "message"),
    [
        ("empty.csv", "", {}, "`path_or_id`=.*is empty"),
        ("blank.txt", "\n \n", {}, "`path_or_id`=.*is empty"),
        ("header.csv", "text,label\n", {}, "`path_or_id`=.*no data rows"),
        ("nums.csv", "text,label\n1,a\n2,b\n", {}, "`text_column`='text'.*not text"),
        (
            "ok.csv",
            "text,label\nhi,a\nho,b\n",
            {"text_column": "sentence"},
            "`text_column`='sentence' is not a column",
        ),
        ("bad.jsonl", '{"text": "a"}\nnot json\n', {}, "`path_or_id`=.*could not be read as json"),
    ],
)
def test_text_file_errors(tmp_path, name, content, kwargs, message):
    (tmp_path / name).write_text(content)
    with pytest.raises(InputError, match=message):
        load_text_dataset(tmp_path / name, cache_dir=str(tmp_path / "cache"), **kwargs)


def test_text_missing_file_and_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(MissingPathError, match="`path`='pairs.tsv' does not exist"):
        load_sts_pairs("pairs.tsv")
    with pytest.raises(InputError, match="`path_or_id`=.*is a folder"):
        load_text_dataset(tmp_path)
    assert os.getcwd() == str(tmp_path)


@pytest.mark.parametrize(
    ("loader", "split"),
    [(loader, split) for loader in ("sts", "text", "image") for split in (["train"], "", 0)] + [("sts", None)],
)
def test_a_split_that_is_no_name_is_refused_naming_split(tmp_path, loader, split):
    # a list split raised TypeError (unhashable) from the split lookup; None for STS pairs (the dataset loaders'
    # "every split") read the DatasetDict of splits as the pairs and said "holds 1 scored pair(s)"
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("sentence1\tsentence2\tscore\na cat\ta dog\t1.0\na man\ta woman\t2.5\n")
    folder = tmp_path / "images" / "cat"
    folder.mkdir(parents=True)
    Image.new("RGB", (4, 4)).save(folder / "0.png")
    call = {
        "sts": lambda: load_sts_pairs(pairs, split=split, cache_dir=str(tmp_path / "cache")),
        "text": lambda: load_text_dataset(pairs, split=split, text_column="sentence1", cache_dir=str(tmp_path / "c")),
        "image": lambda: load_image_dataset(tmp_path / "images", split=split),
    }[loader]
    with pytest.raises(InputError, match=r"`split` must be a non-empty split name"):
        call()


def test_make_long_tailed_guards():
    import datasets

    one_row = datasets.Dataset.from_dict({"label": [0, 0, 0, 1]})
    with pytest.raises(InputError, match=r"classes \[1\] with a single row"):
        make_long_tailed(one_row, 2.0)
    with pytest.raises(InputTypeError, match="`dataset` must be a datasets.Dataset"):
        make_long_tailed({"label": [0, 1]}, 2.0)


# ---- 4. probes ----


def test_unseen_classes_warn_with_counts_and_ceiling():
    assert unseen_classes([0, 0, 1], [0, 2, 2, 3]) == {2: 2, 3: 1}
    g = torch.Generator().manual_seed(0)
    train_z, test_z = torch.randn(20, 4, generator=g), torch.randn(8, 4, generator=g)
    with pytest.warns(UnseenClassWarning, match=r"2 \(4 rows\).*at most 0.5000"):
        scores = probe_scores(train_z, torch.tensor([0, 1] * 10), test_z, torch.tensor([0, 1, 2, 2] * 2), knn_k=3)
    assert scores["linear_probe_accuracy"] <= 0.5 and scores["knn_accuracy"] <= 0.5
    with pytest.raises(InputError, match="`train_y` must contain at least two classes"):
        probe_scores(train_z, torch.zeros(20, dtype=torch.long), test_z, torch.zeros(8, dtype=torch.long))


def _rows(labels):
    return [{"x": [float(i), float(y)], "label": y} for i, y in enumerate(labels)]


def test_probe_evaluator_warns_once_and_refuses_one_class():
    from hf_contrast.evaluation import ProbeEvaluator

    with pytest.warns(
        UnseenClassWarning, match=r"`score_dataset` holds 1 class\(es\) absent from `fit_dataset`: 2 \(3 rows\)"
    ):
        ProbeEvaluator(_rows([0, 1] * 4), _rows([0, 1, 2, 2, 2]), input_column="x")
    with pytest.raises(InputError, match="`fit_dataset` holds 1 class"):
        ProbeEvaluator(_rows([1] * 4), _rows([0, 1]), input_column="x")
