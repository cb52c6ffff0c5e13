"""LS-Score (Wu et al. 2020): a reference-free summary evaluator trained contrastively, without human labels.

  - L (linguistic, Eq. 5-6): a vocabulary head W1·σ(W0·H) over the summary's encoded tokens; L is the mean
    log-probability of each token at its own position (special tokens and pads never count);
  - S (semantic, Eq. 1-4): the cosine between the pooled encodings (cls | mean) of the article and the summary, or
    (`similarity`, ours) the precision, recall or F1 of their greedy token alignment, as BERTScore aligns a
    candidate with a reference (`aligned`);
  - LS = α·L + β·S (Eq. 7; the paper fixes α = 0.01, β = 1).

`LSScorer` is the model (any transformers encoder is injected); `Negatives` perturbs a reference into the three
negatives of §3.4 and `ranking_loss` is the margin loss (the paper's single hinge on LS, or the authors' code's two:
L over deleted and shuffled, S over deleted and inserted). `LSScore` is the reward: the frozen scorer, off the
summarizer, on its inputs' device under `inference_mode`, article encodings cached per article.
Trained offline by `scripts/train_ls_score.py`.
"""
from __future__ import annotations

import random
from collections import OrderedDict
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from models.text.records import DataError, atomic_write, read_jsonl
from models.text.vectors import minilm_path
from rewards.base import Display, Reward, RewardInput
from rewards.correlation import correlation
from rewards.embeddings import STOPWORDS
from models.text.pretrained import load_pretrained

CHECKPOINT = "ls_score.pt"
SIMILARITIES = ("cosine", "precision", "recall", "f1")  # what S is: LSConfig.similarity


@dataclass
class LSConfig:
    encoder: str = ""  # a local directory or hub name ("bert-base-uncased", the paper's); "" = all-MiniLM-L6-v2
    pooling: str = "mean"  # cls | mean
    alpha: float = 0.01  # weight of L
    beta: float = 1.0  # weight of S
    max_article_tokens: int = 256
    max_summary_tokens: int = 128
    similarity: str = "cosine"  # S: cosine of the pooled encodings, or precision | recall | f1 of token alignment

    def __post_init__(self):
        if self.pooling not in ("cls", "mean"):
            raise ValueError(f"pooling must be 'cls' or 'mean', got {self.pooling!r}")
        if self.similarity not in SIMILARITIES:
            raise ValueError(f"similarity must be one of {SIMILARITIES}, got {self.similarity!r}")


def aligned(summary: Tensor, summary_real: Tensor, article: Tensor, article_real: Tensor) -> dict[str, Tensor]:
    """Greedy token alignment (BERTScore's, Zhang et al. 2020) of summary states [B, N, K] with article states
    [B, M, K], over their real tokens ([B, N], [B, M] masks): precision is the mean over summary tokens of the best
    cosine with an article token (what the article supports), recall the converse (what of the article is covered),
    f1 their harmonic mean. P and R below 0 count as 0; all three are 0 where either side has no token. Each [B]."""
    sim = F.normalize(summary, dim=-1) @ F.normalize(article, dim=-1).transpose(1, 2)  # [B, N, M]
    sim = sim.masked_fill(~(summary_real.unsqueeze(2) & article_real.unsqueeze(1)), -2.0)  # below every cosine
    s_real, a_real = summary_real.to(sim.dtype), article_real.to(sim.dtype)
    P = ((sim.max(2).values * s_real).sum(1) / s_real.sum(1).clamp(min=1)).clamp(min=0)
    R = ((sim.max(1).values * a_real).sum(1) / a_real.sum(1).clamp(min=1)).clamp(min=0)
    f1 = 2 * P * R / (P + R).clamp(min=1e-12)
    both = summary_real.any(1) & article_real.any(1)
    return {name: torch.where(both, value, torch.zeros_like(value))
            for name, value in (("precision", P), ("recall", R), ("f1", f1))}


