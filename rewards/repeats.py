"""The repeat penalty, a reward that wraps another: the mover's similarities see a summary as a bag of words, so a
repeated sentence costs them nothing, and RL learns to repeat (README, "The demo"). Configured in
conf/module/summarizer.yaml (`rl.penalize_repeats`)."""
from __future__ import annotations

from torch import Tensor

from models.text.ngrams import repeated_ngram_counts
from rewards.base import Display, Reward, RewardInput, check_reward


class RepeatPenalty(Reward):
    """`reward` times the share of the summary's trigrams that are not repeats. It is `reward` to the tables (name,
    display) and its `test_metric` is `reward`'s: the test scores it unpenalised.
    Its last call's unpenalised values are a term, `unpenalized`, logged beside the penalised reward
    (`train/reward/unpenalized`)."""

    sees_repeats = True

    def __init__(self, reward: Reward):
        self.wrapped = reward
        self._unpenalized: Tensor | None = None

    @property
    def name(self) -> str:
        return self.wrapped.name

    @property
    def needs_reference(self) -> bool:
        return self.wrapped.needs_reference

    @property
    def display(self) -> Display:
        return self.wrapped.display

    @property
    def control(self) -> bool:
        return self.wrapped.control

    @property
    def test_metric(self) -> Reward:
        return self.wrapped.test_metric

    def term_values(self) -> dict[str, Tensor]:
        unpenalized = {} if self._unpenalized is None else {"unpenalized": self._unpenalized}
        return {**self.wrapped.term_values(), **unpenalized}

    def diagnostics(self) -> dict[str, float]:
        return self.wrapped.diagnostics()

    def __call__(self, inputs: RewardInput) -> Tensor:
        base = len(inputs.vocab) + inputs.batch.n_copy_oovs
        repeats, total = repeated_ngram_counts(inputs.hyp, inputs.hyp_lens, base)
        self._unpenalized = self.wrapped(inputs)
        return self._unpenalized * (1 - repeats / total.clamp(min=1))


PENALIZE_REPEATS = (True, False, "blind")


def penalize_repeats(reward: Reward | None, enabled: bool | str = "blind") -> Reward | None:
    """The training reward of `rl.penalize_repeats`: `reward` wrapped in `RepeatPenalty` (true), as it is (false),
    or wrapped only if blind to repeats ("blind"): multiplying ROUGE-L by the penalty as well made the demo's RL
    cut its repetitive starts' decodes to half the references' length first (docs/RESULTS.md)."""
    if enabled not in PENALIZE_REPEATS:
        raise ValueError(f"rl.penalize_repeats must be true, false or blind, got {enabled!r}")
    if reward is not None:
        check_reward(reward, "reward")
    if reward is None or not enabled or (enabled == "blind" and reward.sees_repeats):
        return reward
    return RepeatPenalty(reward)


def penalty_note(reward: Reward, enabled: bool | str) -> str:
    """The training reward, said as a run starts: whether `rl.penalize_repeats` wraps it, and how to change that."""
    if isinstance(reward, RepeatPenalty):
        why = ": it is blind to repeats" if enabled == "blind" else ""
        return (f"training reward {reward.name} × the share of its summary's trigrams that are not repeats "
                f"(rl.penalize_repeats={enabled}{why}); logged unpenalised as train/reward/unpenalized, tested "
                "unpenalised; rl.penalize_repeats=false trains on it as it is")
    why = ": it sees repeats" if enabled == "blind" else ""
    return f"training reward {reward.name}, without the repeat penalty (rl.penalize_repeats={enabled}{why})"
