"""Tiled similarity reductions: the in-batch-negative losses in memory linear in the batch.

The dense losses materialise the ``(N, M)`` similarity matrix of ``N`` anchors against ``M``
candidates (InfoNCE at ``B = 65,536``: a ``131,072²`` float32 matrix, 64 GiB, several times over
for autograd). Following Inf-CL (Cheng et al. 2024, "Breaking the Memory Barrier: Near Infinite
Batch Size Scaling for Contrastive Loss", https://arxiv.org/abs/2410.17243), the functions below
walk over square ``tile × tile`` blocks of that matrix, reduce each block at once (an online,
max-subtracted log-sum-exp, or a plain sum) and keep only per-row statistics. Their backward is
a custom :class:`torch.autograd.Function` that *recomputes* each block from the inputs and the
saved per-row log-sum-exp, so nothing of size ``N × M`` is ever stored:

- peak memory ``O((N + M)·D + tile²)`` (inputs, their gradients, a few blocks);
- compute: one extra block matmul (the recomputation) on top of the dense form's three;
  on one process the similarity matrix of the anchors with themselves is symmetric, and
  :func:`tiled_symmetric_logsumexp` / :func:`tiled_symmetric_uniformity_logsumexp` compute each
  off-diagonal block once for both its row block and its column block (forward), recompute it
  once for both gradient contributions (backward): two ``N²·D`` matmuls in all, fewer than the
  dense form's three. Under ``gather_distributed=True`` (local rows × gathered columns, not
  symmetric) the losses use the general :func:`tiled_row_logsumexp` /
  :func:`tiled_uniformity_logsumexp`;
- no host synchronisation (the loops run over Python integers known from the shapes), so the
  same code runs on CPU and accelerators.

Every function takes the *already scaled* anchors (``z / τ``) so that gradients with respect to
a learnable temperature flow through ordinary autograd outside the tiles. They compute in the
dtype of their inputs (the callers cast to float32, or keep float64) with autocast disabled, in
the forward and in the backward.

Which path runs: :func:`resolve_tile_size` (``tile_size=None`` tiles above
:data:`AUTO_TILE_MIN_LOGITS` similarities, with :data:`DEFAULT_TILE_SIZE` on CPU and
:data:`ACCELERATOR_TILE_SIZE` on GPUs and other accelerators; ``0`` forces the dense form; a
positive integer forces tiles of that size).
"""

from __future__ import annotations

import torch
from torch import Tensor

from hf_contrast.errors import InputError

__all__ = [
    "DEFAULT_TILE_SIZE",
    "ACCELERATOR_TILE_SIZE",
    "AUTO_TILE_MIN_LOGITS",
    "check_tile_size",
    "checked_tile_size",
    "resolve_tile_size",
    "tiled_row_logsumexp",
    "tiled_symmetric_logsumexp",
    "tiled_uniformity_logsumexp",
    "tiled_symmetric_uniformity_logsumexp",
    "tiled_binary_nce_sum",
]

#: Tile edge on CPU when ``tile_size=None`` selects the tiled path: a ``1024²`` float32 block is
#: 4 MiB (cache-friendly), a few of them live at once; the per-block Python overhead is small.
#: Measured (InfoNCE, B = 16,384, one thread): tiles of 512 / 1024 / 2048 / 4096 took
#: 6.4 / 6.6 / 9.4 / 14.1 s. On an oversubscribed CPU (more busy threads than cores) every
#: multi-threaded op waits for its threads to be scheduled and larger tiles (fewer ops) win
#: instead (2 threads on a 2-core machine at load ~10: 70 / 61 / 21 / 17 s): docs/benchmarks/tiled.md.
DEFAULT_TILE_SIZE = 1024
#: Tile edge on accelerators (CUDA, ...) when ``tile_size=None`` tiles: each block is a handful of
#: kernel launches, so larger blocks (64 MiB in float32) keep the GPU busy; at ``B = 4096``,
#: ``1024`` was 10× the dense time on an H100, ``4096`` about 2× (docs/benchmarks/tiled.md;
#: measured with the general form, before the symmetric one halved the matmuls of one process).
ACCELERATOR_TILE_SIZE = 4096
#: ``tile_size=None`` tiles when the similarity matrix has more than this many entries
#: (``8192²`` = 67 M, a 256 MiB float32 matrix: InfoNCE above ``B = 4096``, SupCon/OCL above
#: ``N = 8192``, uniformity and binary NCE above ``B = 8192``). Below it the dense form's memory
#: stays under ~1 GiB (InfoNCE at ``B = 4096``: 779 MiB on CPU) and it is the faster one.
AUTO_TILE_MIN_LOGITS = 8192 * 8192


