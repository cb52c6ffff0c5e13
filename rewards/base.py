"""The reward contract (`Reward`, a base class with documented defaults), its batched input, and weighted sums."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np
import torch
from torch import Tensor

from models.text.batch import Batch, Example, collate
from models.text.vocab import Vocabulary


@dataclass
class RewardInput:
    """Hypotheses to score, with everything a reward may compare them to, on one device.

    hyp [B, T] extended ids (see `models.text.vocab`), positions >= hyp_lens are padding and the
    </s> token is not part of the hypothesis. `batch` carries references (`ref`, `ref_sentence`,
    `references`), sources and the has-reference mask. `unlabelled_fraction`: the share of the training batches'
    articles without a reference (`WeightedSum`); 0 in validation and test, which score the reward as defined.
    """

    hyp: Tensor
    hyp_lens: Tensor
    batch: Batch
    vocab: Vocabulary
    unlabelled_fraction: float = 0.0
    _tokens: list[list[str]] | None = field(default=None, repr=False)
    _host: dict[str, np.ndarray] | None = field(default=None, repr=False)

    @property
    def device(self) -> torch.device:
        return self.hyp.device

    @property
    def has_reference(self) -> Tensor:
        return self.batch.has_reference

    def host_ids(self) -> dict[str, np.ndarray]:
        """`hyp`, `hyp_lens`, `ref`, `ref_sentence` and `ref_lens` as host arrays: one device-to-host
        copy for all the rewards that read them, made once."""
        if self._host is None:
            parts = {"hyp": self.hyp, "hyp_lens": self.hyp_lens, "ref": self.batch.ref,
                     "ref_sentence": self.batch.ref_sentence, "ref_lens": self.batch.ref_lens}
            if self.device.type == "cpu":  # already there: views, no copy
                self._host = {k: t.long().numpy() for k, t in parts.items()}
            else:
                flat = torch.cat([t.flatten().long() for t in parts.values()]).cpu().numpy()
                ends = np.cumsum([t.numel() for t in parts.values()])
                self._host = {k: a.reshape(t.shape) for (k, t), a in zip(parts.items(), np.split(flat, ends[:-1]))}
        return self._host

    def hyp_tokens(self) -> list[list[str]]:
        """Decoded hypothesis tokens (one host transfer for the batch, computed once)."""
        if self._tokens is None:
            rows, lens = self.hyp.tolist(), self.hyp_lens.tolist()
            self._tokens = [self.vocab.decode(r[:n], o, stop_at_eos=False)
                            for r, n, o in zip(rows, lens, self.batch.oovs)]
        return self._tokens

    def hyp_texts(self) -> list[str]:
        """Decoded hypotheses as text (tokens joined by spaces), for rewards that read text."""
        return [" ".join(tokens) for tokens in self.hyp_tokens()]

    @classmethod
    def from_decoded(cls, ids: Tensor, lengths: Tensor, batch: Batch, vocab: Vocabulary,
                     unlabelled_fraction: float = 0.0) -> "RewardInput":
        """From decoder output, whose `lengths` count the </s> step when one was produced."""
        ended = (ids.gather(1, (lengths - 1).clamp(min=0)[:, None])[:, 0] == vocab.eos_id) & (lengths > 0)
        hyp_lens = lengths - ended.long()
        positions = torch.arange(ids.size(1), device=ids.device)[None]
        hyp = ids.masked_fill(positions >= hyp_lens[:, None], vocab.pad_id)
        return cls(hyp=hyp, hyp_lens=hyp_lens, batch=batch, vocab=vocab, unlabelled_fraction=unlabelled_fraction)

    @classmethod
    def from_texts(cls, hypotheses: list[list[str]], references: list[list[list[str]] | None],
                   vocab: Vocabulary, sources: list[list[str]] | None = None,
                   device: torch.device | str = "cpu", source_texts: list[str] | None = None) -> "RewardInput":
        """Score plain token lists (scripts, evaluation): hypotheses become extended ids of
        `vocab`, sharing each example's OOV list with its source and reference. `source_texts`: the
        articles as text, for rewards that read text (default: their tokens joined)."""
        sources = sources or [[] for _ in hypotheses]
        texts = source_texts or [None] * len(hypotheses)
        examples = [Example(id=str(i), source=s, reference=r, text=t)
                    for i, (s, r, t) in enumerate(zip(sources, references, texts))]
        batch = collate(examples, vocab, max_source_len=10**9, max_target_len=10**9)
        hyp = [vocab.extended_ids(h, oovs) for h, oovs in zip(hypotheses, batch.oovs)]
        width = max([len(h) for h in hyp] + [1])
        ids = torch.tensor([h + [vocab.pad_id] * (width - len(h)) for h in hyp], dtype=torch.long)
        lens = torch.tensor([len(h) for h in hyp], dtype=torch.long)
        return cls(hyp=ids.to(device), hyp_lens=lens.to(device), batch=batch.to(device), vocab=vocab,
                   _tokens=[list(h) for h in hypotheses])


@dataclass(frozen=True)
class Display:
    """How tables show a reward as a test metric: its column, the factor its mean is printed with (the papers print
    ROUGE and QA ×100, mover's similarities ×1000), and whether it reads the article (summaries.jsonl does not keep
    the article, so only the test can score it: table4 takes the test's scores)."""

    column: str
    scale: float = 1.0
    reads_article: bool = False


class Reward:
    """The reward contract: a reward scores a batch of hypotheses, float tensor [B] on the input's device. Subclass it,
    set `name` and `needs_reference`, and implement `__call__`; the rest has the defaults below, which a reward
    overrides (as class or instance attributes, or properties) where it differs.

    A reference-based reward (`needs_reference`) may return anything for examples without a reference, and NaN
    where the reference gives nothing to compare with (the mover's similarities on a reference without a content
    word); callers mask both (`zero_where_not_applicable`).

    A reward may own a frozen network (the QA rewards): it keeps it off the LightningModule (not a submodule, so no
    optimizer, DDP wrapper or checkpoint sees it), in eval mode without gradients, runs it under `inference_mode`
    and moves it to its inputs' device on use. Per-article work is cached by article id.
    """

    name: str
    needs_reference: bool
    # whether it already costs a summary its repeats: ROUGE-L's precision counts a repeated phrase as unmatched, the
    # mover's bags of words do not, and `rl.penalize_repeats=blind` wraps only those that do not (`rewards.repeats`)
    sees_repeats: bool = False
    # whether it pays for something other than content, as a control (the length-only reward: `rewards.length`):
    # table4 shows its row as the control beside every other reward's gain
    control: bool = False

    @property
    def display(self) -> Display:
        """How tables show it as a test metric (`Display`): by default its name, ×1, not reading the article."""
        return self.__dict__.get("_display") or Display(self.name)

    @display.setter
    def display(self, value: Display) -> None:
        self.__dict__["_display"] = value

    @property
    def test_metric(self) -> "Reward":
        """The test metric a run trained with it is judged on (its `name` is the key in the test's results and
        tables): by default the reward itself, without any training-time shaping (`RepeatPenalty`); ROUGE-L's is
        rouge-score's stemmed ROUGE-L on text (`rewards.rouge.RougeScore`)."""
        return self

    def diagnostics(self) -> dict[str, float]:
        """What it says about its last call, logged as `train/reward/<key>` (LS-Score's L and S, QA's question
        counts); by default nothing."""
        return {}

    def term_values(self) -> dict[str, Tensor]:
        """Per-row values [B] of its parts in its last call, logged beside it (a weighted sum's terms, the repeat
        penalty's unpenalised reward); by default none."""
        return {}

    def __call__(self, inputs: RewardInput) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} must implement __call__(inputs) -> Tensor [B]")


