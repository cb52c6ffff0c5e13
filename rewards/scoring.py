"""Score texts of summaries with any rewards, through the same batched code path as training: tokenize, build a
vocabulary of every word being scored (nothing maps to <unk>) and call each reward on `RewardInput.from_texts`
batches. Used by evaluation (`trainer.evaluate`) and the command-line tools (`scripts.cli`)."""
from __future__ import annotations

from typing import Mapping, Sequence

import torch

from models.text.vocab import SENTENCE_END, Vocabulary, tokenize_sentences
from rewards.base import Reward, RewardInput, not_applicable, outside_autocast
from rewards.names import TOKENIZERS

# TOKENIZERS: treebank, raw text, PTB-tokenized after sentence splitting (`tokenize_sentences(pretokenized=False)`);
# whitespace, text that is already tokenized, split on whitespace (`pretokenized=True`); rouge_package, as the `rouge`
# package (pltrdy) reads text for Wu et al. (2020): case kept, split on '.' and whitespace, one sentence.


def tokenize(text: str, tokenizer: str) -> list[list[str]]:
    """Sentences of tokens, lower-cased but for `rouge_package` (see TOKENIZERS)."""
    if tokenizer not in TOKENIZERS:
        raise ValueError(f"unknown tokenizer {tokenizer!r}; choose from {TOKENIZERS}")
    if tokenizer == "rouge_package":
        return [[word for piece in text.split(".") for word in piece.split()]]
    return tokenize_sentences(text, pretokenized=tokenizer == "whitespace")


def hypothesis_tokens(sentences: list[list[str]]) -> list[str]:
    """Flatten a hypothesis. Rewards find hypothesis sentences at sentence-final tokens (as in a
    decoded summary), so a sentence that is followed by another but lacks one gets a '.'."""
    tokens: list[str] = []
    for i, sentence in enumerate(sentences):
        tokens += sentence
        if i < len(sentences) - 1 and sentence and sentence[-1] not in SENTENCE_END:
            tokens.append(".")
    return tokens


def score_texts(rewards: Mapping[str, Reward], candidates: Sequence[str], references: Sequence[str | None],
                sources: Sequence[str] | None = None, tokenizers: str | Mapping[str, str] = "treebank",
                batch_size: int = 64, device: str | torch.device = "cpu") -> dict[str, list[float | None]]:
    """Each reward's score of each candidate; None where a reference-based reward does not apply (no
    reference, or NaN: a reference with nothing to compare, see `rewards.base.Reward`).

    `tokenizers` is one tokenizer for all rewards or one per reward label. Rewards sharing a
    tokenizer share the tokenized texts, the vocabulary and the batches.
    """
    if isinstance(tokenizers, str):
        tokenizers = dict.fromkeys(rewards, tokenizers)
    if len(references) != len(candidates) or (sources is not None and len(sources) != len(candidates)):
        raise ValueError("candidates, references and sources must have the same length")
    scores: dict[str, list[float | None]] = {label: [] for label in rewards}
    for tokenizer in sorted(set(tokenizers[label] for label in rewards)):
        scores |= score_tokenized({label: r for label, r in rewards.items() if tokenizers[label] == tokenizer},
                                  [tokenize(c, tokenizer) for c in candidates],
                                  [None if r is None else tokenize(r, tokenizer) for r in references],
                                  sources, tokenizer, batch_size, device)
    return scores


@torch.no_grad()
def score_tokenized(rewards: Mapping[str, Reward], hypotheses: Sequence[list[list[str]]],
                    references: Sequence[list[list[str]] | None], sources: Sequence[str] | None = None,
                    source_tokenizer: str = "whitespace", batch_size: int = 64, device: str | torch.device = "cpu"
                    ) -> dict[str, list[float | None]]:
    """`score_texts` of summaries already split into sentences of tokens (`sources`: the articles' text, tokenized
    with `source_tokenizer` for the rewards that read tokens). A vocabulary of every word being scored (nothing maps to
    <unk>), not a model's: a reference is scored whole, where a batch's reference ids stop at its maximum length.
    Values are float64: a float32 reward's exactly, and rouge-score's as it computes them."""
    hyps = [hypothesis_tokens(h) for h in hypotheses]
    srcs = None if sources is None else [[t for s in tokenize(x, source_tokenizer) for t in s] for x in sources]
    words = {t for h in hyps for t in h}
    words |= {t for r in references if r for s in r for t in s}
    words |= {t for x in srcs or [] for t in x}
    vocab = Vocabulary(sorted(words))
    scores: dict[str, list[float | None]] = {label: [] for label in rewards}
    for start in range(0, len(hyps), batch_size):
        window = slice(start, start + batch_size)
        inputs = RewardInput.from_texts(hyps[window], list(references[window]), vocab,
                                        None if srcs is None else srcs[window], device=device,
                                        source_texts=None if sources is None else list(sources[window]))
        for label, reward in rewards.items():
            with outside_autocast(device):
                values = reward(inputs).double()
            missing = not_applicable(reward, values, inputs).tolist()
            scores[label] += [None if m else v for v, m in zip(values.tolist(), missing)]
    return scores
