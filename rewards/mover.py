"""Word and sentence mover's similarities (Clark et al. 2019, Eq. 1-5) as batched rewards.

A document A becomes a bag of weighted points: word types with weight count(w)/|A| (WMS),
sentences -- the mean of their words' vectors -- with weight |s|/|A| (SMS), or both in one bag,
each half of the mass (S+WMS), where |A| counts the words left after preprocessing (see
`rewards.embeddings`). The similarity is exp(-EMD) under the Euclidean distance.

Degenerate documents, defined here because the reference code has no rule for them (it drops
the whole run, or reuses the previous document's distance): a hypothesis with no word left scores 0,
whatever the reference (were it 1 against an empty reference, saying nothing would be a perfect
summary); against a reference with no word left, the example does not apply: NaN, which callers
treat as they treat a missing reference (`rewards.base.zero_where_not_applicable`).

The batch's token ids reach the host in one transfer (`RewardInput.host_ids`); there the vector
rows, content-word flags and sentences are looked up, and a compiled kernel builds each pair's two
bags, their Euclidean costs and the exact transport (`rewards.transport`), the pairs shared among
torch's threads.
"""
from __future__ import annotations

import functools
import math
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from numba import njit
from torch import Tensor

from rewards.base import Display, Reward, RewardInput
from rewards.embeddings import Embeddings, TokenVectors
from rewards.transport import transport_cost


@njit(cache=True, nogil=True)
def _add_vector(points, k, row, table, extra):
    """points[k] += the vector at `row` (of `table`, then `extra`); element by element, as an array
    expression (or even a row view) costs more than the 50 additions."""
    source, r = (table, row) if row < table.shape[0] else (extra, row - table.shape[0])
    for d in range(points.shape[1]):
        points[k, d] += source[r, d]


@njit(cache=True, nogil=True)
def document_bag(rows: np.ndarray, keep: np.ndarray, sentence: np.ndarray, table: np.ndarray, extra: np.ndarray,
                 word_mass: float, sentence_mass: float) -> tuple[np.ndarray, np.ndarray]:
    """Points [K, D] and weights [K] of one document (one row of `TokenVectors`): its word types
    (tokens of equal row) weighted count(w)/|A| · `word_mass`, then its sentences (mean vector)
    weighted |s|/|A| · `sentence_mass`; |A| counts the kept tokens."""
    size = 0
    for t in range(keep.size):
        size += keep[t]
    words = np.empty(size if word_mass > 0 else 0, np.int64)
    n_sentences, previous, k = 0, -1, 0
    for t in range(keep.size):
        if keep[t]:
            if sentence[t] < previous:
                raise ValueError("sentence indices must not decrease along a document")
            n_sentences += sentence_mass > 0 and sentence[t] != previous
            previous = sentence[t]
            if word_mass > 0:
                words[k] = rows[t]
                k += 1
    for t in range(1, words.size):  # insertion sort: for a few dozen ids, faster than np.sort
        word, u = words[t], t - 1
        while u >= 0 and words[u] > word:
            words[u + 1] = words[u]
            u -= 1
        words[u + 1] = word
    n_types = 0
    for t in range(words.size):
        n_types += t == 0 or words[t] != words[t - 1]
    points, weights = np.zeros((n_types + n_sentences, table.shape[1])), np.zeros(n_types + n_sentences)
    k = -1
    for t in range(words.size):
        if t == 0 or words[t] != words[t - 1]:
            k += 1
            _add_vector(points, k, words[t], table, extra)
        weights[k] += 1  # the count, then its share below
    for t in range(k + 1):
        weights[t] = word_mass * weights[t] / size
    previous = -1
    for t in range(keep.size if n_sentences else 0):  # a sentence: a run of equal indices
        if keep[t]:
            if sentence[t] != previous:
                k += 1
                previous = sentence[t]
            _add_vector(points, k, rows[t], table, extra)
            weights[k] += 1
    for t in range(n_types, n_types + n_sentences):
        for d in range(points.shape[1]):
            points[t, d] /= weights[t]
        weights[t] = sentence_mass * weights[t] / size
    return points, weights


