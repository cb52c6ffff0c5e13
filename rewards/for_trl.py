"""Any sumrl reward as a reward function of TRL's online trainers (GRPOTrainer, RLOOTrainer), so that an LLM can be
trained with SMS, the QA metric or LS-Score:

    from rewards.for_trl import TRLReward
    trainer = GRPOTrainer(model=..., reward_funcs=[TRLReward("sms")], train_dataset=dataset, ...)

TRL calls a reward function as `f(completions=..., prompts=..., **columns)`, the dataset's other columns passed by
name, and takes a list of floats back, None where the reward does not apply to a sample. Completions are strings, or
(conversational) lists of messages whose last one holds the text. TRL stays an optional extra: nothing here imports it.
"""
from __future__ import annotations

from typing import Any, Sequence

from rewards.base import Reward
from rewards.configs import build_reward, score_strings


def completion_text(completion: str | Sequence[dict[str, Any]]) -> str:
    """A completion's text: the string, or the content of a conversational completion's last message."""
    if isinstance(completion, str):
        return completion
    return completion[-1]["content"]


class TRLReward:
    """A sumrl reward with TRL's calling convention. `reference` and `article` name the dataset columns holding the
    reference summary and the article (the rewards that need neither ignore them)."""

    def __init__(self, reward: str | Reward, overrides: Sequence[str] = (), reference: str = "reference",
                 article: str = "article", tokenizer: str = "treebank", device: str = "cpu"):
        self.reward = build_reward(reward, overrides)
        self.reference, self.article, self.tokenizer, self.device = reference, article, tokenizer, device
        self.__name__ = self.reward.name  # TRL logs each reward function under its __name__

    def __call__(self, completions: list, **columns: Any) -> list[float | None]:
        summaries = [completion_text(c) for c in completions]
        if self.reward.needs_reference and self.reference not in columns:
            raise KeyError(f"{self.__name__} compares with a reference: the dataset needs a {self.reference!r} column "
                           f"(TRLReward(reference=...) names another; it has {sorted(columns)})")
        return score_strings(self.reward, summaries, columns.get(self.reference), columns.get(self.article),
                             tokenizer=self.tokenizer, device=self.device)