class NotAReward(TypeError):
    """An object configured as a reward or metric that does not keep the reward contract."""


def check_reward(reward: object, setting: str) -> None:
    """A one-line error, naming the setting, for an object that does not keep the reward contract."""
    if not isinstance(reward, Reward):
        raise NotAReward(f"{setting}: {type(reward).__module__}.{type(reward).__name__} is not a reward: subclass "
                        "rewards.base.Reward (README, \"A reward\")")
    missing = [attr for attr in ("name", "needs_reference") if not hasattr(reward, attr)]
    if missing:
        raise NotAReward(f"{setting}: {type(reward).__name__} does not set {' or '.join(missing)} (rewards.base.Reward)")


def not_applicable(reward: Reward, values: Tensor, inputs: RewardInput) -> Tensor:
    """Where a reward's values do not apply [B]: NaN (nothing to compare), or no reference for a reference-based one."""
    return values.isnan() | ~inputs.has_reference if reward.needs_reference else values.isnan()


def outside_autocast(device: torch.device | str) -> torch.autocast:
    """Where rewards score: in fp32 even under the trainer's bf16 autocast (`trainer.precision`), so that a metric's
    value never depends on the precision the model runs at. A reward may still choose lower precision itself inside
    (the QA rewards' `cpu_bf16`)."""
    return torch.autocast(torch.device(device).type, enabled=False)


