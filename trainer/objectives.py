"""What a run trains toward, chosen once when the module is built: `MLE` (no reward) or `SelfCritical` (the mixed
loss with a reward). The module asks its objective for the step's loss and for what validation, the examples and the
test score besides ROUGE; both objectives answer every question, so the module never asks which one it has.

An objective is handed the model, vocabulary and timer on each call and keeps no network of its own: the module
stays the one owner of the weights (optimizer, DDP and checkpoints see them there)."""
from __future__ import annotations

import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from models.decoding import Decoded, StepProcessor, rollout_rows, sample_and_greedy
from models.summarizer import Summarizer
from models.text.batch import Batch
from models.text.vocab import SENTENCE_END, Vocabulary, as_text
from rewards.base import Reward, RewardInput, not_applicable, outside_autocast, zero_where_not_applicable
from trainer.evaluate import decoded_summaries
from trainer.rl import (Baseline, GreedyBaseline, advantage_statistics, length_neutral_advantage, mixed_loss,
                        sample_statistics, self_critical_loss, term_statistics)
from trainer.schedules import Constant
from trainer.timing import untimed

Timer = Callable[[str], AbstractContextManager[None]]


def finite_or_none(value: float) -> float | None:
    """A score for JSON: NaN (the reward does not apply) as None."""
    return None if value != value else value


def sentence_end_ids(vocab: Vocabulary, device: torch.device) -> Tensor:
    """Ids of the vocabulary's sentence-final tokens (the copy monitor's sentence boundaries)."""
    return torch.tensor([vocab.stoi[t] for t in SENTENCE_END if t in vocab.stoi], device=device)


def decoder_inputs(ids: Tensor, vocab: Vocabulary) -> Tensor:
    """Decoder inputs for a decoded sequence [B, T]: <s> then the sequence shifted right, OOV as <unk>."""
    shifted = torch.cat([torch.full_like(ids[:, :1], vocab.bos_id), ids[:, :-1]], dim=1)
    return shifted.masked_fill(shifted >= len(vocab), vocab.unk_id)


class MLE:
    """Teacher-forced MLE: the mean token NLL of the references. No reward, so nothing is sampled or scored."""

    stage = "mle"
    reward = None
    test_metric = None  # no test metric of its own: the test scores ROUGE and `metrics`

    def loss(self, model: Summarizer, vocab: Vocabulary, batch: Batch, enc: Any, step: int, timer: Timer = untimed
             ) -> tuple[Tensor, dict[str, Any]]:
        """The step's loss and what it logs (`train/<key>`)."""
        with timer("mle"):
            out = model.mle_loss(batch, enc=enc)
        return out["loss"], {"loss": out["loss"], "nll": out["nll"]}

    def validation_values(self, inputs: RewardInput, labelled: bool
                          ) -> tuple[dict[str, Tensor], list[dict[str, float | None]]]:
        """What a validation batch logs besides the module's own values, and each summary's reward for the examples:
        nothing."""
        return {}, [{} for _ in range(len(inputs.hyp))]

    def training_samples(self, model: Summarizer, vocab: Vocabulary, batch: Batch, generator: torch.Generator
                         ) -> list[dict[str, Any]]:
        """One training sample per article with its reward and advantage, for the examples: none."""
        return []


@dataclass
class Rollouts:
    """A batch's training decodes: k samples per article (rows i·k … i·k + k − 1), then a greedy row each if the
    baseline needs it, with their rewards (0 where the reward does not apply), each sample's baseline, and its
    advantage over it (`rl.length_neutral`: with its length's share taken out)."""

    decoded: Decoded
    articles: list[int]          # the article behind each decoded row
    batch: Batch                 # the batch's examples in decoded-row order
    rewards: Tensor              # [B·k (+ B)]
    terms: dict[str, Tensor]     # each term of a weighted-sum reward, per decoded row
    not_applicable: Tensor       # [B·k (+ B)]
    sample_rewards: Tensor       # [B, k]
    baseline: Tensor             # [B, k]
    advantage: Tensor            # [B, k]
    reward_seconds: float


