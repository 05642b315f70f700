"""Embedded offline data: digits, long-tailed subsets, change pairs, sentence pairs."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import datasets
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

from hf_contrast.data import (
    CHANGE_NAMES,
    check_dataset,
    defer_image_decoding,
    load_digits_dataset,
    load_image_dataset,
    load_sentence_pairs,
    load_sts_pairs,
    load_text_dataset,
    long_tailed_counts,
    make_change_pairs,
    make_long_tailed,
)
from hf_contrast.data.naming import loader_notes
from hf_contrast.errors import InputError


@pytest.fixture(scope="module")
def digits():
    return load_digits_dataset(image_size=16, test_size=0.2, seed=0)


def test_digits_are_real_stratified_images(digits) -> None:
    train, test = digits["train"], digits["test"]
    assert len(train) + len(test) == 1797
    assert train.features["label"].num_classes == 10
    image = train[0]["image"]
    assert image.size == (16, 16) and image.mode == "RGB"
    assert np.asarray(image).std() > 0  # not blank
    counts = Counter(test["label"])
    assert set(counts) == set(range(10)) and all(30 <= n <= 42 for n in counts.values())
    with pytest.raises(ValueError, match="`image_size`"):
        load_digits_dataset(image_size=4)
    with pytest.raises(ValueError, match="`test_size`"):
        load_digits_dataset(test_size=1.0)


def test_long_tailed_profile_and_subset(digits) -> None:
    assert long_tailed_counts(100, 3, 10.0) == [100, 32, 10]
    assert long_tailed_counts(100, 4, 1.0) == [100] * 4
    lt = make_long_tailed(digits["train"], imbalance_ratio=10.0)
    counts = [Counter(lt["label"])[c] for c in range(10)]
    n_min = min(Counter(digits["train"]["label"]).values())
    assert counts == long_tailed_counts(n_min, 10, 10.0)
    # said beside the training data in the card (a run's --imbalance_ratio is no training argument); source unchanged
    size = f"{len(lt):,} of the split's {len(digits['train']):,} rows, class sizes {n_min:,} down to {min(counts):,}"
    assert loader_notes(lt) == [f"made long-tailed: {size} (`imbalance_ratio` 10, seed 0)"]
    assert loader_notes(digits["train"]) == [] and make_long_tailed(digits["train"], None) is digits["train"]
    with pytest.raises(ValueError, match="`imbalance_ratio`"):
        make_long_tailed(digits["train"], imbalance_ratio=0.5)
    balanced = make_long_tailed(digits["train"], imbalance_ratio=1.0)
    assert set(Counter(balanced["label"]).values()) == {n_min}
    with pytest.raises(ValueError, match="`label_column`"):
        make_long_tailed(digits["train"], 2.0, label_column="y")


def test_change_pairs_are_named_after_their_images(digits) -> None:
    pairs = make_change_pairs(digits["train"].select(range(20)), seed=0)
    assert (
        pairs.info.dataset_name
        == f"change pairs from {digits['train'].info.dataset_name}"
        == ("change pairs from sklearn-digits")
    )
    unnamed = datasets.Dataset.from_dict(
        {"image": list(digits["train"].select(range(20))["image"]), "label": [0, 1] * 10}
    )
    assert make_change_pairs(unnamed, seed=0).info.dataset_name is None  # no name invented


def test_change_pairs_follow_their_kind(digits) -> None:
    pairs = make_change_pairs(digits["train"], num_pairs=400, seed=1)
    assert pairs.features["label"].names == list(CHANGE_NAMES)
    counts = Counter(pairs["label"])
    assert counts[0] > counts[1] > counts[2] > counts[3] > 0  # skewed as documented
    for row in pairs.select(range(60)):
        pre, post = np.asarray(row["image_pre"], dtype=np.int16), np.asarray(row["image_post"], dtype=np.int16)
        diff = np.abs(pre - post)
        if row["label"] == 0:
            assert diff.mean() < 12
        elif row["label"] == 1:
            assert (post == 0).sum() > (pre == 0).sum()  # a patch was blacked out
    again = make_change_pairs(digits["train"], num_pairs=400, seed=1)
    assert again["label"] == pairs["label"]
    with pytest.raises(ValueError, match="`frequencies`"):
        make_change_pairs(digits["train"], frequencies=(0.5, 0.5))
    with pytest.raises(ValueError, match="`num_pairs`"):
        make_change_pairs(digits["train"], num_pairs=0)


def test_sentence_pairs() -> None:
    ds = load_sentence_pairs(test_size=0.25)
    assert len(ds["train"]) + len(ds["test"]) == 240
    row = ds["train"][0]
    assert isinstance(row["sentence1"], str) and 0.0 <= row["score"] <= 5.0
    assert ds["train"].features["label"].num_classes == 4
    scores = set(ds["train"]["score"]) | set(ds["test"]["score"])
    assert {0.0, 5.0} <= scores


def test_long_tailed_data_is_used_as_is_without_a_ratio(digits) -> None:
    already = make_long_tailed(digits["train"], imbalance_ratio=5.0, seed=2)
    assert make_long_tailed(already, imbalance_ratio=None) is already
    assert make_long_tailed(digits["train"], None, label_column="not_checked") is digits["train"]


def test_check_dataset_empty_small_columns_and_streaming() -> None:
    data = datasets.Dataset.from_dict({"image": [0, 1, 2], "label": [0, 1, 0]})
    assert check_dataset(data, min_rows=3, columns=["label", ("image", "pixel_values")]) == 3
    with pytest.raises(ValueError, match=r"`train_dataset` is empty \(0 rows\).*check the split"):
        check_dataset(data.select([]))
    with pytest.raises(
        ValueError,
        match=r"`train_dataset` has 3 rows, fewer than the 8 needed \(one CARE batch\).*"
        "per_device_train_batch_size",
    ):
        check_dataset(data, min_rows=8, why="one CARE batch")
    with pytest.raises(ValueError, match=r"`eval_dataset` has no column 'text' \(its columns: \['image', 'label'\]\)"):
        check_dataset(data, name="eval_dataset", columns=["text"])
    with pytest.raises(ValueError, match="has no column of 'img', 'pixel_values'"):
        check_dataset(data, columns=[("img", "pixel_values")])
    with pytest.raises(ValueError, match="`train_dataset` is None"):
        check_dataset(None)
    streaming = data.to_iterable_dataset()
    assert check_dataset(streaming, min_rows=1000, columns=["image"]) is None  # no size check, columns checked
    with pytest.raises(ValueError, match="has no column 'text'"):
        check_dataset(streaming, columns=["text"])
    assert check_dataset([{"text": "a"}], columns=["text"]) == 1
    with pytest.raises(ValueError, match="is empty"):
        check_dataset([])


def _image_folder(root: Path) -> Path:
    for name, colour in (("cat", (200, 10, 10, 255)), ("dog", (10, 200, 10, 128))):
        (root / name).mkdir(parents=True)
        for i in range(3):
            Image.new("RGBA", (6, 6), colour).save(root / name / f"{i}.png")
    return root


def test_load_image_folder_keeps_class_names(tmp_path: Path) -> None:
    folder = _image_folder(tmp_path / "pets")
    data = load_image_dataset(folder, cache_dir=str(tmp_path / "cache"))
    assert len(data) == 6 and data.features["label"].names == ["cat", "dog"]
    assert sorted(Counter(data["label"]).items()) == [(0, 3), (1, 3)]
    assert data[0]["image"].mode == "RGBA"
    lazy = load_image_dataset(folder, decode=False, cache_dir=str(tmp_path / "cache"))
    assert str(folder) in lazy[0]["image"]["path"]
    assert defer_image_decoding(lazy) is lazy
    with pytest.raises(ValueError, match=r"`label_column`='class' is not a column of .*\['image', 'label'\]"):
        load_image_dataset(folder, label_column="class", cache_dir=str(tmp_path / "cache"))
    with pytest.raises(ValueError, match="`image_column`='label' .* not images"):
        load_image_dataset(folder, image_column="label", cache_dir=str(tmp_path / "cache"))
    with pytest.raises(ValueError, match=r"`split`='test' is not a split .*\['train'\]"):
        load_image_dataset(folder, split="test", cache_dir=str(tmp_path / "cache"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="`path_or_id`=.*holds no image file"):
        load_image_dataset(tmp_path / "empty", cache_dir=str(tmp_path / "cache"))


ROWS = [
    {"premise": 'A "tall" man sings', "hypothesis": "A man sings", "relatedness": 4.5, "judgment": "entail"},
    {"premise": "A cat sleeps", "hypothesis": "A dog barks", "relatedness": 1.0, "judgment": "neutral"},
    {"premise": "Kids play, loudly", "hypothesis": "Children play", "relatedness": 4.0, "judgment": "entail"},
]


def _write(path: Path, kind: str) -> Path:
    keys = list(ROWS[0])
    if kind in ("csv", "tsv", "txt"):
        sep = "," if kind == "csv" else "\t"

        def cell(value: object) -> str:
            text = str(value)
            if kind == "csv" and ("," in text or '"' in text):
                return '"' + text.replace('"', '""') + '"'  # CSV quoting
            return text  # TSV: raw, quotes included

        lines = [sep.join(keys)] + [sep.join(cell(r[k]) for k in keys) for r in ROWS]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    elif kind == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    elif kind == "json":
        path.write_text(json.dumps(ROWS), encoding="utf-8")
    elif kind == "parquet":
        datasets.Dataset.from_list(ROWS).to_parquet(str(path))
    return path


@pytest.mark.parametrize("kind", ["csv", "tsv", "txt", "json", "jsonl", "parquet"])
def test_load_text_dataset_every_format(tmp_path: Path, kind: str) -> None:
    path = _write(tmp_path / f"pairs.{kind}", kind)
    data = load_text_dataset(
        path,
        text_column="premise",
        text_pair_column="hypothesis",
        label_column="judgment",
        score_column="relatedness",
        cache_dir=str(tmp_path / "cache"),
    )
    # the chosen columns get the package's names (the trainers' defaults); the others are kept
    assert sorted(data.column_names) == ["label", "score", "text", "text_pair"]
    assert data["text"] == [r["premise"] for r in ROWS]  # quotes and commas survive
    assert data["text_pair"] == [r["hypothesis"] for r in ROWS]
    assert data.features["label"].names == ["entail", "neutral"] and data["label"] == [0, 1, 0]
    assert data.features["score"].dtype == "float32" and data["score"] == [4.5, 1.0, 4.0]
    with pytest.raises(ValueError, match=r"`text_pair_column`='sentence2' is not a column .*'premise'"):
        load_text_dataset(path, text_column="premise", text_pair_column="sentence2", cache_dir=str(tmp_path / "cache"))


def test_text_loaders_sentences_errors_and_sts_pairs(tmp_path: Path) -> None:
    lines = tmp_path / "sentences.txt"
    lines.write_text("a cat sat\nthe dog ran\n", encoding="utf-8")
    assert load_text_dataset(lines, cache_dir=str(tmp_path / "cache"))["text"] == ["a cat sat", "the dog ran"]
    semi = tmp_path / "semi.csv"
    semi.write_text("s;t\nhello;1\n", encoding="utf-8")
    with pytest.raises(ValueError, match="or `delimiter=` if the file was split wrongly"):
        load_text_dataset(semi, text_column="s", cache_dir=str(tmp_path / "cache"))
    assert load_text_dataset(semi, text_column="s", delimiter=";", cache_dir=str(tmp_path / "cache"))["text"] == [
        "hello"
    ]
    # pandas reads a longer delimiter as a regular expression ('0|' split every character into a column, and the
    # error blamed `sentence1_column`): one character, named (found by the property suite under a random seed)
    for bad in ("0|", ";;", ""):
        with pytest.raises(ValueError, match=r"`delimiter` must be one character \(e\.g\. ',' or '\\t'\), got"):
            load_text_dataset(semi, text_column="s", delimiter=bad, cache_dir=str(tmp_path / "cache"))
    missing = tmp_path / "missing.csv"
    missing.write_text("text,label\nfine,a\n,b\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"Row 1 of .* has no text in `text_column`='text'"):
        load_text_dataset(missing, cache_dir=str(tmp_path / "cache"))
    with pytest.raises(ValueError, match="Cannot tell the format"):
        load_text_dataset(semi.rename(tmp_path / "x.xlsx"))
    sts = load_sts_pairs(
        _write(tmp_path / "sick.txt", "txt"), "premise", "hypothesis", "relatedness", cache_dir=str(tmp_path / "cache")
    )
    assert sts.column_names == ["sentence1", "sentence2", "score"]
    assert sts["score"] == [4.5, 1.0, 4.0] and sts["sentence1"][0] == 'A "tall" man sings'
    with pytest.raises(ValueError, match="`score_column`='score' is not a column"):
        load_sts_pairs(tmp_path / "sick.txt", "premise", "hypothesis", cache_dir=str(tmp_path / "cache"))


def test_loaded_columns_train_without_setting_the_column_arguments(tmp_path: Path) -> None:
    """One mapping place: the loader renames the user's columns; the trainers' defaults read them."""
    from _tiny import tiny_text_encoder, tiny_timm_encoder
    from distributed_scripts.trainer_utils import training_args

    from hf_contrast.training import SimCLRTrainer, SupConTrainer

    path = tmp_path / "topics.csv"
    rows = [
        ("the cat sat on the mat", "pets", "a cat"),
        ("a red car", "cars", "the car"),
        ("hello world", "misc", "hi"),
    ] * 3
    path.write_text("body,topic,title\n" + "".join(f"{b},{t},{p}\n" for b, t, p in rows), encoding="utf-8")
    texts = load_text_dataset(path, text_column="body", label_column="topic", cache_dir=str(tmp_path / "cache"))
    assert sorted(texts.column_names) == ["label", "text", "title"]
    trainer = SupConTrainer(
        model=tiny_text_encoder(),
        args=training_args(tmp_path / "text", per_device_train_batch_size=4),
        train_dataset=texts,
    )
    trainer.train()  # was: "train_dataset has no column one of 'text', ..." until args.text_column was set too
    # a chosen pair column is named `text_pair`; the trainer says how to use it instead of ignoring it silently
    pairs = load_text_dataset(path, text_column="body", text_pair_column="title", cache_dir=str(tmp_path / "cache"))
    args = training_args(tmp_path / "pairs", per_device_train_batch_size=4, max_steps=1)
    with pytest.warns(UserWarning, match="has a 'text_pair' column .* Set `text_pair_column='text_pair'`"):
        SimCLRTrainer(model=tiny_text_encoder(), args=args, train_dataset=pairs).train()
    # images: a Hub set whose columns are `img` and `kind` (CIFAR-10 names its images `img`)
    folder = _image_folder(tmp_path / "pets")
    hub = datasets.load_dataset("imagefolder", data_dir=str(folder), cache_dir=str(tmp_path / "cache"))
    hub = hub.rename_columns({"image": "img", "label": "kind"})
    real_load = datasets.load_dataset
    datasets.load_dataset = lambda name, **kwargs: hub if name == "user/pets" else real_load(name, **kwargs)
    try:
        images = load_image_dataset("user/pets", image_column="img", label_column="kind")
    finally:
        datasets.load_dataset = real_load
    assert images.column_names == ["image", "label"] and images.features["label"].names == ["cat", "dog"]
    args = training_args(tmp_path / "images", per_device_train_batch_size=4, max_steps=1, image_size=32)
    SupConTrainer(model=tiny_timm_encoder(), args=args, train_dataset=images).train()


def test_a_column_already_named_like_the_canonical_one_is_kept(tmp_path: Path, caplog) -> None:
    path = tmp_path / "news.csv"
    path.write_text("text,body\nshort title,the long body\n", encoding="utf-8")
    with caplog.at_level("WARNING", logger="hf_contrast.data.columns"):
        data = load_text_dataset(path, text_column="body", cache_dir=str(tmp_path / "cache"))
    assert data["text"] == ["the long body"] and data["text_original"] == ["short title"]
    assert "kept as 'text_original'" in caplog.text
    # the card's training-data line names the source's columns too (a loader note, kept through `select`)
    renamed = "the loader renamed the source's columns `body` to `text`, `text` to `text_original`"
    assert loader_notes(data.select([0])) == [renamed]
    # choosing a column named like another canonical one swaps cleanly
    swapped = load_text_dataset(path, text_column="body", text_pair_column="text", cache_dir=str(tmp_path / "cache"))
    assert swapped["text"] == ["the long body"] and swapped["text_pair"] == ["short title"]


def test_load_image_splits_holds_out_a_stratified_split_of_a_folder_without_one(tmp_path: Path, caplog) -> None:
    from PIL import Image

    from hf_contrast.data import load_image_splits

    for label in ("cat", "dog"):
        (tmp_path / label).mkdir()
        for i in range(10):
            Image.new("RGB", (12, 12), (i * 20, 0, 0)).save(tmp_path / label / f"{i}.png")
    with caplog.at_level("INFO", logger="hf_contrast.data.sampling"):
        data = load_image_splits(str(tmp_path), max_eval_samples=2)
    assert len(data["train"]) == 16 and sorted(data["test"]["label"]) == [0, 1]  # 20 % per class, then balanced
    # the held-out split shapes the result: said at start-up, and beside each split in the card; the subset beside
    # the evaluation data only
    said = "has no test split: 20% of each class is held out for evaluation (`test_fraction`, seed 0): 16 training / 4"
    assert f"{tmp_path} {said} evaluation rows." in caplog.text
    subset = "a class-balanced subset of 2 of the split's 4 rows (`max_eval_samples`, seed 0)"
    held_out = "the 20% of each class held out of the training split (no test split; `test_fraction`, seed 0)"
    assert loader_notes(data["test"]) == [held_out, subset]
    assert loader_notes(data["train"]) == [
        "20% of each class held out for evaluation (no test split; `test_fraction`, seed 0)"
    ]
    assert data["train"].features["label"].names == ["cat", "dog"]
    row = data["train"][0]["image"]  # undecoded: the collators decode and can name the file
    assert set(row) == {"bytes", "path"} and row["path"].endswith(".png")
    assert load_image_splits(str(tmp_path), decode=True)["train"][0]["image"].size == (12, 12)
    assert (
        data["train"].info.dataset_name == data["test"].info.dataset_name == tmp_path.name
    )  # the folder's name, no path
    assert load_image_splits(str(tmp_path), dataset_name="pets")["test"].info.dataset_name == "pets"
    assert load_image_splits(None, dataset_name="my-digits")["train"].info.dataset_name == "my-digits"


@given(rows=st.integers(1, 40), limit=st.one_of(st.none(), st.integers(1, 50)), seed=st.integers(0, 2**32))
def test_take_subset_keeps_the_rows_asked_for_and_says_so(rows: int, limit: int | None, seed: int) -> None:
    from hf_contrast.data import balanced_subset, take_subset
    from hf_contrast.hub.card_datasets import dataset_metadata

    labels = [i % 3 for i in range(rows)]
    split = datasets.Dataset.from_dict({"row": list(range(rows)), "label": labels})
    balanced = take_subset(split, limit, argument="max_train_samples", seed=seed, label_column="label")
    drawn = take_subset(split, limit, argument="max_eval_samples", seed=seed)
    if limit is None or limit >= rows:  # all of it, as it is, nothing said
        assert balanced is split and drawn is split and loader_notes(split) == []
        return
    assert balanced["row"] == balanced_subset(labels, limit, seed).tolist()
    assert drawn["row"] == split.shuffle(seed=seed).select(range(limit))["row"]
    said = f"subset of {limit:,} of the split's {rows:,} rows"
    assert dataset_metadata(balanced)[0]["notes"] == [f"a class-balanced {said} (`max_train_samples`, seed {seed})"]
    assert dataset_metadata(drawn)[0]["notes"] == [f"a random {said} (`max_eval_samples`, seed {seed})"]
    assert loader_notes(split) == []  # the source split is not changed


def test_take_subset_refuses_a_limit_that_is_not_a_count() -> None:
    from hf_contrast.data import take_subset

    split = datasets.Dataset.from_dict({"label": [0, 1]})
    for limit in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="`max_train_samples` must be"):
            take_subset(split, limit, argument="max_train_samples")


@pytest.mark.parametrize("column", ["image_column", "label_column"])
def test_a_column_choice_without_a_dataset_is_refused(column: str) -> None:
    """``--label_column nope`` with no ``--dataset`` trained on the embedded digits as if it had not been given."""
    from hf_contrast.data import load_image_splits
    from hf_contrast.errors import InputError

    with pytest.raises(InputError, match=rf"`{column}`='nope' \(`--{column}`\) names a column of your data, but no"):
        load_image_splits(None, **{column: "nope"})
    assert len(load_image_splits(None, **{column: column.removesuffix("_column")})["train"]) > 0  # the digits' own


def test_an_empty_class_folder_is_warned_about(tmp_path: Path) -> None:
    from PIL import Image

    from hf_contrast.data import empty_class_folders, load_image_dataset

    for split, label in (("train", "cat"), ("train", "dog"), ("test", "cat"), ("test", "dog")):
        (tmp_path / split / label).mkdir(parents=True)
        Image.new("RGB", (8, 8)).save(tmp_path / split / label / "0.png")
    assert empty_class_folders(tmp_path) == []
    (tmp_path / "train" / "eel").mkdir()
    (tmp_path / "train" / "eel" / "notes.txt").write_text("no image here")
    assert empty_class_folders(tmp_path) == ["train/eel"]
    with pytest.warns(UserWarning, match=r"the class folder\(s\) \['train/eel'\] hold no image"):
        data = load_image_dataset(tmp_path, split=None)
    assert data["train"].features["label"].names == ["cat", "dog"]  # imagefolder drops it: hence the warning


def test_change_pairs_from_undecoded_images_of_different_sizes_and_a_bad_file(tmp_path: Path) -> None:
    """Any class image folder works: undecoded rows, images of different sizes and modes (the replacement
    takes x_pre's size), a bad file raises naming it or is skipped with a warning."""
    from hf_contrast.data.decode import BadImageError

    rows = {"image": [], "label": []}
    for i in range(8):
        path = tmp_path / f"{i}.png"
        Image.new("L" if i % 3 == 0 else "RGB", (10 + i, 12 + 2 * i), 30 * i).save(path)
        rows["image"].append({"path": str(path), "bytes": None})
        rows["label"].append(i % 2)
    features = datasets.Features({"image": datasets.Image(decode=False), "label": datasets.Value("int64")})
    data = datasets.Dataset.from_dict(rows, features=features)
    pairs = make_change_pairs(data, num_pairs=40, seed=0)
    assert len(pairs) == 40 and set(pairs["label"]) <= {0, 1, 2, 3}
    for row in pairs:
        assert row["image_pre"].size == row["image_post"].size and row["image_pre"].mode == "RGB"
    (tmp_path / "5.png").write_bytes(b"")
    with pytest.raises(BadImageError, match=r"row 5 .*5\.png"):
        make_change_pairs(data, num_pairs=10)
    with pytest.warns(UserWarning) as caught:
        pairs = make_change_pairs(data, num_pairs=10, on_bad_image="skip")
    messages = [str(w.message) for w in caught]
    assert any(m.startswith("Skipped: make_change_pairs: row 5") for m in messages), messages
    # the count, once: the user sees how many images the pairs lost, not only which
    assert [m for m in messages if "were unreadable" in m] == [
        "make_change_pairs: 1 of 8 images were unreadable and left out (on_bad_image='skip'); the 10 pairs are "
        "drawn from the other 7."
    ]
    assert len(pairs) == 10


def test_a_scored_pairs_file_without_a_header_row_is_said_so(tmp_path: Path) -> None:
    from hf_contrast.data import load_sts_pairs
    from hf_contrast.errors import InputError

    path = tmp_path / "pairs.csv"
    path.write_text("A man plays a guitar.,A person plays music.,4.5\nA dog runs.,A cat sleeps.,0.5\n")
    with pytest.raises(InputError, match=r"its first row is read as the header, and that row looks like data") as e:
        load_sts_pairs(str(path))
    assert "`sentence1,sentence2,score`" in str(e.value)
    path.write_text("sentence1,sentence2,score\n" + path.read_text())  # the fix the message names
    assert load_sts_pairs(str(path))["score"] == [4.5, 0.5]


def test_the_shipped_sentence_pairs_have_one_name_however_they_are_loaded(tmp_path: Path) -> None:
    """run_bert reads the shipped file with ``load_text_dataset``: its card named the pairs ``sentence_pairs`` (the
    file's stem) where ``load_sentence_pairs`` and the docs say ``hf_contrast-sentence-pairs``. A copy of the file
    elsewhere is the user's: named by its own stem."""
    from hf_contrast.data import SENTENCE_PAIRS_PATH

    cache = str(tmp_path / "cache")
    every_split = load_text_dataset(str(SENTENCE_PAIRS_PATH), split=None, text_column="sentence1", cache_dir=cache)
    names = {
        load_sentence_pairs()["train"].info.dataset_name,
        load_text_dataset(SENTENCE_PAIRS_PATH, text_column="sentence1", cache_dir=cache).info.dataset_name,
        every_split["train"].info.dataset_name,
        load_sts_pairs(SENTENCE_PAIRS_PATH).info.dataset_name,
    }
    assert names == {"hf_contrast-sentence-pairs"}
    copy = tmp_path / "my_pairs.tsv"
    copy.write_bytes(SENTENCE_PAIRS_PATH.read_bytes())
    assert load_text_dataset(copy, text_column="sentence1", cache_dir=cache).info.dataset_name == "my_pairs"


@given(
    missing=st.sets(st.integers(0, 29), max_size=4),
    kept=st.one_of(st.none(), st.lists(st.integers(0, 29), min_size=1, max_size=30, unique=True)),
    kind=st.sampled_from(["text", "label"]),
)
def test_a_text_or_label_column_with_missing_values_is_named_with_its_first_row(missing, kept, kind) -> None:
    """Read from arrow's null count, over the rows a selection keeps (in its order): refused exactly when a kept row
    is None, naming the argument, the count and the first such row of the dataset as given."""
    from hf_contrast.data.checks import check_column_kinds

    values = [None if i in missing else (f"text {i}" if kind == "text" else i % 3) for i in range(30)]
    data = datasets.Dataset.from_dict(
        {"column": values},
        features=datasets.Features({"column": datasets.Value("string" if kind == "text" else "int64")}),
    )
    if kept is not None:
        data = data.select(kept)
    rows = list(range(30)) if kept is None else kept
    absent = [position for position, row in enumerate(rows) if row in missing]
    argument = f"{kind}_column"
    check = lambda: check_column_kinds(data, [("column", kind, argument)], name="eval_dataset")  # noqa: E731
    if not absent:
        check()
        return
    with pytest.raises(InputError) as error:
        check()
    message = str(error.value)
    assert message.startswith(f"`{argument}`='column': ")
    count = f"{len(absent)} rows of the {len(rows)} in `eval_dataset` have" if len(absent) > 1 else "1 row of"
    assert count in message and f"the first is row {absent[0]})" in message
    assert "dataset.filter(lambda row: row['column'] is not None)" in message
