"""The length-only control: a reward that pays for the summary's length and nothing else. Trained with a grid's recipe,
its row shows what length alone buys on every metric (Singhal et al. 2023 found a length reward reproduced most of
an RLHF preference model's gains); table4 names it as the control beside each reward's gain."""
from __future__ import annotations

from torch import Tensor

from rewards.base import Display, Reward, RewardInput


class LengthOnly(Reward):
    """min(tokens / max_tokens, 1): in [0, 1] as the trainer's settings expect (γ, the baselines), printed in tokens.
    `max_tokens`: the length that earns the whole reward (conf/reward/length_only.yaml: the data's max_target_len)."""

    name = "length_only"
    needs_reference = False
    control = True

    def __init__(self, max_tokens: int = 100):
        if max_tokens < 1:
            raise ValueError(f"reward.max_tokens must be a positive number of tokens, got {max_tokens}")
        self.max_tokens = int(max_tokens)
        self.display = Display("Length only (tokens)", self.max_tokens)

    def __call__(self, inputs: RewardInput) -> Tensor:
        return (inputs.hyp_lens.float() / self.max_tokens).clamp(max=1.0)
