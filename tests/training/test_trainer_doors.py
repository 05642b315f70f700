"""The trainers' door (issue 22): ``model``, ``train_dataset`` / ``eval_dataset`` and the columns they name are
checked in ``__init__``, before any work, with the package's errors naming the argument, the value and the fix;
SimO's sampler options are reachable and its batch size is the product of its class options."""

from __future__ import annotations

import re
import warnings

import datasets
import numpy as np
import pytest
import torch
from distributed_scripts.trainer_utils import image_dataset, training_args, vit_encoder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers import __version__ as transformers_version

from hf_contrast.errors import InputError, InputTypeError
from hf_contrast.objectives import SimOConfig, SimOObjective
from hf_contrast.training import (
    ContrastiveTrainer,
    SimCLRTrainer,
    SimOTrainer,
    SupConTrainer,
)


@pytest.fixture(scope="module")
def model():
    return vit_encoder()


@pytest.fixture(scope="module")
def args(tmp_path_factory):
    return training_args(tmp_path_factory.mktemp("doors"))


NOT_DATASETS = st.one_of(
    st.text(max_size=20),  # a path
    st.lists(st.text(max_size=8), min_size=1, max_size=5),  # sentences
    st.lists(st.integers(), min_size=1, max_size=5),
    st.integers(),
    st.floats(allow_nan=False),
    st.dictionaries(
        st.sampled_from(["text", "image", "label"]), st.lists(st.text(max_size=4), max_size=3), min_size=1
    ),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=NOT_DATASETS)
def test_train_dataset_of_the_wrong_type_is_named_with_the_fix(model, args, value) -> None:
    with pytest.raises(InputTypeError) as caught:
        SimCLRTrainer(model=model, args=args, train_dataset=value)
    message = str(caught.value)
    assert message.startswith("`train_dataset` is")
    if isinstance(value, str):  # the path itself, in the call that loads it
        assert f"load_image_splits({value!r})['train']" in message
    else:
        assert "datasets.Dataset" in message


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=st.one_of(st.text(max_size=10), st.lists(st.text(max_size=5), min_size=1, max_size=3), st.integers()))
def test_eval_dataset_of_the_wrong_type_is_named(model, args, images, value) -> None:
    with pytest.raises(InputTypeError, match=r"^`eval_dataset` is"):
        SimCLRTrainer(model=model, args=args, train_dataset=images, eval_dataset=value)
    with pytest.raises(InputTypeError, match=r"^`eval_dataset\['b'\]` is"):  # a dict of evaluation sets: each checked
        SimCLRTrainer(model=model, args=args, train_dataset=images, eval_dataset={"a": images, "b": value})


def test_split_dicts_frames_and_tuple_rows_name_the_fix(model, args, images) -> None:
    splits = datasets.DatasetDict(train=images, test=images)
    with pytest.raises(
        InputTypeError,
        match=(
            r"`train_dataset` is a DatasetDict of the splits \['train', 'test'\]; "
            r"pass one split, e.g. `train_dataset=data\['train'\]`"
        ),
    ):
        SimCLRTrainer(model=model, args=args, train_dataset=splits)
    pandas = pytest.importorskip("pandas")
    with pytest.raises(
        InputTypeError, match=r"`train_dataset` is a pandas DataFrame; pass `datasets.Dataset.from_pandas\(frame\)`"
    ):
        SimCLRTrainer(model=model, args=args, train_dataset=pandas.DataFrame({"text": ["a", "b"]}))
    tensors = torch.utils.data.TensorDataset(torch.zeros(4, 3, 16, 16), torch.zeros(4, dtype=torch.long))
    with pytest.raises(InputTypeError, match=r"`train_dataset` \(TensorDataset\) yields rows of type tuple"):
        SimCLRTrainer(model=model, args=args, train_dataset=tensors)
    SimCLRTrainer(
        model=model, args=args, train_dataset=images, eval_dataset=splits
    )  # a DatasetDict evaluates each split


@pytest.mark.parametrize("value", ["resnet18", "outputs/care", 3, {"backbone": "resnet18"}])
def test_model_must_be_a_model_object_and_the_message_lists_only_what_is_accepted(args, images, value) -> None:
    with pytest.raises(InputTypeError) as caught:
        SimCLRTrainer(model=value, args=args, train_dataset=images)
    message = str(caught.value)
    assert message.startswith("`model` is") and "(str)" not in message and "as `transformers.Trainer` does" in message
    if isinstance(value, str):
        assert f"ContrastiveEncoder.from_backbone({value!r})" in message and f"from_pretrained({value!r})" in message