def check_tile_size(tile_size: object) -> int | None:
    """Validate a ``tile_size`` argument: ``None`` (automatic), ``0`` (dense) or a positive int."""
    if tile_size is None:
        return None
    if isinstance(tile_size, bool) or not isinstance(tile_size, int) or tile_size < 0:
        raise InputError(
            f"`tile_size` must be None (tile automatically above {AUTO_TILE_MIN_LOGITS} similarities), "
            f"0 (always the dense form) or a positive integer (the tile edge), got {tile_size!r}."
        )
    return int(tile_size)


def checked_tile_size(name: str, tile_size: object) -> int | None:
    """:func:`check_tile_size` as a hyperparameter check ``(name, value)``."""
    return check_tile_size(tile_size)


def resolve_tile_size(tile_size: int | None, n_rows: int, n_cols: int, device_type: str = "cpu") -> int:
    """The tile edge to use for an ``(n_rows, n_cols)`` similarity matrix; ``0`` means dense.

    >>> resolve_tile_size(None, 8192, 8192), resolve_tile_size(None, 16384, 16384), resolve_tile_size(64, 8, 8)
    (0, 1024, 64)
    >>> resolve_tile_size(None, 16384, 16384, "cuda")
    4096
    """
    tile_size = check_tile_size(tile_size)
    if tile_size is None:
        if n_rows * n_cols <= AUTO_TILE_MIN_LOGITS:
            return 0
        return DEFAULT_TILE_SIZE if device_type == "cpu" else ACCELERATOR_TILE_SIZE
    return tile_size


def _self_index(r0: int, r1: int, c0: int, c1: int, offset: int, device: torch.device) -> tuple[Tensor, Tensor] | None:
    """Block-local ``(rows, cols)`` of the anchors' own columns (column ``offset + i`` for row ``i``)."""
    lo, hi = max(r0, c0 - offset), min(r1, c1 - offset)
    if lo >= hi:
        return None
    rows = torch.arange(lo - r0, hi - r0, device=device)
    return rows, rows + (r0 + offset - c0)


def _blocks(n: int, tile: int) -> list[tuple[int, int]]:
    return [(start, min(start + tile, n)) for start in range(0, n, tile)]


