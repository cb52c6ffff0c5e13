"""The data module: read sources, tokenize, split, build (and cache) the vocabulary, batch."""
from __future__ import annotations

import hashlib
import json
import logging
import random
from dataclasses import dataclass, replace
from functools import partial
from itertools import islice
from pathlib import Path
from typing import Any, Callable, Iterator

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Sampler

from models.text.batch import Example, collate
from models.text.records import DataError
from models.text.vocab import Vocabulary, ensure_final_period, tokenize_sentences
from trainer.sources import Record, Source, read_id_list

log = logging.getLogger(__name__)


@dataclass
class RatioSplit:
    """Split one source into train/val/test by ratio, shuffled with a fixed seed."""

    train: float = 0.9
    val: float = 0.05
    test: float = 0.05
    seed: int = 0

    def __post_init__(self) -> None:
        if min(self.train, self.val, self.test) < 0 or abs(self.train + self.val + self.test - 1) > 1e-6:
            raise ValueError(f"split ratios must be non-negative and sum to 1, got "
                             f"train={self.train} val={self.val} test={self.test}")

    def apply(self, examples: list[Example]) -> dict[str, list[Example]]:
        order = sorted(examples, key=lambda e: e.id)  # independent of the source's row order
        random.Random(self.seed).shuffle(order)
        n_train, n_val = round(self.train * len(order)), round(self.val * len(order))
        return {"train": order[:n_train], "val": order[n_train:n_train + n_val],
                "test": order[n_train + n_val:]}


class Unlabelled:
    """Articles mixed into training without their references (Scialom et al. 2019): the records of another
    `source` (Reddit posts), or the articles of one `part` ("val" or "test") of this data's own split (CNN/DM
    articles whose summaries training never sees). A source declared here loses its summaries as its records are
    read, so no example, batch or cache holds them, and its ids are prefixed with `name:` (rewards cache per-article
    work by id, and another source's ids may be this data's). `name` is the articles' `Example.domain` and names
    their metrics (`val/reward/<name>`); `val_size` of them (a seeded choice) are held out as its validation sample.
    `pretokenized`: whether a `source`'s text is tokenized already (None: as the data's own)."""

    def __init__(self, name: str, source: Source | None = None, part: str | None = None, val_size: int = 50,
                 seed: int = 0, pretokenized: bool | None = None):
        if (source is None) == (part is None):
            raise ValueError("data.unlabelled: give either a `source` or a `part` of this data's split, not both")
        if part not in (None, "val", "test"):
            raise ValueError(f"data.unlabelled.part must be 'val' or 'test' (training articles have references), "
                             f"got {part!r}")
        if val_size < 1:
            raise ValueError(f"data.unlabelled.val_size must be at least 1, got {val_size}")
        self.name, self.source, self.part, self.val_size, self.seed = name, source, part, val_size, seed
        self.pretokenized = pretokenized

    def __str__(self) -> str:
        return f"{self.source} (unlabelled)"

    def records(self) -> Iterator[Record]:
        for record in self.source.records():
            yield replace(record, id=f"{self.name}:{record.id}", summary=None)

    def hold_out(self, articles: list[Example]) -> tuple[list[Example], list[Example]]:
        """(training articles, validation sample): `val_size` articles drawn with the seed, by id."""
        order = sorted(articles, key=lambda e: e.id)
        random.Random(self.seed).shuffle(order)
        return order[self.val_size:], order[: self.val_size]


def tokenize_records(source: Source, pretokenized: bool, domain: str = "supervised") -> list[Example]:
    """Tokenize every record; empty articles or summaries are skipped and counted in the log."""
    examples, skipped, seen = [], 0, {}
    for record in source.records():
        if record.id in seen:  # ids pair test summaries across runs (table4's bootstrap): one id, one article
            raise DataError(f"{record.where}: id {record.id!r} is also the id of {seen[record.id]}")
        seen[record.id] = record.where
        article = [t for sentence in tokenize_sentences(record.article, pretokenized) for t in sentence]
        reference = None
        if record.summary is not None:
            reference = ensure_final_period(tokenize_sentences(record.summary, pretokenized))
        if not article or reference == []:
            skipped += 1
            continue
        examples.append(Example(id=record.id, source=article, reference=reference, domain=domain,
                                text=record.article))
    if skipped:
        log.warning("skipped %d records with an empty article or summary (kept %d)", skipped, len(examples))
    if not examples:
        raise DataError(f"{source}: no usable records (every article or summary is empty)")
    return examples