def test_image_column_of_integers_is_named_before_any_work(model, images, tmp_path) -> None:
    with pytest.raises(
        InputTypeError,
        match=r"`image_column`='label' names a column of numbers \(int64\) in `train_dataset`.*set `image_column`",
    ):
        SimCLRTrainer(model=model, args=training_args(tmp_path, image_column="label"), train_dataset=images)
    rows = [{"image": i, "label": 0} for i in range(4)]  # no features: the first row tells
    with pytest.raises(InputTypeError, match=r"`image_column`='image' names a column of numbers \(int\)"):
        SimCLRTrainer(model=model, args=training_args(tmp_path), train_dataset=rows)
    with pytest.raises(InputTypeError, match=r"in `eval_dataset`"):
        SimCLRTrainer(
            model=model,
            args=training_args(tmp_path),
            train_dataset=images,
            eval_dataset=images.rename_column("image", "x").rename_column("label", "image"),
        )


def test_label_column_of_images_or_strings_is_named_before_arrow_sees_it(model, images, tmp_path) -> None:
    with pytest.raises(
        InputTypeError,
        match=r"`label_column`='image' names a column of images \(an Image feature\) in `train_dataset`",
    ):
        SupConTrainer(model=model, args=training_args(tmp_path, label_column="image"), train_dataset=images)
    named = datasets.Dataset.from_dict({"image": list(images["image"]), "label": [str(i % 4) for i in range(16)]})
    with pytest.raises(InputTypeError, match=r"`label_column`='label' names a column of strings.*class_encode_column"):
        SupConTrainer(model=model, args=training_args(tmp_path), train_dataset=named)
    SupConTrainer(model=model, args=training_args(tmp_path), train_dataset=named.class_encode_column("label"))


def test_text_column_of_numbers_is_named(tmp_path) -> None:
    from _tiny import tiny_text_encoder

    data = datasets.Dataset.from_dict({"text": ["a b", "c d", "e f", "g h"], "n": [1, 2, 3, 4]})
    with pytest.raises(InputTypeError, match=r"`text_column`='n' names a column of numbers"):
        SimCLRTrainer(
            model=tiny_text_encoder(),
            args=training_args(tmp_path, text_column="n", per_device_train_batch_size=4),
            train_dataset=data,
        )


def _small_class_images() -> datasets.Dataset:
    labels = [c for c in range(5) for _ in range(4)] + [5, 5]  # class 5 has 2 images, fewer than k = 4
    return image_dataset(n=len(labels), size=16, labels=labels)


def test_simo_replacement_is_an_option_and_the_advice_names_it(model, tmp_path) -> None:
    data = _small_class_images()
    args = training_args(tmp_path, per_device_train_batch_size=8, max_steps=1)
    with pytest.raises(InputError) as caught:  # at construction, not at the first batch
        SimOTrainer(
            model=model,
            args=args,
            train_dataset=data,
            objective=SimOObjective(classes_per_batch=2, samples_per_class=4),
        )
    message = str(caught.value)
    assert "class 5 has 2" in message and "replacement=True" in message and "`--replacement`" in message
    trainer = SimOTrainer(
        model=model, args=args, train_dataset=data,
        objective=SimOObjective(classes_per_batch=2, samples_per_class=4, replacement=True),
    )  # fmt: skip
    sampler = trainer.get_train_dataloader().batch_sampler
    assert getattr(sampler, "replacement", None) is True or "replacement=True" in repr(
        trainer.objective.train_batch_sampler(data, trainer.views)
    )
    with pytest.raises(InputError, match="`replacement` must be True or False, got 'yes'"):
        SimOConfig(replacement="yes").validate()


def test_simo_batch_size_mismatch_names_both_sides_and_the_fix(model, tmp_path) -> None:
    with pytest.raises(
        InputError,
        match=r"`per_device_train_batch_size`=6 must equal .* 2 × 4 = 8.*set `per_device_train_batch_size`=8",
    ):
        SimOTrainer(
            model=model, args=training_args(tmp_path, per_device_train_batch_size=6),
            train_dataset=_small_class_images(),
            objective=SimOObjective(classes_per_batch=2, samples_per_class=4, replacement=True),
        )  # fmt: skip


def test_a_compute_loss_func_is_refused_not_ignored(model, images, args) -> None:
    """The objective computes the loss: a `compute_loss_func` would be silently unused (and would stop the Trainer
    dividing the loss by the accumulation steps)."""
    with pytest.raises(InputError, match=r"`compute_loss_func` is not used by a ContrastiveTrainer.*objective="):
        SimCLRTrainer(model=model, args=args, train_dataset=images, compute_loss_func=lambda *a, **k: 0.0)


def test_a_model_init_is_refused_not_half_honoured(model, images, args) -> None:
    """`model_init` made `model` None ('`model` is None; a trainer takes a model object'), and with a model too,
    `train()` would have replaced the model the objective and its views were built for."""
    for also in ({}, {"model": model}):
        with pytest.raises(
            InputError, match=r"^`model_init` is not supported by a ContrastiveTrainer.*model_init\(\)"
        ):
            SimCLRTrainer(args=args, train_dataset=images, model_init=lambda: model, **also)