# --------------------------------------------------------------------------------------------
# InfoNCE / SupCon / OCL: per-row log-sum-exp over the candidates except the anchor itself
# --------------------------------------------------------------------------------------------
def _contrastive_block(
    a: Tensor,
    c: Tensor,
    ya: Tensor | None,
    yc: Tensor | None,
    abs_negatives: bool,
    self_idx: tuple[Tensor, Tensor] | None,
    pos_sum: Tensor | None = None,
    want_sign: bool = False,
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """Denominator logits ``s'`` of one block (self at -inf), its positive mask, ``ds'/ds``.

    Adds the block's positive logits to ``pos_sum`` (row-wise) when given. ``ds'/ds`` is ``1``
    on positives and ``sign(s)`` on the negatives under ``abs_negatives`` (``None`` otherwise or
    unless ``want_sign``). Works in place on the fresh matmul output: one block-sized tensor.
    """
    s = a @ c.T
    same = None
    if ya is not None and yc is not None:
        same = ya[:, None] == yc[None, :]
        if self_idx is not None:
            same[self_idx] = False
        if pos_sum is not None:
            pos_sum += torch.where(same, s, 0.0).sum(dim=1)
    sign = None
    if abs_negatives and same is not None:
        if want_sign:
            sign = torch.where(same, 1.0, torch.sign(s))
        s = torch.where(same, s, s.abs())
    if self_idx is not None:
        s[self_idx] = float("-inf")
    return s, same, sign


def _online_logsumexp_update(run_max: Tensor, run_sum: Tensor, logits: Tensor) -> Tensor:
    """Fold one block into the running row max / sum (``run_sum`` in place); returns the new max.

    Destroys ``logits``. Rows that are still all ``-inf`` keep a zero shift (no ``inf - inf``).
    """
    new_max = torch.maximum(run_max, logits.amax(dim=1))
    shift = torch.where(torch.isfinite(new_max), new_max, 0.0)
    run_sum.mul_(torch.exp(run_max - shift)).add_(logits.sub_(shift[:, None]).exp_().sum(dim=1))
    return new_max


def _finish_logsumexp(run_max: Tensor, run_sum: Tensor) -> Tensor:
    return torch.where(torch.isfinite(run_max), run_max, 0.0) + torch.log(run_sum)


class _TiledRowLogSumExp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, anchors, candidates, anchor_labels, candidate_labels, offset, abs_negatives, tile):  # type: ignore[override]
        n, m = anchors.shape[0], candidates.shape[0]
        device = anchors.device
        with torch.autocast(device_type=device.type, enabled=False):
            lse = anchors.new_empty(n)
            pos_sum = anchors.new_zeros(n)
            labelled = anchor_labels is not None
            for r0, r1 in _blocks(n, tile):
                a = anchors[r0:r1]
                ya = anchor_labels[r0:r1] if labelled else None
                run_max = anchors.new_full((r1 - r0,), float("-inf"))
                run_sum = anchors.new_zeros(r1 - r0)
                for c0, c1 in _blocks(m, tile):
                    yc = candidate_labels[c0:c1] if labelled else None
                    self_idx = _self_index(r0, r1, c0, c1, offset, device)
                    s_den, _, _ = _contrastive_block(
                        a, candidates[c0:c1], ya, yc, abs_negatives, self_idx, pos_sum=pos_sum[r0:r1]
                    )
                    run_max = _online_logsumexp_update(run_max, run_sum, s_den)
                lse[r0:r1] = _finish_logsumexp(run_max, run_sum)
        ctx.save_for_backward(anchors, candidates, anchor_labels, candidate_labels, lse)
        ctx.offset, ctx.abs_negatives, ctx.tile, ctx.labelled = offset, abs_negatives, tile, labelled
        if not labelled:
            ctx.mark_non_differentiable(pos_sum)
        return lse, pos_sum

    @staticmethod
    def backward(ctx, grad_lse, grad_pos):  # type: ignore[override]
        anchors, candidates, anchor_labels, candidate_labels, lse = ctx.saved_tensors
        n, m = anchors.shape[0], candidates.shape[0]
        device = anchors.device
        tile, labelled = ctx.tile, ctx.labelled
        with torch.autocast(device_type=device.type, enabled=False):
            grad_a = torch.zeros_like(anchors)
            grad_c = torch.zeros_like(candidates)
            g_lse = grad_lse if grad_lse is not None else anchors.new_zeros(n)
            g_pos = grad_pos if (labelled and grad_pos is not None) else None
            for r0, r1 in _blocks(n, tile):
                a = anchors[r0:r1]
                ya = anchor_labels[r0:r1] if labelled else None
                for c0, c1 in _blocks(m, tile):
                    c = candidates[c0:c1]
                    yc = candidate_labels[c0:c1] if labelled else None
                    g, same, sign = _contrastive_block(
                        a,
                        c,
                        ya,
                        yc,
                        ctx.abs_negatives,
                        _self_index(r0, r1, c0, c1, ctx.offset, device),
                        want_sign=True,
                    )
                    # d lse_i / d s'_ij = softmax_ij (0 on the anchor itself), in place.
                    g.sub_(lse[r0:r1, None]).exp_().mul_(g_lse[r0:r1, None])
                    if sign is not None:  # d|s|/ds = sign(s) on the negatives
                        g.mul_(sign)
                    if g_pos is not None:
                        g.add_(torch.where(same, g_pos[r0:r1, None], 0.0))
                    grad_a[r0:r1].addmm_(g, c)
                    grad_c[c0:c1].addmm_(g.T, a)
        return grad_a, grad_c, None, None, None, None, None


