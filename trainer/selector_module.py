"""The content selector's LightningModule: binary cross-entropy against `selection_labels` over the real source
tokens, and selection precision, recall, F1 and AUC on validation and test."""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Callable

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import Tensor
from torchmetrics import MeanMetric, MetricCollection
from torchmetrics.classification import BinaryAUROC, BinaryF1Score, BinaryPrecision, BinaryRecall

from models.bottom_up import ContentSelector, copy_glove, selection_targets
from models.text.batch import Batch
from models.text.records import write_text
from models.text.vocab import Vocabulary
from trainer.checkpoints import SELECTOR_STAGE, checkpoint_description

log = logging.getLogger(__name__)


class ContentSelectorModule(pl.LightningModule):
    """Trains a `ContentSelector`; `threshold` turns probabilities into selections for precision, recall and F1.
    `glove`: start the embeddings from GloVe 6B 50d. The test writes `results.json` (n articles, precision, recall,
    f1, auc, the fractions of tokens selected and labelled), fractions in [0, 1]."""

    stage = SELECTOR_STAGE

    def __init__(self, model: ContentSelector, vocab: Vocabulary, optimizer: Callable[..., torch.optim.Optimizer],
                 threshold: float = 0.5, glove: bool = False, output_dir: str = ".", unlabelled_fraction: float = 0.0):
        super().__init__()
        if unlabelled_fraction > 0:
            raise ValueError("the content selector learns from references only: train it on data without "
                             "`unlabelled` (data=cnndm_sample, say)")
        if glove:
            log.info("content selector: %d of %d embeddings from GloVe", copy_glove(model.embedding, vocab),
                     len(vocab))
        self.model, self.vocab, self.optimizer_factory = model, vocab, optimizer
        self.threshold, self.output_dir = threshold, Path(output_dir)
        self.reading: dict[str, Any] = {}  # how the data read its text (`data_reading`, set by `trainer.run.build`)
        metrics = MetricCollection({"precision": BinaryPrecision(threshold), "recall": BinaryRecall(threshold),
                                    "f1": BinaryF1Score(threshold), "auc": BinaryAUROC()})
        self.val_metrics = metrics.clone(prefix="val/selection_")
        self.test_metrics = metrics.clone()
        self.test_selected, self.test_labelled = MeanMetric(), MeanMetric()
        self._test_articles = 0

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return self.optimizer_factory(self.model.parameters())

    def _forward(self, batch: Batch) -> tuple[Tensor, Tensor, Tensor]:
        """(mean BCE, probabilities, labels) over the tokens that count, the latter two flat [N]."""
        labels, counted = selection_targets(batch)
        logits = self.model(batch)[counted]
        loss = F.binary_cross_entropy_with_logits(logits, labels[counted])
        return loss, torch.sigmoid(logits), labels[counted]

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor:
        loss, _, _ = self._forward(batch)
        self.log("train/loss", loss, batch_size=len(batch), prog_bar=True)
        return loss

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        loss, probs, labels = self._forward(batch)
        # weighted by tokens: the epoch's val/loss is the mean over every token of the validation sample
        self.log("val/loss", loss, batch_size=labels.numel(), prog_bar=True, sync_dist=True)
        self.val_metrics.update(probs, labels.long())
        self.log_dict(self.val_metrics)

    def on_test_epoch_start(self) -> None:
        self.test_metrics.reset()
        self.test_selected.reset()
        self.test_labelled.reset()
        self._test_articles = 0

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        _, probs, labels = self._forward(batch)
        self.test_metrics.update(probs, labels.long())
        self.test_selected.update((probs >= self.threshold).float())
        self.test_labelled.update(labels)
        self._test_articles += int(batch.has_reference.sum())

    def on_test_epoch_end(self) -> None:
        results = {key: float(value) for key, value in self.test_metrics.compute().items()}
        results |= {"selected": float(self.test_selected.compute()), "labelled": float(self.test_labelled.compute())}
        self.output_dir.mkdir(parents=True, exist_ok=True)
        write_text(self.output_dir / "results.json", json.dumps({"n": self._test_articles, **results}, indent=2)
                                                      + "\n")
        for key, value in results.items():
            self.log(f"test/{key}", value)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["sumrl"] = checkpoint_description(self.stage, self.model, self.vocab, self.reading)
