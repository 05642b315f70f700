"""Text views: SimCSE views and CARE's chunk-shared token augmentations."""

from __future__ import annotations

import pytest
import torch

from hf_contrast.views import ChunkedTextAugmentation, simcse_views

PAD, CLS, SEP, MASK = 0, 101, 102, 103
SPECIAL = (PAD, CLS, SEP, MASK)
INSERT_IDS = range(200, 260)


def _batch(lengths: list[int], width: int = 12, seed: int = 0, left_pad: bool = False) -> dict[str, torch.Tensor]:
    """[CLS] t_1 .. t_n [SEP] [PAD]...; token ids 1000 + 10·row + position keep every token traceable."""
    rows, masks = [], []
    for i, n in enumerate(lengths):
        tokens = [CLS] + [1000 + 10 * i + j for j in range(n)] + [SEP]
        pad = [PAD] * (width - len(tokens))
        rows.append(pad + tokens if left_pad else tokens + pad)
        masks.append([0] * len(pad) + [1] * len(tokens) if left_pad else [1] * len(tokens) + [0] * len(pad))
    return {"input_ids": torch.tensor(rows), "attention_mask": torch.tensor(masks)}


def _aug(n_splits: int, ops: tuple[str, ...], seed: int = 0, **kwargs: object) -> ChunkedTextAugmentation:
    return ChunkedTextAugmentation(
        n_splits,
        ops=ops,
        mask_token_id=MASK,
        insert_token_ids=INSERT_IDS,
        special_token_ids=SPECIAL,
        pad_token_id=PAD,
        generator=torch.Generator().manual_seed(seed),
        **kwargs,
    )


def _texts(view: dict[str, torch.Tensor]) -> list[list[int]]:
    """The tokens between [CLS] and [SEP] of each row, checking the layout on the way."""
    out = []
    for ids, mask in zip(view["input_ids"].tolist(), view["attention_mask"].tolist()):
        n_tokens = sum(mask)
        assert mask == [1] * n_tokens + [0] * (len(mask) - n_tokens)  # right-padded, contiguous
        assert ids[n_tokens:] == [PAD] * (len(ids) - n_tokens)
        assert ids[0] == CLS and ids[n_tokens - 1] == SEP and CLS not in ids[1 : n_tokens - 1]
        out.append(ids[1 : n_tokens - 1])
    return out


def _reference(op: str, tokens: list[int], r: float, token: int, span_fraction: float) -> list[int]:
    """Loop reference of one op on one sentence, written from the class docstring."""
    n = len(tokens)
    if n == 0:
        return tokens
    if op == "delete":
        return tokens if n < 2 else tokens[: int(r * n)] + tokens[int(r * n) + 1 :]
    if op == "insert":
        p = min(int(r * (n + 1)), n)
        return tokens[:p] + [token] + tokens[p:]
    span = min(max(1, round(span_fraction * n)), n)
    start = int(r * (n - span + 1))
    return tokens[:start] + [MASK] * span + tokens[start + span :]


LENGTHS = [7, 3, 10, 1, 5, 6, 0, 9]  # includes a 1-token and an empty sentence


@pytest.mark.parametrize("op", ["delete", "insert", "mask"])
def test_each_op_matches_reference_with_shared_relative_parameters(op: str) -> None:
    """Replay the drawn (op, r, token) per chunk and compare every sample with the loop reference."""
    batch = _batch(LENGTHS)
    v1, v2_ = _aug(4, (op,), seed=3, span_fraction=0.3)(batch)
    replay = _aug(4, (op,), seed=3, span_fraction=0.3)  # same generator seed: same draws, in order
    originals = _texts(batch)
    for view in (v1, v2_):
        _, rel, tok = replay._draw(4)
        for i, (got, original) in enumerate(zip(_texts(view), originals)):
            c = i // 2  # chunk of sample i (8 samples, 4 chunks)
            assert got == _reference(op, original, float(rel[c]), int(tok[c]), 0.3), (op, i)


def test_shared_within_chunk_fresh_across_chunks() -> None:
    """Identical sentences: rows of one chunk are augmented identically; chunks and views differ."""
    batch = _batch([12] * 32, width=16)
    for row in range(32):  # same sentence in every row
        batch["input_ids"][row] = batch["input_ids"][0]
    v1, v2_ = _aug(8, ("delete", "insert", "mask"), seed=1)(batch)
    for view in (v1, v2_):
        rows = _texts(view)
        chunks = [rows[4 * c : 4 * c + 4] for c in range(8)]
        assert all(chunk.count(chunk[0]) == 4 for chunk in chunks)  # one augmentation per chunk
        assert len({tuple(chunk[0]) for chunk in chunks}) >= 6  # fresh draws (collisions are possible but rare)
    assert _texts(v1) != _texts(v2_)  # ã1_c and ã2_c are drawn independently


def test_relative_position_is_shared_across_lengths() -> None:
    """Delete at r: sentences of length 10 and 5 lose the token at the same relative position."""
    batch = _batch([10, 5], width=14)
    aug = _aug(1, ("delete",), seed=0)
    for _ in range(10):
        rows = _texts(aug.augment(batch["input_ids"], batch["attention_mask"]))
        lost = [sorted(set(o) - set(g))[0] - (1000 + 10 * i) for i, (o, g) in enumerate(zip(_texts(batch), rows))]
        assert lost[0] // 2 == lost[1]  # floor(r·10) // 2 == floor(r·5)