def tiled_row_logsumexp(
    anchors: Tensor,
    candidates: Tensor,
    anchor_labels: Tensor | None = None,
    candidate_labels: Tensor | None = None,
    offset: int = 0,
    abs_negatives: bool = False,
    tile_size: int = DEFAULT_TILE_SIZE,
) -> tuple[Tensor, Tensor]:
    """Per-anchor log-sum-exp over all candidates but itself, and the sum of positive logits.

    With ``s_ij = anchors_i · candidates_j`` (pass ``n(z) / τ`` as ``anchors``), the anchor's own
    column ``j = offset + i`` excluded, and "positive" meaning ``j ≠ offset + i`` with
    ``anchor_labels_i == candidate_labels_j``:

    - ``lse_i = log Σ_{j ≠ offset+i} exp(s'_ij)`` with ``s'_ij = s_ij`` for positives and, for
      the other candidates, ``|s_ij|`` if ``abs_negatives`` (OCL, the absolute value taken before
      the max-subtraction) else ``s_ij``;
    - ``pos_i = Σ_{positives j} s_ij`` (zeros, without gradient, when no labels are given).

    Memory ``O((N + M)·D + tile²)``; the backward recomputes each block.

    Args:
        anchors: Scaled anchor embeddings. Shape: ``(N, D)``.
        candidates: Candidate embeddings; ``candidates[offset:offset + N]`` are the anchors
            themselves (unscaled). Shape: ``(M, D)``.
        anchor_labels: Integer labels of the anchors, or ``None``. Shape: ``(N,)``.
        candidate_labels: Integer labels of the candidates, or ``None``. Shape: ``(M,)``.
        offset: Row of ``candidates`` at which the anchors start.
        abs_negatives: Use ``|s|`` for the non-positive candidates in the log-sum-exp (OCL).
        tile_size: Block edge, ``>= 1``.

    Returns:
        ``(lse, pos)``, each of shape ``(N,)``.
    """
    if (anchor_labels is None) != (candidate_labels is None):
        raise InputError("`anchor_labels` and `candidate_labels` must both be given or both be None.")
    if tile_size < 1:
        raise InputError(f"`tile_size` must be >= 1 for the tiled path, got {tile_size}.")
    return _TiledRowLogSumExp.apply(
        anchors, candidates, anchor_labels, candidate_labels, int(offset), bool(abs_negatives), int(tile_size)
    )


# --------------------------------------------------------------------------------------------
# Symmetric case (one process: the candidates are the anchors): each block pair once
# --------------------------------------------------------------------------------------------
def _fold_columns(run_max: Tensor, run_sum: Tensor, logits: Tensor) -> Tensor:
    """:func:`_online_logsumexp_update` along ``dim=0`` (the block's columns); keeps ``logits``."""
    new_max = torch.maximum(run_max, logits.amax(dim=0))
    shift = torch.where(torch.isfinite(new_max), new_max, 0.0)
    run_sum.mul_(torch.exp(run_max - shift)).add_((logits - shift[None, :]).exp_().sum(dim=0))
    return new_max


def _upper_blocks(n: int, tile: int) -> list[tuple[int, int, int, int]]:
    """``(r0, r1, c0, c1)`` of the diagonal and upper-triangle blocks of an ``n × n`` matrix."""
    blocks = _blocks(n, tile)
    return [(r0, r1, c0, c1) for i, (r0, r1) in enumerate(blocks) for (c0, c1) in blocks[i:]]


def _symmetric_block(
    xr: Tensor, xc: Tensor, yr: Tensor | None, yc: Tensor | None, abs_negatives: bool, diagonal: bool, want_sign: bool
) -> tuple[Tensor, Tensor | None, Tensor | None, Tensor | None]:
    """Block ``s = xr·xcᵀ`` as denominator logits (self at -inf on a diagonal block).

    Returns ``(s', same, sign, positive_logits)``: the positive mask (labels given), ``ds'/ds``
    (``abs_negatives`` and ``want_sign``) and ``where(same, s, 0)`` (labels given, forward).
    """
    s = xr @ xc.T
    same = sign = pos = None
    diag = None
    if diagonal:
        diag = torch.arange(s.shape[0], device=s.device)
    if yr is not None and yc is not None:
        same = yr[:, None] == yc[None, :]
        if diag is not None:
            same[diag, diag] = False
        if not want_sign:
            pos = torch.where(same, s, 0.0)
        if abs_negatives:
            if want_sign:
                sign = torch.where(same, 1.0, torch.sign(s))
            s = torch.where(same, s, s.abs())
    if diag is not None:
        s[diag, diag] = float("-inf")
    return s, same, sign, pos