def test_good_inputs_still_pass(model, images, tmp_path) -> None:
    rows = [{"image": np.zeros((16, 16, 3), dtype=np.uint8), "label": i % 2} for i in range(8)]
    ContrastiveTrainer(model=model, args=training_args(tmp_path), train_dataset=rows, objective="simclr")
    paths = datasets.Dataset.from_dict({"image": ["a.png"] * 8, "label": [0, 1] * 4})  # paths: decoded by the collator
    SupConTrainer(model=model, args=training_args(tmp_path), train_dataset=paths)


_resnet = None


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(size=st.integers(1, 40))
def test_an_image_size_the_encoder_cannot_take_is_refused_before_training(size: int, images, tmp_path) -> None:
    """test_resnet's total stride is 32: the encoder takes sizes >= 16 (half of it); a smaller `image_size` is
    refused when the trainer is built, naming the argument (it failed at the first step before)."""
    from _tiny import tiny_timm_encoder

    global _resnet
    _resnet = _resnet or tiny_timm_encoder()
    build = lambda: ContrastiveTrainer(  # noqa: E731
        model=_resnet, args=training_args(tmp_path, image_size=size), train_dataset=images, objective="simclr"
    )
    if size < 16:
        with pytest.raises(InputError, match=rf"`image_size`: the training views would be {size}x{size} px"):
            build()
    else:
        assert build().image_size_choice.size == (size, size)
    assert _resnet.training  # the dry forward leaves the model as it found it


_text_encoder = None


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(max_length=st.one_of(st.none(), st.integers(2, 200)), max_seq_length=st.one_of(st.none(), st.integers(2, 200)))
def test_a_text_cut_longer_than_the_position_embeddings_is_refused_before_training(
    max_length: int | None, max_seq_length: int | None, tmp_path
) -> None:
    """The tiny BERT has 64 positions: a text run that truncates at more tokens (`max_length`, else the encoder's
    `max_seq_length`, else the tokenizer's 64) is refused when the trainer is built (a longer text stopped training
    at its batch with torch's 'The size of tensor a (702) must match the size of tensor b (512)')."""
    from _tiny import tiny_text_encoder

    global _text_encoder
    _text_encoder = _text_encoder or tiny_text_encoder()
    _text_encoder.config.max_seq_length = max_seq_length
    data = datasets.Dataset.from_dict({"text": ["a b", "c d", "e f", "g h"]})
    build = lambda: SimCLRTrainer(  # noqa: E731
        model=_text_encoder, args=training_args(tmp_path, max_length=max_length, per_device_train_batch_size=4),
        train_dataset=data,
    )  # fmt: skip
    length = max_length or max_seq_length or 64
    if length > 64:
        given_length = (
            f"`max_length`={length} is" if max_length else f"`max_length` is unset, so the texts are cut at {length}"
        )
        with pytest.raises(InputError, match="the 64 tokens the position embeddings") as error:
            build()
        assert given_length in str(error.value) and "Set `max_length` to 64 or less" in str(error.value)
    else:
        assert build().views.max_length() == length


def test_missing_texts_or_labels_are_refused_when_the_trainer_is_built(tmp_path, images) -> None:
    """A None text (or label) stopped training at the batch that held it (the collator's error); the trainer now
    refuses it when built, for the training and the evaluation sets."""
    from _tiny import tiny_text_encoder

    texts = datasets.Dataset.from_dict({"text": ["a b", "c d", None, "g h"]})
    good = datasets.Dataset.from_dict({"text": ["a b", "c d", "e f", "g h"]})
    args = training_args(tmp_path, per_device_train_batch_size=4)
    for train, evaluation, where in ((texts, None, "train_dataset"), (good, texts, "eval_dataset")):
        with pytest.raises(InputError, match=rf"`text_column`='text': 1 row of `{where}` has no value .* row 2\)"):
            SimCLRTrainer(model=tiny_text_encoder(), args=args, train_dataset=train, eval_dataset=evaluation)
    labels = images.cast_column("label", datasets.Value("int64")).map(
        lambda row, i: {"label": None if i == 5 else row["label"]}, with_indices=True
    )
    with pytest.raises(InputError, match=r"`label_column`='label': 1 row of `train_dataset` has no value"):
        SupConTrainer(model=vit_encoder(), args=args, train_dataset=labels)