def zero_where_not_applicable(reward: Reward, values: Tensor, inputs: RewardInput) -> Tensor:
    """The values, 0 where they do not apply (`torch.where`, not a product: NaN·0 is NaN)."""
    return torch.where(not_applicable(reward, values, inputs), torch.zeros_like(values), values)


class WeightedSum(Reward):
    """sum_k w_k r_k, itself a reward. A reference-based term adds nothing where it does not apply.

    Training on a mix of articles with and without references (`trainer.data.MixedShuffle`), the inputs carry the
    fraction p without one (`RewardInput.unlabelled_fraction`): reference-based terms then weigh w_k/(1 − p) where a
    reference exists (and 0 where none does), so that their expected weight per example stays w_k (Scialom et al.
    2019 at p = 0.5: ROUGE-L ×2 or ×0). Validation and test have p = 0: the reward as defined. Each term's values
    of the last call are kept in `term_values`.
    """

    def __init__(self, terms: Mapping[str, Reward], weights: Mapping[str, float],
                 name: str | None = None, column: str | None = None, scale: float = 1.0):
        missing = set(terms) ^ set(weights)
        if missing:
            raise ValueError(f"WeightedSum: terms and weights must name the same rewards; mismatch: {sorted(missing)}")
        self.terms = dict(terms)
        self.weights = {k: float(v) for k, v in weights.items()}
        self.name = name or "+".join(f"{self.weights[k]:g}*{t.name}" for k, t in self.terms.items())
        self.needs_reference = all(t.needs_reference for t in self.terms.values())
        self.display = Display(column or self.name, scale, any(t.display.reads_article for t in self.terms.values()))
        self._term_values: dict[str, Tensor] = {}  # of the last call, for the log

    @property
    def sees_repeats(self) -> bool:
        """A sum sees repeats if all its terms do."""
        return all(term.sees_repeats for term in self.terms.values())

    def components(self, inputs: RewardInput) -> dict[str, Tensor]:
        """Each term's reward, 0 where it does not apply."""
        return {key: zero_where_not_applicable(term, term(inputs), inputs) for key, term in self.terms.items()}

    def total(self, parts: Mapping[str, Tensor], unlabelled_fraction: float = 0.0) -> Tensor:
        """The weighted sum of `components`, reference-based terms rescaled by 1/(1 − `unlabelled_fraction`)."""
        scale = {k: 1 / (1 - unlabelled_fraction) if term.needs_reference else 1.0 for k, term in self.terms.items()}
        return sum(self.weights[k] * scale[k] * v for k, v in parts.items())

    def __call__(self, inputs: RewardInput) -> Tensor:
        self._term_values = self.components(inputs)
        return self.total(self._term_values, inputs.unlabelled_fraction)

    def term_values(self) -> dict[str, Tensor]:
        return self._term_values

    def diagnostics(self) -> dict[str, float]:
        return {k: v for term in self.terms.values() for k, v in term.diagnostics().items()}
