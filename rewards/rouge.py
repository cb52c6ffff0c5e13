"""ROUGE as rewards, ROUGE-L (LCS F-measure) and ROUGE-N, on token ids: the batch's host copy (`RewardInput.host_ids`);
and ROUGE as the test measures it, rouge-score on text (`RougeScore`).

The LCS lengths come from rapidfuzz's bit-parallel LCS (C++; Hyyrö 2004), one call per pair on the
ids' host copy: 2x faster than the batched bit-parallel numpy LCS it replaced (scripts/bench_rewards.py).
The LCS is a sequential loop of a few tiny integer operations per token, so it stays on the host even
for batches on a GPU, where every step would cost a kernel launch; the ids cross once per batch.
"""
from __future__ import annotations

import functools
from collections import Counter
from typing import Sequence

import numpy as np
import torch
from rapidfuzz.distance import LCSseq
from nltk.stem import porter
from rouge_score import rouge_scorer, tokenize, tokenizers
from torch import Tensor

from models.text.vocab import as_text, split_at_sentence_ends
from rewards.base import Display, Reward, RewardInput


def lcs_lengths(hyps: Sequence[Sequence[int]], refs: Sequence[Sequence[int]]) -> np.ndarray:
    """Longest-common-subsequence length of each (hyp, ref) pair of token-id sequences. int64 [B]."""
    return np.fromiter(map(LCSseq.similarity, hyps, refs), dtype=np.int64, count=len(hyps))


def lcs_f_measure(lcs: np.ndarray, hyp_lens: np.ndarray, ref_lens: np.ndarray, beta: float = 1.0) -> np.ndarray:
    """(1+β²)PR / (R+β²P) with P = lcs/|hyp|, R = lcs/|ref|; 0 where the LCS (or either side) is empty."""
    precision = lcs / np.maximum(hyp_lens, 1)
    recall = lcs / np.maximum(ref_lens, 1)
    denominator = np.maximum(recall + beta ** 2 * precision, np.finfo(np.float64).tiny)
    return np.where(lcs > 0, (1 + beta ** 2) * precision * recall / denominator, 0.0)


class RougeL(Reward):
    """ROUGE-L F-measure between the hypothesis and the full reference, on extended token ids.

    β = 1 is rouge-score's `rougeL`; β = 1.2 is the ROUGE-1.5.5 setting with which Clark et al.
    (2019) report ROUGE-L's correlation with human judgments.
    """

    name = "rouge_l"
    display = Display("ROUGE-L", 100)
    needs_reference = True
    sees_repeats = True  # a repeated phrase lowers the LCS precision (`rl.penalize_repeats=blind` leaves it alone)

    def __init__(self, beta: float = 1.0):
        self.beta = float(beta)

    @property
    def test_metric(self) -> Reward:
        """What the test measures for it: rouge-score's ROUGE-L F on text, with stemming."""
        return RougeScore("rougeL")

    def __call__(self, inputs: RewardInput) -> Tensor:
        host = inputs.host_ids()
        hyp_lens, ref_lens = host["hyp_lens"], host["ref_lens"]
        hyp, ref = host["hyp"].tolist(), host["ref"].tolist()
        lcs = lcs_lengths([h[:n] for h, n in zip(hyp, hyp_lens)], [r[:m] for r, m in zip(ref, ref_lens)])
        f = lcs_f_measure(lcs, hyp_lens, ref_lens, self.beta)
        return torch.from_numpy(f).to(device=inputs.device, dtype=torch.float32)


def ngram_counts(tokens: Sequence[int], n: int, distinct: bool) -> Counter:
    """The n-grams of a token sequence with their counts (each counted once when `distinct`)."""
    grams = Counter(zip(*(tokens[i:] for i in range(n))))
    return Counter(dict.fromkeys(grams, 1)) if distinct else grams


class RougeN(Reward):
    """ROUGE-N recall, precision or F1 between the hypothesis and the full reference, on extended token ids.

    Matches are clipped counts (ROUGE-1.5.5, rouge-score); `distinct=True` counts each n-gram once, as the `rouge`
    package (pltrdy) does: the ROUGE recall of Wu et al. (2020)'s Table 1 (with the `rouge_package` tokenizer of
    `rewards.scoring`).
    """

    needs_reference = True

    def __init__(self, n: int = 1, measure: str = "recall", distinct: bool = False):
        if measure not in ("recall", "precision", "f1"):
            raise ValueError(f"measure must be recall, precision or f1, got {measure!r}")
        self.n, self.measure, self.distinct = int(n), measure, bool(distinct)
        self.name = f"rouge_{self.n}_{measure}"
        self.display = Display(self.name, 100)

    def __call__(self, inputs: RewardInput) -> Tensor:
        host = inputs.host_ids()
        values = []
        for hyp, n_hyp, ref, n_ref in zip(host["hyp"].tolist(), host["hyp_lens"], host["ref"].tolist(),
                                          host["ref_lens"]):
            h, r = ngram_counts(hyp[:n_hyp], self.n, self.distinct), ngram_counts(ref[:n_ref], self.n, self.distinct)
            match = sum((h & r).values())
            precision, recall = match / max(sum(h.values()), 1), match / max(sum(r.values()), 1)
            f1 = 2 * precision * recall / (precision + recall) if match else 0.0
            values.append({"recall": recall, "precision": precision, "f1": f1}[self.measure])
        return torch.tensor(values, dtype=torch.float32, device=inputs.device)