def test_a_text_pair_column_every_set_lacks_is_refused_when_the_trainer_is_built(tmp_path) -> None:
    """The text collator tokenises ``text_pair_column`` in every batch: a training set without it stopped at its first
    batch, an evaluation set at the first evaluation ("'pair' is not a column of the dataset")."""
    from _tiny import tiny_text_encoder

    pairs = datasets.Dataset.from_dict({"text": ["a b", "c d", "e f", "g h"], "pair": ["b a", "d c", "f e", "h g"]})
    alone = pairs.remove_columns("pair")
    args = training_args(tmp_path, per_device_train_batch_size=4, text_pair_column="pair")
    for train, evaluation, where in ((alone, None, "train_dataset"), (pairs, alone, "eval_dataset")):
        with pytest.raises(InputError, match=rf"^`{where}` has no column 'pair' \(its columns: \['text'\]\)"):
            SimCLRTrainer(model=tiny_text_encoder(), args=args, train_dataset=train, eval_dataset=evaluation)
    SimCLRTrainer(model=tiny_text_encoder(), args=args, train_dataset=pairs, eval_dataset=pairs)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(labels=st.lists(st.sampled_from([-100, -1, 0, 1, 2]), min_size=8, max_size=8))
def test_negative_labels_are_unlabelled_rows_said_when_the_trainer_is_built(labels, model, tmp_path) -> None:
    """-1 / -100 mark unlabelled rows (as the embedding metrics read them): SupCon trained them as one more class, and
    an evaluation set mixing them with classes stopped training at its first evaluation ('`label_ids` mixes
    negative ... and class labels')."""
    data = image_dataset(n=8, size=16, labels=labels)
    classes = {label for label in labels if label >= 0}
    negative = sorted({label for label in labels if label < 0})
    args = training_args(tmp_path, per_device_train_batch_size=4)
    if negative:
        said = (
            rf"`train_dataset`'s `label_column`='label' holds the negative labels \[{', '.join(map(str, negative))}\]"
        )
        with pytest.raises(InputError, match=said + ", which mark unlabelled rows: SupConObjective"):
            SupConTrainer(model=model, args=args, train_dataset=data)
    elif len(classes) > 1:
        SupConTrainer(model=model, args=args, train_dataset=data)
    evaluated = lambda: SimCLRTrainer(model=model, args=args, train_dataset=data, eval_dataset=data)  # noqa: E731
    if negative and classes:
        with pytest.raises(InputError, match="`eval_dataset`'s `label_column`='label' mixes the negative labels"):
            evaluated()
    else:
        evaluated()  # all labelled, or all unlabelled (-1 everywhere: the metrics leave the label ones out)


def test_per_batch_predictions_are_refused_for_the_default_metrics_only(model, images, tmp_path) -> None:
    """`eval_do_concat_batches=False` stopped training at the first evaluation (the embedding metrics got a list of
    batches); a compute_metrics of the user's may take them, and does."""
    args = training_args(tmp_path, eval_do_concat_batches=False, per_device_eval_batch_size=8)
    with pytest.raises(InputError, match=r"`eval_do_concat_batches=False` hands `compute_metrics` one array per"):
        SimCLRTrainer(model=model, args=args, train_dataset=images, eval_dataset=images)
    batches: list[int] = []

    def per_batch(prediction) -> dict[str, float]:  # noqa: ANN001
        batches.extend(len(embeddings) for embeddings, *_ in prediction.predictions)
        return {"batches": float(len(prediction.predictions))}

    trainer = SimCLRTrainer(
        model=model, args=args, train_dataset=images, eval_dataset=images, compute_metrics=per_batch
    )
    assert trainer.evaluate()["eval_batches"] == 2.0 and batches == [8, 8]


def test_metrics_per_batch_are_refused_for_the_default_metrics_and_work_with_yours(model, images, tmp_path) -> None:
    """`batch_eval_metrics=True` was refused by transformers as "your `compute_metrics` function must take a
    `compute_result` boolean argument", of a function the user never passed (the trainer's default metrics); it is
    refused naming the argument, and a `compute_metrics(eval_prediction, compute_result)` of the user's gets each
    batch."""
    args = training_args(tmp_path, batch_eval_metrics=True, per_device_eval_batch_size=8)
    with pytest.raises(InputError, match=r"^`batch_eval_metrics=True` scores each evaluation batch alone"):
        SimCLRTrainer(model=model, args=args, train_dataset=images, eval_dataset=images)
    rows: list[int] = []

    def per_batch(prediction, compute_result: bool) -> dict[str, float]:  # noqa: ANN001
        rows.append(len(prediction.predictions[0]))
        return {"rows": float(sum(rows))} if compute_result else {}

    trainer = SimCLRTrainer(
        model=model, args=args, train_dataset=images, eval_dataset=images, compute_metrics=per_batch
    )
    assert trainer.evaluate()["eval_rows"] == len(images) and rows == [8] * (len(images) // 8)


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("label_smoothing_factor", 0.1, "`label_smoothing_factor`=0.1 is not used by a ContrastiveTrainer"),
        ("neftune_noise_alpha", 5.0, "`neftune_noise_alpha`=5.0: NEFTune adds noise"),
    ],
)
def test_trainer_features_a_contrastive_trainer_cannot_honour_are_refused(model, images, tmp_path, field, value, said):  # noqa: ANN001, ANN201
    """label_smoothing_factor trained as if unset (the objective replaces Trainer.compute_loss, whose smoother it is);
    neftune_noise_alpha stopped train() with 'get_input_embeddings not auto-handled for ContrastiveEncoder'."""
    with pytest.raises(InputError, match=re.escape(said)):
        SimCLRTrainer(model=model, args=training_args(tmp_path, **{field: value}), train_dataset=images)
    SimCLRTrainer(model=model, args=training_args(tmp_path, **{field: 0.0 if field.startswith("label") else None}),
                  train_dataset=images)  # fmt: skip


