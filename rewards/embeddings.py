"""Word vectors for the mover's similarities, one padded tensor per side of a batch.

Preprocessing follows Clark et al. (2019) and their code (eaclark07/sms, smd.py): tokens are
lower-cased, and a token counts as a word only if it is alphabetic and not an NLTK English stopword.
Type-based vectors (GloVe, word2vec) also drop words without a vector; the reference code instead
gives them spaCy's zero vector, which keeps them in |A| and pulls sentence means towards 0.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np
from numba import njit

from models.text.vectors import word_vectors
from models.text.vocab import SENTENCE_END, Vocabulary
from rewards.base import RewardInput

# NLTK's English stopword list (179 words), the list smd.py uses via nltk.corpus.stopwords. Kept
# here because the NLTK corpus is a separate download (unavailable offline) and sklearn's/spaCy's
# lists are different, larger lists.
STOPWORDS = frozenset("""
i me my myself we our ours ourselves you you're you've you'll you'd your yours yourself yourselves
he him his himself she she's her hers herself it it's its itself they them their theirs themselves
what which who whom this that that'll these those am is are was were be been being have has had
having do does did doing a an the and but if or because as until while of at by for with about
against between into through during before after above below to from up down in out on off over
under again further then once here there when where why how all any both each few more most other
some such no nor not only own same so than too very s t can will just don don't should should've
now d ll m o re ve y ain aren aren't couldn couldn't didn didn't doesn doesn't hadn hadn't hasn
hasn't haven haven't isn isn't ma mightn mightn't mustn mustn't needn needn't shan shan't shouldn
shouldn't wasn wasn't weren weren't won won't wouldn wouldn't
""".split())


def is_content_word(word: str) -> bool:
    """Alphabetic and not a stopword (after lower-casing): the words the metrics compare."""
    return word.isalpha() and word.lower() not in STOPWORDS


@dataclass
class TokenVectors:
    """One side (hypotheses or references) of a batch, token by token, on the host, where the
    transport problems are solved (`rewards.mover`).

    keep         [B, N] bool   a content word with a vector: the only tokens the metrics see
    sentence     [B, N] int64  sentence index of the token within its document (never decreasing)
    rows         [B, N] int64  where the token's vector is: row r of `table`, or row r - len(table)
                               of `extra` (a batch's OOV words). Tokens of equal row are one word
                               type; contextual vectors give every token its own row.
    table, extra [T, D], [E, D] float64
    """

    keep: np.ndarray
    sentence: np.ndarray
    rows: np.ndarray
    table: np.ndarray
    extra: np.ndarray

    def arrays(self) -> tuple[np.ndarray, ...]:
        """(rows, keep, sentence, table, extra): one side as `rewards.mover`'s kernel takes it."""
        return self.rows, self.keep, self.sentence, self.table, self.extra


class Embeddings(Protocol):
    def embed_batch(self, inputs: RewardInput, side: str) -> TokenVectors:
        """Vectors of the hypotheses (`side="hyp"`) or the references (`side="ref"`)."""
        ...


@dataclass
class _IdTable:
    """Per-id lookups: vector, content-word flag, sentence-end flag."""

    vectors: np.ndarray  # [n, D] float64: exact means and costs
    keep: np.ndarray  # [n] bool
    end: np.ndarray  # [n] bool


class WordVectors:
    """Type-based embeddings (one vector per word), looked up by extended vocabulary id.

    The `vocab id -> vector` table and its masks are built once per vocabulary and cached; only
    extended ids >= len(vocab) (copied or reference-only OOV words) are looked up per batch, by their
    strings in `batch.oovs`. Everything lives on the host, with the transport solver: the batch's
    ids come over in one copy (`RewardInput.host_ids`), which is less than moving vectors would be.
    """

    def __init__(self, words: Sequence[str], matrix: np.ndarray):
        self.matrix = np.asarray(matrix, dtype=np.float32)
        self.row: dict[str, int] = {}
        for i, word in enumerate(words):
            self.row.setdefault(word, i)  # the first (most frequent) entry wins
        self._described: dict[str, int] = {}
        self._tables: dict[Vocabulary, _IdTable] = {}
        self._last_oovs: tuple[list[list[str]], tuple[int, ...], _IdTable] | None = None

    def _describe(self, word: str) -> int:
        """4 * (row + 1) + 2 * (content word with a vector) + (sentence end), memoised: OOV words
        recur across batches; one int per word keeps the per-batch lookup fast."""
        code = self._described.get(word)
        if code is None:
            row = self.row.get(word.lower(), -1)
            code = self._described[word] = (4 * (row + 1) + 2 * (row >= 0 and is_content_word(word))
                                            + (word in SENTENCE_END))
        return code

    def _lookup(self, words: Sequence[str]) -> _IdTable:
        if not words:  # a batch without OOV words: skip a dozen numpy calls
            return _IdTable(np.zeros((0, self.matrix.shape[1])), np.zeros(0, bool), np.zeros(0, bool))
        codes = np.fromiter(map(self._describe, words), dtype=np.int64, count=len(words))
        rows = codes // 4 - 1
        vectors = self.matrix[np.maximum(rows, 0)].astype(np.float64) * (rows >= 0)[:, None]
        return _IdTable(vectors, (codes & 2).astype(bool), (codes & 1).astype(bool))

    def _oov_table(self, oovs: list[list[str]]) -> tuple[_IdTable, int]:
        """Example b's k-th OOV word at row b * width + k; the last batch's table is reused (both
        sides and every reward of a batch share it)."""
        lengths = tuple(map(len, oovs))  # guards against lists extended in place
        width = max(lengths, default=0)
        last = self._last_oovs
        if last is None or last[0] is not oovs or last[1] != lengths:
            table = self._lookup([o[k] if k < len(o) else "" for o in oovs for k in range(width)])
            self._last_oovs = last = (oovs, lengths, table)
        return last[2], width

    def vocab_table(self, vocab: Vocabulary) -> _IdTable:
        if vocab not in self._tables:
            self._tables[vocab] = self._lookup(vocab.itos)
        return self._tables[vocab]

    def embed_batch(self, inputs: RewardInput, side: str) -> TokenVectors:
        host = inputs.host_ids()
        if side == "hyp":
            ids, lengths = host["hyp"], host["hyp_lens"]
        else:
            ids, lengths = host["ref"], host["ref_lens"]
        table, n_vocab = self.vocab_table(inputs.vocab), len(inputs.vocab)
        oov, width = self._oov_table(inputs.batch.oovs)
        keep, sentence, rows = _lookup_tokens(ids, lengths, n_vocab, width, table.keep, table.end, oov.keep, oov.end)
        if side == "ref":  # references keep the sentence split of the data, not one found from . ! ?
            sentence = host["ref_sentence"]
        return TokenVectors(keep, sentence, rows, table=table.vectors, extra=oov.vectors)


@njit(cache=True)
def _lookup_tokens(ids, lengths, n_vocab, width, vocab_keep, vocab_end, oov_keep, oov_end):
    """keep, sentence (counted from sentence ends) and vector rows of the first lengths[b] ids of each
    row b; example b's k-th OOV word (id n_vocab + k) is row n_vocab + b * width + k."""
    keep, sentence = np.zeros(ids.shape, np.bool_), np.zeros(ids.shape, np.int64)
    rows = np.empty(ids.shape, np.int64)
    for b in range(ids.shape[0]):
        current = 0
        for t in range(ids.shape[1]):
            i = ids[b, t]
            rows[b, t] = i if i < n_vocab else i + b * width
            if t < lengths[b]:
                keep[b, t] = vocab_keep[i] if i < n_vocab else oov_keep[i - n_vocab + b * width]
                sentence[b, t] = current
                current += vocab_end[i] if i < n_vocab else oov_end[i - n_vocab + b * width]
    return keep, sentence, rows


@functools.lru_cache(maxsize=None)
def _load_word_vectors(path: str | None) -> WordVectors:
    return WordVectors(*word_vectors(path))


class GloveEmbeddings:
    """GloVe or word2vec vectors from a text file (`path`), GloVe 6B 50d by default.

    Loaded once per path per process: rewards built with the same path share the vectors and their
    per-vocabulary device tables.
    """

    def __init__(self, path: str | None = None):
        self.word_vectors = _load_word_vectors(None if path is None else str(Path(path).expanduser().resolve()))

    def embed_batch(self, inputs: RewardInput, side: str) -> TokenVectors:
        return self.word_vectors.embed_batch(inputs, side)
