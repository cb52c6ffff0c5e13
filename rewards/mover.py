"""Word and sentence mover's similarities (Clark et al. 2019, Eq. 1-5) as batched rewards.

A document A becomes a bag of weighted points: word types with weight count(w)/|A| (WMS),
sentences -- the mean of their words' vectors -- with weight |s|/|A| (SMS), or both in one bag,
each half of the mass (S+WMS), where |A| counts the words left after preprocessing (see
`rewards.embeddings`). The similarity is exp(-EMD) under the Euclidean distance.

Degenerate documents, defined here because the reference code has no rule for them (it drops
the whole run, or reuses the previous document's distance): when neither side has a word left,
the similarity is 1 (nothing to move); when only one side is empty, it is 0 (no transport exists).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from rewards.base import RewardInput
from rewards.embeddings import Embeddings, TokenVectors
from rewards.transport import batched_emd


def word_types(tokens: TokenVectors) -> tuple[Tensor, Tensor]:
    """Each document's word types, found as runs of equal type ids after sorting: vectors
    [B, K, D] and counts [B, K] (types first, zero counts after)."""
    keep = tokens.keep
    n, width = keep.shape
    types = (tokens.word_type if tokens.word_type is not None  # contextual: every token its own type
             else torch.arange(width, device=keep.device).expand(n, width))
    sorted_types, order = torch.where(keep, types, -1).sort(dim=1)
    first = (sorted_types >= 0) & (sorted_types != F.pad(sorted_types[:, :-1], (1, 0), value=-1))
    run = (first.cumsum(1) - 1).clamp(min=0)
    counts = torch.zeros(n, width, dtype=torch.float64, device=keep.device).scatter_add_(
        1, run, (sorted_types >= 0).to(torch.float64))
    token = torch.zeros_like(order).scatter_(1, torch.where(first, run, width - 1), order)  # a type's first token
    n_types = int(first.sum(1).max()) if n else 0
    positions = (token[:, :n_types] + width * torch.arange(n, device=keep.device)[:, None]).flatten()
    return tokens.vectors(positions).view(n, n_types, tokens.table.size(1)), counts[:, :n_types]


def sentences(tokens: TokenVectors) -> tuple[Tensor, Tensor]:
    """Each document's sentences: mean word vectors [B, S, D] and word counts [B, S] (0: a
    sentence with no word left, or padding)."""
    keep = tokens.keep
    n = len(keep)
    slot = tokens.sentence * keep
    n_slots = int(slot.max()) + 1 if slot.numel() else 1
    kept = keep.flatten().nonzero().squeeze(1)
    vectors = tokens.vectors(kept)
    index = (slot + n_slots * torch.arange(n, device=keep.device)[:, None]).flatten()[kept]
    sums = vectors.new_zeros(n * n_slots, vectors.size(1)).index_add_(0, index, vectors)
    counts = torch.zeros(n, n_slots, dtype=torch.float64, device=keep.device).scatter_add_(
        1, slot, keep.to(torch.float64))
    return sums.view(n, n_slots, -1) / counts.clamp(min=1)[..., None], counts


def build_bag(tokens: TokenVectors, word_mass: float, sentence_mass: float) -> tuple[Tensor, Tensor]:
    """Points [B, K, D] and weights [B, K] (float64, nonzero weights first, then zero padding) of
    each document: word types weighted count(w)/|A| · `word_mass`, sentences |s|/|A| · `sentence_mass`."""
    inverse_size = 1 / tokens.keep.sum(1, keepdim=True).clamp(min=1).to(torch.float64)  # 1/|A|
    parts = []
    if word_mass:
        points, counts = word_types(tokens)
        parts.append((points, word_mass * counts * inverse_size))
    if sentence_mass:
        points, counts = sentences(tokens)
        parts.append((points, sentence_mass * counts * inverse_size))
    if not sentence_mass:
        return parts[0]  # types are already first
    points, weights = torch.cat([p for p, _ in parts], 1), torch.cat([w for _, w in parts], 1)
    return pack(points, weights, int((weights > 0).sum(1).max()) if len(weights) else 0)


def pack(points: Tensor, weights: Tensor, size: int) -> tuple[Tensor, Tensor]:
    """The first `size` items once nonzero weights are moved first (in bag order)."""
    n, k = weights.shape
    order = torch.argsort((weights == 0).to(torch.int8), dim=1, stable=True)[:, :size]
    rows = (order + k * torch.arange(n, device=order.device)[:, None]).flatten()
    return points.flatten(0, 1).index_select(0, rows).view(n, size, points.size(2)), weights.gather(1, order)


def euclidean(x: Tensor, y: Tensor) -> Tensor:
    """Pairwise distances [B, P, Q] (float64) via |x|^2 + |y|^2 - 2 x.y. Squared distances below
    1e-12 are rounding noise of coincident points and become 0, so each entry is within 1e-6 of
    the exact distance (typically 1e-14) and the EMD, Lipschitz in the costs, within 1e-6 too."""
    squared = torch.baddbmm((x * x).sum(2)[:, :, None] + (y * y).sum(2)[:, None, :], x, y.transpose(1, 2),
                            alpha=-2)
    return squared.masked_fill_(squared < 1e-12, 0.0).sqrt_()


class MoverSimilarity:
    """exp(-EMD) between the hypothesis's and the reference's bags; subclasses fix the bag.

    Float32 [B] on the input's device, always finite: 1 when neither document has a word left
    after preprocessing, 0 when only one has none (an empty hypothesis, or no reference).
    """

    name: str
    word_mass: float
    sentence_mass: float
    needs_reference = True

    def __init__(self, embeddings: Embeddings):
        self.embeddings = embeddings

    def __call__(self, inputs: RewardInput) -> Tensor:
        hyp_points, hyp_weights = build_bag(self.embeddings.embed_batch(inputs, "hyp"),
                                            self.word_mass, self.sentence_mass)
        ref_points, ref_weights = build_bag(self.embeddings.embed_batch(inputs, "ref"),
                                            self.word_mass, self.sentence_mass)
        cost = euclidean(hyp_points, ref_points)
        return torch.exp(-batched_emd(cost, hyp_weights, ref_weights)).float()


class WordMoverSimilarity(MoverSimilarity):
    """WMS: word types weighted by count(w)/|A| (Eq. 1-3)."""

    name, word_mass, sentence_mass = "wms", 1.0, 0.0


class SentenceMoverSimilarity(MoverSimilarity):
    """SMS: sentences (mean word vector) weighted by |s|/|A| (Eq. 4)."""

    name, word_mass, sentence_mass = "sms", 0.0, 1.0


class SentenceWordMoverSimilarity(MoverSimilarity):
    """S+WMS: words and sentences in one bag, each half of the mass (Eq. 5)."""

    name, word_mass, sentence_mass = "s_wms", 0.5, 0.5
