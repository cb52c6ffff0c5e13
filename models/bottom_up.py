"""Bottom-up summarization (Gehrmann et al. 2018): a content selector tags the source tokens a summary may copy,
and the pointer-generator's copy attention is masked with its probabilities.

Shapes: B batch, S source length, E embedding size, H hidden size.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace

import torch
from torch import Tensor, nn

from models.pointer_generator import BiLSTMEncoder, EncoderOutput, PointerGenerator, PointerGeneratorConfig
from models.text.batch import Batch
from models.text.pretrained import load_pretrained
from models.text.vectors import minilm_path, word_vectors
from models.text.vocab import Vocabulary


def selection_labels(source: list[str], reference: list[str]) -> list[int]:
    """1 for each source token inside a span copied from the reference, else 0 (Gehrmann et al. 2018, §3).

    Greedy, left to right: at each source position take the longest span starting there that occurs as contiguous
    tokens anywhere in the reference; label it 1 unless the same span was labelled before (each span once), and
    jump past it; with no match, label 0 and move on. A span of one token counts, as in the original.

    Matching is on whole tokens: Gehrmann et al.'s code matches a span's characters anywhere in the summary
    string, so "art" matches inside "party". (Using up reference tokens instead would make "longest" moot: every
    word would be labelled at its first k occurrences, k its count in the reference.)
    """
    starts = defaultdict(list)  # token -> its positions in the reference: only these can start a match
    for j, token in enumerate(reference):
        starts[token].append(j)
    labels, labelled = [0] * len(source), set()
    i = 0
    while i < len(source):
        longest = 0
        for j in starts.get(source[i], ()):
            n = 1
            while i + n < len(source) and j + n < len(reference) and source[i + n] == reference[j + n]:
                n += 1
            longest = max(longest, n)
        span = tuple(source[i:i + longest])
        if longest and span not in labelled:
            labels[i:i + longest] = [1] * longest
            labelled.add(span)
        i += max(longest, 1)
    return labels


def selection_targets(batch: Batch) -> tuple[Tensor, Tensor]:
    """The labels [B, S] (float) of the batch's source tokens, and where they count [B, S]: real tokens of
    articles with a reference."""
    width = batch.src.size(1)
    rows = [selection_labels(source, [t for sentence in reference or [] for t in sentence])
            for source, reference in zip(batch.sources, batch.references)]
    labels = torch.tensor([row + [0] * (width - len(row)) for row in rows], dtype=torch.float, device=batch.device)
    return labels, batch.src_mask & batch.has_reference[:, None]


class ContextualFeatures:
    """Each source word's vector from a frozen pretrained encoder, as Gehrmann et al.'s selector read ELMo's: the mean
    of its wordpieces' last hidden states (all-MiniLM-L6-v2 by default, installed offline); words past
    `max_wordpieces` get zeros. Not a module of the selector, so no optimizer, DDP wrapper or checkpoint sees it. The
    encoder is frozen, so an article's vectors never change: they are kept by article id (bf16), and an epoch after
    the first encodes nothing. `cpu_bf16`: on a CPU the encoder reads under bf16 autocast."""

    def __init__(self, name: str = "minilm", max_wordpieces: int = 512, cpu_bf16: bool = True):
        self.tokenizer, self.encoder = load_pretrained(minilm_path() if name == "minilm" else name, "AutoModel",
                                                       "content selector encoder")
        self.encoder.eval().requires_grad_(False)
        self.size: int = self.encoder.config.hidden_size
        self.max_wordpieces, self.cpu_bf16 = max_wordpieces, cpu_bf16
        self.kept: dict[tuple[str, int], Tensor] = {}

    def __call__(self, batch: Batch) -> Tensor:
        """The batch's word vectors [B, S, F], float32, zeros on padding."""
        keys = [(article, len(source)) for article, source in zip(batch.ids, batch.sources)]
        new = [i for i, key in enumerate(keys) if key not in self.kept]
        if new:
            for i, vectors in zip(new, self.encode([batch.sources[i] for i in new], batch.device)):
                self.kept[keys[i]] = vectors
        out = torch.zeros(*batch.src.shape, self.size, device=batch.device)
        for i, key in enumerate(keys):
            vectors = self.kept[key]
            out[i, :len(vectors)] = vectors.to(out)
        return out

    def encode(self, sources: list[list[str]], device: torch.device) -> list[Tensor]:
        """Each article's word vectors [n_words, F] (bf16)."""
        if next(self.encoder.parameters()).device != device:
            self.encoder.to(device)
        pieces = self.tokenizer(sources, is_split_into_words=True, truncation=True, max_length=self.max_wordpieces,
                                padding=True, return_tensors="pt")
        with torch.inference_mode(), torch.autocast(device.type, torch.bfloat16,
                                                    enabled=self.cpu_bf16 and device.type == "cpu"):
            hidden = self.encoder(**{k: v.to(device) for k, v in pieces.items()}).last_hidden_state.float()  # [b, W, F]
        vectors = []
        for j, source in enumerate(sources):
            word = torch.tensor([-1 if w is None else w for w in pieces.word_ids(j)], device=device)  # [W]
            inside = word >= 0  # not [CLS], [SEP] or padding
            sums = torch.zeros(len(source), self.size, device=device).index_add_(0, word[inside], hidden[j][inside])
            counts = torch.bincount(word[inside], minlength=len(source)).clamp(min=1)  # a word past the cut: 0 / 1
            vectors.append((sums / counts[:, None]).to(torch.bfloat16))
        return vectors


