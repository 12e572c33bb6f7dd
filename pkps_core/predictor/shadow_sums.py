"""The kernel sums a profile's shadows add to the references' own: every bandwidth, one pass.

A profile's space is the references and their shadows (:mod:`pkps_core.methods.shadows`).
The references' pairs are the same for every profile, so they are summed once
(:meth:`pkps_core.predictor.ReferencePredictor` keeps the references' own fit); a profile
only adds the pairs that involve a shadow. For the linear response kernel (unit rows: the
cosine kernel too) these factor through the queries, as the local engine's exact path does
(``space/sums.py``): with ``Y_i[q] = Σ_{r ∈ i, q_r = q} x_r`` (model i's responses summed
per query) and, for a shadow s, ``W_s[q] = Σ_{l ∈ s} kQ(u_q, u_{q_l}) x_l``,

    N[i, s] = Σ_q Y_i[q] · W_s[q],        Z[i, s] = Σ_q c_i[q] w_s[q]

(``c_i[q]`` model i's responses to q, ``w_s[q] = Σ_{l ∈ s} kQ(u_q, u_{q_l})``): one matrix
product over the queries per bandwidth instead of a pass over every response per shadow.
The queries are taken in blocks so memory stays bounded. The module is over 500 lines: the
one pass holds four paths (the references' dense rows, thin rows, the delta kernel and the
near-delta bandwidths) that must agree pair for pair, and they are read together.
"""

from __future__ import annotations

import functools

import numpy as np
from scipy import sparse

from pkps_core.predictor.near_delta import near_delta_pairs, near_delta_sums
from pkps_core.space import kernels
from pkps_core.space.runtime import WorkerPool

BLOCK_BYTES = 64 * 2**20
DENSE_SHARE = 4  # a row that answered at least 1/DENSE_SHARE of the queries is dense