class LSScorer(nn.Module):
    """The evaluator: an injected encoder, the L head (transform tied to a decoder sharing the input embeddings,
    as BERT's MLM head does) and the S cosine."""

    def __init__(self, encoder: nn.Module, config: LSConfig):
        super().__init__()
        self.encoder, self.config = encoder, config
        width = encoder.config.hidden_size
        self.transform = nn.Linear(width, width)  # W0
        self.norm = nn.LayerNorm(width)
        embeddings = encoder.get_input_embeddings().weight  # [V, K]
        self.decoder_bias = nn.Parameter(torch.zeros(embeddings.size(0)))  # W1 is the embedding matrix, tied

    def encode(self, ids: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """Token states H [B, N, K] and the pooled vector [B, K] ([CLS] or the mean over real tokens)."""
        H = self.encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        if self.config.pooling == "cls":
            return H, H[:, 0]
        weights = mask.unsqueeze(-1).to(H.dtype)
        return H, (H * weights).sum(1) / weights.sum(1).clamp(min=1)

    def linguistic(self, H: Tensor, ids: Tensor, counted: Tensor) -> Tensor:
        """Mean log p(token_i | H_i) over the `counted` positions (real, non-special tokens): [B]."""
        logits = F.linear(self.norm(F.gelu(self.transform(H))), self.encoder.get_input_embeddings().weight,
                          self.decoder_bias)  # [B, N, V]
        logp = logits.float().log_softmax(-1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)  # [B, N]
        counted = counted.to(logp.dtype)
        return (logp * counted).sum(1) / counted.sum(1).clamp(min=1)

    def article(self, ids: Tensor, mask: Tensor, counted: Tensor) -> tuple[Tensor, Tensor]:
        """What S compares summaries with, (vectors [B, M, K], real [B, M]): the pooled encoding (M = 1) for the
        cosine, the token states and the counted tokens for the aligned forms."""
        H, pooled = self.encode(ids, mask)
        if self.config.similarity == "cosine":
            return pooled.unsqueeze(1), torch.ones(len(pooled), 1, dtype=torch.bool, device=pooled.device)
        return H, counted

    def forward(self, ids: Tensor, mask: Tensor, counted: Tensor, article: tuple[Tensor, Tensor]
                ) -> dict[str, Tensor]:
        """Scores of summaries ids/mask [B, N] against their articles (`article()`'s vectors and real mask): L, S
        and LS, each [B]."""
        H, pooled = self.encode(ids, mask)
        L = self.linguistic(H, ids, counted)
        vectors, real = article
        if self.config.similarity == "cosine":
            S = F.cosine_similarity(pooled, vectors[:, 0], dim=-1)
        else:
            S = aligned(H, counted, vectors, real)[self.config.similarity]
        return {"L": L, "S": S, "LS": self.config.alpha * L + self.config.beta * S}

    def save(self, directory: str | Path, card: dict | None = None) -> None:
        """`ls_score.pt`: the config and every weight (encoder included), written whole or not at all."""
        checkpoint = {"config": asdict(self.config), "state_dict": self.state_dict(), "card": card or {}}
        atomic_write(Path(directory) / CHECKPOINT, lambda partial: torch.save(checkpoint, partial))


def load_encoder(name: str):
    """(tokenizer, encoder) of a local directory or hub name; "" is the installed all-MiniLM-L6-v2."""
    return load_pretrained(name or minilm_path(), "AutoModel", "LS-Score encoder")


def load_scorer(checkpoint: str | None, **overrides) -> tuple[object, LSScorer]:
    """(tokenizer, scorer): trained weights from `checkpoint` (a directory holding ls_score.pt, or the file), or,
    without one, the untrained encoder with a fresh L head. `overrides` replace config fields (pooling, α, β, ...);
    None keeps the checkpoint's."""
    state = None
    if checkpoint:
        path = Path(checkpoint).expanduser()
        path = path / CHECKPOINT if path.is_dir() else path
        if not path.exists():
            raise ValueError(f"no LS-Score checkpoint at {path}; train one: python scripts/train_ls_score.py")
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except (RuntimeError, EOFError, OSError) as error:  # a truncated or foreign file
            reason = " ".join(str(error).split())[:120]
            raise ValueError(f"{path} is not a whole LS-Score checkpoint ({reason}); train one again: python "
                             "scripts/train_ls_score.py") from None
    given = {key: value for key, value in overrides.items() if value is not None}
    config = LSConfig(**{**(state["config"] if state else {}), **given})
    tokenizer, encoder = load_encoder(config.encoder)
    scorer = LSScorer(encoder, config)
    if state:
        scorer.load_state_dict(state["state_dict"])
    return tokenizer, scorer


def article_rows(scorer: LSScorer, tokenizer, texts: list[str], batch_size: int, device: torch.device
                 ) -> list[Tensor]:
    """Each article's real vectors [m, K] (`LSScorer.article` without its padding), `batch_size` articles a pass."""
    rows = []
    for start in range(0, len(texts), batch_size):
        ids, mask, counted = tokenize_batch(tokenizer, texts[start:start + batch_size], scorer.config.max_article_tokens)
        vectors, real = scorer.article(ids.to(device), mask.to(device), counted.to(device))
        rows += [v[r] for v, r in zip(vectors, real)]
    return rows


def padded_articles(rows: list[Tensor], device: torch.device) -> tuple[Tensor, Tensor]:
    """`article_rows`' rows as `LSScorer.forward` reads them: (vectors [B, M, K], real [B, M])."""
    vectors = rows[0].new_zeros(len(rows), max(1, *map(len, rows)), rows[0].size(-1))  # an empty article: 1 pad
    real = torch.zeros(vectors.shape[:2], dtype=torch.bool)
    for i, row in enumerate(rows):
        vectors[i, :len(row)], real[i, :len(row)] = row, True
    return vectors.to(device), real.to(device)


def tokenize_batch(tokenizer, texts: list[str], max_tokens: int) -> tuple[Tensor, Tensor, Tensor]:
    """ids, attention mask and the counted mask (real tokens that are not [CLS]/[SEP]), each [B, N]."""
    enc = tokenizer(texts, truncation=True, max_length=max_tokens, padding=True, return_tensors="pt",
                    return_special_tokens_mask=True)
    mask = enc["attention_mask"].bool()
    return enc["input_ids"], mask, mask & ~enc["special_tokens_mask"].bool()


# ---------------------------------------------------------------- training: negatives and loss
PAPER_KINDS = ("deleted", "shuffled", "inserted")  # Wu et al.'s three (§3.4)
KINDS = PAPER_KINDS + ("repeated", "swapped", "dropped", "foreign")  # ours: repetition, content and facts


@dataclass
class Negatives:
    """The negatives of a reference, one per kind in `kinds`. Wu et al.'s three (§3.4): `delete_rate` of its words
    deleted; its words shuffled within each sentence; `insert_sentences` article sentences inserted at random places,
    chosen among the sentences that are not the closest (most shared words) to one of the reference's. Ours:
    "repeated", `repeat_sentences` of its own sentences repeated at the end (the length and repetition a policy
    learns when the three never show it a repeated summary); "swapped", `swap_words` of its words that the article
    has (numbers first, then alphabetic non-stopwords) each replaced by another article word of the same sort that the
    reference lacks (a wrong fact in the article's own words, which a bag of words cannot tell apart); "dropped",
    the reference without its sentence sharing the most content words with the article (without its second half if
    it has one sentence): less of the article's content; "foreign", `swap_words` of its words that the article has
    each replaced by a word of `lexicon` that the article lacks (an unsupported fact, as XSum's hallucinations are)."""

    delete_rate: float = 0.2
    insert_sentences: int = 1
    repeat_sentences: int = 1
    swap_words: int = 2
    kinds: tuple[str, ...] = PAPER_KINDS
    lexicon: tuple[str, ...] = ()  # content words a "foreign" negative draws from (the training references')

    def __post_init__(self):
        self.kinds = tuple(self.kinds)
        unknown = [kind for kind in self.kinds if kind not in KINDS]
        if unknown or not self.kinds:
            raise ValueError(f"negative kinds must be among {KINDS}, got {list(self.kinds)}")
        if "foreign" in self.kinds and not self.lexicon:
            raise ValueError("a 'foreign' negative needs a lexicon of words to draw from")

    def __call__(self, reference: list[list[str]], article: list[list[str]], rng: random.Random) -> dict[str, str]:
        build = {"deleted": self._deleted, "shuffled": self._shuffled, "inserted": self._inserted,
                 "repeated": self._repeated, "swapped": self._swapped, "dropped": self._dropped,
                 "foreign": self._foreign}
        # drawn in KINDS order whatever `kinds` holds, so a kind's negative does not depend on the others asked for
        return {kind: " ".join(build[kind](reference, article, rng)) for kind in KINDS if kind in self.kinds}

    def _deleted(self, reference, article, rng) -> list[str]:
        words = [w for s in reference for w in s]
        return [w for w in words if rng.random() >= self.delete_rate] or words[:1]

    def _shuffled(self, reference, article, rng) -> list[str]:
        return [w for s in reference for w in rng.sample(s, len(s))]

    def _inserted(self, reference, article, rng) -> list[str]:
        closest = {_most_shared(article, s) for s in reference} if article else set()
        candidates = [s for i, s in enumerate(article) if i not in closest] or article
        inserted = [list(s) for s in reference]
        for sentence in rng.sample(candidates, min(self.insert_sentences, len(candidates))):
            inserted.insert(rng.randint(0, len(inserted)), sentence)
        return [w for s in inserted for w in s]

    def _repeated(self, reference, article, rng) -> list[str]:
        repeated = reference + [rng.choice(reference) for _ in range(self.repeat_sentences)]
        return [w for s in repeated for w in s]

    def _swapped(self, reference, article, rng) -> list[str]:
        words = [w for s in reference for w in s]
        pools = {sort: sorted({w for s in article for w in s if _sort(w) == sort} - set(words))
                 for sort in ("number", "word")}
        in_article = {w for s in article for w in s}
        swappable = {sort: [i for i, w in enumerate(words) if w in in_article and _sort(w) == sort and pools[sort]]
                     for sort in pools}
        chosen = rng.sample(swappable["number"], min(self.swap_words, len(swappable["number"])))  # numbers first
        chosen += rng.sample(swappable["word"], min(self.swap_words - len(chosen), len(swappable["word"])))
        for i in chosen:
            words[i] = rng.choice(pools[_sort(words[i])])
        return words

    def _dropped(self, reference, article, rng) -> list[str]:
        if len(reference) == 1:
            return reference[0][: max(1, len(reference[0]) // 2)]
        article_words = {w for s in article for w in s if _sort(w)}  # content: numbers and non-stopwords
        supported = max(range(len(reference)), key=lambda i: len(set(reference[i]) & article_words))
        return [w for i, s in enumerate(reference) if i != supported for w in s]

    def _foreign(self, reference, article, rng) -> list[str]:
        words = [w for s in reference for w in s]
        in_article = {w for s in article for w in s}
        absent = [w for w in self.lexicon if w not in in_article]
        swappable = [i for i, w in enumerate(words) if w in in_article and _sort(w) == "word"] if absent else []
        for i in rng.sample(swappable, min(self.swap_words, len(swappable))):
            words[i] = rng.choice(absent)
        return words


def lexicon(references: list[list[list[str]]]) -> tuple[str, ...]:
    """The alphabetic non-stopwords of some references, sorted: what a "foreign" negative draws from."""
    return tuple(sorted({w for reference in references for s in reference for w in s if _sort(w) == "word"}))


def _most_shared(sentences: list[list[str]], sentence: list[str]) -> int:
    """Index of the sentence sharing the most distinct words with `sentence`."""
    return max(range(len(sentences)), key=lambda i: len(set(sentences[i]) & set(sentence)))


def _sort(word: str) -> str | None:
    """"number" (has a digit), "word" (alphabetic, not a stopword) or None (never swapped)."""
    if any(c.isdigit() for c in word):
        return "number"
    return "word" if word.isalpha() and word not in STOPWORDS else None


# The kinds each hinge ranks the reference over, those of them the negatives have. "single" is Eq. 8 (every kind on
# LS); "two" is the authors' code (L over the linguistic kinds, S over the content ones).
HINGES = {"single": {"LS": KINDS},
          "two": {"L": ("deleted", "shuffled", "repeated"),
                  "S": ("deleted", "inserted", "swapped", "dropped", "foreign")}}


def ranking_loss(positive: dict[str, Tensor], negatives: dict[str, dict[str, Tensor]], form: str = "single",
                 margin: float = 1.0) -> Tensor:
    """Σ max(0, margin − (score(r) − score(x̂))) over the form's hinges (see HINGES), averaged over references.
    `positive[k]` [B]; `negatives[kind][k]` [B]; k in L, S, LS (L and S enter as α·L and β·S)."""
    if form not in HINGES:
        raise ValueError(f"loss form must be one of {sorted(HINGES)}, got {form!r}")
    if not any(kind in negatives for kinds in HINGES[form].values() for kind in kinds):
        raise ValueError(f"the {form!r} loss ranks none of the negatives given: {sorted(negatives)}")
    total = 0.0
    for key, kinds in HINGES[form].items():
        for kind in kinds:
            if kind in negatives:
                total = total + (margin - (positive[key] - negatives[kind][key])).clamp(min=0)
    return total.mean()


# ---------------------------------------------------------------- the reward
class LSScore(Reward):
    """LS-Score as a reward (reference-free): the frozen scorer of `checkpoint` (None: the untrained encoder, whose
    S is the plain encoder's). Set α = 0 for S alone. Not a submodule of the summarizer: it follows its inputs'
    device, runs under `inference_mode`; each article is encoded once and cached. An empty summary
    has no token to count: its L is 0 and its S the cosine of the bare [CLS] [SEP] encoding (0 in the aligned forms).
    The cache keeps the `cached_articles` most recently used (an aligned form keeps every token state)."""

    needs_reference = False

    def __init__(self, checkpoint: str | None = None, name: str = "ls_score", batch_size: int = 64,
                 column: str | None = None, cached_articles: int = 2048, **overrides):
        if cached_articles < 0:
            raise ValueError(f"cached_articles must be 0 or more, got {cached_articles}")
        self.tokenizer, self.scorer = load_scorer(checkpoint, **overrides)
        self.scorer.eval().requires_grad_(False)
        self.name, self.batch_size = name, batch_size
        self.display = Display(column or name, reads_article=True)
        self._articles: OrderedDict[tuple[str, int], Tensor] = OrderedDict()  # each article's real vectors [m, K]
        self.cached_articles = cached_articles
        self._diagnostics: dict[str, float] = {}

    def diagnostics(self) -> dict[str, float]:
        return self._diagnostics

    def article_vectors(self, ids: list[str], texts: list[str], device: torch.device) -> tuple[Tensor, Tensor]:
        """The articles as `LSScorer.article` gives them, (vectors [B, M, K], real [B, M]), cached by (id, text)
        (scoring calls may reuse ids for other articles)."""
        keys = [(i, hash(t)) for i, t in zip(ids, texts)]
        missing = list(dict.fromkeys(k for k in keys if k not in self._articles))
        text_of = dict(zip(keys, texts))
        found = {k: self._articles[k] for k in keys if k in self._articles}
        found.update(zip(missing, article_rows(self.scorer, self.tokenizer, [text_of[k] for k in missing],
                                               self.batch_size, device)))
        for k in keys:  # least recently used last out
            self._articles[k] = found[k]
            self._articles.move_to_end(k)
        while len(self._articles) > self.cached_articles:
            self._articles.popitem(last=False)
        return padded_articles([found[k] for k in keys], device)

    @torch.inference_mode()
    def __call__(self, inputs: RewardInput) -> Tensor:
        device = inputs.device
        if next(self.scorer.parameters()).device != device:
            self.scorer.to(device)
            self._articles.clear()
        batch = inputs.batch
        articles = [t if t is not None else " ".join(s) for t, s in zip(batch.texts, batch.sources)]
        article = self.article_vectors(list(batch.ids), articles, device)
        ids, mask, counted = tokenize_batch(self.tokenizer, inputs.hyp_texts(), self.scorer.config.max_summary_tokens)
        out = self.scorer(ids.to(device), mask.to(device), counted.to(device), article)
        self._diagnostics = {"ls_L": float(out["L"].mean()), "ls_S": float(out["S"].mean())}
        return out["LS"].float()


# Human-judgment sets a training run is chosen by (scripts/train_ls_score.py --select-by dev)

@dataclass
class DevSet:
    """Judged summaries of a human-judgment set: each one's article, text and judgment."""

    name: str
    articles: list[str]
    summaries: list[str]
    human: list[float]


def read_dev(spec: str, rows: int, seed: int) -> DevSet:
    """`PATH:FIELD`: a seeded sample of `rows` rows with a judgment in FIELD (null ones and `system` "reference"
    rows left out), their `source` and `candidate`."""
    path, _, field = spec.rpartition(":")
    if not path or not field:
        raise DataError(f"--dev {spec}: give PATH:FIELD, the file and its human-judgment field")
    judged = [row for row in read_jsonl(path)
              if row.data.get("system") != "reference" and row.number(field) is not None]
    if len(judged) < 4:
        raise DataError(f"--dev {spec}: {len(judged)} judged rows; a correlation needs at least 4")
    chosen = sorted(random.Random(seed).sample(range(len(judged)), min(rows, len(judged))))
    return DevSet(f"{Path(path).stem}:{field}", [judged[i].text("source") for i in chosen],
                  [judged[i].text("candidate") for i in chosen], [judged[i].number(field) for i in chosen])


@torch.no_grad()
def dev_correlations(scorer: LSScorer, tokenizer, devs: list[DevSet], batch_size: int = 32) -> dict[str, float]:
    """Spearman's rho of LS with each set's judgments (`dev/<name>`), and their mean (`dev`). Each article is encoded
    once: a set judges many systems' summaries of each."""
    scorer.eval()
    device = next(scorer.parameters()).device
    rhos = {}
    for dev in devs:
        unique = list(dict.fromkeys(dev.articles))
        rows = dict(zip(unique, article_rows(scorer, tokenizer, unique, batch_size, device)))
        scores = []
        for i in range(0, len(dev.summaries), batch_size):
            article = padded_articles([rows[text] for text in dev.articles[i:i + batch_size]], device)
            ids, mask, counted = tokenize_batch(tokenizer, dev.summaries[i:i + batch_size],
                                                scorer.config.max_summary_tokens)
            scores += scorer(ids.to(device), mask.to(device), counted.to(device), article)["LS"].tolist()
        rhos[f"dev/{dev.name}"] = correlation(scores, dev.human)
    scorer.train()
    return rhos | ({"dev": sum(rhos.values()) / len(rhos)} if rhos else {})