@dataclass
class ContentSelectorConfig:
    vocab_size: int = 50_000
    emb_dim: int = 128
    hidden_dim: int = 256
    layers: int = 2
    dropout: float = 0.0
    pad_id: int = Vocabulary.pad_id
    contextual: str | None = None  # "minilm" or a transformers model folder: its word vectors join the embeddings


class ContentSelector(nn.Module):
    """A tagger over source tokens: embeddings (beside them, with `contextual`, a frozen encoder's word vectors:
    `ContextualFeatures`), a bidirectional LSTM, and one logit per token (selected or not)."""

    def __init__(self, config: ContentSelectorConfig):
        super().__init__()
        self.config = cfg = config
        self.embedding = nn.Embedding(cfg.vocab_size, cfg.emb_dim, padding_idx=cfg.pad_id)
        self.contextual = ContextualFeatures(cfg.contextual) if cfg.contextual else None
        width = cfg.emb_dim + (self.contextual.size if self.contextual is not None else 0)
        self.encoder = BiLSTMEncoder(width, cfg.hidden_dim, cfg.layers, cfg.dropout)
        self.dropout = nn.Dropout(cfg.dropout)
        self.out = nn.Linear(2 * cfg.hidden_dim, 1)

    def forward(self, batch: Batch) -> Tensor:
        """The batch's source tokens (`src` [B, S], right-padded, `src_mask` [B, S]) -> logits [B, S]; the logits of
        padding positions mean nothing."""
        lengths = batch.src_mask.sum(1).clamp(min=1)  # an empty row runs one (pad) step rather than none
        x = self.embedding(batch.src)  # [B, S, E]
        if self.contextual is not None:
            x = torch.cat([x, self.contextual(batch)], dim=-1)  # [B, S, E + F]
        h, _, _ = self.encoder(self.dropout(x), lengths)  # [B, S, 2H]
        return self.out(self.dropout(h)).squeeze(-1)  # [B, S]

    def probabilities(self, batch: Batch) -> Tensor:
        """The selection probability of each source token [B, S], 0 on padding."""
        return torch.sigmoid(self(batch)) * batch.src_mask


