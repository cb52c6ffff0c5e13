"""The reward contract (rewards/base.py `Reward`): its defaults, how the repeat penalty and a weighted sum compose
through it, and the one-line refusal of an object that does not keep it."""
import pytest
import torch

from rewards.base import Display, NotAReward, Reward, RewardInput, WeightedSum
from rewards.repeats import RepeatPenalty, penalize_repeats
from rewards.rouge import RougeL, RougeScore
from rewards.configs import compose_rewards
from test_rl import tiny_module


class Tokens(Reward):
    """Only what a reward must set: a name, whether it needs a reference, and `__call__`."""

    name, needs_reference = "tokens", False

    def __call__(self, inputs: RewardInput) -> torch.Tensor:
        return inputs.hyp_lens.float() / 10


def test_a_reward_that_sets_only_what_it_must_gets_the_documented_defaults():
    reward = Tokens()
    assert reward.display == Display("tokens", 1.0, reads_article=False)
    assert reward.test_metric.name == "tokens" and reward.test_metric is reward
    assert reward.diagnostics() == {} and reward.term_values() == {}
    assert reward.sees_repeats is False
    reward.display = Display("Tokens", 100)  # an instance may set its own
    assert reward.display.column == "Tokens" and Tokens().display.column == "tokens"


def test_the_repeat_penalty_is_its_reward_to_the_tables_and_the_test():
    """Wrapped, a reward keeps its name, display and test metric, and the test scores it unshaped; a reward blind to
    repeats is wrapped by default, one that sees them (ROUGE-L) and a sum of such are not."""
    penalized = penalize_repeats(Tokens(), "blind")
    assert isinstance(penalized, RepeatPenalty)
    assert (penalized.name, penalized.display, penalized.test_metric.name) == ("tokens", Display("tokens"), "tokens")
    assert isinstance(penalized.test_metric, Tokens)
    rouge = penalize_repeats(RougeL(), "blind")
    assert isinstance(rouge, RougeL) and rouge.test_metric.name == "rougeL"
    metric = penalize_repeats(RougeL(), True).test_metric  # the test's ROUGE-L, not the reward's LCS on ids
    assert isinstance(metric, RougeScore) and metric.name == "rougeL" and metric.display == Display("ROUGE-L", 100)
    both = WeightedSum({"a": RougeL(), "b": RougeL()}, {"a": 1, "b": 1})
    assert both.sees_repeats and penalize_repeats(both, "blind") is both
    mixed = WeightedSum({"a": RougeL(), "b": Tokens()}, {"a": 1, "b": 1})
    assert not mixed.sees_repeats and isinstance(penalize_repeats(mixed, "blind"), RepeatPenalty)


class Plain:
    """Scores like a reward, but does not subclass `Reward`."""

    name, needs_reference = "plain", False

    def __call__(self, inputs):
        return inputs.hyp_lens.float()


def test_an_object_that_is_not_a_reward_is_refused_where_it_is_configured(tmp_path, monkeypatch):
    (tmp_path / "mine.py").write_text("class Plain:\n    name, needs_reference = 'plain', False\n")
    (tmp_path / "conf" / "reward").mkdir(parents=True)
    (tmp_path / "conf" / "reward" / "plain.yaml").write_text("_target_: mine.Plain\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(NotAReward, match=r"^conf/reward/plain.yaml: mine.Plain is not a reward: subclass "
                                         r"rewards.base.Reward"):
        compose_rewards(["plain"], config_dirs=[tmp_path / "conf"])
    with pytest.raises(NotAReward, match=r"^reward: .*Plain is not a reward"):
        penalize_repeats(Plain(), "blind")
    module, _ = tiny_module()
    with pytest.raises(NotAReward, match=r"^metrics.plain: .*Plain is not a reward"):
        type(module)(module.model, module.vocab, optimizer=None, metrics={"plain": Plain()})


class AutocastProbe(Reward):
    """Records whether CPU autocast is on while it scores, and the dtype a matmul gives there."""

    name, needs_reference = "probe", False

    def __init__(self):
        self.seen = []

    def __call__(self, inputs: RewardInput) -> torch.Tensor:
        x = torch.ones(len(inputs.hyp), 4)
        self.seen.append((torch.is_autocast_enabled("cpu"), (x @ x.T).dtype))
        return inputs.hyp_lens.float()


def test_rewards_score_in_fp32_under_the_trainers_bf16_autocast():
    """trainer.precision=bf16-mixed runs the steps under autocast; a reward's values must not depend on it: the
    training step's rewards and the test's scoring (`score_tokenized`) both see autocast off."""
    from rewards.scoring import score_tokenized
    probe = AutocastProbe()
    module, batch = tiny_module(probe)
    with torch.autocast("cpu", torch.bfloat16):
        module.training_step(batch, 0)
        score_tokenized({"probe": probe}, [[["the", "cat"]]], [[["the", "cat"]]])
    assert len(probe.seen) == 2 and probe.seen == [(False, torch.float32)] * 2
