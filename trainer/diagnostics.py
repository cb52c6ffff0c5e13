"""Cheap on-device statistics of sampled summaries, to see reward hacking early."""
from __future__ import annotations

import torch
from torch import Tensor

from rewards.repeats import ngram_keys, repeated_ngram_counts


def repeated_ngram_rate(ids: Tensor, lengths: Tensor, base: int, n: int = 3) -> Tensor:
    """Share of a batch's n-grams that already occurred earlier in the same summary."""
    repeats, total = repeated_ngram_counts(ids, lengths, base, n)
    return repeats.sum() / total.sum().clamp(min=1)


def novel_ngram_rate(ids: Tensor, lengths: Tensor, source: Tensor, source_lengths: Tensor, base: int,
                     n: int = 3) -> Tensor:
    """Share of a batch's summary n-grams that do not occur in the example's own source."""
    keys, valid = ngram_keys(ids, lengths, n, base)
    src_keys, src_valid = ngram_keys(source, source_lengths, n, base)
    row = torch.arange(ids.size(0), device=ids.device)[:, None]
    # Key by (row, n-gram) so membership is tested within each example only.
    offset = base ** n
    ours = (keys + row * offset)[valid]
    theirs = (src_keys + row * offset)[src_valid]
    return (~torch.isin(ours, theirs)).sum() / valid.sum().clamp(min=1)


def distinct_ngram_ratio(ids: Tensor, lengths: Tensor, base: int, n: int = 3) -> Tensor:
    """Distinct n-grams over all n-grams of a batch, across its rows: low when the samples say the same things."""
    keys, valid = ngram_keys(ids, lengths, n, base)
    keys = keys[valid]
    return torch.tensor(keys.unique().numel() / max(keys.numel(), 1), device=ids.device)


def lead_lengths(source: Tensor, source_lengths: Tensor, sentence_ends: Tensor, sentences: int = 3) -> Tensor:
    """Tokens in each source's first `sentences` sentences (up to its `sentences`-th sentence-final token)."""
    inside = torch.arange(source.size(1), device=source.device)[None] < source_lengths[:, None]
    ended = torch.isin(source, sentence_ends) & inside
    before = ended.long().cumsum(1) - ended.long()  # sentence ends strictly before each position
    return ((before < sentences) & inside).sum(1)


def lead_copy_rate(ids: Tensor, lengths: Tensor, source: Tensor, source_lengths: Tensor, sentence_ends: Tensor,
                   base: int, n: int = 3, sentences: int = 3) -> Tensor:
    """Share of a batch's summary n-grams found verbatim in the example's lead (its first three sentences): LS-Score's
    S rewards copying the lead, and this shows it happening."""
    keys, valid = ngram_keys(ids, lengths, n, base)
    src_keys, src_valid = ngram_keys(source, lead_lengths(source, source_lengths, sentence_ends, sentences), n, base)
    row = torch.arange(ids.size(0), device=ids.device)[:, None]
    offset = base ** n  # key by (row, n-gram): membership within each example only
    found = torch.isin((keys + row * offset)[valid], (src_keys + row * offset)[src_valid])
    return found.sum() / valid.sum().clamp(min=1)