def copy_glove(embedding: nn.Embedding, vocab: Vocabulary) -> int:
    """Copy GloVe 6B 50d vectors into the rows of the vocabulary's words that GloVe has; the other rows (specials,
    rare words) keep their initialisation. Returns the number of rows copied."""
    words, matrix = word_vectors()
    if embedding.embedding_dim != matrix.shape[1]:
        raise ValueError(f"GloVe vectors have {matrix.shape[1]} dimensions, the embedding "
                         f"{embedding.embedding_dim}: set model.config.emb_dim={matrix.shape[1]}")
    row: dict[str, int] = {}
    for i, word in enumerate(words):
        row.setdefault(word, i)  # the first (most frequent) entry wins
    rows = [i for i, word in enumerate(vocab.itos) if word in row]
    vectors = matrix[[row[vocab.itos[i]] for i in rows]]
    with torch.no_grad():
        embedding.weight[rows] = torch.from_numpy(vectors).to(embedding.weight)
    return len(rows)


class MaskedCopy(PointerGenerator):
    """A pointer-generator whose copy attention a selection of source tokens masks (Gehrmann et al. 2018): tokens
    selected with probability below `threshold` are never copied; the others' attention is multiplied by `scale`
    (the original's `attn · tags · 2`) or, with `renormalize`, renormalised to sum to 1. Subclasses say where the
    selection comes from (`selection`).

    Its weights are exactly a pointer-generator's: a pointer-generator checkpoint initialises it and its own
    checkpoints are pointer-generator checkpoints. The mask applies in eval mode (validation, test) and, with
    `mask_in_training`, in training too: a training step encodes once, so its RL samples, its MLE term and its RL
    term all see the same mask, or none."""

    def __init__(self, config: PointerGeneratorConfig, threshold: float = 0.15, renormalize: bool = False,
                 scale: float = 2.0, mask_in_training: bool = False):
        super().__init__(config)
        if not 0 <= threshold <= 1:
            raise ValueError(f"model.threshold must be in [0, 1], got {threshold}")
        self.threshold, self.renormalize, self.scale = threshold, renormalize, scale
        self.mask_in_training = mask_in_training

    def selection(self, batch: Batch) -> Tensor:
        """The probability [B, S] that each source token belongs in the summary."""
        raise NotImplementedError

    def encode(self, batch: Batch) -> EncoderOutput:
        enc = super().encode(batch)
        if self.training and not self.mask_in_training:
            return enc
        keep = self.selection(batch) >= self.threshold
        copy_mask = keep.float() * (1.0 if self.renormalize else self.scale)  # outside inference_mode: a normal tensor
        return replace(enc, copy_mask=copy_mask, renormalize_copy=self.renormalize)


class BottomUp(MaskedCopy):
    """Bottom-up copying with a trained content selector (`model=content_selector`), handed in frozen (the trainer
    loads it: `trainer.checkpoints.load_content_selector`). It is not a submodule, so no optimizer, DDP wrapper or
    checkpoint sees it; it follows the articles' device and runs under `inference_mode`."""

    def __init__(self, config: PointerGeneratorConfig, selector: ContentSelector, threshold: float = 0.15,
                 renormalize: bool = False, scale: float = 2.0, mask_in_training: bool = False):
        super().__init__(config, threshold, renormalize, scale, mask_in_training)
        self.__dict__["selector"] = selector  # not registered

    @property
    def frozen_parts(self) -> list[nn.Module]:
        """`models.summarizer.HoldsTrainedParts`: the selector, whose vocabulary `trainer.train` checks."""
        return [self.selector]

    def selection(self, batch: Batch) -> Tensor:
        selector = self.selector
        if next(selector.parameters()).device != batch.device:
            selector.to(batch.device)
        with torch.inference_mode():
            return selector.probabilities(batch)


class OracleCopy(MaskedCopy):
    """Copying masked by the selector's training labels, read from each article's reference: how far a perfect
    content selector would take the pointer-generator. An upper bound to test with, not a model to train."""

    def selection(self, batch: Batch) -> Tensor:
        return selection_targets(batch)[0]
