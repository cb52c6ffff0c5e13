"""Where a training step's time goes: the module names its sections (`SummarizationModule.timer`), and a benchmark
attaches a `StepTimer` to see them (`scripts/bench_rl.py`). Without one a section costs a `nullcontext`."""
from __future__ import annotations

import time
from collections import defaultdict
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Iterator

import torch


class StepTimer:
    """Seconds per named section of training steps (`scripts/bench_rl.py`'s breakdown): install one as a module's
    `timer`. The device is synchronized at both ends of a section, so queued CUDA work is charged to its section."""

    def __init__(self, device: torch.device):
        self.device = device
        self.seconds: dict[str, float] = defaultdict(float)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    @contextmanager
    def __call__(self, section: str) -> Iterator[None]:
        self._sync()
        start = time.perf_counter()
        try:
            yield
        finally:
            self._sync()
            self.seconds[section] += time.perf_counter() - start


def untimed(section: str) -> AbstractContextManager[None]:
    """The timer of a module that nobody measures: sections cost nothing and no synchronization."""
    return nullcontext()