@njit(cache=True, nogil=True, fastmath=True)  # fastmath: the sum over dimensions vectorises (order of additions only)
def euclidean_costs(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Distances [P, Q] between the points x [P, D] and y [Q, D]."""
    cost = np.empty((x.shape[0], y.shape[0]))
    for i in range(x.shape[0]):
        for j in range(y.shape[0]):
            squared = 0.0
            for d in range(x.shape[1]):
                squared += (x[i, d] - y[j, d]) ** 2
            cost[i, j] = np.sqrt(squared)
    return cost


@njit(cache=True, nogil=True)
def without_shared_mass(a: np.ndarray, b: np.ndarray, cost: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The transport problem left once the mass both bags hold at one point (cost 0) stays there:
    with a metric cost, such as the Euclidean, some optimal plan keeps it in place, so the EMD is
    unchanged. Rows and columns left without mass go (smaller problems, faster solves); either side may come
    back empty, all of its mass shared."""
    a, b, any_shared = a.copy(), b.copy(), False
    for i in range(a.size):
        for j in range(b.size):
            if cost[i, j] == 0.0:
                shared = min(a[i], b[j])
                a[i] -= shared
                b[j] -= shared
                any_shared = True
    if not any_shared:
        return a, b, cost
    rows, cols = np.flatnonzero(a > 0), np.flatnonzero(b > 0)
    left = np.empty((rows.size, cols.size))
    for s in range(rows.size):
        for t in range(cols.size):
            left[s, t] = cost[rows[s], cols[t]]
    return a[rows], b[cols], left


@njit(cache=True, nogil=True)
def mover_similarities(hyp: tuple, ref: tuple, word_mass: float, sentence_mass: float, order: np.ndarray,
                       claimed: np.ndarray, similarities: np.ndarray) -> None:
    """similarities[i] = exp(-EMD) between the bags of hypothesis and reference i, for the pairs i in
    `order` that no other thread has claimed (`claimed`, shared); each side is (rows, keep, sentence,
    table, extra) as in `TokenVectors`. 0 when the hypothesis's bag is empty, else NaN when the
    reference's is (and where the solver did not converge)."""
    hyp_rows, hyp_keep, hyp_sentence, hyp_table, hyp_extra = hyp
    ref_rows, ref_keep, ref_sentence, ref_table, ref_extra = ref
    for i in order:
        if claimed[i]:
            continue
        claimed[i] = True  # two threads claiming at once both solve the pair, to the same value
        x, a = document_bag(hyp_rows[i], hyp_keep[i], hyp_sentence[i], hyp_table, hyp_extra, word_mass, sentence_mass)
        y, b = document_bag(ref_rows[i], ref_keep[i], ref_sentence[i], ref_table, ref_extra, word_mass, sentence_mass)
        if a.size == 0 or b.size == 0:
            similarities[i] = 0.0 if a.size == 0 else np.nan
            continue
        a, b, cost = without_shared_mass(a, b, euclidean_costs(x, y))
        distance = transport_cost(a, b, cost) if a.size and b.size else 0.0  # else: rounding's leftovers
        similarities[i] = np.exp(-distance)


@functools.lru_cache(maxsize=None)
def _thread_pool(threads: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(threads - 1, thread_name_prefix="mover")


def batch_similarities(hyp: TokenVectors, ref: TokenVectors, word_mass: float, sentence_mass: float) -> np.ndarray:
    """`mover_similarities` [B] of every pair on torch.get_num_threads() threads, the caller's
    included. Thread t first solves its share, pairs t, t + threads, ... (interleaved, so that long
    and short documents even out), then takes what is left of the others' shares from their ends:
    a thread slowed down (a core shared with other jobs, a late start) is helped rather than waited
    for. The kernel releases the GIL. Own threads rather than numba's parallel layer, whose OpenMP
    runtime is torch's: it changed torch's thread count and left spinning threads behind."""
    sides, n = [hyp.arrays(), ref.arrays()], len(hyp.rows)
    threads = max(1, min(torch.get_num_threads(), n))
    shares = [np.arange(t, n, threads) for t in range(threads)]
    orders = [np.concatenate([shares[t]] + [shares[(t + s) % threads][::-1] for s in range(1, threads)])
              for t in range(threads)]
    claimed, similarities = np.zeros(n, np.bool_), np.empty(n)
    others = [_thread_pool(threads).submit(mover_similarities, *sides, word_mass, sentence_mass, order, claimed,
                                           similarities)
              for order in orders[1:]]
    mover_similarities(*sides, word_mass, sentence_mass, orders[0], claimed, similarities)
    for other in others:
        while not other.done():  # poll, not block: waking a blocked thread took ~30 us here, 5% of a batch
            time.sleep(0)  # lets the GIL go, which the worker needs to hand its result back
        other.result()
    return similarities


class MoverSimilarity(Reward):
    """exp(-EMD) between the hypothesis's and the reference's bags; subclasses fix the bag.

    Float32 [B] on the input's device: 0 for a hypothesis with no word left after preprocessing,
    else NaN where the reference has none (or there is no reference), else in (0, 1].
    """

    name: str
    word_mass: float
    sentence_mass: float
    needs_reference = True

    def __init__(self, embeddings: Embeddings):
        self.embeddings = embeddings

    def __call__(self, inputs: RewardInput) -> Tensor:
        hyp, ref = (self.embeddings.embed_batch(inputs, side) for side in ("hyp", "ref"))
        similarities = batch_similarities(hyp, ref, self.word_mass, self.sentence_mass)
        if math.isnan(similarities.sum()):  # one numpy call on the common path
            unsolved = np.flatnonzero(np.isnan(similarities) & ref.keep.any(1))  # the others: empty references
            if unsolved.size:
                raise RuntimeError(f"{self.name}: the transport simplex did not converge for batch rows "
                                   f"{unsolved.tolist()}")
        return torch.from_numpy(similarities).to(inputs.device, torch.float32)


class WordMoverSimilarity(MoverSimilarity):
    """WMS: word types weighted by count(w)/|A| (Eq. 1-3)."""

    name, word_mass, sentence_mass = "wms", 1.0, 0.0
    display = Display("WMS", 1000)


class SentenceMoverSimilarity(MoverSimilarity):
    """SMS: sentences (mean word vector) weighted by |s|/|A| (Eq. 4)."""

    name, word_mass, sentence_mass = "sms", 0.0, 1.0
    display = Display("SMS", 1000)


class SentenceWordMoverSimilarity(MoverSimilarity):
    """S+WMS: words and sentences in one bag, each half of the mass (Eq. 5)."""

    name, word_mass, sentence_mass = "s_wms", 0.5, 0.5
    display = Display("S+WMS", 1000)
