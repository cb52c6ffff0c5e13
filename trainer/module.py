"""The LightningModule: teacher-forced MLE, self-critical mixed training, validation and test decoding."""
from __future__ import annotations

import logging
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Callable

import pytorch_lightning as pl
import torch
from torch import Tensor

from models.decoding import beam_search, check_beam_settings, greedy
from models.text.batch import Batch
from models.text.ngrams import lead_copy_rate, repeated_ngram_rate
from models.text.vocab import Vocabulary, split_at_sentence_ends
from rewards.base import Reward, RewardInput, check_reward
from rewards.rouge import RougeL
from trainer.checkpoints import checkpoint_description
from trainer.evaluate import (SHAPE_KEYS, decoded_summaries, evaluate, mean_shape, summary_shape,
                              write_test_files)
from trainer.objectives import Objective, objective_for, sentence_end_ids
from trainer.examples import GreedyDecodes, ValidationExamples
from trainer.timing import untimed

log = logging.getLogger(__name__)

# What a mixed run's validation scores, and so which checkpoint it keeps (`select_by`): `reward`, the training reward
# (repeat penalty included) of greedy decodes; `test_metric`, the reward's test metric, unpenalised, of the test's
# beam decodes (the `beam` settings), that is what the test measures.
SELECT_BY = ("reward", "test_metric")