class ResumableShuffle(Sampler[int]):
    """This rank's share of a seeded permutation per epoch, picked up mid-epoch on resume.

    Its state is the epoch and the optimizer step at which the epoch began (one batch per step), so a run
    resumed from any checkpoint draws the batches an uninterrupted run would have drawn."""

    def __init__(self, size: int, batch_size: int, seed: int, steps: Callable[[], int], rank: int = 0,
                 world_size: int = 1):
        self.size, self.batch_size, self.seed, self.steps = size, batch_size, seed, steps
        self.rank, self.world_size = rank, world_size
        self.epoch, self.epoch_start, self._resuming = -1, 0, False

    def __len__(self) -> int:
        return -(-self.size // self.world_size)

    def __iter__(self) -> Iterator[int]:
        batches = -(-len(self) // self.batch_size)
        skip = self.steps() - self.epoch_start if self._resuming else batches
        self._resuming = False
        if skip >= batches:  # a new epoch (or a resume exactly at an epoch's end)
            self.epoch, self.epoch_start, skip = self.epoch + 1, self.steps(), 0
        order = torch.randperm(self.size, generator=torch.Generator().manual_seed(self.seed + self.epoch)).tolist()
        order += order[: len(self) * self.world_size - self.size]  # equal shares on every rank
        yield from order[self.rank::self.world_size][skip * self.batch_size:]

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "epoch_start": self.epoch_start}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self.epoch_start, self._resuming = state["epoch"], state["epoch_start"], True


def endless_order(size: int, key: str, start: int) -> Iterator[int]:
    """Positions `start`, `start` + 1, ... of an endless stream over range(size): a permutation per pass, seeded
    by `key` and the pass."""
    epoch, offset = divmod(start, size)
    while True:
        order = list(range(size))
        random.Random(f"{key}/{epoch}").shuffle(order)
        yield from order[offset:]
        epoch, offset = epoch + 1, 0


class MixedShuffle(Sampler[int]):
    """This rank's share of a stream that mixes labelled examples (indices 0 .. n_labelled − 1) with unlabelled
    ones (n_labelled ..): every batch holds `batch_size` − `unlabelled_per_batch` labelled examples, then
    `unlabelled_per_batch` unlabelled ones.

    A fixed count per batch rather than a Bernoulli draw per example: the fraction is exact in every batch on every
    rank, so the reward's rescaling of reference-based terms by 1/(1 − fraction) is exact, every batch keeps an MLE
    term, and the gradient has no extra variance from the batch's make-up.

    Each kind is drawn from its own endless stream (a seeded permutation per pass) and the batch at optimizer step
    t takes the (t·world_size + rank)-th chunk of each: a batch is a function of the seed and the step alone, so a
    run resumed from any checkpoint's global step draws what an uninterrupted run would have drawn, with no state
    to save. An epoch is one pass over the labelled examples."""

    def __init__(self, n_labelled: int, n_unlabelled: int, batch_size: int, unlabelled_per_batch: int, seed: int,
                 steps: Callable[[], int], rank: int = 0, world_size: int = 1):
        self.sizes = (n_labelled, n_unlabelled)
        self.per_batch = (batch_size - unlabelled_per_batch, unlabelled_per_batch)
        self.batch_size, self.seed, self.steps, self.rank, self.world_size = batch_size, seed, steps, rank, world_size
        self.batches = -(-n_labelled // (world_size * self.per_batch[0]))  # per epoch

    def __len__(self) -> int:
        return self.batches * self.batch_size

    def __iter__(self) -> Iterator[int]:
        start = self.steps()
        end = (start // self.batches + 1) * self.batches  # a resume mid-epoch draws the rest of that epoch
        labelled, unlabelled = (self._chunks(kind, start) for kind in (0, 1))
        for _ in range(start, end):
            yield from next(labelled)
            yield from (self.sizes[0] + i for i in next(unlabelled))

    def _chunks(self, kind: int, step: int) -> Iterator[list[int]]:
        """This rank's examples of one kind for each step from `step` on."""
        n = self.per_batch[kind]
        order = endless_order(self.sizes[kind], f"{self.seed}/{kind}", step * self.world_size * n)
        while True:
            chunks = [list(islice(order, n)) for _ in range(self.world_size)]
            yield chunks[self.rank]

    def state_dict(self) -> dict[str, Any]:
        """Nothing beyond the checkpoint's global step; having it tells Lightning the loader resumes mid-epoch."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


class ResumableLoader(DataLoader):
    """A DataLoader whose state Lightning saves in checkpoints and restores on resume (its sampler's)."""

    def state_dict(self) -> dict[str, Any]:
        return self.sampler.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.sampler.load_state_dict(state)


def quoted(ids: list[str], shown: int = 3) -> str:
    """The first `shown` ids, quoted, and how many more."""
    more = f", … ({len(ids) - shown} more)" if len(ids) > shown else ""
    return ", ".join(repr(i) for i in ids[:shown]) + more


class SummarizationData(pl.LightningDataModule):
    """Train/val/test splits of article-summary pairs and the vocabulary built on the training split.

    Either give each split its own source, or one `train` source plus a `split` by ratio. Ids listed in
    `exclude_ids` (a file) never enter train or val; with a ratio split they are moved to test.

    `unlabelled` articles, if given, are mixed into training: `unlabelled_proportion` of every batch (rounded to a
    whole count, `unlabelled_fraction`), and their held-out sample is validated beside the labelled one. They are
    never the labelled validation sample's articles nor excluded ids, and the vocabulary stays the labelled
    training split's: their words reach the model by copying (the extended vocabulary).
    """

    def __init__(self, train: Source, val: Source | None = None, test: Source | None = None,
                 split: RatioSplit | None = None, exclude_ids: str | None = None, pretokenized: bool = False,
                 vocab_size: int = 50_000, max_source_len: int = 400, max_target_len: int = 100,
                 batch_size: int = 16, eval_batch_size: int = 32, val_sample_size: int = 200,
                 test_size: int | None = None, num_workers: int = 0, cache_dir: str = "~/.cache/sumrl",
                 name: str = "data", shuffle_seed: int = 0, unlabelled: Unlabelled | None = None,
                 unlabelled_proportion: float = 0.5):
        super().__init__()
        if split is None and (val is None or test is None):
            raise ValueError("data: give `val` and `test` sources, or a `split` of the train source")
        if split is not None and (val is not None or test is not None):  # the split would leave them unread
            given = " and ".join(f"data.{name}" for name, source in (("val", val), ("test", test)) if source is not None)
            raise ValueError(f"{given} would be ignored: data.split divides data.train into train, val and test; give "
                             "data.split=null to read val and test from sources of their own (both)")
        for setting, value in {"max_source_len": max_source_len, "max_target_len": max_target_len,
                               "batch_size": batch_size, "eval_batch_size": eval_batch_size,
                               "val_sample_size": val_sample_size, "test_size": test_size}.items():
            if value is not None and value < 1:  # now, not after training; a negative size slices from the end
                raise ValueError(f"data.{setting} must be at least 1, got {value}")
        self.unlabelled, self.unlabelled_per_batch = unlabelled, 0
        if unlabelled is not None:
            self.unlabelled_per_batch = round(unlabelled_proportion * batch_size)
            if not 0 < self.unlabelled_per_batch < batch_size:  # every batch needs both kinds
                raise ValueError(f"data.unlabelled_proportion={unlabelled_proportion} with data.batch_size="
                                 f"{batch_size} gives {self.unlabelled_per_batch} unlabelled examples per batch: "
                                 f"it must leave at least one of each kind")
        self.sources = {"train": train, "val": val, "test": test}
        self.split, self.exclude_ids, self.pretokenized = split, exclude_ids, pretokenized
        self.vocab_size, self.max_source_len, self.max_target_len = vocab_size, max_source_len, max_target_len
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size
        self.val_sample_size, self.test_size, self.num_workers = val_sample_size, test_size, num_workers
        self.cache_dir, self.name, self.shuffle_seed = Path(cache_dir).expanduser(), name, shuffle_seed
        self.splits: dict[str, list[Example]] = {}
        self.vocab: Vocabulary | None = None

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        excluded = read_id_list(self.exclude_ids) if self.exclude_ids else set()
        if self.split is not None:
            pool = tokenize_records(self.sources["train"], self.pretokenized, self.name)
            self._check_exclusions(excluded, {e.id for e in pool})
            self.splits = self.split.apply([e for e in pool if e.id not in excluded])
        else:
            self.splits = {name: tokenize_records(source, self.pretokenized, self.name)
                           for name, source in self.sources.items()}
            self._check_disjoint()
            self._check_exclusions(excluded, {e.id for split in self.splits.values() for e in split})
            for name in ("train", "val"):
                self.splits[name] = [e for e in self.splits[name] if e.id not in excluded]
        if self.unlabelled is not None:  # before the test split gains the excluded ids
            self.splits["unlabelled_train"], self.splits["unlabelled_val"] = self._unlabelled_articles(excluded)
        if self.split is not None:
            self.splits["test"] += [e for e in pool if e.id in excluded]
        if self.test_size is not None:
            self.splits["test"] = self.splits["test"][: self.test_size]
        for name, examples in self.splits.items():
            if not examples:
                raise DataError(f"data {self.name!r}: split {name!r} is empty")
        if all(e.reference is None for e in self.splits["train"]):  # MLE and every reward learn from summaries
            raise DataError(f"data {self.name!r}: no training example of {self.sources['train']} has a summary "
                            "(is fields.summary set?)")
        log.info("data %s: %s", self.name, {k: len(v) for k, v in self.splits.items()})
        self.vocab = self._cached_vocabulary()

    def _check_disjoint(self) -> None:
        """Splits read from sources of their own share no article text: a test (or validation) article also trained on
        scores what the model memorized. (Ids may repeat across sources that number their records each from 1.)"""
        texts = {name: {hash(tuple(e.source)): e.id for e in split} for name, split in self.splits.items()}
        for first, second in (("train", "val"), ("train", "test"), ("val", "test")):
            shared = texts[first].keys() & texts[second].keys()
            if shared:
                key = min(shared, key=lambda k: texts[second][k])
                raise DataError(f"data {self.name!r}: split {second!r} ({self.sources[second]}) shares {len(shared)} "
                                f"articles with split {first!r} ({self.sources[first]}), e.g. {texts[second][key]!r} "
                                f"(there {texts[first][key]!r}): a model would be scored on what it trained on; keep "
                                "each article in one source")

    def _check_exclusions(self, excluded: set[str], ids: set[str]) -> None:
        """A list of held-out ids that names none of the data's (another id format, a misread file) would keep nothing
        out, silently; one that names some says how many."""
        if not excluded:
            return
        missing = sorted(excluded - ids)
        if len(missing) == len(excluded):
            raise DataError(f"data.exclude_ids {self.exclude_ids}: none of its {len(excluded)} ids is an id of data "
                            f"{self.name!r} (its ids: {quoted(sorted(excluded))}; the data's: {quoted(sorted(ids))})")
        if missing:
            log.warning("data.exclude_ids %s: %d of its %d ids are ids of data %r and kept out; the other %d (%s) are "
                        "not in the data", self.exclude_ids, len(excluded) - len(missing), len(excluded), self.name,
                        len(missing), quoted(missing))

    def _unlabelled_articles(self, excluded: set[str]) -> tuple[list[Example], list[Example]]:
        """(training articles, validation sample) of the unlabelled source, without references. Of this data's own
        articles, excluded ids and the labelled validation sample (checkpoints are chosen on it) stay out."""
        source = self.unlabelled
        if source.part is None:
            pretokenized = self.pretokenized if source.pretokenized is None else source.pretokenized
            return source.hold_out(tokenize_records(source, pretokenized, source.name))
        kept_out = excluded | {e.id for e in self.splits["val"][: self.val_sample_size]}
        return source.hold_out([replace(e, reference=None, domain=source.name) for e in self.splits[source.part]
                                if e.id not in kept_out])

    @property
    def unlabelled_fraction(self) -> float:
        """The exact fraction of unlabelled examples in every training batch (0 without unlabelled articles)."""
        return self.unlabelled_per_batch / self.batch_size

    def _cached_vocabulary(self) -> Vocabulary:
        """Build the vocabulary from the training split once; later runs on the same data reuse it.

        The key hashes the training text itself, not the config, so an edited data file never
        picks up a stale vocabulary."""
        digest = hashlib.sha1(json.dumps([self.vocab_size, self.max_source_len]).encode())
        for e in self.splits["train"]:
            digest.update(" ".join([e.id, *e.source, *(t for s in e.reference or [] for t in s)]).encode())
        folder, key = self.cache_dir / "vocab", f"{self.name}-{digest.hexdigest()[:16]}"
        for path in folder.glob(f"{key}-*.txt"):  # <key>-<checksum of the words>.txt
            try:
                vocab = Vocabulary.load(path)
                if vocab.digest() == path.stem.rsplit("-", 1)[1]:
                    return vocab
            except (OSError, UnicodeDecodeError):
                pass
            log.warning("vocabulary cache %s is damaged (its words do not match its checksum): rebuilding", path)
            path.unlink()
        vocab = Vocabulary.build(
            (tokens for e in self.splits["train"]
             for tokens in [e.source[: self.max_source_len], *(e.reference or [])]), self.vocab_size)
        folder.mkdir(parents=True, exist_ok=True)
        vocab.save(folder / f"{key}-{vocab.digest()}.txt")
        return vocab

    def _loader(self, examples: list[Example], batch_size: int,
                sampler: ResumableShuffle | MixedShuffle | None = None) -> DataLoader:
        # Its own generator: starting an iterator must not draw from the global RNG that training samples from.
        collate_batch = partial(collate, vocab=self.vocab, max_source_len=self.max_source_len,
                                max_target_len=self.max_target_len)
        loader = DataLoader if sampler is None else ResumableLoader  # val and test hold no state to resume
        return loader(examples, batch_size=batch_size, sampler=sampler, num_workers=self.num_workers,
                      generator=torch.Generator(), collate_fn=collate_batch)

    def train_dataloader(self) -> DataLoader:
        trainer = self.trainer  # None for a loader made outside a Trainer: one process, starting at step 0
        where = dict(steps=lambda: getattr(trainer, "global_step", 0), rank=getattr(trainer, "global_rank", 0),
                     world_size=getattr(trainer, "world_size", 1))
        labelled = self.splits["train"]
        if self.unlabelled is None:
            return self._loader(labelled, self.batch_size,
                                ResumableShuffle(len(labelled), self.batch_size, self.shuffle_seed, **where))
        unlabelled = self.splits["unlabelled_train"]
        return self._loader(labelled + unlabelled, self.batch_size, MixedShuffle(
            len(labelled), len(unlabelled), self.batch_size, self.unlabelled_per_batch, self.shuffle_seed, **where))

    def val_dataloader(self) -> DataLoader | list[DataLoader]:
        """A fixed validation sample: the first `val_sample_size` examples of the val split; with unlabelled
        articles, a second loader over their held-out sample."""
        labelled = self._loader(self.splits["val"][: self.val_sample_size], self.eval_batch_size)
        if self.unlabelled is None:
            return labelled
        return [labelled, self._loader(self.splits["unlabelled_val"], self.eval_batch_size)]

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.splits["test"], self.eval_batch_size)
