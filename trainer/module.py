"""The LightningModule: teacher-forced MLE, self-critical mixed training, validation and test decoding."""
from __future__ import annotations

import logging
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import Tensor

from models.decoding import (Decoded, StepProcessor, beam_search, check_beam_settings, greedy, rollout_rows,
                             sample_and_greedy)
from models.text.batch import Batch
from models.text.vocab import SENTENCE_END, Vocabulary, split_at_sentence_ends
from rewards.base import Reward, RewardInput, check_reward, not_applicable, zero_where_not_applicable
from rewards.repeats import repeated_ngram_counts
from rewards.rouge import RougeL
from trainer.baselines import Baseline, GreedyBaseline
from trainer.checkpoints import checkpoint_description
from trainer.diagnostics import lead_copy_rate, repeated_ngram_rate
from trainer.evaluate import ROUGE_KEYS, SHAPE_KEYS, as_text, evaluate, mean_shape, summary_shape, write_test_files
from trainer.rl import advantage_statistics, mixed_loss, sample_statistics, self_critical_loss, term_statistics
from trainer.samples import ValidationSamples
from trainer.schedules import Constant
from trainer.timing import untimed

log = logging.getLogger(__name__)

# What a mixed run's validation scores, and so which checkpoint it keeps (`select_by`): `reward`, the training reward
# (repeat penalty included) of greedy decodes; `test_metric`, the reward's test metric, unpenalised, of the test's
# beam decodes (the `beam` settings), that is what the test measures.
SELECT_BY = ("reward", "test_metric")


def finite_or_none(value: float) -> float | None:
    """A score for JSON: NaN (the reward does not apply) as None."""
    return None if value != value else value


@dataclass
class Rollouts:
    """A batch's training decodes: k samples per article (rows i·k … i·k + k − 1), then a greedy row each if the
    baseline needs it, with their rewards (0 where the reward does not apply) and each sample's baseline."""

    decoded: Decoded
    articles: list[int]          # the article behind each decoded row
    batch: Batch                 # the batch's examples in decoded-row order
    rewards: Tensor              # [B·k (+ B)]
    terms: dict[str, Tensor]     # each term of a weighted-sum reward, per decoded row
    not_applicable: Tensor       # [B·k (+ B)]
    sample_rewards: Tensor       # [B, k]
    baseline: Tensor             # [B, k]
    reward_seconds: float

    @property
    def advantage(self) -> Tensor:
        return self.sample_rewards - self.baseline