class SummarizationModule(pl.LightningModule):
    """Orchestrates a summarizer's training, validation and test. What it trains toward is its `objective`
    (`trainer.objectives`: MLE, or γ·L_RL + (1−γ)·L_MLE with self-critical RL under a reward), built from its config
    node with Hydra's `_partial_` and completed here with `unlabelled_fraction` (the data's share of articles without a
    reference, passed by `trainer.run.build`). `beam` is the test's decoder; validation and test's greedy decodes
    stop at its `max_len` too."""

    def __init__(self, model: torch.nn.Module, vocab: Vocabulary, optimizer: Callable[..., torch.optim.Optimizer],
                 objective: Callable[..., Objective] = objective_for, beam: dict[str, Any] | None = None,
                 metrics: dict[str, Reward] | None = None, select_by: str = "reward", max_nonfinite_steps: int = 10,
                 output_dir: str = ".", unlabelled_fraction: float = 0.0, examples_to_log: int = 8,
                 examples_seed: int = 0):
        super().__init__()
        self.model, self.vocab, self.optimizer_factory = model, vocab, optimizer
        self.objective = objective(unlabelled_fraction=unlabelled_fraction)
        beam = dict(beam or {})
        # the config names the rules (beam.processors.<name>), so that an experiment adds one, or drops one (null)
        beam["processors"] = [p for p in (beam.get("processors") or {}).values() if p is not None]
        self.beam = check_beam_settings(**beam)  # now, not in the test-time decode after training; defaults filled
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
        self._steps_taken = self._steps_skipped = 0  # this fit's training steps with a finite loss, and without
        self.rouge_l = RougeL()
        self._test_summaries: list[dict] = []
        # what checkpoints record of the run, set by `trainer.run.build`: its id and lineage (`provenance`), and how
        # the data read its text (`data_reading`)
        self.provenance: dict[str, Any] = {}
        self.reading: dict[str, Any] = {}
        if examples_to_log < 0:
            raise ValueError(f"examples_to_log must be at least 0, got {examples_to_log}")
        self.examples_to_log, self.examples_seed = examples_to_log, examples_seed
        self.timer: Callable[[str], AbstractContextManager[None]] = untimed  # a `StepTimer` to see where a step goes

    @property
    def reward(self) -> Reward | None:
        """The reward it trains with (None: MLE)."""
        return self.objective.reward

    @property
    def stage(self) -> str:
        return self.objective.stage

    def configure_callbacks(self) -> list[pl.Callback]:
        """What the model writes at each validation (`ValidationExamples`): a setting of the module, so every
        summarizer run has it. Attached once: a fit after the start validation keeps the one it attached."""
        if not self.examples_to_log or any(isinstance(c, ValidationExamples) for c in self.trainer.callbacks):
            return []
        return [ValidationExamples(self.examples_to_log, self.examples_seed, str(self.output_dir))]

    # ---------------------------------------------------------------- training
    def configure_optimizers(self) -> torch.optim.Optimizer:
        return self.optimizer_factory(self.model.parameters())

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor | None:
        with self.timer("encode"):
            enc = self.model.encode(batch)
        loss, logged = self.objective.loss(self.model, self.vocab, batch, enc, self.global_step, self.timer)
        shown = {"loss", "reward_sample"}
        for key, value in logged.items():
            self.log(f"train/{key}", value, batch_size=len(batch), prog_bar=key in shown)
        return self._guard_nonfinite(loss, batch)

    def _guard_nonfinite(self, loss: Tensor, batch: Batch) -> Tensor | None:
        """A non-finite loss (on any rank) skips the optimizer step, logged with the articles' ids; after
        `max_nonfinite_steps` in a row the run stops, pointing at the last checkpoint (written before any of them)."""
        finite = bool(torch.isfinite(loss))
        if self._trainer is not None:  # every rank skips together, or DDP waits forever for the skipping one
            finite = self.trainer.strategy.reduce_boolean_decision(finite, all=True)
        if finite:
            self._nonfinite_steps = 0
            self._steps_taken += 1
            return loss
        self._nonfinite_steps += 1
        self._steps_skipped += 1
        log.warning("step %d: non-finite loss (%s), optimizer step skipped; articles %s", self.global_step,
                    loss.item(), batch.ids)
        if self._nonfinite_steps >= self.max_nonfinite_steps:
            last = self.output_dir / "checkpoints" / "last.ckpt"
            where = f"the last good weights are in {last}" if last.exists() else "no checkpoint was written yet"
            raise FloatingPointError(f"{self._nonfinite_steps} non-finite losses in a row (the last at step "
                                     f"{self.global_step}): stopping; {where}")
        return None

    def on_train_end(self) -> None:
        """A fit whose every step was skipped (fewer than `max_nonfinite_steps`) trained nothing: not a trained run."""
        if self._steps_skipped and not self._steps_taken:
            raise FloatingPointError(f"all {self._steps_skipped} training steps had a non-finite loss and were skipped: "
                                     "the weights are the start's, so the run is not tested as trained; the warnings "
                                     "above name the articles")

    # ---------------------------------------------------------------- validation
    def validation_step(self, batch: Batch, batch_idx: int, dataloader_idx: int = 0) -> GreedyDecodes:
        """Greedy decodes of the labelled validation sample log `val/<metric>`. A mixed run's unlabelled sample (its
        second loader, `dataloader_idx` 1: articles of one source, none with a reference) logs the metrics that need
        no reference as `val/<metric>/<source>`."""
        labelled = bool(batch.has_reference.all())
        enc = self.model.encode(batch)
        decoded = greedy(self.model, enc, self.beam["max_len"])
        inputs = RewardInput.from_decoded(decoded.ids, decoded.lengths, batch, self.vocab)
        values = {"length": inputs.hyp_lens.float().mean(),
                  "repeated_trigrams": repeated_ngram_rate(decoded.ids, decoded.lengths,
                                                           len(self.vocab) + batch.n_copy_oovs),
                  "lead3_copy": lead_copy_rate(decoded.ids, decoded.lengths, batch.src_ext, batch.src_mask.sum(1),
                                               sentence_end_ids(self.vocab, self.device),
                                               len(self.vocab) + batch.n_copy_oovs)}
        if labelled:
            values |= {"loss": self.model.mle_loss(batch, enc=enc)["loss"], "rouge_l": self.rouge_l(inputs).mean()}
        logged, rewards = self.objective.validation_values(inputs, labelled)
        values |= logged
        if labelled and self.select_by == "test_metric" and self.objective.test_metric is not None:
            values["test_metric"], values["beam_length"] = self.test_metric_score(batch, enc)
        where = "" if labelled else f"/{batch.domains[0]}"
        for key, value in values.items():
            # sync_dist: under DDP the checkpoint monitor must see the mean over all ranks, not rank 0's share
            self.log(f"val/{key}{where}", value, batch_size=len(batch), prog_bar=labelled and key in ("loss", "reward"),
                     sync_dist=True, add_dataloader_idx=False)
        return GreedyDecodes(decoded, rewards)  # for callbacks (`trainer.examples.ValidationExamples`)

    @property
    def metrics_at_test(self) -> dict[str, Reward]:
        """What the test scores besides ROUGE: `metrics`, and the test metric a mixed run is judged by (its reward's
        `test_metric`: by default the reward itself without the repeat penalty), so that its diagonal cell is always scored.
        Where `metrics` lists that key already, its entry is the one scored, at validation too: what table4 shows."""
        metric = self.objective.test_metric
        if metric is None or metric.name in self.metrics:
            return self.metrics
        return self.metrics | {metric.name: metric}  # after them: the columns keep the order `metrics` gives

    def test_metric_score(self, batch: Batch, enc: Any) -> tuple[Tensor, Tensor]:
        """The mean of the test metric the run is judged by (`test_metric`), scored as the test scores it, over the test
        decoder's summaries of a labelled batch, and their mean length in tokens."""
        key = self.objective.test_metric.name
        written = decoded_summaries(self.vocab, beam_search(self.model, enc, **self.beam), batch)
        means, _ = evaluate([r["summary"] for r in written], [r["reference"] for r in written],
                            {key: self.metrics_at_test[key]}, device=self.device,
                            sources=[r["article"] for r in written])
        length = mean_shape([summary_shape(r["summary"]) for r in written])["tokens"]
        # evaluate's mean leaves out rows the metric does not apply to
        return torch.tensor(means.get(key, float("nan"))), torch.tensor(float(length))

    # ---------------------------------------------------------------- test
    def test_step(self, batch: Batch, batch_idx: int) -> None:
        """The test's beam decodes, and beside them the greedy decodes without the test's rules (trigram blocking, a
        minimum length): a gain that only those rules give shows as a gap between the two. Each row also keeps the
        article's lead-3 (its first three sentences, See et al.'s baseline)."""
        enc = self.model.encode(batch)
        written = decoded_summaries(self.vocab, beam_search(self.model, enc, **self.beam), batch)
        plain = decoded_summaries(self.vocab, greedy(self.model, enc, self.beam["max_len"]), batch)
        for row, other, source in zip(written, plain, batch.sources):
            row["greedy"], row["lead3"] = other["summary"], split_at_sentence_ends(source)[:3]
        self._test_summaries.extend(written)

    def on_test_epoch_start(self) -> None:
        self._test_summaries = []

    def on_test_epoch_end(self) -> None:
        """Writes `summaries.jsonl` (per article: the beam summary with its scores, tokens and repeated-trigram share,
        the same of the greedy decode under `greedy`, and the lead-3) and `results.json` (their means)."""
        results = write_test_files(self._test_summaries, self.metrics_at_test, self.device, self.output_dir)
        for key, value in results.items():
            if key not in ("n", "greedy"):
                self.log(f"test/{key}", value)
        for key, value in results["greedy"].items():
            self.log(f"test/greedy/{key}", value)

    # ---------------------------------------------------------------- checkpoints
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["sumrl"] = checkpoint_description(self.stage, self.model, self.vocab, self.reading) | self.provenance