@pytest.mark.parametrize("counted", [True, "all", "non_padding"])
def test_input_tokens_are_counted_for_text_and_refused_for_images(model, images, tmp_path, counted) -> None:
    """`include_num_input_tokens_seen` on an image encoder warned "Tried to track the number of tokens seen, however
    the current model is not configured properly" at every step and logged `num_input_tokens_seen` 0; a text
    encoder's batches hold `input_ids`, and their tokens are counted."""
    from _tiny import tiny_text_encoder

    with pytest.raises(InputError, match=r"`include_num_input_tokens_seen`=.* counts a text model's tokens"):
        SimCLRTrainer(model=model, args=training_args(tmp_path, include_num_input_tokens_seen=counted),
                      train_dataset=images)  # fmt: skip
    texts = datasets.Dataset.from_dict({"text": [("word " * (i % 5 + 1)) + str(i) for i in range(8)]})
    args = training_args(tmp_path, max_steps=2, per_device_train_batch_size=4, include_num_input_tokens_seen=counted)
    trainer = SimCLRTrainer(model=tiny_text_encoder(), args=args, train_dataset=texts)
    trainer.train()  # one epoch: two batches of 4 that hold the 8 rows between them, in a seeded random order
    lengths = [len(ids) for ids in trainer.processing_class(list(texts["text"]), truncation=True)["input_ids"]]
    seen = trainer.state.num_input_tokens_seen
    if counted == "non_padding":  # the attention masks' ones: every row's own tokens, whatever the order
        assert seen == sum(lengths)
    else:  # every position of the padded batches: 4 rows × the longest of each batch
        assert sum(lengths) < seen <= 8 * max(lengths) and seen % 4 == 0


def test_input_tokens_of_a_pair_column_are_said_to_be_left_out(tmp_path) -> None:
    """transformers counts the model's main input (`input_ids`) only: with `text_pair_column` the pairs' tokens
    (`pair_input_ids`) were left out of `num_input_tokens_seen` in silence. Said when the trainer is built, and the
    count is what the message says: the text column's tokens."""
    from _tiny import tiny_text_encoder

    texts = datasets.Dataset.from_dict(
        {"text": [("word " * (i % 5 + 1)) + str(i) for i in range(8)], "pair": [f"pair {i} " * 3 for i in range(8)]}
    )
    args = lambda **pair: training_args(  # noqa: E731
        tmp_path, max_steps=2, per_device_train_batch_size=4, include_num_input_tokens_seen="non_padding", **pair
    )
    said = r"counts the tokens of `text_column` only .*`text_pair_column` \(`pair_input_ids`\)"
    with pytest.warns(UserWarning, match=said):
        trainer = SimCLRTrainer(model=tiny_text_encoder(), args=args(text_pair_column="pair"), train_dataset=texts)
    trainer.train()  # one epoch: the 8 rows in two batches
    tokens = lambda column: sum(  # noqa: E731
        len(ids) for ids in trainer.processing_class(list(texts[column]), truncation=True)["input_ids"]
    )
    assert trainer.state.num_input_tokens_seen == tokens("text") < tokens("text") + tokens("pair")
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*counts the tokens of `text_column` only")
        SimCLRTrainer(model=tiny_text_encoder(), args=args(), train_dataset=texts.remove_columns("pair"))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(num_labels=st.integers(1, 5), labels=st.lists(st.integers(-2, 5), min_size=8, max_size=8))