ROUGE_COLUMNS = {"rouge1": "ROUGE-1", "rouge2": "ROUGE-2", "rougeL": "ROUGE-L", "rougeLsum": "ROUGE-Lsum"}


@functools.lru_cache(maxsize=4096)
def rouge_f_measures(reference: str, hypothesis: str) -> dict[str, float]:
    """rouge-score's F of every `ROUGE_COLUMNS` key for one pair (Porter stemming), computed once for the four
    `RougeScore` metrics that read it."""
    scores = rouge_scorer_once().score(reference, hypothesis)
    return {key: scores[key].fmeasure for key in ROUGE_COLUMNS}


class StemCachedTokenizer(tokenizers.Tokenizer):
    """rouge-score's default tokenizer with Porter stemming, each word's stem computed once: NLTK's stemmer was the
    test's largest Python cost, and a summary's words repeat across summaries, references and validations."""

    def __init__(self):
        self.stem = functools.lru_cache(maxsize=2**17)(porter.PorterStemmer().stem)  # what `tokenize` calls

    def tokenize(self, text: str) -> list[str]:
        return tokenize.tokenize(text, self)


@functools.cache
def rouge_scorer_once() -> rouge_scorer.RougeScorer:
    """rouge-score's scorer, built once: each build logs a line ("Using default tokenizer") through absl."""
    return rouge_scorer.RougeScorer(list(ROUGE_COLUMNS), tokenizer=StemCachedTokenizer())


class RougeScore(Reward):
    """ROUGE as the test measures it: rouge-score's F-measure of `key` (rouge1, rouge2, rougeL, rougeLsum), with
    Porter stemming, on the summaries' text. rougeLsum sees their sentences on separate lines (ROUGE-1.5.5's
    summary-level ROUGE-L), the hypothesis split at its sentence-final tokens, the reference as its sentences; rougeL
    sees each as one sequence. We split sentences ourselves: rouge-score's splitter needs NLTK data that is offline
    here. Float64, as rouge-score computes it; the papers print it ×100."""

    needs_reference = True
    sees_repeats = True

    def __init__(self, key: str = "rougeL"):
        if key not in ROUGE_COLUMNS:
            raise ValueError(f"key must be one of {tuple(ROUGE_COLUMNS)}, got {key!r}")
        self.name = key
        self.display = Display(ROUGE_COLUMNS[key], 100)

    def __call__(self, inputs: RewardInput) -> Tensor:
        values = [0.0 if ref is None else rouge_f_measures(*as_text([ref, split_at_sentence_ends(hyp)]))[self.name]
                  for hyp, ref in zip(inputs.hyp_tokens(), inputs.batch.references)]
        return torch.tensor(values, dtype=torch.float64, device=inputs.device)


MULTI_REFERENCE = ("max", "all", "prob")


def multi_reference_recall(hyp: Sequence, refs: Sequence[Sequence], n: int = 1, method: str = "prob") -> float:
    """ROUGE-N recall against several references, as Toutanova et al. (2016, §4.1) aggregate them: MULT-MAX, the best
    single-reference recall; MULT-ALL, the union of the references' units; MULT-PROB, each unit weighted by the
    fraction of references that contain it. The i-th occurrence of an n-gram is its own unit (their footnote 8), so
    a unit's weight is the fraction of references with at least i of it, and recall = Φ(refs)·Φ(o) / |Φ(refs)|₁."""
    if method not in MULTI_REFERENCE:
        raise ValueError(f"method must be one of {MULTI_REFERENCE}, got {method!r}")
    if not refs:
        raise ValueError("multi_reference_recall needs at least one reference")
    counts = [ngram_counts(list(r), n, distinct=False) for r in refs]
    out = ngram_counts(list(hyp), n, distinct=False)
    if method == "max":
        return max(sum((out & c).values()) / max(sum(c.values()), 1) for c in counts)
    weight = {}  # (n-gram, i) -> weight of its i-th occurrence
    for gram in set().union(*counts):
        for i in range(1, max(c[gram] for c in counts) + 1):
            have = [c[gram] >= i for c in counts]
            weight[gram, i] = float(any(have)) if method == "all" else sum(have) / len(counts)
    match = sum(w for (gram, i), w in weight.items() if out[gram] >= i)
    return match / max(sum(weight.values()), 1e-12)