class _TiledSymmetricLogSumExp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, labels, abs_negatives, tile):  # type: ignore[override]
        n = x.shape[0]
        labelled = labels is not None
        with torch.autocast(device_type=x.device.type, enabled=False):
            run_max = x.new_full((n,), float("-inf"))
            run_sum = x.new_zeros(n)
            pos_sum = x.new_zeros(n)
            for r0, r1, c0, c1 in _upper_blocks(n, tile):
                diagonal = r0 == c0
                s, _, _, pos = _symmetric_block(
                    x[r0:r1], x[c0:c1], labels[r0:r1] if labelled else None, labels[c0:c1] if labelled else None,
                    abs_negatives, diagonal, want_sign=False,
                )  # fmt: skip
                if pos is not None:
                    pos_sum[r0:r1] += pos.sum(dim=1)
                    if not diagonal:
                        pos_sum[c0:c1] += pos.sum(dim=0)
                if not diagonal:  # the block's columns are rows c0:c1 of the (symmetric) matrix
                    run_max[c0:c1] = _fold_columns(run_max[c0:c1], run_sum[c0:c1], s)
                run_max[r0:r1] = _online_logsumexp_update(run_max[r0:r1], run_sum[r0:r1], s)
            lse = _finish_logsumexp(run_max, run_sum)
        ctx.save_for_backward(x, labels, lse)
        ctx.abs_negatives, ctx.tile, ctx.labelled = abs_negatives, tile, labelled
        if not labelled:
            ctx.mark_non_differentiable(pos_sum)
        return lse, pos_sum

    @staticmethod
    def backward(ctx, grad_lse, grad_pos):  # type: ignore[override]
        x, labels, lse = ctx.saved_tensors
        n = x.shape[0]
        labelled = ctx.labelled
        with torch.autocast(device_type=x.device.type, enabled=False):
            grad_x = torch.zeros_like(x)
            g_lse = grad_lse if grad_lse is not None else x.new_zeros(n)
            g_pos = grad_pos if (labelled and grad_pos is not None) else None
            for r0, r1, c0, c1 in _upper_blocks(n, ctx.tile):
                diagonal = r0 == c0
                s, same, sign, _ = _symmetric_block(
                    x[r0:r1], x[c0:c1], labels[r0:r1] if labelled else None, labels[c0:c1] if labelled else None,
                    ctx.abs_negatives, diagonal, want_sign=True,
                )  # fmt: skip
                # d/ds' of the row terms (softmax of rows r0:r1) and, off the diagonal, of the
                # column terms (rows c0:c1 see the same entries transposed); one combined block.
                if diagonal:
                    h = s.sub_(lse[r0:r1, None]).exp_().mul_(g_lse[r0:r1, None])
                else:
                    h = (s - lse[None, c0:c1]).exp_().mul_(g_lse[None, c0:c1])
                    h.add_(s.sub_(lse[r0:r1, None]).exp_().mul_(g_lse[r0:r1, None]))
                if sign is not None:  # d|s|/ds = sign(s) on the negatives
                    h.mul_(sign)
                if g_pos is not None:
                    g_col = 0.0 if diagonal else g_pos[None, c0:c1]
                    h.add_(torch.where(same, g_pos[r0:r1, None] + g_col, 0.0))
                if diagonal:  # s = x_r·x_rᵀ: both factors are the same rows
                    grad_x[r0:r1].addmm_(h + h.T, x[r0:r1])
                else:
                    grad_x[r0:r1].addmm_(h, x[c0:c1])
                    grad_x[c0:c1].addmm_(h.T, x[r0:r1])
        return grad_x, None, None, None