def test_labels_the_task_head_has_no_logit_for_are_refused_before_training(num_labels, labels, tmp_path) -> None:
    """align_uniform with a task head (`num_labels` > 0) trains a cross-entropy over the labels: one outside
    0..num_labels - 1 stopped training at its batch (torch's 'Target 2 is out of bounds'; on a GPU a device assert)."""
    data = image_dataset(n=8, size=16, labels=labels)
    build = lambda: ContrastiveTrainer(  # noqa: E731
        model=vit_encoder(num_labels=num_labels), args=training_args(tmp_path, per_device_train_batch_size=4),
        train_dataset=data, objective="align_uniform",
    )  # fmt: skip
    outside = [label for label in sorted(set(labels)) if not 0 <= label < num_labels]
    if outside:
        with pytest.raises(InputError, match=re.escape(f"holds the labels {outside}, which the encoder's task head")):
            build()
    else:
        build().train()  # every label has a logit: the cross-entropy trains
    # an evaluation set's labels too: its `eval_loss` is the same cross-entropy (it stopped the first evaluation)
    inside = image_dataset(n=8, size=16, n_classes=num_labels)
    evaluated = lambda: ContrastiveTrainer(  # noqa: E731
        model=vit_encoder(num_labels=num_labels), args=training_args(tmp_path, per_device_train_batch_size=4),
        train_dataset=inside, eval_dataset={"held_out": data}, objective="align_uniform",
    )  # fmt: skip
    if outside:
        with pytest.raises(InputError, match=re.escape("`eval_dataset['held_out']`'s `label_column`='label' holds")):
            evaluated()
    else:
        evaluated()


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    labels=st.lists(st.sampled_from([-100, -1, 0, 1, 2, 3]), min_size=8, max_size=8),
    method=st.sampled_from(["supcon", "align_uniform"]),
)
def test_a_streamed_training_sets_labels_are_checked_at_their_batch(labels, method, tmp_path) -> None:
    """A streaming training set's labels cannot be read before training: a negative label (an unlabelled row) was
    trained by SupCon as one more class, and a -100 was left out of a task head's cross-entropy (its ignore index),
    both silently. Each batch's labels are now checked as a `datasets.Dataset`'s are when the trainer is built: the
    batch that holds one stops training, before its step, with the same error."""
    head = 3 if method == "align_uniform" else 0  # align/uniform: a task head of 3 classes; SupCon: its classes
    data = image_dataset(n=8, size=16, labels=labels)
    trainer = ContrastiveTrainer(
        model=vit_encoder(num_labels=head), args=training_args(tmp_path, per_device_train_batch_size=4, max_steps=2),
        train_dataset=data.to_iterable_dataset(), objective=method,
    )  # fmt: skip
    batches = [sorted(set(labels[:4])), sorted(set(labels[4:]))]
    bad = [[c for c in batch if (c >= head if head else False) or c < 0] for batch in batches]
    first = next((i for i, outside in enumerate(bad) if outside), None)
    if first is None:
        trainer.train()
        assert trainer.state.global_step == 2
        return
    where = r" \(in a training batch: the set's labels could not be read before training\)"
    said = (
        rf"holds the labels \[{', '.join(map(str, bad[first]))}\]{where}, which the encoder's task head"
        if head
        else rf"holds the negative labels \[{', '.join(map(str, bad[first]))}\]{where}, which mark unlabelled rows"
    )
    with pytest.raises(InputError, match=rf"^`train_dataset`'s `label_column`='label' {said}"):
        trainer.train()
    assert trainer.state.global_step <= first  # stopped before its step (accelerate's loader reads a batch ahead)


def test_an_objective_that_samples_its_batches_refuses_a_streamed_training_set(tmp_path) -> None:
    """SimO's class-major batches are drawn by class from the rows; the Trainer's loader of a stream left its sampler
    out, so SimO trained on the stream's batches in their order, whose groups are not classes, silently (2 steps and
    a finite loss here). Now refused when the trainer is built: SimO's own message, and for any objective with a
    ``train_batch_sampler`` the trainer's."""
    from hf_contrast.objectives import SimCLRObjective

    stream = image_dataset(n=40, n_classes=8).to_iterable_dataset()
    args = training_args(tmp_path, per_device_train_batch_size=6, max_steps=2)
    with pytest.raises(InputError, match=r"^SimO trains on class-major batches .* a streaming training set gives"):
        SimOTrainer(
            model=vit_encoder(),
            args=args,
            train_dataset=stream,
            objective=SimOObjective(classes_per_batch=3, samples_per_class=2),
        )

    class Sampled(SimCLRObjective):  # a user's objective with batches of its own
        def train_batch_sampler(self, dataset, views):  # noqa: ANN001, ANN202
            return [[0, 1, 2, 3, 4, 5]]

    with pytest.raises(InputError, match=r"^Sampled draws its training batches with a batch sampler .* streaming"):
        ContrastiveTrainer(model=vit_encoder(), args=args, train_dataset=stream, objective=Sampled())
    ContrastiveTrainer(model=vit_encoder(), args=args, train_dataset=stream, objective=SimCLRObjective()).train()