def shadow_pair_sums(
    layout: kernels.ResponseLayout,
    features: np.ndarray,
    query_vectors: np.ndarray | None,
    bandwidths: np.ndarray,
    shadows: np.ndarray,
    rows: np.ndarray | None = None,
    pool: WorkerPool | None = None,
    query_kernels: list[np.ndarray | None] | None = None,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per bandwidth, the numerator and denominator sums of every model with every shadow.

    Parameters
    ----------
    layout : ResponseLayout
        All responses (references and shadows), sorted by model.
    features : ndarray (n_responses, p)
        Response vectors as the linear response kernel reads them.
    query_vectors : ndarray (n_queries, d) or None
        None: the delta query kernel (bandwidths are ignored).
    bandwidths : ndarray
        Query-kernel bandwidths (0: the delta limit).
    shadows : ndarray of bool (n_models,)
    rows : ndarray of bool (n_models,), optional
        The models whose sums with the shadows are wanted (default all); the others' rows
        are 0, except each shadow's sum with itself, which is always computed.
    pool : WorkerPool, optional
        Threads the bandwidths are spread over (default: one per core BLAS may use); the
        sums do not depend on it.
    query_kernels : list, optional
        :func:`~pkps_core.space.kernels.query_kernel_matrices` of ``query_vectors`` and
        ``bandwidths``, when the caller keeps them (made here otherwise).

    Returns
    -------
    list of (numerator, denominator), ndarray (n_models, n_shadows) each, shadows in
    model order.
    """
    return nested_shadow_pair_sums(
        layout,
        features,
        query_vectors,
        bandwidths,
        shadows,
        rows=rows,
        pool=pool,
        query_kernels=query_kernels,
    )[0]


def nested_shadow_pair_sums(
    layout: kernels.ResponseLayout,
    features: np.ndarray,
    query_vectors: np.ndarray | None,
    bandwidths: np.ndarray,
    shadows: np.ndarray,
    level: np.ndarray | None = None,
    rows: np.ndarray | None = None,
    pool: WorkerPool | None = None,
    n_levels: int | None = None,
    query_kernels: list[np.ndarray | None] | None = None,
) -> list[list[tuple[np.ndarray, np.ndarray]]]:
    """:func:`shadow_pair_sums` for nested shadows, every level in one pass.

    A profile's shadows at budget m are a prefix of the same shadows at every larger
    budget (one shuffle per repeat, cut at the budget: :func:`~pkps_core.methods.shadows.
    shadow_records`), so the predictor sums the largest budget's shadows once, their
    responses in levels: level k's sums are those of the shadows cut to their responses
    of level ≤ k — each ``W_s`` grows by the responses of one level at a time, so the
    kernel rows of a response are gathered and multiplied once for all budgets.

    Parameters
    ----------
    level : ndarray of int (n_responses,), optional
        Each shadow response's level (the smallest budget whose shadow has it); ignored
        for the other models' responses, which belong to every level. Default: one level.
    n_levels : int, optional
        How many levels (default: the highest level + 1; a level may have no response).

    Other parameters as :func:`shadow_pair_sums`.

    Returns
    -------
    Per level, what :func:`shadow_pair_sums` returns for the shadows cut at that level.
    """
    model_idx, query_idx = layout.model_idx, layout.query_idx
    n_models, n_queries = layout.n_models, layout.n_queries
    p = features.shape[1]
    shadows = np.asarray(shadows, dtype=bool)
    shadow_models = np.flatnonzero(shadows)
    n_shadows = len(shadow_models)
    level = np.zeros(len(model_idx), dtype=np.int64) if level is None else np.asarray(level)
    level = np.where(shadows[model_idx], level, 0)  # the other models are in every level
    if n_levels is None:
        n_levels = int(level.max()) + 1 if len(level) else 1
    pool = WorkerPool() if pool is None else pool
    row_models = np.arange(n_models) if rows is None else np.flatnonzero(rows)
    # rows that answered most queries (the references) meet the shadows through one dense
    # product per block; rows that answered few (shadows, thin new models) through their
    # own responses, one small product per query, so their cost follows their responses
    answered = np.bincount(model_idx, minlength=n_models)
    dense = row_models[answered[row_models] * DENSE_SHARE >= n_queries]
    if n_levels > 1:  # a shadow's row has a level's responses: its own, never dense
        dense = dense[~shadows[dense]]
    in_sparse = np.isin(model_idx, np.setdiff1d(row_models, dense))
    sparse_responses = np.flatnonzero(in_sparse)
    sparse_responses = sparse_responses[np.argsort(query_idx[sparse_responses], kind="stable")]
    sparse_queries = query_idx[sparse_responses]
    width = max(len(dense), len(shadow_models), 1)
    rows_per_block = max(1, BLOCK_BYTES // (8 * p * width))
    bandwidths = np.asarray(bandwidths, dtype=float)
    kernels_by_bandwidth = (
        kernels.query_kernel_matrices(query_vectors, bandwidths)
        if query_kernels is None
        else query_kernels
    )
    # a bandwidth whose kernel is the delta's but for a few pairs of queries: the delta's
    # sums plus those pairs' (near_delta.py), not a dense product per block
    zero = next((b for b, kernel in enumerate(kernels_by_bandwidth) if kernel is None), None)
    rbf = [b for b, kernel in enumerate(kernels_by_bandwidth) if kernel is not None]
    near = {} if zero is None else {b: near_delta_pairs(kernels_by_bandwidth[b]) for b in rbf}
    near = {b: pairs for b, pairs in near.items() if pairs is not None}
    shape = (n_levels, len(bandwidths), n_models, n_shadows)
    numerators, denominators = np.zeros(shape), np.zeros(shape)
    selected = np.isin(model_idx, dense)
    position = np.full(n_models, -1)
    position[dense] = np.arange(len(dense))
    # every shadow's responses, ordered by level, padded to one length: one batched
    # product per block (and level)
    shadow_rows = [
        own[np.argsort(level[own], kind="stable")]
        for own in (
            np.arange(layout.model_bounds[s], layout.model_bounds[s + 1]) for s in shadow_models
        )
    ]
    longest = max((len(own) for own in shadow_rows), default=0)
    padded = np.zeros((len(shadow_models), longest), dtype=np.int64)
    present = np.zeros((len(shadow_models), longest), dtype=bool)
    for k, own in enumerate(shadow_rows):
        padded[k, : len(own)] = own
        present[k, : len(own)] = True
    padded_level = np.where(present, level[padded], n_levels)
    padded_queries = query_idx[padded]
    increments = [_padded_level(padded, present & (padded_level == k)) for k in range(n_levels)]
    # padding reads a zero row appended to the query kernel's columns (index n_queries)
    by_level = [
        (
            np.where(here, query_idx[rows_k], n_queries),
            np.where(here[:, :, None], features[rows_k], 0.0),
        )
        for rows_k, here in increments
    ]
    owner = np.repeat(np.arange(len(shadow_models)), present.sum(axis=1))
    all_rows = padded[present]
    all_levels = padded_level[present]
    dense_rows = (position[model_idx[selected]], query_idx[selected], features[selected])
    y_buffer = np.empty(len(dense) * min(rows_per_block, n_queries) * p)
    for start in range(0, n_queries, rows_per_block):
        block = np.arange(start, min(start + rows_per_block, n_queries))
        y, counts = _per_query_sums(*dense_rows, block, len(dense), y_buffer)
        flat = y.reshape(len(dense), len(block) * p)
        first, last = np.searchsorted(sparse_queries, [block[0], block[-1] + 1])
        thin = sparse_responses[first:last]
        thin_by_level = [thin[level[thin] <= k] for k in range(n_levels)]
        # the delta kernel's sums (a response meets one query) are made by its own item
        delta = functools.partial(
            _delta_levels,
            y=y,
            counts=counts,
            block=block,
            shadow_responses=(all_rows, all_levels, owner, n_shadows),
            thin_by_level=thin_by_level,
            layout=layout,
            features=features,
        )

        one_bandwidth = functools.partial(
            _block_at_bandwidth,
            kernels_by_bandwidth=kernels_by_bandwidth,
            sums=(numerators, denominators),
            block=block,
            dense_rows=(dense, flat, counts),
            delta=delta,
            scratch=pool.scratch,
            padded=by_level,
            thin=[
                (rows_k, query_idx[rows_k] - block[0], model_idx[rows_k])
                for rows_k in thin_by_level
            ],
            features=features,
        )
        pool.map(one_bandwidth, [b for b in range(len(bandwidths)) if b not in near])
    for b, pairs in near.items():
        extra = near_delta_sums(layout, features, level, row_models, shadow_models, pairs, n_levels)
        numerators[:, b] = numerators[:, zero] + extra[0]
        denominators[:, b] = denominators[:, zero] + extra[1]
    # each shadow with itself, shadows in chunks: their responses' Gram matrices (padded
    # rows are zero vectors and weigh 0), weighted by the query kernel per bandwidth; a
    # level's pairs are those of its responses (the first ones of each shadow's row)
    chunk = max(1, BLOCK_BYTES // (8 * 3 * max(longest, 1) ** 2))
    padded_features = np.where(present[:, :, None], features[padded], 0.0)
    for first in range(0, len(shadow_models), chunk):
        part = slice(first, first + chunk)
        features_here = padded_features[part]
        gram = np.matmul(features_here, features_here.transpose(0, 2, 1))
        own = np.arange(len(shadow_models))[part]
        for k in range(n_levels):
            here = padded_level[part] <= k
            cut = int(here.sum(axis=1).max(initial=0))
            here, queries = here[:, :cut], padded_queries[part, :cut]
            pair_present = here[:, :, None] & here[:, None, :]
            gram_k = gram[:, :cut, :cut]
            for b, query_kernel in enumerate(kernels_by_bandwidth):
                if query_kernel is None:
                    weight = (queries[:, :, None] == queries[:, None, :]) & pair_present
                else:
                    weight = query_kernel[queries[:, :, None], queries[:, None, :]] * pair_present
                numerators[k, b, shadow_models[part], own] = np.einsum("sij,sij->s", weight, gram_k)
                denominators[k, b, shadow_models[part], own] = weight.sum(axis=(1, 2))
    return [
        [(numerators[k, b], denominators[k, b]) for b in range(len(bandwidths))]
        for k in range(n_levels)
    ]


def _padded_level(padded: np.ndarray, here: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The responses of one level, each shadow's moved to the front of a row as long as
    the level's longest: their indices (0 where padding) and the mask of real ones."""
    width = int(here.sum(axis=1).max(initial=0))
    order = np.argsort(~here, axis=1, kind="stable")[:, :width]
    mask = np.take_along_axis(here, order, axis=1)
    return np.where(mask, np.take_along_axis(padded, order, axis=1), 0), mask


def _delta_levels(*, y, counts, block, shadow_responses, thin_by_level, layout, features):
    """Per level, the delta kernel's increment of the dense rows' sums (level k's shadow
    responses only) and the thin rows' whole sums with the shadows cut at level k."""
    all_rows, all_levels, owner, n_shadows = shadow_responses
    query_idx, model_idx = layout.query_idx, layout.model_idx
    delta, thin_delta = [], []
    for k, rows_k in enumerate(thin_by_level):
        here = all_levels == k
        delta.append(
            _delta_block(
                y,
                counts,
                block,
                query_idx[all_rows[here]],
                features[all_rows[here]],
                owner[here],
                n_shadows,
            )
        )
        upto = all_levels <= k
        thin_delta.append(
            _thin_rows_delta(
                (query_idx[rows_k], model_idx[rows_k], features[rows_k]),
                (query_idx[all_rows[upto]], owner[upto], features[all_rows[upto]]),
                block,
                (layout.n_models, n_shadows),
            )
            if len(rows_k)
            else None
        )
    return delta, thin_delta


def _block_at_bandwidth(
    b,
    *,
    kernels_by_bandwidth,
    sums,
    block,
    dense_rows,
    delta,
    padded,
    thin,
    features,
    scratch,
):
    """One block of queries at bandwidth ``b``: adds to row ``b`` of every level's sums
    only (the bandwidths of a block run on the pool's threads). Level k's ``W_s`` is
    level k−1's plus the products of level k's responses."""
    numerators, denominators = sums
    dense, flat, counts = dense_rows
    query_kernel = kernels_by_bandwidth[b]
    n_levels = len(padded)
    if query_kernel is None:  # delta: a shadow's response meets one query
        delta, thin_delta = delta()
        numerator = np.zeros_like(delta[0][0])
        denominator = np.zeros_like(delta[0][1])
        for k in range(n_levels):
            numerator += delta[k][0]
            denominator += delta[k][1]
            numerators[k, b, dense] += numerator
            denominators[k, b, dense] += denominator
            if thin_delta[k] is not None:
                numerators[k, b] += thin_delta[k][0]
                denominators[k, b] += thin_delta[k][1]
        return
    # (shadows, their responses, block): kQ(u_{q_l}, u_q) from whole kernel rows (0 for
    # the padding), then one batched product per level
    n_queries = query_kernel.shape[0]
    kernel_rows = np.zeros((n_queries + 1, len(block)))
    kernel_rows[:n_queries] = query_kernel[:, block[0] : block[-1] + 1]  # a block is a range
    # the large temporaries in the thread's own buffer (fresh ones of this size cost their
    # page faults on every block and bandwidth)
    n_shadows = padded[0][0].shape[0]
    p = features.shape[1]
    longest = max(columns.shape[1] for columns, _ in padded)
    w_size = n_shadows * len(block) * p
    sizes = (n_shadows * longest * len(block), w_size, w_size if n_levels > 1 else 0)
    buffer = scratch(sum(sizes))
    w = buffer[sizes[0] : sizes[0] + w_size].reshape(n_shadows, len(block), p)
    step = buffer[sizes[0] + w_size :].reshape(n_shadows, len(block), p) if n_levels > 1 else w
    mass = np.zeros((n_shadows, len(block)))
    for k, (padded_columns, padded_features) in enumerate(padded):
        width = padded_columns.shape[1]
        columns = buffer[: n_shadows * width * len(block)].reshape(n_shadows, width, len(block))
        # mode='clip' writes straight into the buffer (the default mode buffers every take
        # with ``out``); the indices are in range, the padding's included
        np.take(kernel_rows, padded_columns, axis=0, out=columns, mode="clip")
        into = w if k == 0 else step
        np.matmul(columns.transpose(0, 2, 1), padded_features, out=into)  # (shadows, block, p)
        if k:
            w += step
        mass += columns.sum(axis=1)
        if len(dense):
            numerators[k, b, dense] += flat @ w.reshape(n_shadows, -1).T
            denominators[k, b, dense] += counts @ mass.T
        responses, local, owners = thin[k]
        if len(responses):
            _thin_rows(
                numerators[k, b], denominators[k, b], w, mass, responses, local, owners, features
            )


def _thin_rows_delta(thin, shadows, block, shape):
    """The delta kernel's sums of thin rows with every shadow for one block of queries: a
    thin row's response meets only the shadows' responses to the same query,
    ``N[i, s] += x_r · x_l`` and ``Z[i, s] += 1`` for each such pair — one small product
    per query that both answered, summed per (row, shadow) pair by one ``bincount``.

    ``thin`` and ``shadows`` are (query index, owner, vectors) of their responses; the
    owners are model rows and shadow columns of ``shape``."""
    thin_queries, thin_owner, thin_vectors = thin
    queries, owner, vectors = shadows
    inside = np.flatnonzero((queries >= block[0]) & (queries <= block[-1]))
    inside = inside[np.argsort(queries[inside], kind="stable")]
    order = np.argsort(thin_queries, kind="stable")
    edges_thin = np.searchsorted(thin_queries[order], block, side="left")
    ends_thin = np.searchsorted(thin_queries[order], block, side="right")
    sorted_queries = queries[inside]
    edges = np.searchsorted(sorted_queries, block, side="left")
    ends = np.searchsorted(sorted_queries, block, side="right")
    pairs, values = [], []
    for k in np.flatnonzero((ends_thin > edges_thin) & (ends > edges)):
        rows = order[edges_thin[k] : ends_thin[k]]
        columns = inside[edges[k] : ends[k]]
        values.append((thin_vectors[rows] @ vectors[columns].T).ravel())
        pairs.append((thin_owner[rows][:, None] * shape[1] + owner[columns][None, :]).ravel())
    size = shape[0] * shape[1]
    if not pairs:
        return np.zeros(shape), np.zeros(shape)
    pairs = np.concatenate(pairs)
    numerator = np.bincount(pairs, weights=np.concatenate(values), minlength=size)
    denominator = np.bincount(pairs, minlength=size).astype(float)
    return numerator.reshape(shape), denominator.reshape(shape)


def _thin_rows(numerator, denominator, w, mass, responses, local, owners, features):
    """The sums of thin rows with every shadow from their own responses (sorted by query):
    ``N[i, s] += x_r · W_s[q_r]`` and ``Z[i, s] += w_s[q_r]`` for each response ``r`` of
    row ``i``, one small product per query."""
    values = np.empty((len(responses), w.shape[0]))
    edges = np.flatnonzero(np.diff(local)) + 1
    for start, stop in zip(np.r_[0, edges], np.r_[edges, len(local)], strict=True):
        values[start:stop] = features[responses[start:stop]] @ w[:, local[start], :].T
    rows = sparse.csr_matrix(
        (np.ones(len(responses)), (owners, np.arange(len(responses)))),
        shape=(numerator.shape[0], len(responses)),
    )
    numerator += rows @ values
    denominator += rows @ mass[:, local].T


def _delta_block(y, counts, block, queries, vectors, owner, n_shadows):
    """The delta query kernel's sums of the rows with every shadow for one block of
    queries: a shadow response ``l`` meets only the rows' responses to its own query,
    ``N[i, s] += Y_i[q_l] · x_l`` — one small product per query of the block (the rows'
    vectors for that query against the shadow responses to it), then summed per shadow,
    instead of a dense product over every query of the block."""
    inside = np.flatnonzero((queries >= block[0]) & (queries <= block[-1]))
    local = queries[inside] - block[0]
    order = np.argsort(local, kind="stable")
    inside, local = inside[order], local[order]
    values = np.empty((y.shape[0], len(inside)))
    edges = np.flatnonzero(np.diff(local)) + 1
    for start, stop in zip(np.r_[0, edges], np.r_[edges, len(local)], strict=True):
        if stop > start:
            values[:, start:stop] = y[:, local[start], :] @ vectors[inside[start:stop]].T
    owners = sparse.csr_matrix(
        (np.ones(len(inside)), (np.arange(len(inside)), owner[inside])),
        shape=(len(inside), n_shadows),
    )
    numerator = np.asarray((owners.T @ values.T).T)
    denominator = np.asarray((owners.T @ counts[:, local].T).T)
    return numerator, denominator


def _per_query_sums(model_idx, query_idx, features, block, n_models, buffer):
    """``Y_i[q]`` and ``c_i[q]`` for the queries in ``block`` (contiguous); a model answers
    a query at most once (:class:`~pkps_core.space.kernels.ResponseLayout`), so each is
    one response's vector or zero. ``Y`` is written into ``buffer`` (one per call of
    :func:`shadow_pair_sums`, reused block after block)."""
    inside = (query_idx >= block[0]) & (query_idx <= block[-1])
    y = buffer[: n_models * len(block) * features.shape[1]]
    y = y.reshape(n_models, len(block), features.shape[1])
    y.fill(0.0)
    counts = np.zeros((n_models, len(block)))
    local = query_idx[inside] - block[0]
    y[model_idx[inside], local] = features[inside]
    counts[model_idx[inside], local] = 1.0
    return y, counts


def budget_levels(prepared: list, shadows: np.ndarray) -> np.ndarray | None:
    """Each response's level in the last of ``prepared`` (caches of the same models and
    queries whose shadows grow from one to the next, e.g. a predictor's profiles from the
    smallest budget up): the first cache holding the same (model, query) response, or
    None when the shadows are not nested so (a cache's shadow responses not those of
    level ≤ its position, the other models' responses not the same, or the caches'
    models or queries differ)."""
    largest = prepared[-1]
    models, keys = largest.models, largest.query_keys
    for cache in prepared[:-1]:
        if not np.array_equal(cache.models, models) or not cache.query_keys.equals(keys):
            return None
    n_queries = largest.layout.n_queries

    def response_keys(cache):
        return cache.layout.model_idx.astype(np.int64) * n_queries + cache.layout.query_idx

    biggest = response_keys(largest)
    other = ~shadows[largest.layout.model_idx]
    smaller = []
    for cache in prepared[:-1]:
        own = response_keys(cache)
        mine = shadows[cache.layout.model_idx]
        if not np.array_equal(own[~mine], biggest[other]):
            return None
        smaller.append(own[mine])
    return shadow_levels(biggest, ~other, smaller)


def shadow_levels(
    keys: np.ndarray, is_shadow: np.ndarray, smaller: list[np.ndarray]
) -> np.ndarray | None:
    """The levels of :func:`budget_levels` from response keys: ``keys`` of the largest
    cache's responses (``is_shadow`` marks the shadows'), ``smaller`` the keys of each
    smaller cache's shadow responses, smallest first. None unless cache k's shadow
    responses are exactly the largest's of level ≤ k."""
    last = len(smaller)
    level = np.full(len(keys), last, dtype=np.int64)
    shadow_keys = keys[is_shadow]
    holds = []
    for k, own in enumerate(smaller):
        held = np.isin(keys, own) & is_shadow
        if len(own) != held.sum() or not np.isin(own, shadow_keys).all():
            return None
        holds.append(held)
        level[held & (level == last)] = k
    for k, held in enumerate(holds):
        if not np.array_equal(held, is_shadow & (level <= k)):
            return None
    return level
