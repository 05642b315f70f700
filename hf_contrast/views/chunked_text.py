"""Text views: SimCSE dropout views and CARE's chunk-shared token augmentations.

* SimCSE (https://arxiv.org/abs/2104.08821) needs no augmentation: the same batch goes through
  the encoder twice with dropout on (``model.train()``), and the two dropout masks make the two
  views. :func:`simcse_views` only spells that out.
* CARE on text (docs/methods.md §4, "Text"; https://arxiv.org/abs/2306.13924): the batch is cut into
  ``n_splits`` chunks and each chunk draws ONE token-level augmentation per view -- delete the
  token at the same *relative* position of every sentence, insert the same token at the same
  relative position, or mask the same relative span -- so that, as for images, one augmentation
  acts on all samples of a chunk. :class:`ChunkedTextAugmentation` works on tokenized, padded
  batches and is vectorised over the whole batch (no Python loop over samples or chunks).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

import torch
from torch import Tensor

from hf_contrast.errors import InputError
from hf_contrast.tensor_checks import check_int, check_number

__all__ = ["simcse_views", "ChunkedTextAugmentation"]

_B = TypeVar("_B")
_DELETE, _INSERT, _MASK = 0, 1, 2
_OP_CODES = {"delete": _DELETE, "insert": _INSERT, "mask": _MASK}
#: The largest token id: ids are int64 tensors.
MAX_TOKEN_ID = 2**63 - 1


def simcse_views(batch: _B) -> tuple[_B, _B]:
    """SimCSE's two views of a batch: the batch itself, twice.

    The views differ only through dropout, so encode both with the model in training mode
    (two forward passes, or one pass on the batch repeated along dim 0).

    Args:
        batch: A tokenized batch (any object).

    Returns:
        ``(batch, batch)`` (the same object twice, not copies).
    """
    return batch, batch


def _as_id_tensor(name: str, ids: Iterable[int] | Tensor) -> Tensor:
    """``ids`` (a tensor, a ``range`` or any iterable of int token ids) as a 1-D int64 tensor of ids >= 0."""
    expected = f"`{name}` must be a 1-D collection of int token ids >= 0"
    if isinstance(ids, (str, bytes)) or not isinstance(ids, (Tensor, Iterable)):
        raise InputError(f"{expected}, got {ids!r} of type {type(ids).__name__}.")
    try:
        tensor = ids if isinstance(ids, Tensor) else torch.as_tensor(list(ids))
    except (TypeError, ValueError, RuntimeError, OverflowError) as error:
        raise InputError(f"{expected}, got {ids!r} ({error}).") from error
    if tensor.ndim != 1 or (tensor.numel() > 0 and (tensor.is_floating_point() or tensor.is_complex())):
        raise InputError(f"{expected}, got {tensor.dtype} of shape {tuple(tensor.shape)}.")
    if tensor.dtype == torch.bool or (tensor.numel() > 0 and bool(tensor.min() < 0)):  # int64: none above MAX_TOKEN_ID
        raise InputError(f"{expected}, got {tensor.tolist()[:8]}.")
    return tensor.long()


class ChunkedTextAugmentation:
    """Chunk-shared token-level augmentations of a tokenized batch (CARE on BERT).

    Paper: https://arxiv.org/abs/2306.13924 (Algorithm 1), docs/methods.md §4 "Text". The batch is cut
    into ``n_splits`` consecutive chunks. For each view and each chunk, ONE operation from
    ``ops`` and ONE set of parameters are drawn -- a relative position ``r ∈ [0, 1)`` and, for
    ``"insert"``, a token id -- and applied to every sample of the chunk:

    * ``"delete"``: remove the real token at index ``floor(r·n)`` (``n`` = the sample's number of
      real tokens, i.e. attended and not special). Samples with ``n < 2`` are left unchanged so
      that no sentence becomes empty.
    * ``"insert"``: insert the drawn token before real token ``floor(r·(n+1))`` (after the last
      one when that index is ``n``).
    * ``"mask"``: replace the real tokens ``[s, s+len)`` by ``mask_token_id``, with
      ``len = max(1, round(span_fraction·n))`` and ``s = floor(r·(n-len+1))``.

    Samples with no real token are left unchanged. Special tokens ([CLS], [SEP], ...) never move
    relative to the text and are never deleted or masked. Each view draws its own operations
    (``ã1_c`` and ``ã2_c``), so the two views of a chunk differ. The ops act on tokens
    (word pieces), not whole words.

    Output layout: right-padded with ``pad_token_id``; ``attention_mask`` marks the kept tokens.
    The length is ``L + 1`` when some chunk of the view drew ``"insert"`` and ``L`` otherwise,
    decided from the (CPU-drawn) operations so that no device synchronisation is needed; a
    trailing all-padding column may therefore remain. Inputs may be right- or left-padded.

    Randomness: parameters come from ``generator`` if given, else from torch's global CPU
    generator (``torch.manual_seed`` makes runs reproducible).

    Args:
        n_splits: Number of chunks ``S``; it must divide the batch size.
        ops: Operations to draw from, uniformly, a non-empty subset of
            ``("delete", "insert", "mask")``.
        mask_token_id: Id used by ``"mask"`` (required when ``"mask"`` is in ``ops``).
        insert_token_ids: Candidate ids for ``"insert"`` (a ``range`` of the vocabulary or a list);
            special ids are removed from it. Required when ``"insert"`` is in ``ops``.
        special_token_ids: Ids that are never deleted, masked or counted as text.
        pad_token_id: Id written in padding positions of the output.
        span_fraction: Fraction of the real tokens covered by a mask span, in ``(0, 1]``.
        generator: Optional CPU ``torch.Generator`` for the parameter draws.

    Raises:
        ValueError: on an invalid ``n_splits``, ``ops``, ``span_fraction``, token id (ids are integers >= 0) or
            ``generator``, or a missing or empty ``mask_token_id`` / ``insert_token_ids`` for an op that needs it.

    >>> aug = ChunkedTextAugmentation(2, ops=("mask",), mask_token_id=103, special_token_ids=[0, 101, 102])
    >>> ids = torch.tensor([[101, 7, 8, 9, 102], [101, 5, 6, 102, 0]])
    >>> v1, v2_ = aug({"input_ids": ids, "attention_mask": (ids != 0).long()})
    >>> v1["input_ids"].shape
    torch.Size([2, 5])
    """

    def __init__(
        self,
        n_splits: int,
        *,
        ops: Sequence[str] = ("delete", "insert", "mask"),
        mask_token_id: int | None = None,
        insert_token_ids: Iterable[int] | Tensor | None = None,
        special_token_ids: Iterable[int] | Tensor = (),
        pad_token_id: int = 0,
        span_fraction: float = 0.1,
        generator: torch.Generator | None = None,
    ) -> None:
        check_int("n_splits", n_splits, 1)
        expected_ops = f"`ops` must be a non-empty subset of {tuple(_OP_CODES)} without repeats"
        if isinstance(ops, Tensor) or not isinstance(ops, (str, Iterable)):
            raise InputError(f"{expected_ops}, got {ops!r}.")
        ops = tuple(ops) if not isinstance(ops, str) else (ops,)
        unknown = [op for op in ops if not isinstance(op, str) or op not in _OP_CODES]
        if not ops or unknown or len(set(ops)) != len(ops):
            raise InputError(f"{expected_ops}, got {ops!r}.")
        span_fraction = check_number("span_fraction", span_fraction)
        if not 0.0 < span_fraction <= 1.0:
            raise InputError(f"`span_fraction` must be in (0, 1], got {span_fraction}.")
        check_int("mask_token_id", mask_token_id, 0, MAX_TOKEN_ID, allow_none=True)
        check_int("pad_token_id", pad_token_id, 0, MAX_TOKEN_ID)
        if "mask" in ops and mask_token_id is None:
            raise InputError("`mask_token_id` is required when 'mask' is in `ops` (e.g. tokenizer.mask_token_id).")
        special = _as_id_tensor("special_token_ids", special_token_ids)
        inserts = None
        if "insert" in ops:
            if insert_token_ids is None:
                raise InputError(
                    "`insert_token_ids` is required when 'insert' is in `ops` (e.g. range(tokenizer.vocab_size))."
                )
            inserts = _as_id_tensor("insert_token_ids", insert_token_ids)
            inserts = inserts[~torch.isin(inserts, special)]
            if inserts.numel() == 0:
                raise InputError("`insert_token_ids` must contain at least one non-special token id, got none.")
        if generator is not None and not isinstance(generator, torch.Generator):
            raise InputError(f"`generator` must be a CPU torch.Generator or None, got {generator!r}.")
        if generator is not None and generator.device.type != "cpu":
            raise InputError(f"`generator` must be a CPU torch.Generator, got one on {generator.device}.")
        self.n_splits = n_splits
        self.ops = ops
        self.mask_token_id = None if mask_token_id is None else int(mask_token_id)
        self.insert_token_ids = inserts
        self.special_token_ids = special
        self.pad_token_id = int(pad_token_id)
        self.span_fraction = float(span_fraction)
        self.generator = generator
        self._op_codes = torch.tensor([_OP_CODES[op] for op in ops])

    @classmethod
    def from_tokenizer(cls, tokenizer: Any, n_splits: int, **kwargs: Any) -> ChunkedTextAugmentation:
        """Build from a ``transformers`` tokenizer (mask, pad and special ids, insertable vocabulary).

        Args:
            tokenizer: A ``PreTrainedTokenizerBase``.
            n_splits: Number of chunks.
            **kwargs: Other constructor arguments; they win over the tokenizer's values.

        Returns:
            The augmentation.
        """
        kwargs.setdefault("mask_token_id", tokenizer.mask_token_id)
        kwargs.setdefault("special_token_ids", tokenizer.all_special_ids)
        kwargs.setdefault("insert_token_ids", range(len(tokenizer)))
        if tokenizer.pad_token_id is not None:
            kwargs.setdefault("pad_token_id", tokenizer.pad_token_id)
        return cls(n_splits, **kwargs)

    def _draw(self, n_chunks: int) -> tuple[Tensor, Tensor, Tensor]:
        """Per chunk: an op code, a relative position in [0, 1) and an insert token (CPU)."""
        op = self._op_codes[torch.randint(len(self.ops), (n_chunks,), generator=self.generator)]
        rel = torch.rand(n_chunks, generator=self.generator, dtype=torch.float64)
        if self.insert_token_ids is not None:
            pick = torch.randint(self.insert_token_ids.numel(), (n_chunks,), generator=self.generator)
            token = self.insert_token_ids[pick]
        else:
            token = torch.zeros(n_chunks, dtype=torch.long)
        return op, rel, token

    def _check(self, batch: Mapping[str, Any]) -> tuple[Tensor, Tensor, Tensor | None]:
        if not isinstance(batch, Mapping) or "input_ids" not in batch or "attention_mask" not in batch:
            raise InputError(
                "`batch` must be a mapping with 'input_ids' and 'attention_mask' tensors of shape (B, L)."
            )
        ids, am = batch["input_ids"], batch["attention_mask"]
        tt = batch.get("token_type_ids")
        if not isinstance(ids, Tensor) or ids.ndim != 2 or ids.is_floating_point() or ids.dtype == torch.bool:
            got = f"{ids.dtype} of shape {tuple(ids.shape)}" if isinstance(ids, Tensor) else type(ids).__name__
            raise InputError(f"`input_ids` must be an int tensor of shape (B, L), got {got}.")
        for name, value in (("attention_mask", am), ("token_type_ids", tt)):
            if value is not None and (not isinstance(value, Tensor) or value.shape != ids.shape):
                got = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
                raise InputError(
                    f"`{name}` must be a tensor of the shape of `input_ids` {tuple(ids.shape)}, got {got}."
                )
        batch_size, length = ids.shape
        if batch_size == 0 or length == 0 or batch_size % self.n_splits != 0:
            raise InputError(
                f"`input_ids` batch size {batch_size} must be a positive multiple of `n_splits`={self.n_splits} "
                f"(and L={length} > 0)."
            )
        for key, value in batch.items():
            if (
                key not in ("input_ids", "attention_mask", "token_type_ids")
                and isinstance(value, Tensor)
                and value.shape[:2] == ids.shape
            ):
                raise InputError(
                    f"`batch[{key!r}]` is aligned with the tokens (shape {tuple(value.shape)}) and cannot follow the "
                    f"insertions/deletions; drop it before augmenting."
                )
        return ids, am, tt

    def augment(
        self,
        input_ids: Tensor,
        attention_mask: Tensor,
        token_type_ids: Tensor | None = None,
    ) -> dict[str, Tensor]:
        """Draw one view: one op and parameter set per chunk, applied to all its samples.

        Args:
            input_ids: Token ids. Shape: ``(B, L)``, ``B`` divisible by ``n_splits``.
            attention_mask: 1 on tokens, 0 on padding. Shape: ``(B, L)``.
            token_type_ids: Optional segment ids (inserted tokens take their neighbour's).
                Shape: ``(B, L)``.

        Returns:
            ``{"input_ids", "attention_mask"[, "token_type_ids"]}``. Shape: ``(B, L')`` each,
            ``L' ∈ {L, L + 1}``.

        Raises:
            ValueError: on a malformed batch (see :meth:`__call__`).
        """
        batch = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None:
            batch["token_type_ids"] = token_type_ids
        ids, am, tt = self._check(batch)
        return self._augment(ids, am, tt)

    def _augment(self, ids: Tensor, am: Tensor, tt: Tensor | None) -> dict[str, Tensor]:
        device = ids.device
        batch_size, length = ids.shape
        chunk = batch_size // self.n_splits
        op_c, rel_c, tok_c = self._draw(self.n_splits)
        any_insert = bool((op_c == _INSERT).any())  # CPU tensor: no device sync
        op = op_c.repeat_interleave(chunk).to(device)
        rel = rel_c.repeat_interleave(chunk).to(device)
        tok = tok_c.repeat_interleave(chunk).to(device=device, dtype=ids.dtype)

        pos = torch.arange(length, device=device)
        attended = am.bool()
        real = attended & ~torch.isin(ids, self.special_token_ids.to(device))
        n = real.sum(dim=1)  # (B,) number of real tokens
        ridx = real.long().cumsum(dim=1) - 1  # index among real tokens, valid where `real`

        # delete: the real token at floor(r·n), only when n >= 2
        p_del = torch.minimum((rel * n).floor().long(), (n - 1).clamp(min=0))
        delete = (op == _DELETE) & (n >= 2)
        deleted = real & (ridx == p_del[:, None]) & delete[:, None]

        # mask: real tokens [s, s+len) with len = max(1, round(f·n)), s = floor(r·(n-len+1))
        span = torch.minimum((self.span_fraction * n).round().long().clamp(min=1), n)
        start = (rel * (n - span + 1)).floor().long()
        in_span = (ridx >= start[:, None]) & (ridx < (start + span)[:, None])
        masked = real & in_span & ((op == _MASK) & (n >= 1))[:, None]
        if self.mask_token_id is not None:
            ids = torch.where(masked, torch.as_tensor(self.mask_token_id, dtype=ids.dtype, device=device), ids)

        # insert before real token p = floor(r·(n+1)) (after the last real token when p == n)
        p_ins = torch.minimum((rel * (n + 1)).floor().long(), n)
        anchor = torch.where(p_ins == 0, 0, p_ins - 1)
        anchor_pos = torch.where(real & (ridx == anchor[:, None]), pos, length).amin(dim=1)
        q = torch.where(p_ins == 0, anchor_pos, anchor_pos + 1)  # insertion slot in the output
        insert = (op == _INSERT) & (n >= 1)

        # one extra column; each row reads its source column (shifted right after an insertion)
        out_pos = torch.arange(length + 1, device=device)
        after = insert[:, None] & (out_pos[None] > q[:, None])
        src = (out_pos[None] - after.long()).clamp(max=length - 1)
        new = insert[:, None] & (out_pos[None] == q[:, None])
        keep = (attended & ~deleted).gather(1, src) & ~(~insert[:, None] & (out_pos[None] == length))
        keep = keep | new
        ext_ids = torch.where(new, tok[:, None], ids.gather(1, src))

        # compact the kept tokens to the left (stable: order preserved), pad on the right
        order = torch.argsort((~keep).to(torch.int8), dim=1, stable=True)
        keep = keep.gather(1, order)
        width = length + 1 if any_insert else length
        keep = keep[:, :width]
        out_ids = torch.where(keep, ext_ids.gather(1, order)[:, :width], self.pad_token_id)
        out = {"input_ids": out_ids, "attention_mask": keep.to(am.dtype)}
        if tt is not None:
            out["token_type_ids"] = torch.where(keep, tt.gather(1, src).gather(1, order)[:, :width], 0)
        return out

    def __call__(self, batch: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """Return the two chunk-augmented views of a tokenized batch.

        Args:
            batch: A mapping with ``input_ids`` and ``attention_mask`` (and optionally
                ``token_type_ids``), each of shape ``(B, L)``; other entries (e.g. ``labels`` of
                shape ``(B,)``) are copied to both views unchanged.

        Returns:
            ``(view1, view2)``: copies of ``batch`` whose token tensors are replaced; rows
            ``c*m:(c+1)*m`` of a view share one op and parameter set. Shape: ``(B, L')``.

        Raises:
            ValueError: if ``input_ids`` is not an int ``(B, L)`` tensor, a companion tensor has
                another shape, ``B`` is not divisible by ``n_splits``, or another entry is
                aligned with the tokens (shape ``(B, L, ...)``), which could not stay aligned.
        """
        ids, am, tt = self._check(batch)
        views = []
        for _ in range(2):
            view = dict(batch)
            view.update(self._augment(ids, am, tt))
            views.append(view)
        return views[0], views[1]

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(n_splits={self.n_splits}, ops={self.ops}, mask_token_id={self.mask_token_id}, "
            f"span_fraction={self.span_fraction})"
        )