def _ordered(strategy: str) -> dict[str, object]:
    """The `TrainingArguments` field asking for ``strategy`` (``group_by_length=True`` before transformers 5.2)."""
    from transformers import TrainingArguments

    if "train_sampling_strategy" in TrainingArguments.__dataclass_fields__:
        return {"train_sampling_strategy": strategy}
    if strategy != "group_by_length":
        pytest.skip(f"transformers {transformers_version} has no train_sampling_strategy={strategy!r}")
    return {"group_by_length": True}


@pytest.mark.parametrize("strategy", ["group_by_length", "batch_rebalance"])
def test_a_text_run_grouped_by_length_measures_its_rows_token_lengths(strategy, tmp_path, caplog, capfd) -> None:
    """The rows hold raw text, tokenized per batch, so the Trainer found no `input_ids` to measure and stopped train()
    ('Can only automatically infer lengths ...'), or the first evaluation for an evaluation set without the column.
    The trainer measures each row's tokens once (the run's tokenizer and truncation) into `length_column_name`; a
    set that has the column keeps it."""
    from _tiny import tiny_text_encoder

    texts = datasets.Dataset.from_dict({"text": [("word " * (i % 7 + 1)) + str(i) for i in range(16)]})
    mine = texts.map(lambda row: {"length": 3})  # a user's own lengths are theirs
    grouped = _ordered(strategy)
    args = training_args(tmp_path, max_steps=1, eval_strategy="steps", eval_steps=1, max_length=8, **grouped)
    with caplog.at_level("INFO", logger="hf_contrast.training.run_setup"):
        trainer = SimCLRTrainer(model=tiny_text_encoder(), args=args, train_dataset=texts, eval_dataset=mine)
    tokens = trainer.processing_class(list(texts["text"]), truncation=True, max_length=8)["input_ids"]
    lengths = list(trainer.train_dataset["length"])
    assert lengths == [len(ids) for ids in tokens] and min(lengths) < 8 == max(lengths)  # truncated as the collator
    assert trainer.eval_dataset is mine and "the token length of every row of train_dataset" in caplog.text
    assert "Token lengths" not in capfd.readouterr().err  # `disable_tqdm=True` (these arguments) silences its bar
    if strategy == "group_by_length":  # the Trainer orders the evaluation sets too: measured as well
        other = SimCLRTrainer(model=tiny_text_encoder(), args=args, train_dataset=mine, eval_dataset={"held": texts})
        assert list(other.eval_dataset["held"]["length"]) == lengths and other.train_dataset is mine
    trainer.train()
    assert "eval_loss" in trainer.state.log_history[-2]
    # a set given to evaluate / predict (ordered by length under "group_by_length") is measured as the trainer's own
    with caplog.at_level("INFO", logger="hf_contrast.training.run_setup"):
        assert np.isfinite(trainer.evaluate(eval_dataset=texts.select(range(8)))["eval_loss"])
        assert np.isfinite(trainer.predict(texts.select(range(4, 12))).metrics["test_loss"])
    if strategy == "group_by_length":
        assert "of the `eval_dataset` given" in caplog.text and "of the `test_dataset` given" in caplog.text


@pytest.mark.parametrize("strategy", ["group_by_length", "sequential"])
def test_a_training_order_the_run_cannot_follow_is_refused(model, images, tmp_path, strategy) -> None:
    """SimO draws its own class-major batches: any other order was ignored without a word. Image rows have no
    length to group by (the Trainer stopped train())."""
    ordered = _ordered(strategy)
    with pytest.raises(InputError, match=r"would be ignored: SimOObjective draws its own training batches"):
        SimOTrainer(
            model=model, args=training_args(tmp_path, per_device_train_batch_size=8, **ordered),
            train_dataset=_small_class_images(),
            objective=SimOObjective(classes_per_batch=2, samples_per_class=4, replacement=True),
        )  # fmt: skip
    if strategy == "group_by_length":
        with pytest.raises(InputError, match=r"groups rows of similar token length; image rows have none"):
            SimCLRTrainer(model=model, args=training_args(tmp_path, **ordered), train_dataset=images)
    else:  # an order an image run follows
        trainer = SimCLRTrainer(
            model=model, args=training_args(tmp_path, max_steps=1, **ordered), train_dataset=images
        )
        trainer.train()


