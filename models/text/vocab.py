"""Word-level tokenization and the vocabulary with per-example extended (copy) ids.

Id layout of one example's extended vocabulary (See et al. 2017):
  [0, V)                     model vocabulary (0..3 are <pad>, <unk>, <s>, </s>)
  [V, V + n_article_oovs)    article words outside the vocabulary: the model can copy these
  [V + n_article_oovs, ...)  reference-only words outside the vocabulary: never produced by the
                             model, but kept distinct so that rewards compare real words, not <unk>
"""
from __future__ import annotations

import hashlib
import re
from collections import Counter
from pathlib import Path
from typing import Iterable

from nltk.tokenize import TreebankWordTokenizer
from syntok import segmenter

from models.text.records import write_text

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<s>", "</s>"
SPECIALS = (PAD, UNK, BOS, EOS)
SENTENCE_END = (".", "!", "?")

_treebank = TreebankWordTokenizer()
# A sentence ends at . ! ? (optionally followed by closing quotes/brackets) before whitespace.
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])[\"')\]]*\s+|\n+")


def split_at_punctuation(text: str) -> list[str]:
    """Sentences ending at newlines and at every sentence-final punctuation mark (abbreviations included)."""
    return [s.strip() for s in _SENTENCE_BREAK.split(text) if s and s.strip()]


def split_sentences(text: str) -> list[str]:
    """Raw text's sentences: each line's, as syntok's rules split it (abbreviations, initials, decimals and quotes stay
    inside their sentence). syntok starts sentences at capitals, so text without any (lower-cased) keeps the
    punctuation rule. scripts/bench_splitters.py measured both against the alternatives (docs/RESULTS.md)."""
    if text == text.lower():
        return split_at_punctuation(text)
    return ["".join(token.spacing + token.value for token in sentence).strip()
            for line in text.split("\n") if line.strip()
            for paragraph in segmenter.analyze(line) for sentence in paragraph]


def tokenize_sentences(text: str, pretokenized: bool = False) -> list[list[str]]:
    """Lower-cased PTB-style tokens, one list per sentence.

    Raw text is split into sentences before it is lower-cased (a capital tells a new sentence from an abbreviation's
    next word). `pretokenized` text (CNN/DM as See et al. released it) is split on whitespace; its sentences are
    its lines, or, on a single line, runs ending in a sentence-final token.
    """
    if not pretokenized:
        return [_treebank.tokenize(s.lower()) for s in split_sentences(text)]
    lines = [line.split() for line in text.lower().split("\n") if line.strip()]
    if len(lines) > 1:
        return lines
    return split_at_sentence_ends(lines[0] if lines else [])


def split_at_sentence_ends(tokens: list[str]) -> list[list[str]]:
    """Group a token sequence into sentences, each ending at a sentence-final token."""
    sentences, current = [], []
    for token in tokens:
        current.append(token)
        if token in SENTENCE_END:
            sentences.append(current)
            current = []
    if current:
        sentences.append(current)
    return sentences


def as_text(summaries: list[list[list[str]]]) -> list[str]:
    """Tokenized summaries as text: tokens joined by spaces, one sentence per line."""
    return ["\n".join(" ".join(s) for s in summary) for summary in summaries]


def ensure_final_period(sentences: list[list[str]]) -> list[list[str]]:
    """End every summary sentence with a sentence-final token so that decoded summaries can be split."""
    return [s if s[-1] in SENTENCE_END else s + ["."] for s in sentences if s]


class Vocabulary:
    """The model's word list plus the extended-id bookkeeping for copying."""

    pad_id, unk_id, bos_id, eos_id = 0, 1, 2, 3

    def __init__(self, words: Iterable[str]):
        self.itos: list[str] = list(SPECIALS) + [w for w in words if w not in SPECIALS]
        self.stoi: dict[str, int] = {w: i for i, w in enumerate(self.itos)}
        # a text's words: `<s>` or `</s>` written in a text is a word (copied as an OOV), never the start or end id
        self.word_ids = {w: i for w, i in self.stoi.items() if w not in (PAD, BOS, EOS)}

    def __len__(self) -> int:
        return len(self.itos)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocabulary) and self.itos == other.itos

    __hash__ = object.__hash__

    @classmethod
    def build(cls, token_lists: Iterable[Iterable[str]], size: int) -> "Vocabulary":
        """The `size` most frequent words (specials included in the count), ties broken alphabetically."""
        counts = Counter(t for tokens in token_lists for t in tokens)
        for special in SPECIALS:
            counts.pop(special, None)
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        return cls(w for w, _ in ranked[: max(size - len(SPECIALS), 0)])

    def digest(self) -> str:
        """A short checksum of the word list: names a cache file, so that a damaged file is recognised."""
        return hashlib.sha1("\n".join(self.itos).encode("utf-8")).hexdigest()[:12]

    def save(self, path: str | Path) -> None:
        """Written beside `path`, then renamed over it: a reader never sees half a vocabulary."""
        text = "\n".join(self.itos[len(SPECIALS):]) + "\n"
        write_text(path, text)

    @classmethod
    def load(cls, path: str | Path) -> "Vocabulary":
        return cls(Path(path).read_text(encoding="utf-8").splitlines())

    def id(self, word: str) -> int:
        return self.stoi.get(word, self.unk_id)

    def ids(self, tokens: Iterable[str]) -> list[int]:
        """In-vocabulary ids, out-of-vocabulary words as <unk> (what the model reads)."""
        return [self.word_ids.get(t, self.unk_id) for t in tokens]

    def extended_ids(self, tokens: Iterable[str], oovs: list[str]) -> list[int]:
        """Extended ids; words outside the vocabulary and `oovs` are appended to `oovs` (in place)."""
        index = {w: i for i, w in enumerate(oovs)}
        out = []
        for token in tokens:
            i = self.word_ids.get(token)
            if i is None:
                if token not in index:
                    index[token] = len(oovs)
                    oovs.append(token)
                i = len(self) + index[token]
            out.append(i)
        return out

    def token(self, extended_id: int, oovs: list[str]) -> str:
        if extended_id < len(self):
            return self.itos[extended_id]
        k = extended_id - len(self)
        return oovs[k] if k < len(oovs) else UNK

    def decode(self, extended_ids: Iterable[int], oovs: list[str], stop_at_eos: bool = True) -> list[str]:
        """Tokens of an extended-id sequence, stopping at </s> and skipping <pad> and <s>."""
        tokens = []
        for i in extended_ids:
            i = int(i)
            if i == self.eos_id and stop_at_eos:
                break
            if i in (self.pad_id, self.bos_id):
                continue
            tokens.append(self.token(i, oovs))
        return tokens