def tiled_symmetric_logsumexp(
    x: Tensor, labels: Tensor | None = None, abs_negatives: bool = False, tile_size: int = DEFAULT_TILE_SIZE
) -> tuple[Tensor, Tensor]:
    """:func:`tiled_row_logsumexp` of ``x`` against itself, each off-diagonal block computed once.

    With ``s = x·xᵀ`` symmetric (one process: the candidates are the anchors; pass
    ``n(z) / √τ`` so that ``s = n(z)·n(z)ᵀ / τ``), block ``(I, J)`` of the upper triangle is
    computed once and folded into the online log-sum-exp of rows ``I`` (along its rows) and of
    rows ``J`` (along its columns); the backward recomputes it once and gets both gradient
    contributions from it: ``dL/dx = (G + Gᵀ)·x``. Half the block matmuls of the general form
    in the forward, half the recomputations and half the gradient matmuls in the backward; same
    values: ``lse_i = log Σ_{j≠i} exp(s'_ij)`` and ``pos_i = Σ_{j≠i, y_j = y_i} s_ij``.

    Args:
        x: Rows whose pairwise dot products are the logits. Shape: ``(N, D)``.
        labels: Integer labels (positives: same label, not self), or ``None``. Shape: ``(N,)``.
        abs_negatives: Use ``|s|`` for the non-positive pairs (OCL).
        tile_size: Block edge, ``>= 1``.

    Returns:
        ``(lse, pos)``, each of shape ``(N,)`` (``pos`` is zeros without labels).
    """
    if tile_size < 1:
        raise InputError(f"`tile_size` must be >= 1 for the tiled path, got {tile_size}.")
    return _TiledSymmetricLogSumExp.apply(x, labels, bool(abs_negatives), int(tile_size))


# --------------------------------------------------------------------------------------------
# Uniformity: per-row log-sum-exp of −t·max(‖a_i‖² + ‖c_j‖² − 2 a_i·c_j, 0), self excluded
# --------------------------------------------------------------------------------------------
def _uniformity_block(
    a: Tensor, c: Tensor, sq_a: Tensor, sq_c: Tensor, t: float, self_idx: tuple[Tensor, Tensor] | None
) -> tuple[Tensor, Tensor]:
    raw = torch.addmm(sq_a[:, None] + sq_c[None, :], a, c.T, alpha=-2.0)  # squared distances
    logits = raw.clamp_min(0.0) * -t
    if self_idx is not None:
        logits[self_idx] = float("-inf")
    return raw, logits


class _TiledUniformity(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, c, sq_a, sq_c, offset, t, tile):  # type: ignore[override]
        n, m = a.shape[0], c.shape[0]
        device = a.device
        with torch.autocast(device_type=device.type, enabled=False):
            lse = a.new_empty(n)
            for r0, r1 in _blocks(n, tile):
                run_max = a.new_full((r1 - r0,), float("-inf"))
                run_sum = a.new_zeros(r1 - r0)
                for c0, c1 in _blocks(m, tile):
                    _, logits = _uniformity_block(
                        a[r0:r1], c[c0:c1], sq_a[r0:r1], sq_c[c0:c1], t, _self_index(r0, r1, c0, c1, offset, device)
                    )
                    run_max = _online_logsumexp_update(run_max, run_sum, logits)
                lse[r0:r1] = _finish_logsumexp(run_max, run_sum)
        ctx.save_for_backward(a, c, sq_a, sq_c, lse)
        ctx.offset, ctx.t, ctx.tile = offset, t, tile
        return lse

    @staticmethod
    def backward(ctx, grad_lse):  # type: ignore[override]
        a, c, sq_a, sq_c, lse = ctx.saved_tensors
        n, m = a.shape[0], c.shape[0]
        device = a.device
        with torch.autocast(device_type=device.type, enabled=False):
            grad_a, grad_c = torch.zeros_like(a), torch.zeros_like(c)
            grad_sq_a, grad_sq_c = torch.zeros_like(sq_a), torch.zeros_like(sq_c)
            for r0, r1 in _blocks(n, ctx.tile):
                for c0, c1 in _blocks(m, ctx.tile):
                    raw, logits = _uniformity_block(
                        a[r0:r1], c[c0:c1], sq_a[r0:r1], sq_c[c0:c1], ctx.t,
                        _self_index(r0, r1, c0, c1, ctx.offset, device),
                    )  # fmt: skip
                    # d lse_i / d raw_ij = softmax_ij · (−t) where the clamp passes (raw >= 0).
                    g = logits.sub_(lse[r0:r1, None]).exp_().mul_(grad_lse[r0:r1, None] * -ctx.t)
                    g = torch.where(raw >= 0, g, 0.0)
                    grad_sq_a[r0:r1] += g.sum(dim=1)
                    grad_sq_c[c0:c1] += g.sum(dim=0)
                    grad_a[r0:r1].addmm_(g, c[c0:c1], alpha=-2.0)
                    grad_c[c0:c1].addmm_(g.T, a[r0:r1], alpha=-2.0)
        return grad_a, grad_c, grad_sq_a, grad_sq_c, None, None, None