def test_special_tokens_padding_and_length() -> None:
    batch = _batch(LENGTHS)
    for seed in range(5):
        v1, v2_ = _aug(2, ("delete", "insert", "mask"), seed=seed)(batch)
        for view in (v1, v2_):
            rows = _texts(view)  # checks [CLS]/[SEP]/padding/mask layout
            assert view["input_ids"].shape[1] in (12, 13) and view["attention_mask"].dtype == torch.long
            assert rows[6] == []  # empty sentence untouched
            for got, original in zip(rows, _texts(batch)):
                assert abs(len(got) - len(original)) <= 1


def test_insert_only_adds_a_column_and_delete_keeps_width() -> None:
    batch = _batch([10, 10], width=12)  # full rows: an insertion needs one more column
    assert _aug(1, ("insert",)).augment(**batch)["input_ids"].shape == (2, 13)
    assert _aug(1, ("delete",)).augment(**batch)["input_ids"].shape == (2, 12)


def test_left_padded_input_comes_back_right_padded() -> None:
    right, left = _batch([4, 7], left_pad=False), _batch([4, 7], left_pad=True)
    out_right = _aug(1, ("insert",), seed=9).augment(**right)
    out_left = _aug(1, ("insert",), seed=9).augment(**left)
    assert torch.equal(out_right["input_ids"], out_left["input_ids"])
    assert torch.equal(out_right["attention_mask"], out_left["attention_mask"])


def test_token_type_ids_and_other_columns_follow() -> None:
    batch = _batch([5, 6]) | {"token_type_ids": torch.zeros(2, 12, dtype=torch.long), "labels": torch.tensor([1, 0])}
    v1, v2_ = _aug(2, ("insert",))(batch)
    for view in (v1, v2_):
        assert view["token_type_ids"].shape == view["input_ids"].shape and not view["token_type_ids"].any()
        assert view["labels"] is batch["labels"]


def test_generator_reproducible() -> None:
    batch = _batch(LENGTHS)
    ops = ("delete", "insert", "mask")
    first, second = _aug(4, ops, seed=5)(batch), _aug(4, ops, seed=5)(batch)
    for a, b in zip(first, second):
        assert torch.equal(a["input_ids"], b["input_ids"])


def test_from_tokenizer_with_a_tiny_bert_tokenizer() -> None:
    from transformers import BertTokenizerFast

    words = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran"]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]
    tokenizer = BertTokenizerFast(vocab={token: i for i, token in enumerate(vocab)})
    aug = ChunkedTextAugmentation.from_tokenizer(tokenizer, 2, generator=torch.Generator().manual_seed(0))
    assert aug.mask_token_id == tokenizer.mask_token_id
    assert set(aug.insert_token_ids.tolist()) == set(tokenizer.convert_tokens_to_ids(words))
    sentences = ["the cat sat on the mat", "a dog ran", "the dog sat", "a cat"]
    batch = tokenizer(sentences, padding=True, return_tensors="pt")
    v1, _ = aug(dict(batch))
    decoded = tokenizer.batch_decode(v1["input_ids"], skip_special_tokens=False)
    assert all(text.startswith("[CLS]") for text in decoded)
    assert torch.equal(v1["attention_mask"].bool(), v1["input_ids"] != tokenizer.pad_token_id)


def test_simcse_views_returns_the_batch_twice() -> None:
    batch = _batch([3])
    v1, v2_ = simcse_views(batch)
    assert v1 is batch and v2_ is batch


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_splits": 0}, "`n_splits` must be an integer >= 1"),
        ({"ops": ("delete", "shuffle")}, "`ops` must be a non-empty subset"),
        ({"ops": ()}, "`ops` must be a non-empty subset"),
        ({"span_fraction": 0.0}, "`span_fraction` must be in \\(0, 1\\]"),
        ({"mask_token_id": None}, "`mask_token_id` is required"),
        ({"insert_token_ids": None}, "`insert_token_ids` is required"),
        ({"insert_token_ids": [CLS, SEP]}, "`insert_token_ids` must contain at least one non-special"),
        ({"insert_token_ids": [1.5]}, "`insert_token_ids` must be a 1-D collection of int"),
    ],
)
def test_constructor_rejects_bad_arguments(kwargs: dict, match: str) -> None:
    args = {
        "n_splits": 2,
        "ops": ("delete", "insert", "mask"),
        "mask_token_id": MASK,
        "insert_token_ids": INSERT_IDS,
        "special_token_ids": SPECIAL,
    } | kwargs
    n_splits = args.pop("n_splits")
    with pytest.raises(ValueError, match=match):
        ChunkedTextAugmentation(n_splits, **args)


@pytest.mark.parametrize(
    ("batch", "match"),
    [
        (_batch([3, 4, 5]), "batch size 3 must be a positive multiple of `n_splits`=2"),
        ({"input_ids": torch.ones(2, 4)}, "mapping with 'input_ids' and 'attention_mask'"),
        ({"input_ids": torch.ones(2, 4), "attention_mask": torch.ones(2, 4)}, "`input_ids` must be an int tensor"),
        (
            {"input_ids": torch.ones(2, 4, dtype=torch.long), "attention_mask": torch.ones(2, 5)},
            "`attention_mask` must be a tensor of the shape of `input_ids`",
        ),
        (
            _batch([3, 4]) | {"special_tokens_mask": torch.zeros(2, 12)},
            "`batch\\['special_tokens_mask'\\]` is aligned",
        ),
    ],
)
def test_call_rejects_bad_batches(batch: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        _aug(2, ("delete",))(batch)