class SelfCritical:
    """γ·L_RL + (1−γ)·L_MLE (Paulus et al. 2018), L_RL self-critical (Rennie et al. 2017): k samples per article,
    each against its `baseline` (greedy, or leave-one-out), rewarded by `reward`.

    `unlabelled_fraction`: the fraction of each training batch without references. Those rows get no MLE term (its
    mean is over reference tokens) and, from a weighted-sum reward, only its reference-free terms; its
    reference-based terms weigh 1/(1 − fraction) on the other rows (`rewards.base.WeightedSum.total`).

    `length_neutral` (0 … 1, `rl.length_neutral`): that share of the batch's advantages' rise with the samples'
    lengths is taken out (`trainer.rl.length_neutral_advantage`), so that the reward does not teach length."""

    stage = "mixed"

    def __init__(self, reward: Reward, gamma: Callable[[int], float] | None = None, samples: int = 1,
                 baseline: Baseline | None = None, temperature: float = 1.0, rl_max_len: int = 100,
                 length_normalize: bool = False, processors: list[StepProcessor] | None = None,
                 unlabelled_fraction: float = 0.0, length_neutral: float = 0.0):
        if samples < 1:
            raise ValueError(f"rl.samples must be at least 1, got {samples}")
        if temperature <= 0:
            raise ValueError(f"rl.temperature must be positive, got {temperature}")
        if not 0 <= length_neutral <= 1:
            raise ValueError(f"rl.length_neutral must be in [0, 1] (the share of length taken out), got "
                             f"{length_neutral}")
        self.reward, self.gamma = reward, gamma or Constant(0.0)
        self.samples, self.baseline, self.temperature = samples, baseline or GreedyBaseline(), temperature
        self.rl_max_len, self.length_normalize = rl_max_len, length_normalize
        self.processors = list(processors or [])
        self.unlabelled_fraction, self.length_neutral = unlabelled_fraction, length_neutral

    @property
    def test_metric(self) -> Reward:
        """The test metric a run trained with this reward is judged on (`Reward.test_metric`)."""
        return self.reward.test_metric

    def scores(self, inputs: RewardInput) -> tuple[Tensor, dict[str, Tensor]]:
        """The training reward of each decoded row (with the repeat penalty where the config wraps it in one:
        `rewards.repeats`), and, for a sum of rewards, each term's values (for the log)."""
        with outside_autocast(inputs.device):
            return self.reward(inputs), self.reward.term_values()

    def rollouts(self, model: Summarizer, vocab: Vocabulary, batch: Batch, enc: Any,
                 generator: torch.Generator | None = None, timer: Timer = untimed) -> Rollouts:
        """The training decodes of a batch (k samples per article, drawn with `generator`, and the greedy rows if the
        baseline needs them), scored as training scores them, with each sample's baseline."""
        B, k, with_greedy = len(batch), self.samples, self.baseline.needs_greedy
        # The baseline decodes in test-time mode (no dropout); k samples and the greedy rows share one batched loop.
        training = model.training  # as it was: the samples' draw decodes in eval mode too
        model.eval()
        with timer("decode"):
            decoded = sample_and_greedy(model, enc, self.rl_max_len, generator=generator, samples=k,
                                        with_greedy=with_greedy, processors=self.processors,
                                        temperature=self.temperature)
        model.train(training)
        decode_end = time.perf_counter()
        articles = rollout_rows(B, k, with_greedy)
        rollouts = batch.index_select(articles)
        with torch.no_grad(), timer("reward"):  # one reward call scores samples and greedy rows together
            inputs = RewardInput.from_decoded(decoded.ids, decoded.lengths, rollouts, vocab, self.unlabelled_fraction)
            rewards, terms = self.scores(inputs)
        # Rows where the reward does not apply (NaN, or no reference for a reference-based one) get 0, sample and
        # baseline alike.
        missing = not_applicable(self.reward, rewards, inputs)
        rewards = zero_where_not_applicable(self.reward, rewards, inputs)
        r_sample = rewards[: B * k].view(B, k)
        baseline = self.baseline(r_sample, rewards[B * k:] if with_greedy else None)
        lengths = inputs.hyp_lens.float()
        sample_lengths = lengths[: B * k].view(B, k)
        gap = sample_lengths - self.baseline(sample_lengths, lengths[B * k:] if with_greedy else None)
        advantage = length_neutral_advantage(r_sample - baseline, gap, self.length_neutral)
        return Rollouts(decoded, articles, rollouts, rewards, terms, missing, r_sample, baseline, advantage,
                        time.perf_counter() - decode_end)

    def loss(self, model: Summarizer, vocab: Vocabulary, batch: Batch, enc: Any, step: int, timer: Timer = untimed
             ) -> tuple[Tensor, dict[str, Any]]:
        """The step's mixed loss and what it logs (`train/<key>`): the losses, rewards, advantages, the samples'
        shape (length, repeats, copying) and each reward term."""
        gamma = self.gamma(step)
        B, k = len(batch), self.samples
        start = time.perf_counter()
        out = self.rollouts(model, vocab, batch, enc, timer=timer)
        sampled = out.decoded.select(slice(0, B * k))
        mle, sample_log_probs = self.teacher_forced(model, vocab, batch, enc, sampled, out.articles[: B * k], timer)
        rl = self_critical_loss(sample_log_probs, sampled.lengths, out.advantage.flatten(),
                                self.length_normalize).view(B, k).mean(1)
        loss = mixed_loss(gamma, rl, mle["loss"], bool(batch.has_reference.any()))
        greedy_reward = {"reward_greedy": out.rewards[B * k:].mean()} if self.baseline.needs_greedy else {}
        return loss, {
            "loss": loss, "nll": mle["nll"], "rl_loss": rl.mean(), "gamma": gamma,
            "reward_sample": out.sample_rewards.mean(), **greedy_reward,
            "reward_not_applicable": out.not_applicable.float().mean(), **advantage_statistics(out.advantage),
            **sample_statistics(sampled.ids, sampled.lengths, out.batch.src_ext[: B * k],
                                out.batch.src_mask[: B * k].sum(1), sentence_end_ids(vocab, batch.device),
                                len(vocab) + batch.n_copy_oovs),
            "reward_time_share": out.reward_seconds / max(time.perf_counter() - start, 1e-9),
            **term_statistics({name: value[: B * k] for name, value in out.terms.items()}, self.reward.diagnostics()),
        }

    def teacher_forced(self, model: Summarizer, vocab: Vocabulary, batch: Batch, enc: Any, sampled: Decoded,
                       sample_articles: list[int], timer: Timer = untimed) -> tuple[dict[str, Tensor], Tensor]:
        """The MLE loss of the references and log q(ŷ) of the samples [B·k, T] with gradient, q the sampled
        (tempered) distribution. At τ = 1 one teacher-forced pass runs over the references and the samples together:
        its decoder loop launches once for both (on a GPU the loop is launch-bound). At τ ≠ 1 the samples' pass
        normalises q over the whole vocabulary, which the references' does not, so each has its own."""
        B, device = len(batch), batch.device
        if self.temperature != 1.0:
            with timer("mle"):
                mle = model.mle_loss(batch, enc=enc)
            with timer("rescore"):
                # one sample per article: its rows are the articles' own (`rollout_rows`), so no copy of the encoding
                sample_enc = enc if len(sample_articles) == B else enc.index_select(
                    torch.tensor(sample_articles, device=device))
                log_q = model.teacher_forced(sample_enc, decoder_inputs(sampled.ids, vocab), sampled.ids,
                                             self.temperature).log_probs
            return mle, log_q
        with timer("forced"):
            width = max(batch.target.size(1), sampled.ids.size(1))

            def padded(ids: Tensor) -> Tensor:
                return F.pad(ids, (0, width - ids.size(1)), value=vocab.pad_id)
            articles = torch.cat([torch.arange(B, device=device), torch.tensor(sample_articles, device=device)])
            inputs = torch.cat([padded(batch.dec_in), padded(decoder_inputs(sampled.ids, vocab))])
            forced = model.teacher_forced(enc.index_select(articles), inputs,
                                          torch.cat([padded(batch.target), padded(sampled.ids)]))
            mle = model.mle_loss(batch, forced=forced)
        return mle, forced.log_probs[B:, : sampled.ids.size(1)]

    def validation_values(self, inputs: RewardInput, labelled: bool
                          ) -> tuple[dict[str, Tensor], list[dict[str, float | None]]]:
        """The training reward of the greedy decodes (`val/reward`), the mean over the rows it applies to, and from
        the same scoring each summary's reward and weighted-sum terms, for the examples; on an unlabelled sample only
        for a reward that needs no reference."""
        if not labelled and self.reward.needs_reference:
            return {}, [{} for _ in range(len(inputs.hyp))]
        rewards, terms = self.scores(inputs)
        columns = {"reward": rewards.tolist()} | {f"reward/{name}": value.tolist() for name, value in terms.items()}
        rows = [{key: finite_or_none(values[i]) for key, values in columns.items()} for i in range(len(rewards))]
        return {"reward": rewards.nanmean()}, rows

    def training_samples(self, model: Summarizer, vocab: Vocabulary, batch: Batch, generator: torch.Generator
                         ) -> list[dict[str, Any]]:
        """For each article, its first sample drawn as training draws it (with `generator`), its training reward and
        its advantage over its baseline."""
        out = self.rollouts(model, vocab, batch, model.encode(batch), generator)
        drawn = decoded_summaries(vocab, out.decoded.select(slice(0, len(batch) * self.samples, self.samples)), batch)
        return [{"id": row["id"], "sample": as_text([row["summary"]])[0],
                 "sample_reward": float(out.sample_rewards[i, 0]), "sample_advantage": float(out.advantage[i, 0])}
                for i, row in enumerate(drawn)]


Objective = MLE | SelfCritical


def objective_for(reward: Reward | None = None, processors: dict[str, StepProcessor | None] | None = None,
                  unlabelled_fraction: float = 0.0, **settings: Any) -> Objective:
    """The one place a run's reward decides what it trains toward: none, MLE; one, the mixed loss with it, under
    `settings` (`SelfCritical`'s). `processors`: the config's named rules on the training decodes' next tokens (a
    null drops one), e.g. the test's trigram blocking, so that the reward judges what the test decoder would not
    already fix."""
    if not 0 <= unlabelled_fraction < 1:
        raise ValueError(f"unlabelled_fraction must be in [0, 1), got {unlabelled_fraction}")
    if reward is None:
        return MLE()
    rules = [p for p in (processors or {}).values() if p is not None]
    return SelfCritical(reward, processors=rules, unlabelled_fraction=unlabelled_fraction, **settings)