def tiled_uniformity_logsumexp(
    a: Tensor, c: Tensor, sq_a: Tensor, sq_c: Tensor, offset: int, t: float, tile_size: int = DEFAULT_TILE_SIZE
) -> Tensor:
    """Per-row ``log Σ_{j ≠ offset+i} exp(−t·max(sq_a_i + sq_c_j − 2 a_i·c_j, 0))``.

    The log-mean-exp of the uniformity loss is ``logsumexp`` of the result minus the log of the
    pair count. Memory ``O((N + M)·D + tile²)``.

    Args:
        a: Local embeddings. Shape: ``(N, D)``.
        c: All candidates; ``c[offset:offset + N]`` are ``a``. Shape: ``(M, D)``.
        sq_a: ``‖a_i‖²``. Shape: ``(N,)``.
        sq_c: ``‖c_j‖²``. Shape: ``(M,)``.
        offset: Row of ``c`` at which ``a`` starts.
        t: Scale ``t > 0``.
        tile_size: Block edge, ``>= 1``.

    Returns:
        Shape: ``(N,)``.
    """
    if tile_size < 1:
        raise InputError(f"`tile_size` must be >= 1 for the tiled path, got {tile_size}.")
    return _TiledUniformity.apply(a, c, sq_a, sq_c, int(offset), float(t), int(tile_size))


class _TiledSymmetricUniformity(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, sq, t, tile):  # type: ignore[override]
        n = a.shape[0]
        with torch.autocast(device_type=a.device.type, enabled=False):
            run_max = a.new_full((n,), float("-inf"))
            run_sum = a.new_zeros(n)
            for r0, r1, c0, c1 in _upper_blocks(n, tile):
                diagonal = r0 == c0
                _, logits = _uniformity_block(
                    a[r0:r1], a[c0:c1], sq[r0:r1], sq[c0:c1], t, _self_index(r0, r1, c0, c1, 0, a.device)
                )
                if not diagonal:  # the block's columns are rows c0:c1 of the (symmetric) matrix
                    run_max[c0:c1] = _fold_columns(run_max[c0:c1], run_sum[c0:c1], logits)
                run_max[r0:r1] = _online_logsumexp_update(run_max[r0:r1], run_sum[r0:r1], logits)
            lse = _finish_logsumexp(run_max, run_sum)
        ctx.save_for_backward(a, sq, lse)
        ctx.t, ctx.tile = t, tile
        return lse

    @staticmethod
    def backward(ctx, grad_lse):  # type: ignore[override]
        a, sq, lse = ctx.saved_tensors
        n = a.shape[0]
        with torch.autocast(device_type=a.device.type, enabled=False):
            grad_a, grad_sq = torch.zeros_like(a), torch.zeros_like(sq)
            for r0, r1, c0, c1 in _upper_blocks(n, ctx.tile):
                diagonal = r0 == c0
                raw, logits = _uniformity_block(
                    a[r0:r1], a[c0:c1], sq[r0:r1], sq[c0:c1], ctx.t, _self_index(r0, r1, c0, c1, 0, a.device)
                )
                # d/d raw of the row terms and, off the diagonal, of the column terms (rows c0:c1
                # see the same distances transposed), times −t where the clamp passes.
                if diagonal:
                    g = logits.sub_(lse[r0:r1, None]).exp_().mul_(grad_lse[r0:r1, None])
                else:
                    g = (logits - lse[None, c0:c1]).exp_().mul_(grad_lse[None, c0:c1])
                    g.add_(logits.sub_(lse[r0:r1, None]).exp_().mul_(grad_lse[r0:r1, None]))
                g = torch.where(raw >= 0, g, 0.0).mul_(-ctx.t)
                if diagonal:  # raw = sq_r + sq_rᵀ − 2 a_r·a_rᵀ: both sides are the same rows
                    g = g + g.T
                    grad_sq[r0:r1] += g.sum(dim=1)
                    grad_a[r0:r1].addmm_(g, a[r0:r1], alpha=-2.0)
                else:
                    grad_sq[r0:r1] += g.sum(dim=1)
                    grad_sq[c0:c1] += g.sum(dim=0)
                    grad_a[r0:r1].addmm_(g, a[c0:c1], alpha=-2.0)
                    grad_a[c0:c1].addmm_(g.T, a[r0:r1], alpha=-2.0)
        return grad_a, grad_sq, None, None


