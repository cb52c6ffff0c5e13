"""Callbacks that stop their own process at a known moment (test_resume.py): SIGTERM before a chosen batch of a chosen
trainer call (a scheduler's stop, in or outside fit), or Ctrl-C before a chosen training step."""
import os
import signal

import pytorch_lightning as pl


class SigtermAt(pl.Callback):
    def __init__(self, fn: str, batch: int = 0, step: int | None = None):
        self.fn, self.batch = fn, batch  # fn: "validate", "fit" or "test" (Lightning's trainer.state.fn)
        self.step = step  # only at this optimizer step (None: at any)

    def _maybe(self, trainer: pl.Trainer, batch_idx: int) -> None:
        if trainer.state.fn == self.fn and batch_idx == self.batch and self.step in (None, trainer.global_step):
            os.kill(os.getpid(), signal.SIGTERM)

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        self._maybe(trainer, batch_idx)

    def on_test_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        self._maybe(trainer, batch_idx)


class InterruptAt(pl.Callback):
    """Ctrl-C (a KeyboardInterrupt, as Python raises it on SIGINT) before training step `step`."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == self.step:
            raise KeyboardInterrupt