def test_simo_gathered_over_processes_is_checked_for_the_batch_the_loss_sees(model, tmp_path, monkeypatch) -> None:
    """With `gather_distributed=True` on 2 processes SimO scores the 2 processes' batches as one: C = 3 classes per
    process make 6 of 10 classes, against the paper's fewer-than-half (refused, naming the flag); with
    `on_bad_image='skip'` a process could shrink its class groups, which a joint batch cannot take (refused)."""
    from hf_contrast.training import ContrastiveTrainingArguments

    monkeypatch.setattr(ContrastiveTrainingArguments, "world_size", property(lambda self: 2))  # as if launched on 2
    data = image_dataset(n=60, size=16, labels=[c for c in range(10) for _ in range(6)])
    build = lambda c, **args: SimOTrainer(  # noqa: E731
        model=model, args=training_args(tmp_path, per_device_train_batch_size=2 * c, gather_distributed=True, **args),
        train_dataset=data, objective=SimOObjective(classes_per_batch=c, samples_per_class=2),
    )  # fmt: skip
    with pytest.raises(InputError) as raised:
        build(3)
    said = str(raised.value)
    assert "`classes_per_batch`=3 × `distinct_across`=2 = 6 classes, in 2 batches scored as one" in said
    assert "use `classes_per_batch` ≤ 2" in said and "`gather_distributed=True` on 2 processes" in said
    with pytest.raises(InputError, match=r"`on_bad_image='skip'` would shrink the groups"):
        build(2, on_bad_image="skip")
    trainer = build(2)
    assert trainer.objective.train_batch_sampler(data, trainer.views).distinct_across == 2
    assert trainer.objective.loss.gather_distributed


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    objective=st.sampled_from(["simclr", "supcon", "ocl"]),
    dropped=st.sets(st.sampled_from(["image", "label"])),
    where=st.sampled_from(["built", "evaluate", "predict"]),
)
def test_an_evaluation_set_without_the_columns_its_evaluation_reads_is_refused_before_its_first_batch(
    objective, dropped, where, model, tmp_path
) -> None:
    """An evaluation set without its image column, or without labels where the objective's ``eval_loss`` compares by
    class (SupCon, OCL), stopped training at the first evaluation (the collator's "`image_column`='image' is not a
    column", the objective's "needs class labels"); one given to ``evaluate`` or ``predict`` stopped at its first
    batch, and one with labels outside LOCAL's classifier told a trainer's user to build ``LOCALLoss``. Each is now
    refused by the trainer's own checks, naming the set; a set its evaluation can read still evaluates."""
    data = image_dataset(n=16, size=16).add_column("id", list(range(16)))  # a set without both keeps its rows
    bad = data.remove_columns(sorted(dropped)) if dropped else data.select(range(16))  # a new object either way
    args = training_args(tmp_path, per_device_train_batch_size=8, eval_strategy="steps", eval_steps=1)
    refused = "image" in dropped or ("label" in dropped and objective != "simclr")
    name = {"built": "eval_dataset", "evaluate": "eval_dataset", "predict": "test_dataset"}[where]
    said = rf"^`{name}` has no " + (
        "column of 'image'" if "image" in dropped else r"`label_column`='label' .*`eval_loss` compares"
    )
    build = lambda evaluation: ContrastiveTrainer(  # noqa: E731
        model=model, args=args, train_dataset=data, eval_dataset=evaluation, objective=objective
    )
    if where == "built":
        if refused:
            with pytest.raises(InputError, match=said):
                build(bad)
        else:
            build(bad)
        return
    trainer = build(data)
    run = (lambda: trainer.evaluate(eval_dataset=bad)) if where == "evaluate" else (lambda: trainer.predict(bad))
    if refused:
        with pytest.raises(InputError, match=said) as error:
            run()
        labels_only = "image" not in dropped
        assert ("encode_dataset(trainer.model, dataset)" in str(error.value)) == (labels_only and where == "predict")
    else:
        metrics = run() if where == "evaluate" else run().metrics
        prefix = "eval" if where == "evaluate" else "test"
        assert np.isfinite(metrics[f"{prefix}_loss"])


def test_labels_outside_the_classifier_given_to_evaluate_name_the_objective_option(tmp_path) -> None:
    """LOCAL trained on classes 0..1 and evaluated on a set holding class 2 said "build `LOCALLoss` with
    `num_classes`", a class a trainer's user never builds; it is refused before the first batch as the trainer's own
    evaluation sets are."""
    pairs = lambda labels: datasets.Dataset.from_dict(  # noqa: E731
        {"image_pre": image_dataset(n=len(labels), size=16)["image"], "label": labels}
    ).map(lambda row: {"image_post": row["image_pre"]})
    trainer = ContrastiveTrainer(
        model=vit_encoder(),
        args=training_args(tmp_path, per_device_train_batch_size=8),
        train_dataset=pairs([0, 1] * 8),
        eval_dataset=pairs([0, 1] * 4),
        objective="local",
    )
    with pytest.raises(InputError, match=re.escape("`eval_dataset`'s `label_column`='label' holds the labels [2]")):
        trainer.evaluate(eval_dataset=pairs([0, 1, 2, 1] * 2))
    with pytest.raises(InputError, match="`predict` would fail on it"):
        trainer.predict(pairs([0, 1, 2, 1] * 2))
    assert np.isfinite(trainer.evaluate(eval_dataset=pairs([1, 0] * 4))["eval_loss"])
