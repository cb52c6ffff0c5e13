"""Examples and padded batches: what flows from the data pipeline into models and rewards."""
from __future__ import annotations

from dataclasses import dataclass, fields, replace

import torch
from torch import Tensor

from models.text.vocab import Vocabulary


@dataclass
class Example:
    """One tokenized article with its reference summary (None for reference-free articles)."""

    id: str
    source: list[str]
    reference: list[list[str]] | None  # sentences of tokens
    domain: str = "supervised"
    text: str | None = None  # the article as it came (cased, untruncated), for rewards that read text; None: tokens


@dataclass
class Batch:
    """A padded batch. Id tensors use the extended vocabulary described in `models.text.vocab`.

    src          [B, S]  vocabulary ids of the (truncated) article, OOV as <unk>   (encoder input)
    src_ext      [B, S]  extended ids of the article                              (copy targets)
    src_mask     [B, S]  True on real tokens
    dec_in       [B, T]  <s> + target[:-1], OOV as <unk>                         (teacher forcing)
    target       [B, T]  extended ids of the truncated summary + </s> (no </s> when truncated);
                         reference-only OOVs as <unk> since the model cannot produce them
    target_mask  [B, T]  True on real target positions; all False without a reference
    ref          [B, R]  extended ids of the full-length reference (no </s>), reference-only OOVs
                         kept distinct; <pad> where there is no reference
    ref_sentence [B, R]  sentence index of each reference token, -1 on padding
    ref_lens     [B]     reference tokens per row (0 without a reference)
    has_reference [B]    bool
    n_copy_oovs          max number of article OOVs in the batch: the model's output size is V + this
    oovs                 per example: article OOVs, then reference-only OOVs (index k is id V + k)
    texts                per example: the article's original text (`Example.text`)
    """

    ids: list[str]
    src: Tensor
    src_ext: Tensor
    src_mask: Tensor
    dec_in: Tensor
    target: Tensor
    target_mask: Tensor
    ref: Tensor
    ref_sentence: Tensor
    ref_lens: Tensor
    has_reference: Tensor
    n_copy_oovs: int
    oovs: list[list[str]]
    sources: list[list[str]]
    references: list[list[list[str]] | None]
    domains: list[str]
    texts: list[str]

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def device(self) -> torch.device:
        return self.src.device

    def to(self, device: torch.device | str, **kwargs) -> "Batch":
        moved = {f.name: getattr(self, f.name).to(device, **kwargs)
                 for f in fields(self) if isinstance(getattr(self, f.name), Tensor)}
        return replace(self, **moved)

    def index_select(self, rows: list[int]) -> "Batch":
        """The examples at `rows`, repeats allowed (k samples per article); the extended vocabulary is kept."""
        index = torch.tensor(rows, dtype=torch.long, device=self.device)
        picked = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Tensor):
                picked[f.name] = value.index_select(0, index)
            elif isinstance(value, list):
                picked[f.name] = [value[i] for i in rows]
        return replace(self, **picked)


def _pad(rows: list[list[int]], value: int, min_len: int = 1) -> Tensor:
    width = max([len(r) for r in rows] + [min_len])
    return torch.tensor([r + [value] * (width - len(r)) for r in rows], dtype=torch.long)


def collate(examples: list[Example], vocab: Vocabulary, max_source_len: int = 400,
            max_target_len: int = 100) -> Batch:
    """Encode and pad examples. Articles are truncated to `max_source_len`, decoder targets to
    `max_target_len`; the reward-side reference keeps its full length."""
    src, src_ext, dec_in, target, ref, ref_sentence, oov_lists = [], [], [], [], [], [], []
    n_copy = 0
    for ex in examples:
        tokens = ex.source[:max_source_len]
        oovs: list[str] = []
        src.append(vocab.ids(tokens))
        src_ext.append(vocab.extended_ids(tokens, oovs))
        n_article_oovs = len(oovs)
        n_copy = max(n_copy, n_article_oovs)
        if ex.reference is None:
            dec_in.append([])
            target.append([])
            ref.append([])
            ref_sentence.append([])
        else:
            words = [t for sentence in ex.reference for t in sentence]
            full = vocab.extended_ids(words, oovs)
            ref.append(full)
            ref_sentence.append([i for i, s in enumerate(ex.reference) for _ in s])
            copyable = [i if i < len(vocab) + n_article_oovs else vocab.unk_id for i in full]
            tgt = copyable[:max_target_len]
            if len(copyable) < max_target_len:  # a truncated target has no </s> (See et al.)
                tgt = tgt + [vocab.eos_id]
            target.append(tgt)
            dec_in.append([vocab.bos_id] + [i if i < len(vocab) else vocab.unk_id for i in tgt[:-1]])
        oov_lists.append(oovs)
    src_t = _pad(src, vocab.pad_id)
    target_t = _pad(target, vocab.pad_id)
    return Batch(
        ids=[ex.id for ex in examples],
        src=src_t,
        src_ext=_pad(src_ext, vocab.pad_id),
        src_mask=_pad([[1] * len(s) for s in src], 0).bool(),
        dec_in=_pad(dec_in, vocab.pad_id),
        target=target_t,
        target_mask=_pad([[1] * len(t) for t in target], 0).bool(),
        ref=_pad(ref, vocab.pad_id),
        ref_sentence=_pad(ref_sentence, -1),
        ref_lens=torch.tensor([len(r) for r in ref], dtype=torch.long),
        has_reference=torch.tensor([ex.reference is not None for ex in examples]),
        n_copy_oovs=n_copy,
        oovs=oov_lists,
        sources=[ex.source[:max_source_len] for ex in examples],
        references=[ex.reference for ex in examples],
        domains=[ex.domain for ex in examples],
        texts=[" ".join(ex.source) if ex.text is None else ex.text for ex in examples],
    )
