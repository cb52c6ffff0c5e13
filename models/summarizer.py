"""The model contract: what the decoders (`models.decoding`), the losses and the trainer call on a summarization
model. `PointerGenerator` (and its bottom-up variant) satisfies it; a new model satisfies it to train with every
stage, reward and decoder (tests/test_summarizer.py runs a minimal second model through them).

Shapes: B rows, S source length, T target length, X = V + n_copy_oovs the batch's extended vocabulary
(`models.text.vocab`): a model may put probability on the article's out-of-vocabulary words (copying) or not.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

import torch
from torch import Tensor, nn

from models.text.batch import Batch

R = TypeVar("R", bound="Rows")


class Rows(Protocol):
    """Per-row values (an encoding, a decoder state) that decoding reorders, repeats and drops: `index_select` takes
    rows `index` (a tensor of row numbers, repeats allowed, or a slice). A decoder state should be a dataclass of
    tensors: on CUDA the decode captures its step as a graph and copies the new state into the old one's tensors."""

    def index_select(self: R, index: Tensor | slice) -> R: ...


class Encoded(Rows, Protocol):
    src_ext: Tensor  # [B, S] the article's extended ids: its rows and device are the batch's


class SummarizerConfig(Protocol):
    vocab_size: int
    pad_id: int
    bos_id: int
    eos_id: int


@dataclass
class TeacherForced:
    log_probs: Tensor      # [B, T] fp32 log p(target_t | target_<t); 0 where the target is <pad>
    coverage_loss: Tensor  # [B, T] a model's extra per-token loss (See et al.'s coverage); zeros without one


@runtime_checkable
class Summarizer(Protocol):
    """An `nn.Module` with a `config` (`SummarizerConfig`) and these methods."""

    config: Any

    def encode(self, batch: Batch) -> Encoded:
        """The articles, encoded once per batch."""

    def initial_state(self, enc: Encoded) -> Rows:
        """The decoder's state before the first token."""

    def step_probs(self, enc: Encoded, state: Rows, input_ids: Tensor) -> tuple[Tensor, Rows, Tensor]:
        """One decoder step from the previous tokens' extended ids [B]: (probabilities [B, X] fp32, the new state,
        attention [B, S] or any tensor the model reports)."""

    def step(self, enc: Encoded, state: Rows, input_ids: Tensor) -> tuple[Tensor, Rows, Tensor]:
        """`step_probs` as log-probabilities (beam search adds them up)."""

    def teacher_forced(self, enc: Encoded, dec_in: Tensor, target: Tensor, temperature: float = 1.0
                       ) -> TeacherForced:
        """log p(target_t) for extended-id targets [B, T] read after `dec_in` [B, T], with gradient; at a
        `temperature` τ ≠ 1, log q for q ∝ p^(1/τ) without <pad> and <s>, the distribution a sampler at τ
        draws."""

    def mle_loss(self, batch: Batch, enc: Encoded | None = None, forced: TeacherForced | None = None
                 ) -> dict[str, Tensor]:
        """{"loss", "nll", "coverage"}: the token-averaged NLL of the references (plus any extra loss); `enc` reuses
        an encoding, `forced` a teacher-forced pass whose first B rows and T columns are the references'."""


@runtime_checkable
class HoldsTrainedParts(Protocol):
    """A model that holds trained networks besides its own weights (the bottom-up model's content selector), each
    loaded from a checkpoint (`checkpoint_path`): `trainer.train` checks each one's vocabulary against the run's."""

    @property
    def frozen_parts(self) -> list[nn.Module]: ...


def launch_bound(device: torch.device) -> bool:
    """Whether a decoder step's time goes to launching its kernels (a GPU) rather than to its arithmetic (a CPU). There,
    a smaller batch saves nothing, and each look at which rows have ended waits for the device to drain its queue."""
    return device.type != "cpu"