class SummarizationModule(pl.LightningModule):
    """MLE training when `reward` is None; otherwise γ·L_RL + (1−γ)·L_MLE with self-critical RL.

    `unlabelled_fraction`: the fraction of each training batch without references (the data's, passed by
    `trainer.train.build`). Those rows get no MLE term (its mean is over reference tokens) and, from a weighted-sum
    reward, only its reference-free terms; its reference-based terms weigh 1/(1 − fraction) on the other rows
    (`rewards.base.WeightedSum.total`)."""

    def __init__(self, model: torch.nn.Module, vocab: Vocabulary, optimizer: Callable[..., torch.optim.Optimizer],
                 reward: Reward | None = None, gamma: Callable[[int], float] | None = None,
                 samples: int = 1, baseline: Baseline | None = None, temperature: float = 1.0,
                 rl_max_len: int = 100, length_normalize: bool = False, val_max_len: int = 100,
                 rollout_processors: dict[str, StepProcessor | None] | None = None, beam: dict[str, Any] | None = None,
                 metrics: dict[str, Reward] | None = None,
                 select_by: str = "reward", max_nonfinite_steps: int = 10, output_dir: str = ".",
                 unlabelled_fraction: float = 0.0, samples_to_log: int = 8, samples_seed: int = 0,
                 reading: dict[str, Any] | None = None):
        super().__init__()
        if not 0 <= unlabelled_fraction < 1:
            raise ValueError(f"unlabelled_fraction must be in [0, 1), got {unlabelled_fraction}")
        self.unlabelled_fraction = unlabelled_fraction
        self.model, self.vocab, self.optimizer_factory = model, vocab, optimizer
        self.reward, self.gamma = reward, gamma or Constant(0.0)
        if samples < 1:
            raise ValueError(f"rl.samples must be at least 1, got {samples}")
        self.samples, self.baseline = samples, baseline or GreedyBaseline()
        if temperature <= 0:
            raise ValueError(f"rl.temperature must be positive, got {temperature}")
        self.temperature = temperature
        self.rl_max_len, self.length_normalize, self.val_max_len = rl_max_len, length_normalize, val_max_len
        # rules on the training decodes' next tokens (samples and greedy baseline alike), e.g. the test's trigram
        # blocking, so that the reward judges what the test decoder would not already fix
        self.rollout_processors = [p for p in (rollout_processors or {}).values() if p is not None]
        self.beam = dict(beam or {})
        # the config names the rules (beam.processors.<name>), so that an experiment adds one, or drops one (null)
        self.beam["processors"] = [p for p in (self.beam.get("processors") or {}).values() if p is not None]
        check_beam_settings(**self.beam)  # now, not in the test-time decode after training
        self.metrics = dict(metrics or {})
        for key, metric in self.metrics.items():
            check_reward(metric, f"metrics.{key}")
        if taken := sorted(set(self.metrics) & {"n", "greedy", *SHAPE_KEYS}):
            raise ValueError(f"metrics: {', '.join(taken)} names what the test writes of every summary: give the "
                             "metric another key")
        if select_by not in SELECT_BY:
            raise ValueError(f"select_by must be one of {SELECT_BY}, got {select_by!r}")
        self.select_by = select_by
        self.output_dir = Path(output_dir)
        self.max_nonfinite_steps, self._nonfinite_steps = max_nonfinite_steps, 0
        self.rouge_l = RougeL()
        self._test_rows: list[dict] = []
        self.provenance: dict[str, Any] = {}  # the run's id and lineage (`trainer.train.provenance`), in checkpoints
        self.reading = dict(reading or {})  # how the data read its text (`data_reading`), in checkpoints
        if samples_to_log < 0:
            raise ValueError(f"samples_to_log must be at least 0, got {samples_to_log}")
        self.samples_to_log, self.samples_seed = samples_to_log, samples_seed
        self.timer: Callable[[str], AbstractContextManager[None]] = untimed  # a `StepTimer` to see where a step goes

    @property
    def stage(self) -> str:
        return "mle" if self.reward is None else "mixed"

    def configure_callbacks(self) -> list[pl.Callback]:
        """What the model writes at each validation (`ValidationSamples`): a setting of the module, so every
        summarizer run has it. Attached once: a fit after the start validation keeps the one it attached."""
        if not self.samples_to_log or any(isinstance(c, ValidationSamples) for c in self.trainer.callbacks):
            return []
        return [ValidationSamples(self.samples_to_log, self.samples_seed, str(self.output_dir))]

    # ---------------------------------------------------------------- training
    def configure_optimizers(self) -> torch.optim.Optimizer:
        return self.optimizer_factory(self.model.parameters())

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor | None:
        with self.timer("encode"):
            enc = self.model.encode(batch)
        if self.reward is None:
            with self.timer("mle"):
                out = self.model.mle_loss(batch, enc=enc)
            self._log_train({"loss": out["loss"], "nll": out["nll"]}, len(batch))
            loss = out["loss"]
        else:
            loss = self._mixed_step(batch, enc)
        return self._guard_nonfinite(loss, batch)

    def _guard_nonfinite(self, loss: Tensor, batch: Batch) -> Tensor | None:
        """A non-finite loss (on any rank) skips the optimizer step, logged with the articles' ids; after
        `max_nonfinite_steps` in a row the run stops, pointing at the last checkpoint (written before any of them)."""
        finite = bool(torch.isfinite(loss))
        if self._trainer is not None:  # every rank skips together, or DDP waits forever for the skipping one
            finite = self.trainer.strategy.reduce_boolean_decision(finite, all=True)
        if finite:
            self._nonfinite_steps = 0
            return loss
        self._nonfinite_steps += 1
        log.warning("step %d: non-finite loss (%s), optimizer step skipped; articles %s", self.global_step,
                    loss.item(), batch.ids)
        if self._nonfinite_steps >= self.max_nonfinite_steps:
            last = self.output_dir / "checkpoints" / "last.ckpt"
            where = f"the last good weights are in {last}" if last.exists() else "no checkpoint was written yet"
            raise FloatingPointError(f"{self._nonfinite_steps} non-finite losses in a row (the last at step "
                                     f"{self.global_step}): stopping; {where}")
        return None

    def _rollouts(self, batch: Batch, enc: Any, generator: torch.Generator | None = None) -> Rollouts:
        """The training decodes of a batch (k samples per article, drawn with `generator`, and the greedy rows if the
        baseline needs them), scored as training scores them, with each sample's baseline."""
        B, k, with_greedy = len(batch), self.samples, self.baseline.needs_greedy
        # The baseline decodes in test-time mode (no dropout); k samples and the greedy rows share one batched loop.
        training = self.model.training  # as it was: validation (`training_samples`) decodes in eval mode too
        self.model.eval()
        with self.timer("decode"):
            decoded = sample_and_greedy(self.model, enc, self.rl_max_len, generator=generator, samples=k,
                                        with_greedy=with_greedy, processors=self.rollout_processors,
                                        temperature=self.temperature)
        self.model.train(training)
        decode_end = time.perf_counter()
        articles = rollout_rows(B, k, with_greedy)
        rollouts = batch.index_select(articles)
        with torch.no_grad(), self.timer("reward"):  # one reward call scores samples and greedy rows together
            inputs = RewardInput.from_decoded(decoded.ids, decoded.lengths, rollouts, self.vocab,
                                              self.unlabelled_fraction)
            rewards, terms = self._reward(inputs)
        # Rows where the reward does not apply (NaN, or no reference for a reference-based one) get 0, sample and
        # baseline alike.
        missing = not_applicable(self.reward, rewards, inputs)
        rewards = zero_where_not_applicable(self.reward, rewards, inputs)
        r_sample = rewards[: B * k].view(B, k)
        baseline = self.baseline(r_sample, rewards[B * k:] if with_greedy else None)
        return Rollouts(decoded, articles, rollouts, rewards, terms, missing, r_sample, baseline,
                        time.perf_counter() - decode_end)

    def _mixed_step(self, batch: Batch, enc: Any) -> Tensor:
        gamma = self.gamma(self.global_step)
        B, k = len(batch), self.samples
        start = time.perf_counter()
        out = self._rollouts(batch, enc)
        sampled = out.decoded.rows(slice(0, B * k))
        mle, sample_log_probs = self._teacher_forced(batch, enc, sampled, out.articles[: B * k])
        rl = self_critical_loss(sample_log_probs, sampled.lengths, out.sample_rewards.flatten(),
                                out.baseline.flatten(), self.length_normalize).view(B, k).mean(1)
        loss = mixed_loss(gamma, rl, mle["loss"], bool(batch.has_reference.any()))
        greedy_reward = {"reward_greedy": out.rewards[B * k:].mean()} if self.baseline.needs_greedy else {}
        self._log_train({
            "loss": loss, "nll": mle["nll"], "rl_loss": rl.mean(), "gamma": gamma,
            "reward_sample": out.sample_rewards.mean(), **greedy_reward,
            "reward_not_applicable": out.not_applicable.float().mean(), **advantage_statistics(out.advantage),
            **sample_statistics(sampled.ids, sampled.lengths, out.batch.src_ext[: B * k],
                                out.batch.src_mask[: B * k].sum(1), self._sentence_ends(),
                                len(self.vocab) + batch.n_copy_oovs),
            "reward_time_share": out.reward_seconds / max(time.perf_counter() - start, 1e-9),
            **term_statistics({name: value[: B * k] for name, value in out.terms.items()}, self.reward.diagnostics()),
        }, B)
        return loss

    def _teacher_forced(self, batch: Batch, enc: Any, sampled: Decoded, sample_articles: list[int]
                        ) -> tuple[dict[str, Tensor], Tensor]:
        """The MLE loss of the references and log q(ŷ) of the samples [B·k, T] with gradient, q the sampled
        (tempered) distribution. At τ = 1 one teacher-forced pass runs over the references and the samples together:
        its decoder loop launches once for both (on a GPU the loop is launch-bound). At τ ≠ 1 the samples' pass
        normalises q over the whole vocabulary, which the references' does not, so each has its own."""
        B, device = len(batch), batch.device
        if self.temperature != 1.0:
            with self.timer("mle"):
                mle = self.model.mle_loss(batch, enc=enc)
            with self.timer("rescore"):
                # one sample per article: its rows are the articles' own (`rollout_rows`), so no copy of the encoding
                sample_enc = enc if len(sample_articles) == B else enc.index_select(
                    torch.tensor(sample_articles, device=device))
                log_q = self.model.teacher_forced(sample_enc, self._feed(sampled.ids), sampled.ids,
                                                  self.temperature).log_probs
            return mle, log_q
        with self.timer("forced"):
            width = max(batch.target.size(1), sampled.ids.size(1))

            def padded(ids: Tensor) -> Tensor:
                return F.pad(ids, (0, width - ids.size(1)), value=self.vocab.pad_id)
            articles = torch.cat([torch.arange(B, device=device), torch.tensor(sample_articles, device=device)])
            forced = self.model.teacher_forced(
                enc.index_select(articles), torch.cat([padded(batch.dec_in), padded(self._feed(sampled.ids))]),
                torch.cat([padded(batch.target), padded(sampled.ids)]))
            mle = self.model.mle_loss(batch, forced=forced)
        return mle, forced.log_probs[B:, : sampled.ids.size(1)]

    def _reward(self, inputs: RewardInput) -> tuple[Tensor, dict[str, Tensor]]:
        """The training reward of each decoded row (with the repeat penalty where the config wraps it in one:
        `rewards.repeats`), and, for a sum of rewards, each term's values (for the log)."""
        return self.reward(inputs), self.reward.term_values()

    def _sentence_ends(self) -> Tensor:
        """Ids of the vocabulary's sentence-final tokens (the copy monitor's sentence boundaries)."""
        return torch.tensor([self.vocab.stoi[t] for t in SENTENCE_END if t in self.vocab.stoi], device=self.device)

    def _feed(self, ids: Tensor) -> Tensor:
        """Decoder inputs for a decoded sequence: <s> then the sequence shifted right, OOV as <unk>."""
        shifted = torch.cat([torch.full_like(ids[:, :1], self.vocab.bos_id), ids[:, :-1]], dim=1)
        return shifted.masked_fill(shifted >= len(self.vocab), self.vocab.unk_id)

    def _log_train(self, values: dict[str, Any], batch_size: int) -> None:
        shown = {"loss", "reward_sample"}
        for key, value in values.items():
            self.log(f"train/{key}", value, batch_size=batch_size, prog_bar=key in shown)

    # ---------------------------------------------------------------- validation
    def validation_step(self, batch: Batch, batch_idx: int, dataloader_idx: int = 0) -> Decoded:
        """Greedy decodes of the labelled validation sample log `val/<metric>`. A mixed run's unlabelled sample (its
        second loader, `dataloader_idx` 1: articles of one source, none with a reference) logs the metrics that need
        no reference as `val/<metric>/<source>`."""
        labelled = bool(batch.has_reference.all())
        enc = self.model.encode(batch)
        decoded = greedy(self.model, enc, self.val_max_len)
        inputs = RewardInput.from_decoded(decoded.ids, decoded.lengths, batch, self.vocab)
        values = {"length": inputs.hyp_lens.float().mean(),
                  "repeated_trigrams": repeated_ngram_rate(decoded.ids, decoded.lengths,
                                                           len(self.vocab) + batch.n_copy_oovs),
                  "lead3_copy": lead_copy_rate(decoded.ids, decoded.lengths, batch.src_ext, batch.src_mask.sum(1),
                                               self._sentence_ends(), len(self.vocab) + batch.n_copy_oovs)}
        if labelled:
            values |= {"loss": self.model.mle_loss(batch, enc=enc)["loss"], "rouge_l": self.rouge_l(inputs).mean()}
        if self.reward is not None and (labelled or not self.reward.needs_reference):
            values["reward"] = self._reward(inputs)[0].nanmean()  # the mean over the rows it applies to
        if self.reward is not None and labelled and self.select_by == "test_metric":
            values["test_metric"], values["beam_length"] = self.test_metric(batch, enc)
        where = "" if labelled else f"/{batch.domains[0]}"
        for key, value in values.items():
            # sync_dist: under DDP the checkpoint monitor must see the mean over all ranks, not rank 0's share
            self.log(f"val/{key}{where}", value, batch_size=len(batch), prog_bar=labelled and key in ("loss", "reward"),
                     sync_dist=True, add_dataloader_idx=False)
        return decoded  # the greedy decodes, for callbacks (`trainer.samples.ValidationSamples`)

    @property
    def metrics_at_test(self) -> dict[str, Reward]:
        """What the test scores besides ROUGE: `metrics`, and a mixed run's own test metric (`test_metric`, else the
        reward's name: the reward itself without the repeat penalty), so that its diagonal cell is always scored.
        Where `metrics` lists that key already, its entry is the one scored, at validation too: what table4 shows."""
        key = self.reward.judged_by if self.reward is not None else None
        if key is None or key in ROUGE_KEYS or key in self.metrics:
            return self.metrics
        return self.metrics | {key: self.reward.unshaped}

    def test_metric(self, batch: Batch, enc: Any) -> tuple[Tensor, Tensor]:
        """The mean of the reward's test metric, scored as the test scores it, over the test decoder's summaries of a
        labelled batch, and their mean length in tokens."""
        key = self.reward.judged_by
        written = self.summaries(beam_search(self.model, enc, **self.beam), batch)
        means, _ = evaluate([r["summary"] for r in written], [r["reference"] for r in written],
                            {} if key in ROUGE_KEYS else {key: self.metrics_at_test[key]}, device=self.device,
                            sources=[r["article"] for r in written])
        length = mean_shape([summary_shape(r["summary"]) for r in written])["tokens"]
        # evaluate's mean leaves out rows the metric does not apply to
        return torch.tensor(means.get(key, float("nan"))), torch.tensor(float(length))

    def sample_rows(self, batch: Batch, decoded: Decoded) -> list[dict[str, Any]]:
        """What the model writes for a labelled batch, one flat row per article: the reference; the greedy summary
        (`decoded`, `validation_step`'s) with its length, repeated-trigram rate, ROUGE and `metrics` (test scales, as
        `score/<key>`) and,
        for a mixed run, its reward (as `val/reward` scores it) and weighted-sum terms."""
        written = self.summaries(decoded, batch)
        _, scores = evaluate([r["summary"] for r in written], [r["reference"] for r in written], self.metrics,
                             device=self.device, sources=[r["article"] for r in written])
        inputs = RewardInput.from_decoded(decoded.ids, decoded.lengths, batch, self.vocab)
        repeats, trigrams = repeated_ngram_counts(decoded.ids, decoded.lengths, len(self.vocab) + batch.n_copy_oovs)
        rewards, terms = self._reward(inputs) if self.reward is not None else (None, {})
        samples = []
        for i, row in enumerate(written):
            summary, reference = as_text([row["summary"], row["reference"]])
            samples.append({"id": row["id"], "reference": reference, "summary": summary,
                            "length": int(inputs.hyp_lens[i]),
                            "repeated_trigrams": float(repeats[i]) / max(int(trigrams[i]), 1),
                            # no metric's name is a field: the scores are score/<key>
                            **{f"score/{key}": value for key, value in scores[i].items()}})
            if rewards is not None:
                samples[-1]["reward"] = finite_or_none(float(rewards[i]))
                samples[-1] |= {f"reward/{name}": finite_or_none(float(value[i])) for name, value in terms.items()}
        return samples

    def training_samples(self, batch: Batch, generator: torch.Generator) -> list[dict[str, Any]]:
        """For each article of a mixed run's batch, one sample drawn as training draws it (with `generator`), its
        training reward and its advantage over its baseline; nothing for an MLE run."""
        if self.reward is None:
            return []
        out = self._rollouts(batch, self.model.encode(batch), generator)
        drawn = self.summaries(out.decoded.rows(slice(0, len(batch) * self.samples, self.samples)), batch)
        return [{"id": row["id"], "sample": as_text([row["summary"]])[0],
                 "sample_reward": float(out.sample_rewards[i, 0]), "sample_advantage": float(out.advantage[i, 0])}
                for i, row in enumerate(drawn)]

    # ---------------------------------------------------------------- test
    def test_step(self, batch: Batch, batch_idx: int) -> None:
        """The test's beam decodes, and beside them the greedy decodes without the test's rules (trigram blocking, a
        minimum length): a gain that only those rules give shows as a gap between the two. Each row also keeps the
        article's lead-3 (its first three sentences, See et al.'s baseline)."""
        enc = self.model.encode(batch)
        written = self.summaries(beam_search(self.model, enc, **self.beam), batch)
        plain = self.summaries(greedy(self.model, enc, self.val_max_len), batch)
        for row, other, source in zip(written, plain, batch.sources):
            row["greedy"], row["lead3"] = other["summary"], split_at_sentence_ends(source)[:3]
        self._test_rows.extend(written)

    def summaries(self, decoded: Decoded, batch: Batch) -> list[dict]:
        """Each decoded row of a batch as its article's summary (sentences of tokens), with its id, reference and
        article text."""
        written = []
        for i, (ids, n) in enumerate(zip(decoded.ids.tolist(), decoded.lengths.tolist())):
            tokens = self.vocab.decode(ids[:n], batch.oovs[i])
            written.append({"id": batch.ids[i], "summary": split_at_sentence_ends(tokens),
                            "reference": batch.references[i], "article": batch.texts[i]})
        return written

    def on_test_epoch_start(self) -> None:
        self._test_rows = []

    def on_test_epoch_end(self) -> None:
        """Writes `summaries.jsonl` (per article: the beam summary with its scores, tokens and repeated-trigram share,
        the same of the greedy decode under `greedy`, and the lead-3) and `results.json` (their means)."""
        results = write_test_files(self._test_rows, self.metrics_at_test, self.device, self.output_dir)
        for key, value in results.items():
            if key not in ("n", "greedy"):
                self.log(f"test/{key}", value)
        for key, value in results["greedy"].items():
            self.log(f"test/greedy/{key}", value)

    # ---------------------------------------------------------------- checkpoints
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["sumrl"] = checkpoint_description(self.stage, self.model, self.vocab, self.reading) | self.provenance
