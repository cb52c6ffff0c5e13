"""N-grams of token-id rows, counted on the device: the repeat penalty's count (`rewards.repeats`) and the cheap
statistics of sampled summaries that show reward hacking early (repeats, novelty, distinctness, copying from the
lead), logged by the trainer. Rows hold ids below `base`; `lengths` says where each row ends."""
from __future__ import annotations

import torch
from torch import Tensor


def ngram_keys(ids: Tensor, lengths: Tensor, n: int, base: int) -> tuple[Tensor, Tensor]:
    """Each n-gram of each row as one int64 key (ids < base), and a mask of n-grams inside `lengths`."""
    windows = ids.unfold(1, n, 1) if ids.size(1) >= n else ids.new_zeros(ids.size(0), 0, n)
    keys = torch.zeros(windows.shape[:2], dtype=torch.long, device=ids.device)
    for k in range(n):
        keys = keys * base + windows[..., k]
    valid = torch.arange(keys.size(1), device=ids.device)[None] < (lengths[:, None] - n + 1)
    return keys, valid


def repeated_ngram_counts(ids: Tensor, lengths: Tensor, base: int, n: int = 3) -> tuple[Tensor, Tensor]:
    """Per row: how many n-grams already occurred earlier in the same summary, and how many n-grams it has."""
    keys, valid = ngram_keys(ids, lengths, n, base)
    keys = torch.where(valid, keys, -1 - torch.arange(keys.numel(), device=ids.device).view_as(keys))
    ordered = keys.sort(dim=1).values
    repeats = ((ordered[:, 1:] == ordered[:, :-1]) & (ordered[:, 1:] >= 0)).sum(1)
    return repeats, valid.sum(1)


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
