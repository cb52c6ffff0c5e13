"""What the model writes as it learns: the same few validation articles decoded and scored at every validation."""
from __future__ import annotations

import json
import logging
import random
import textwrap
import time
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import pytorch_lightning as pl
import torch
from pytorch_lightning.loggers import WandbLogger

from models.decoding import Decoded
from models.text.batch import Batch, Example
from models.text.ngrams import repeated_ngram_counts
from models.text.records import write_text
from models.text.vocab import as_text
from rewards.base import RewardInput
from trainer.evaluate import decoded_summaries, evaluate

if TYPE_CHECKING:  # the module attaches this callback: a runtime import would be circular
    from trainer.module import SummarizationModule

log = logging.getLogger(__name__)


def choose_articles(examples: Sequence[Example], count: int, seed: int) -> list[Example]:
    """`count` labelled examples drawn with `seed` from the ids in sorted order, returned by id: the same articles
    whatever the loader's order, the data order's seed or the step a run resumes at."""
    labelled = sorted((e for e in examples if e.reference is not None), key=lambda e: e.id)
    return sorted(random.Random(seed).sample(labelled, min(count, len(labelled))), key=lambda e: e.id)


@dataclass
class GreedyDecodes:
    """What `validation_step` hands the callbacks: its greedy decodes of the batch and, from the one scoring that
    `val/reward` logs, each summary's training reward and terms (empty dicts in an MLE run)."""

    decoded: Decoded
    rewards: list[dict[str, float | None]]

    def select(self, picks: list[int]) -> GreedyDecodes:
        return GreedyDecodes(self.decoded.select(picks), [self.rewards[i] for i in picks])


def example_rows(module: SummarizationModule, batch: Batch, greedy: GreedyDecodes) -> list[dict[str, Any]]:
    """What the model writes for a labelled batch, one flat row per article: the reference; the greedy summary
    (`validation_step`'s) with its length, repeated-trigram rate, ROUGE and the module's `metrics` (test scales, as
    `score/<key>`) and, for a mixed run, its reward (as `val/reward` scored it) and weighted-sum terms."""
    decoded, rewards = greedy.decoded, greedy.rewards
    written = decoded_summaries(module.vocab, decoded, batch)
    _, scores = evaluate([r["summary"] for r in written], [r["reference"] for r in written], module.metrics,
                         device=module.device, sources=[r["article"] for r in written])
    inputs = RewardInput.from_decoded(decoded.ids, decoded.lengths, batch, module.vocab)
    repeats, trigrams = repeated_ngram_counts(decoded.ids, decoded.lengths, len(module.vocab) + batch.n_copy_oovs)
    rows = []
    for i, row in enumerate(written):
        summary, reference = as_text([row["summary"], row["reference"]])
        rows.append({"id": row["id"], "reference": reference, "summary": summary, "length": int(inputs.hyp_lens[i]),
                     "repeated_trigrams": float(repeats[i]) / max(int(trigrams[i]), 1),
                     # no metric's name is a field: the scores are score/<key>
                     **{f"score/{key}": value for key, value in scores[i].items()}, **rewards[i]})
    return rows


def side_by_side(left: str, right: str, width: int = 58, left_lines: int = 6) -> str:
    """Two texts in two columns: the first `left_lines` lines of `left`, all of `right`."""
    columns = textwrap.wrap(left, width)[:left_lines], textwrap.wrap(right, width)
    return "\n".join(f"{a:<{width}} | {b}" for a, b in zip_longest(*columns, fillvalue=""))


class ValidationExamples(pl.Callback):
    """At each validation (rank 0): `count` validation articles, chosen by `choose_articles`, with their greedy
    decodes from `validation_step` scored by `example_rows` and, in a mixed run, one training sample each (its
    objective's `training_samples`, drawn with a generator seeded by (`seed`, step): the training RNG never moves),
    written to `<output_dir>/examples/step_<N>.jsonl`; a wandb logger gets them as the table `examples/step_<N>`. Logs
    the first article's start beside its greedy summary, and the seconds it took, of the validation's (to the run's log file
    only under `trainer.train`: conf/train.yaml)."""

    def __init__(self, count: int, seed: int, output_dir: str):
        self.count, self.seed, self.folder = count, seed, Path(output_dir) / "examples"
        self._chosen: list[Example] = []
        self._rows: list[dict[str, Any]] = []
        self._started, self._seconds = 0.0, 0.0

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._started, self._seconds, self._rows, self._chosen = time.perf_counter(), 0.0, [], []
        if not trainer.sanity_checking and trainer.is_global_zero:
            self._chosen = choose_articles(self._labelled_loader(trainer).dataset, self.count, self.seed)

    def on_validation_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                                batch_idx: int, dataloader_idx: int = 0) -> None:
        start = time.perf_counter()
        ids = {e.id for e in self._chosen}
        picks = [i for i, article in enumerate(batch.ids) if article in ids] if dataloader_idx == 0 else []
        if picks:
            self._rows += example_rows(pl_module, batch.index_select(picks), outputs.select(picks))
        self._seconds += time.perf_counter() - start

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not self._rows:
            return
        start = time.perf_counter()
        step = trainer.global_step
        generator = torch.Generator(device=pl_module.device).manual_seed(self.seed * 2**32 + step)
        batch = self._labelled_loader(trainer).collate_fn(self._chosen).to(pl_module.device)
        # (Lightning calls this hook with the model in eval mode and gradients off, as in validation_step)
        drawn = {row["id"]: row for row in pl_module.objective.training_samples(pl_module.model, pl_module.vocab,
                                                                                   batch, generator)}
        rows = [{"step": step, **row, **drawn.get(row["id"], {})} for row in sorted(self._rows, key=lambda r: r["id"])]
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"step_{step}.jsonl"
        write_text(path, "".join(json.dumps(row) + "\n" for row in rows))
        self.log_tables(trainer, f"examples/step_{step}", rows)
        seconds = self._seconds + time.perf_counter() - start
        total = time.perf_counter() - self._started
        log.info("%s: %d articles in %.3f s, %.1f%% of the validation's %.2f s", path, len(rows), seconds,
                 100 * seconds / total, total)
        first = self._chosen[0]
        log.info(f"{first.id}, step {step}\n" + side_by_side(first.text or " ".join(first.source), rows[0]["summary"]))

    @staticmethod
    def _labelled_loader(trainer: pl.Trainer) -> Any:
        loaders = trainer.val_dataloaders
        return loaders[0] if isinstance(loaders, (list, tuple)) else loaders  # the labelled sample comes first

    @staticmethod
    def log_tables(trainer: pl.Trainer, key: str, rows: list[dict[str, Any]]) -> None:
        """A table per validation step (its own key), so a wandb run keeps every step's table browsable."""
        columns = list(rows[0])
        for logger in trainer.loggers:
            if isinstance(logger, WandbLogger):
                logger.log_table(key=key, columns=columns, data=[[row[c] for c in columns] for row in rows],
                                 step=trainer.global_step)
