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
from torch import Tensor

from rewards.base import RewardInput
from rewards.embeddings import Embeddings, TokenVectors
from rewards.transport import batched_emd


def build_bag(tokens: TokenVectors, word_mass: float, sentence_mass: float) -> tuple[Tensor, Tensor]:
    """Points [B, K, D] and weights [B, K] (float64; zero weight = not in the bag) of each document:
    its word types with total mass `word_mass` and its sentences with total mass `sentence_mass`."""
    keep = tokens.keep
    vectors = tokens.vectors.to(torch.float64) * keep[..., None]
    share = keep / keep.sum(1, keepdim=True).clamp(min=1).to(torch.float64)  # 1/|A| per kept token
    points, weights = [], []
    if word_mass:
        type_share = share
        if tokens.word_type is not None:  # a type's count(w)/|A| goes to its first occurrence
            same = (tokens.word_type[:, :, None] == tokens.word_type[:, None, :]) & keep[:, None, :]
            first = keep & ~(same & torch.ones_like(same[0]).tril(-1)).any(2)
            type_share = torch.where(first, same.sum(2) * share, torch.zeros_like(share))
        points.append(vectors)
        weights.append(word_mass * type_share)
    if sentence_mass:  # sentence s of a document: slot s, mean of its words
        slot = (tokens.sentence * keep).clamp(0, keep.size(1) - 1)
        sums = torch.zeros_like(vectors).scatter_add_(1, slot[..., None].expand_as(vectors), vectors)
        sentence_share = torch.zeros_like(share).scatter_add_(1, slot, share)  # |s|/|A|
        counts = torch.zeros_like(share).scatter_add_(1, slot, keep.to(share.dtype))
        points.append(sums / counts.clamp(min=1)[..., None])
        weights.append(sentence_mass * sentence_share)
    return torch.cat(points, 1), torch.cat(weights, 1)


def pack(points: Tensor, weights: Tensor, size: int) -> tuple[Tensor, Tensor]:
    """The `size` first items with nonzero weight (in bag order), nonzero weights first."""
    order = torch.argsort((weights == 0).to(torch.int8), dim=1, stable=True)[:, :size]
    return points.gather(1, order[..., None].expand(-1, -1, points.size(2))), weights.gather(1, order)


class MoverSimilarity:
    """exp(-EMD) between the hypothesis's and the reference's bags; subclasses fix the bag."""

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
        sizes = torch.stack([(hyp_weights > 0).sum(1).max(), (ref_weights > 0).sum(1).max()]).tolist()
        hyp_points, hyp_weights = pack(hyp_points, hyp_weights, sizes[0])
        ref_points, ref_weights = pack(ref_points, ref_weights, sizes[1])
        # difference-based Euclidean: exact zeros for identical points (the mm trick is not)
        cost = torch.cdist(hyp_points, ref_points, compute_mode="donot_use_mm_for_euclid_dist")
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