def tiled_symmetric_uniformity_logsumexp(
    a: Tensor, sq: Tensor, t: float, tile_size: int = DEFAULT_TILE_SIZE
) -> Tensor:
    """:func:`tiled_uniformity_logsumexp` of ``a`` against itself, each off-diagonal block once.

    The distance matrix of one process's rows is symmetric: block ``(I, J)`` of the upper
    triangle is computed once for the log-sum-exp of rows ``I`` and of rows ``J``, and
    recomputed once in the backward for both gradient contributions (as
    :func:`tiled_symmetric_logsumexp`).

    Args:
        a: Embeddings. Shape: ``(N, D)``.
        sq: ``‖a_i‖²``. Shape: ``(N,)``.
        t: Scale ``t > 0``.
        tile_size: Block edge, ``>= 1``.

    Returns:
        ``log Σ_{j≠i} exp(−t·max(sq_i + sq_j − 2 a_i·a_j, 0))``. Shape: ``(N,)``.
    """
    if tile_size < 1:
        raise InputError(f"`tile_size` must be >= 1 for the tiled path, got {tile_size}.")
    return _TiledSymmetricUniformity.apply(a, sq, float(t), int(tile_size))


# --------------------------------------------------------------------------------------------
# Binary NCE ("all"): Σ_ij log σ(−(a_i·c_j + b))
# --------------------------------------------------------------------------------------------
class _TiledBinaryNCE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, c, bias, tile):  # type: ignore[override]
        device = a.device
        with torch.autocast(device_type=device.type, enabled=False):
            total = a.new_zeros(())
            for r0, r1 in _blocks(a.shape[0], tile):
                for c0, c1 in _blocks(c.shape[0], tile):
                    total += torch.nn.functional.logsigmoid(-(a[r0:r1] @ c[c0:c1].T + bias)).sum()
        ctx.save_for_backward(a, c, bias)
        ctx.tile = tile
        return total

    @staticmethod
    def backward(ctx, grad_total):  # type: ignore[override]
        a, c, bias = ctx.saved_tensors
        device = a.device
        with torch.autocast(device_type=device.type, enabled=False):
            grad_a, grad_c = torch.zeros_like(a), torch.zeros_like(c)
            grad_bias = torch.zeros_like(bias)
            for r0, r1 in _blocks(a.shape[0], ctx.tile):
                for c0, c1 in _blocks(c.shape[0], ctx.tile):
                    # d log σ(−l) / dl = −σ(l)
                    g = torch.sigmoid(a[r0:r1] @ c[c0:c1].T + bias) * -grad_total
                    grad_bias += g.sum()
                    grad_a[r0:r1].addmm_(g, c[c0:c1])
                    grad_c[c0:c1].addmm_(g.T, a[r0:r1])
        return grad_a, grad_c, grad_bias if ctx.needs_input_grad[2] else None, None


def tiled_binary_nce_sum(a: Tensor, c: Tensor, bias: Tensor, tile_size: int = DEFAULT_TILE_SIZE) -> Tensor:
    """``Σ_ij log σ(−(a_i·c_j + bias))`` over all pairs, block by block.

    Args:
        a: Scaled first view (``n(z1) / τ``). Shape: ``(B, D)``.
        c: Second view. Shape: ``(B', D)``.
        bias: The logit bias, a 0-dim tensor (may require grad).
        tile_size: Block edge, ``>= 1``.

    Returns:
        Scalar tensor.
    """
    if tile_size < 1:
        raise InputError(f"`tile_size` must be >= 1 for the tiled path, got {tile_size}.")
    return _TiledBinaryNCE.apply(a, c, bias, int(tile_size))
